/* The port counters of an RDMA device (rxe, mlx5, ...) under
 * /sys/class/infiniband/DEV/ports/PORT/hw_counters: RNR NAKs sent and
 * received, sequence errors, retries exceeded. Shared by `wimm doctor` and
 * the errata programs (tests/errata). */
#ifndef WIMM_HW_COUNTERS_H
#define WIMM_HW_COUNTERS_H

#define HW_COUNTERS_MAX 64

struct hw_counters {
	int n; /* -1: the counter folder could not be read */
	char name[HW_COUNTERS_MAX][40];
	long long val[HW_COUNTERS_MAX];
};

/* Read every counter of the port, after waiting out the kernel's cache. */
void hw_counters_read(const char *dev, int port, struct hw_counters *c);
/* Value of a counter, -1 if absent. */
long long hw_counter(const struct hw_counters *c, const char *name);

#endif
