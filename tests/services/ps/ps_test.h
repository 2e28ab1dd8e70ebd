/* Shared by ps_test.c (processes, scenarios) and ps_test_raw.c (hand-made
 * peers: bad input, a hostile worker). */
#ifndef PS_TEST_H
#define PS_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "ps_cmd.h"
#include "ps_internal.h"
#include "svc_test.h"

extern const char *wimm_bin, *fabric;
/* Hellos in-band (a scenario named SCENARIO_inband). */
extern int inband_hello;

#define die(...)                                                                                   \
	do {                                                                                       \
		fprintf(stderr, "ps_test: " __VA_ARGS__);                                          \
		fputc('\n', stderr);                                                               \
		exit(1);                                                                           \
	} while (0)

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			SVC_FAIL(__VA_ARGS__);                                                     \
			return -1;                                                                 \
		}                                                                                  \
	} while (0)

struct proc {
	pid_t pid;
	int status; /* exit status, or 128 + signal; -1 while running */
	int64_t ended_ms;
	char out[300], err[300];
};

/* Start argv with stdout and stderr into files of the test's directory. */
void spawn(struct proc *p, const char *name, char *const argv[]);
/* "test_host():0", to listen on. */
const char *test_listen_addr(void);
/* The statistics of the server on 127.0.0.1:port, waiting for it. */
void stats_of(int port, struct wimm_ps_stats *st);
/* `wimm ps serve` with these flags on a port of its own; returns the port. */
int serve_cmd(struct proc *p, const char *shards, const char *size, const char *workers,
	      const char *backups, const char *liveness);
/* n `wimm ps worker` processes, ranks 0..n-1 (first_rank.. with
 * workers_from). */
void workers_from(struct proc *w, int first_rank, int n, int port, const char *iters,
		  const char *delay, int check, const char *timeout);
/* Wait up to ms (times the scale) for all n; how many still run. */
int wait_all(struct proc *p, int n, int ms);
void stop_all(struct proc *p, int n);
void show(const struct proc *p, const char *who);

int t_bad_input(void);
int t_hostile(void);

#endif
