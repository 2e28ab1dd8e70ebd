/* What the services' process tests share (kv, ps; the log tests' own
 * copies can give way to it): the failure line, the clock, the knobs of
 * the test environment, the output files of a process, and the leftovers
 * of killed shm peers. */
#ifndef WIMM_SVC_TEST_H
#define WIMM_SVC_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* "FAIL file:line: what" on stderr; the caller counts or returns. */
#define SVC_FAIL(...)                                                                              \
	do {                                                                                       \
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                               \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fputc('\n', stderr);                                                               \
	} while (0)

/* CLOCK_MONOTONIC in ms. */
int64_t now_ms(void);
void sleep_ms(int ms);
/* WIMM_TEST_TIMEOUT_SCALE, at least 1: slow fabrics such as Soft-RoCE in
 * the TCG guest. */
int scale(void);
/* Where the servers are reached: loopback, or the RDMA device's address
 * (WIMM_TEST_HOST, e.g. 192.0.2.1 in the Soft-RoCE guest). */
const char *test_host(void);
/* What a process wrote to a file (at most len - 1 bytes; "" without one). */
void slurp(const char *path, char *buf, size_t len);
/* The shm provider's files of processes that are gone (a killed process
 * cannot remove them; left behind they make endpoints fail with EBUSY). */
void remove_stale_shm(void);

#endif
