/* The conformance suite: one program, run once per fabric URI. Each test is
 * a function taking the URI; it records a failure with CHECK*() (which jumps
 * to the test's `out:` label for cleanup) or a skip with conf_skip().
 *
 * Peers are two contexts in one process (contexts are single-threaded, so
 * a test either drives both from one thread or gives each its own thread),
 * or a child process where a peer has to die. */
#ifndef WIMM_CONF_H
#define WIMM_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "wimm.h"

/* ------------------------------------------------------------ reporting */

void conf_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void conf_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int conf_failed(void);
/* The runner's side: clear the state before a test, read it after (0 pass,
 * 1 fail, 2 skip; reason filled). */
void conf_reset(void);
int conf_result(char *reason, size_t len);
/* A "# ..." diagnostic line (timings, measured values). */
void conf_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			conf_fail(__FILE__, __LINE__, "%s", #cond);                                \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

/* Same, with a message saying what happened instead. */
#define CHECKF(cond, ...)                                                                          \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			conf_fail(__FILE__, __LINE__, __VA_ARGS__);                                \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

/* A call returning a wimm code must return exactly `want`. */
#define CHECK_RC(expr, want)                                                                       \
	do {                                                                                       \
		int check_rc_ = (expr), check_want_ = (want);                                      \
		if (check_rc_ != check_want_) {                                                    \
			conf_fail(__FILE__, __LINE__, "%s: got %s, expected %s", #expr,            \
				  wimm_err_name(check_rc_), wimm_err_name(check_want_));           \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

#define CHECK_OK(expr) CHECK_RC(expr, 0)

/* Integer equality (counts, lengths), printing both values. */
#define CHECK_EQ(expr, want)                                                                       \
	do {                                                                                       \
		long long check_v_ = (long long)(expr), check_w_ = (long long)(want);              \
		if (check_v_ != check_w_) {                                                        \
			conf_fail(__FILE__, __LINE__, "%s: got %lld, expected %lld", #expr,        \
				  check_v_, check_w_);                                             \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

/* --------------------------------------------------------- environment */

/* Host to listen on and connect to (env WIMM_TEST_HOST, default 127.0.0.1:
 * verbs:rxe0 needs the rxe netdev's address). */
const char *conf_host(void);
/* Reduced workloads (env WIMM_TEST_QUICK=1), e.g. under valgrind. */
int conf_quick(void);
/* Multiplier for watchdogs and timing limits (env WIMM_TEST_TIMEOUT_SCALE,
 * default 1: the contract's own numbers), for valgrind and emulated CPUs. */
double conf_scale(void);
/* Path of this program, for re-executing it as a child peer. */
extern const char *conf_self;

int64_t conf_now_ms(void);
uint64_t conf_now_us(void);
void conf_sleep_us(unsigned us);

/* xorshift64*: deterministic, so a failing size/seed reproduces. */
uint64_t conf_rand(uint64_t *state);
void conf_fill(void *buf, size_t len, uint64_t seed);
/* 0 when buf holds what conf_fill(seed) wrote, else 1 + first bad index. */
size_t conf_verify(const void *buf, size_t len, uint64_t seed);

/* --------------------------------------------------------------- pairs */

#define PAIR_MAX_REGIONS 8
#define CONNECT_TIMEOUT_MS 10000

struct region {
	struct wimm_ctx *ctx;
	void *buf;
	size_t len;
	struct wimm_mr *mr;
	int allocated; /* buf is wimm_mr_alloc's */
};

/* Two contexts and one connection between them: the server side listens and
 * accepts (conn s), the client side connects (conn c). */
struct pair {
	struct wimm_ctx *sctx, *cctx;
	struct wimm_listener *l;
	struct wimm_conn *s, *c;
	struct region reg[PAIR_MAX_REGIONS];
	int nreg;
};

/* Open both contexts (records a failure itself and returns < 0). */
int pair_open(struct pair *p, const char *uri);
/* pair_open with the environment variable name set to sval while the
 * server's context opens and to cval while the client's does (NULL: as it
 * is); the environment is restored after each. */
int pair_open_env(struct pair *p, const char *uri, const char *name, const char *sval,
		  const char *cval);
/* The same with context attributes for each side (NULL: defaults). */
int pair_open_attr(struct pair *p, const char *uri, const struct wimm_ctx_attr *sattr,
		   const struct wimm_ctx_attr *cattr);
/* Register a zeroed region of len bytes on ctx, owned by the pair. */
struct region *pair_region(struct pair *p, struct wimm_ctx *ctx, size_t len, unsigned access);
/* The same in memory of wimm_mr_alloc (zeroed by it; the ipc fabric maps
 * such a window into the writer). */
struct region *pair_region_alloc(struct pair *p, struct wimm_ctx *ctx, size_t len, unsigned access);
/* Listen with sattr, connect with cattr, accept: both conns exist after. */
int pair_connect(struct pair *p, const struct wimm_conn_attr *sattr,
		 const struct wimm_conn_attr *cattr);
/* Connect to p->l, already listening at addr, and accept there. */
int pair_connect_on(struct pair *p, const char *addr, const struct wimm_conn_attr *cattr);
/* After a hostile test: the listener at addr still accepts a real wimm
 * connection, and its doorbell (imm) arrives. 0, or -1 (failure recorded). */
int pair_still_accepts(struct pair *p, const char *addr, uint32_t imm);
/* Everything in the order the API wants: conns, listener, regions, ctxs. */
void pair_close(struct pair *p);

/* Listen on conf_host():0; writes "host:port" into addr. */
int conf_listen(struct wimm_ctx *ctx, const struct wimm_conn_attr *attr, struct wimm_listener **l,
		char *addr, size_t addr_len);

/* Next event of ctx within timeout_ms, driving `other` (may be NULL) while
 * waiting so manual-progress providers move the peer's data. Returns 1 with
 * *ev filled, 0 on timeout, or a negative wimm error. */
int next_event(struct wimm_ctx *ctx, struct wimm_ctx *other, struct wimm_event *ev, int timeout_ms);
/* Like next_event, skipping events of other types (counted in *skipped if
 * not NULL); returns 1 only for an event of `type` on conn (NULL: any). */
int wait_event(struct wimm_ctx *ctx, struct wimm_ctx *other, enum wimm_event_type type,
	       struct wimm_conn *conn, struct wimm_event *ev, int timeout_ms, int *skipped);
/* Count events of ctx arriving within ms (driving other): for "nothing more
 * arrives" checks. */
int drain_events(struct wimm_ctx *ctx, struct wimm_ctx *other, int ms);
const char *conf_ev_name(enum wimm_event_type t);

/* ---------------------------------------------------------------- tests */

struct conf_test {
	const char *name;
	void (*fn)(const char *uri);
	int timeout_s; /* watchdog; 0 = default */
};

/* Each topic file exports its table, terminated by { NULL }. */
extern const struct conf_test conf_tests_data[];
extern const struct conf_test conf_tests_bounds[];
extern const struct conf_test conf_tests_credit[];
extern const struct conf_test conf_tests_failure[];
extern const struct conf_test conf_tests_wait[];
extern const struct conf_test conf_tests_input[];
extern const struct conf_test conf_tests_handshake_cm[];
extern const struct conf_test conf_tests_requests[];
extern const struct conf_test conf_tests_hostile[];
extern const struct conf_test conf_tests_counter[];
extern const struct conf_test conf_tests_server[];
extern const struct conf_test conf_tests_server_scale[];
extern const struct conf_test conf_tests_atomic[];
extern const struct conf_test conf_tests_connect_burst[];
extern const struct conf_test conf_tests_alloc[];
extern const struct conf_test conf_tests_prep[];

/* Child roles for tests that need a peer process (conf_failure.c). */
int conf_child_main(int argc, char **argv);
/* A killed process cannot remove its libfabric shm regions (/dev/shm/<pid>:*):
 * remove them for it (conf_failure.c). */
void remove_shm_regions(pid_t pid);
/* The ipc fabric's listener at "host:port" (an abstract unix socket):
 * a connected SOCK_SEQPACKET socket, or -1 (conf_hostile.c). */
int conf_ipc_dial(const char *addr);
/* A raw socket to the listener at addr (TCP; ipc: its unix socket, the
 * bytes as one message with three fds) that has sent buf: its fd, or -1
 * (conf_input.c). */
int conf_raw_send(const char *uri, const char *addr, const uint8_t *buf, size_t len);
/* One message of len bytes with three fds attached (SCM_RIGHTS): 0 or -1. */
int conf_ipc_send(int sock, const uint8_t *buf, size_t len, const int *fd);
/* The client role of conf_requests.c: --child client URI ADDR PARAMS. */
int conf_requests_child(int argc, char **argv);

/* ------------------------------------------- server tests' child peers */

/* A child peer process (conf_server_peer.c): this program re-run as
 * `--server-child ROLE URI ARGS...` (under `ip netns exec NS` if netns),
 * dying with the test; it reports lines on st and reads commands on cmd. */
struct srv_peer {
	pid_t pid;
	int st, cmd;
	char buf[512];
	size_t len;
	int eof;
	char why[256]; /* its last "fail ..." line */
};
int srv_peer_spawn(struct srv_peer *p, const char *netns, const char *const *argv);
/* Next line the child said, without blocking: 1, 0 (none yet), -1 (EOF). */
int srv_peer_line(struct srv_peer *p, char *line, size_t len);
int srv_peer_cmd(struct srv_peer *p, char c);
/* Its exit status (128 + signal if killed), -1 if it did not exit in time. */
int srv_peer_exit(struct srv_peer *p, int timeout_ms);
void srv_peer_kill(struct srv_peer *p);
void srv_peer_reap(struct srv_peer *p); /* kill, wait, close the pipes */
int srv_needs_park(const char *uri);
/* A wimm_ctx_attr.log hook: the first warnings and errors as diagnostics. */
void srv_log(void *arg, enum wimm_log_level level, const char *msg);
void srv_raise_nofile(void);
/* The child's side: a status line, a failure line (returns 1), the next
 * command byte (0 if none; exits when the test is gone), a context. */
void child_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int child_fail(struct wimm_ctx *ctx, const char *what, int rc);
int child_cmd(int block);
int child_open(const char *uri, uint32_t liveness_ms, struct wimm_ctx **ctx);
int conf_server_child_main(int argc, char **argv);
int conf_server_scale_child(int argc, char **argv);
/* The burst tests' client role (conf_connect_burst.c). */
int conf_burst_child(int argc, char **argv);
/* The load tests' own roles (conf_server_event_loop.c, conf_server_cycles.c),
 * dispatched by conf_server_scale_child. */
int child_loop(const char *uri, const char *addr, const char *mode, int rxd, int nev,
	       uint32_t count);
int child_cycles(const char *uri, const char *addr);
/* Descriptors this process has open (conf_server_scale.c). */
int count_fds(void);
/* Tests of conf_tests_server_scale in files of their own. */
void t_server_event_loop(const char *uri);
void t_server_connect_cycles(const char *uri);

/* ------------------------------------- the server tests' small loop */

#define SRV_MAX 4

/* One context, one listener, a few connections told apart by their conn
 * pointer; every event goes through srv_turn (conf_server_loop.c). */
struct srv {
	struct wimm_ctx *ctx;
	struct wimm_listener *l;
	char addr[300];
	int n;
	struct {
		struct wimm_conn *c;
		int64_t accepted_ms, established_ms, down_ms;
		int established, down, status;
		uint64_t rx;
	} p[SRV_MAX];
	int64_t connect_ev_ms; /* the last CONNECT event */
};

/* wimm_ctx_open (attr may be NULL): 0, or -1 with a skip (no such fabric
 * here) or a failure recorded. */
int srv_ctx_open(const char *uri, const struct wimm_ctx_attr *attr, struct wimm_ctx **ctx);
/* Open the context (liveness_ms) and listen on listen_addr ("host:0"; NULL:
 * conf_host()); -1 with a failure or a skip recorded. */
int srv_open(struct srv *s, const char *uri, uint32_t liveness_ms, const char *listen_addr);
void srv_close(struct srv *s);
/* Serve until *flag becomes non-zero (or fn says so), at most timeout_ms;
 * 1 when it did, 0 on timeout, -1 on failure. */
typedef int (*srv_cond)(struct srv *s, void *arg);
int srv_until(struct srv *s, srv_cond cond, void *arg, int timeout_ms);
/* Conditions: connection k has rung n doorbells (arg: struct rx_goal);
 * connection *(int *)arg is down. */
struct rx_goal {
	int k;
	uint64_t n;
};
int cond_rx(struct srv *s, void *arg);
int cond_down(struct srv *s, void *arg);
/* The peer's next line starting with prefix, serving meanwhile. */
int srv_expect(struct srv *s, struct srv_peer *peer, const char *prefix, char *line, size_t len,
	       int timeout_ms, const char *who);
/* A "stream" child: connect to addr, ring doorbells every pace_us. */
int spawn_stream(struct srv_peer *p, const char *netns, const char *uri, const char *addr,
		 unsigned pace_us, uint32_t liveness);
/* Where srv_needs_park(uri): SIGUSR1 and serve until it says "parked". */
int srv_park(struct srv *s, struct srv_peer *peer, const char *uri, const char *who);

#endif
