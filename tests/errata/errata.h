/* Shared helpers of the ERRATA programs: TAP-like reporting, bounded time,
 * and the rxe port counters under /sys/class/infiniband. */
#ifndef ERRATA_H
#define ERRATA_H

#include <stdint.h>

#include "hw_counters.h" /* tools/: shared with wimm doctor */

/* Print "ok - ..." or "not ok - ..." and count it; returns cond != 0. */
int errata_check(int cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A "# ..." diagnostic line. */
void errata_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print "N passed, N failed"; the exit status for main. */
int errata_summary(void);

int64_t errata_now_ms(void);
/* WIMM_TEST_TIMEOUT_SCALE (default 1): the guest is slow, timeouts stretch. */
int64_t errata_timeout_ms(int64_t base_ms);
const char *errata_host(void);
/* The RDMA device: WIMM_SOFTROCE_DEVICE or rxe0. */
const char *errata_device(void);

/* Read every file of /sys/class/infiniband/DEV/ports/1/hw_counters. */
void errata_counters_read(const char *dev, struct hw_counters *c);
/* Value of a counter, -1 if absent. */
long long errata_counter(const struct hw_counters *c, const char *name);
/* One diagnostic line listing every counter that changed from a to b. */
void errata_counters_diff(const struct hw_counters *a, const struct hw_counters *b);

#endif
