/* Shared by the log service's process tests (log_test*.c): spawning
 * `wimm` processes, reading what they print, reading a log back and checking
 * every entry. */
#ifndef WIMM_LOG_TEST_UTIL_H
#define WIMM_LOG_TEST_UTIL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <wimm/log.h>

#define MAX_SIZE 16384
#define MAX_PROCS 80

extern const char *wimm_bin, *fabric;
/* How a process is killed mid-stream: SIGKILL, or on ofi:shm SIGUSR1, which
 * makes it SIGKILL itself between two calls (WIMM_LOG_CRASH_ON_USR1: a shm
 * peer killed inside a provider call leaves its peers spinning). */
extern int kill_sig;
extern char dir[256];
extern int failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                       \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
			failures++;                                                                \
			return -1;                                                                 \
		}                                                                                  \
	} while (0)

int64_t now_ms(void);
/* Where the servers listen and are reached: loopback, or the RDMA device's
 * address (WIMM_TEST_HOST, e.g. 192.0.2.1 in the Soft-RoCE guest). */
const char *test_host(void);
/* "host:port" of the server at port on test_host(), written to buf. */
char *test_addr(char *buf, size_t len, int port);
/* ms times WIMM_TEST_TIMEOUT_SCALE (default 1): slow fabrics such as
 * Soft-RoCE in the TCG guest. proc_line and proc_wait scale their own. */
int scaled_ms(int ms);

/* n entries at WIMM_LOG_TEST_WORKLOAD percent (1..100, default 100; at
 * least 1): the Soft-RoCE guest's smaller workloads. */
unsigned workload(unsigned n);

struct proc {
	pid_t pid;
	int in;	      /* a pipe to its stdin (spawn_stdin), else -1 */
	int out, err; /* pipes of its stdout and stderr */
	char line[256];
	size_t got;
	uint64_t durable; /* the last "durable N" or "committed N" it printed */
	uint64_t resent;  /* from a writer's summary line */
	uint64_t entries; /* from a server's "listening" line: recovered */
	int shared_port;  /* ... and the shared ring's port (0: none) */
	int status;
	char errtext[4096];
	size_t errlen;
};

int spawn(struct proc *p, char *const argv[]);
/* The same with a pipe to its stdin in p->in. */
int spawn_stdin(struct proc *p, char *const argv[]);
/* Read what the process printed; returns a complete stdout line or NULL. */
const char *proc_line(struct proc *p, int timeout_ms);
void proc_drain(struct proc *p);
/* Wait for the process to end (draining its output); its exit status, or
 * -1 after timeout_ms (it is then killed). */
int proc_wait(struct proc *p, int timeout_ms);
/* The same, calling idle(arg) between looks (it may block up to about 20
 * ms): a test's own connection stays polled while the process runs. */
int proc_wait_idle(struct proc *p, int timeout_ms, void (*idle)(void *), void *arg);
/* `wimm log serve` on directory d (extra1/extra2: more options or NULL):
 * its port, or -1. */
int server_start_dir(struct proc *p, const char *d, int port, const char *extra1,
		     const char *extra2);
/* The same with a NULL-terminated list of options. */
int server_start_opts(struct proc *p, const char *d, int port, const char *const *extra);
int server_start(struct proc *p, int port, const char *extra1, const char *extra2);
int writer_start(struct proc *p, int port, uint64_t id, uint64_t n, const char *size,
		 const char *extra);
/* Run a wimm command to its end: its status, its stderr in p->errtext. */
int run(struct proc *p, char *const argv[]);
int expect_serve_error(const char *d, const char *needle);
void write_file(const char *path, const void *data, size_t len);
void rm_dir(const char *d);

struct verify {
	uint64_t next_pos, total;
	uint64_t next_seq[MAX_PROCS + 1]; /* by writer id 1..MAX_PROCS */
	size_t min, max;
	unsigned char buf[MAX_SIZE * 8];
	int bad;
	char why[256];
};
/* Check one entry read back (positions in order, each writer's sequence
 * whole, generated contents): a wimm_log_entry_fn. */
int check_entry(void *arg, const struct wimm_log_entry *e);
/* Read the whole log at port and check every entry. */
int verify_log(int port, struct verify *v);
/* The statistics of the server at port (a reader's stat): 0 or an error. */
int stat_of(int port, struct wimm_log_stat *st);
/* Writers 1..n each hold exactly per entries. */
int check_counts(const struct verify *v, unsigned n, uint64_t per);

int test_concurrent(void);
int test_concurrent_wide(void);
int test_crash(void);
int test_writer_kill(void);
int test_bad_input(void);
int test_replication(void);
int test_truncate(void);
int test_hostile(void);
int test_raw_peer(void);
int test_shared(void);
int test_shared_hole(void);
int test_shared_hostile(void);

#endif
