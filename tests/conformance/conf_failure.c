/* Failure is an event, never a hang (contract item 8): a peer process that
 * dies by SIGKILL, or one that closes in order, shows up as a DISCONNECT
 * event at the other side, fast. The dying peers are this program re-run
 * with --child, so they start from a clean process. */
#include <errno.h>
#include <glob.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf.h"
#include "ipc/ipc_wire.h"

#define DEATH_LIMIT_MS ((int)(1000 * conf_scale()))
#define WARMUP_EVENTS 200

/* ---------------------------------------------------------- child roles */

/* libfabric 1.17's shm provider takes a spinlock inside the shared region on
 * every post and progress call; a process killed while holding it leaves
 * its peer spinning inside fi_cq_read forever, where no library above the
 * provider can see it. On such fabrics the test asks the child to stop
 * between two wimm calls (SIGUSR1, answered on a pipe) before it kills it:
 * the connection is still mid-stream, but no provider lock is held. */
static volatile sig_atomic_t quiesce_requested;

static void on_quiesce(int sig)
{
	(void)sig;
	quiesce_requested = 1;
}

static int needs_quiesce(const char *uri)
{
	return strncmp(uri, "ofi:shm", 7) == 0;
}

static void child_quiesce_point(void)
{
	if (!quiesce_requested)
		return;
	const char *fd = getenv("WIMM_CONF_QUIESCE_FD");
	if (fd && write(atoi(fd), "q", 1) < 0)
		_exit(6);
	for (;;)
		pause();
}

/* Ring doorbells at the peer forever, handling our own events so credits
 * keep flowing; exit when the connection fails. */
static int child_stream(struct wimm_ctx *ctx, struct wimm_conn *c)
{
	struct wimm_event ev[16];
	uint32_t seq = 0;

	signal(SIGUSR1, on_quiesce);
	for (;;) {
		child_quiesce_point();
		int rc = wimm_write_imm(c, NULL, 0, 0, 0, seq, 0);

		if (rc == 0)
			seq++;
		else if (rc != WIMM_E_AGAIN)
			return 1;
		int n = wimm_poll(ctx, ev, 16);

		for (int i = 0; i < n; i++)
			if (ev[i].type == WIMM_EV_DISCONNECT)
				return 1;
		if (rc == WIMM_E_AGAIN)
			conf_sleep_us(100);
	}
}

/* The "direct" child: connects, forks a keeper of its fds and names it on
 * the quiesce pipe; on SIGUSR2 an 8-byte doorbell (imm 1), then a payload
 * of DIRECT_LEN (imm 2), then its own death before the receiver has
 * looked: a payload that stays in the sender's memory (ipc's direct
 * payloads) dies with it. */
#define DIRECT_LEN (2 * IPC_DIRECT_MIN)
#define DIRECT_AT 4096

static int child_direct(struct wimm_ctx *ctx, const char *addr, const sigset_t *go)
{
	static uint8_t src[DIRECT_LEN];
	struct wimm_conn *c = NULL;
	struct wimm_mr *mr = NULL;
	int sig;

	memset(src, 0x5A, sizeof(src));
	if (wimm_mr_reg(ctx, src, sizeof(src), WIMM_LOCAL, &mr) ||
	    wimm_connect(ctx, addr, NULL, CONNECT_TIMEOUT_MS, &c))
		return 4;
	/* A keeper of our fds (the connection's socket among them), so that
	 * our death shows only where our payload is read. Fork clears the
	 * parent-death signal and the alarm: its own alarm bounds it. */
	pid_t keeper = fork();
	if (keeper == 0) {
		alarm(30);
		for (;;)
			pause();
	}
	const char *qfd = getenv("WIMM_CONF_QUIESCE_FD");
	if (keeper < 0 || !qfd || dprintf(atoi(qfd), "%d\n", (int)keeper) < 0)
		return 8;
	if (sigwait(go, &sig))
		return 5;
	if (wimm_write_imm(c, mr, 0, 0, 8, 1, 0) ||
	    wimm_write_imm(c, mr, 0, DIRECT_AT, DIRECT_LEN, 2, 0))
		return 6;
	raise(SIGKILL);
	return 7;
}

/* --child writer URI ADDR | --child server URI FD | --child direct URI ADDR */
int conf_child_main(int argc, char **argv)
{
	struct wimm_ctx *ctx = NULL;
	struct wimm_conn *c = NULL;
	struct wimm_listener *l = NULL;
	char addr[300];

	/* Never outlive the test, whatever happens to it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	alarm(60);
	if (argc >= 1 && strcmp(argv[0], "client") == 0)
		return conf_requests_child(argc, argv);
	if (argc != 3)
		return 2;
	/* The direct child's go (SIGUSR2), blocked before anything else so
	 * that it is never lost: sigwait takes it. */
	sigset_t go;
	sigemptyset(&go);
	sigaddset(&go, SIGUSR2);
	if (strcmp(argv[0], "direct") == 0)
		sigprocmask(SIG_BLOCK, &go, NULL);
	if (wimm_ctx_open(argv[1], NULL, &ctx))
		return 3;
	if (strcmp(argv[0], "direct") == 0)
		return child_direct(ctx, argv[2], &go);
	if (strcmp(argv[0], "writer") == 0) {
		if (wimm_connect(ctx, argv[2], NULL, CONNECT_TIMEOUT_MS, &c))
			return 4;
	} else if (strcmp(argv[0], "server") == 0) {
		int fd = atoi(argv[2]);

		if (conf_listen(ctx, NULL, &l, addr, sizeof(addr)))
			return 4;
		dprintf(fd, "%d\n", wimm_listener_port(l));
		close(fd);
		if (wimm_accept(l, CONNECT_TIMEOUT_MS, &c))
			return 5;
	} else {
		return 2;
	}
	int rc = child_stream(ctx, c);
	/* Closed, so that the sanitizer build's exit finds nothing leaked. */
	wimm_conn_delete(&c);
	wimm_listener_delete(&l);
	wimm_ctx_close(&ctx);
	return rc;
}

/* Written by a parked child; created before each spawn. */
static int quiesce_pipe[2] = {-1, -1};

static void close_quiesce_pipe(void)
{
	for (int i = 0; i < 2; i++) {
		if (quiesce_pipe[i] >= 0)
			close(quiesce_pipe[i]);
		quiesce_pipe[i] = -1;
	}
}

/* fork + exec this program as a child peer; returns its pid or -1. */
static pid_t spawn_child(const char *role, const char *uri, const char *arg)
{
	pid_t pid;

	fflush(stdout);
	fflush(stderr);
	/* The pipe fd of the server role stays open across exec on purpose,
	 * and so does the quiesce pipe (named in the environment). */
	pid = fork();
	if (pid == 0) {
		char qfd[16];

		snprintf(qfd, sizeof(qfd), "%d", quiesce_pipe[1]);
		setenv("WIMM_CONF_QUIESCE_FD", qfd, 1);
		char *const argv[] = {(char *)conf_self, "--child",   (char *)role,
				      (char *)uri,	 (char *)arg, NULL};

		execv(conf_self, argv);
		_exit(127);
	}
	return pid;
}

/* Stop the child between two wimm calls on fabrics that need it (see
 * needs_quiesce); 0 when it is parked or nothing was needed. */
static int quiesce_child(const char *uri, pid_t pid, int fd)
{
	char b;

	if (!needs_quiesce(uri))
		return 0;
	kill(pid, SIGUSR1);
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	if (poll(&pfd, 1, 5000) != 1 || read(fd, &b, 1) != 1) {
		conf_fail(__FILE__, __LINE__, "the child did not park within 5 s of SIGUSR1");
		return -1;
	}
	return 0;
}

/* A killed process cannot remove its libfabric shm regions
 * (/dev/shm/<pid>:...): do it for the child, so runs leave nothing behind. */
void remove_shm_regions(pid_t pid)
{
	char pattern[64];
	glob_t g;

	snprintf(pattern, sizeof(pattern), "/dev/shm/%d:*", (int)pid);
	if (glob(pattern, 0, NULL, &g) != 0)
		return;
	for (size_t i = 0; i < g.gl_pathc; i++)
		unlink(g.gl_pathv[i]);
	globfree(&g);
}

static void reap(pid_t *pid)
{
	if (*pid > 0) {
		kill(*pid, SIGKILL);
		waitpid(*pid, NULL, 0);
		remove_shm_regions(*pid);
		*pid = -1;
	}
}

/* Take WARMUP_EVENTS doorbells of conn, so the peer is surely streaming. */
static int warm_up(struct wimm_ctx *ctx, struct wimm_conn *conn)
{
	struct wimm_event ev;
	int got = 0;
	int64_t deadline = conf_now_ms() + 10000;

	while (got < WARMUP_EVENTS && conf_now_ms() < deadline) {
		int n = next_event(ctx, NULL, &ev, 100);

		if (n < 0)
			return n;
		if (n == 1 && ev.type == WIMM_EV_WRITE_IMM && ev.conn == conn)
			got++;
		else if (n == 1) {
			conf_fail(__FILE__, __LINE__, "unexpected %s event while streaming",
				  conf_ev_name(ev.type));
			return -1;
		}
	}
	if (got < WARMUP_EVENTS) {
		conf_fail(__FILE__, __LINE__, "only %d doorbells from the child in 10 s", got);
		return -1;
	}
	return 0;
}

/* After the kill: poll (and try to post) until the death shows, as a
 * DISCONNECT event or a DISCONNECTED post. Returns ms, or -1 on none in 5 s. */
static int64_t time_to_notice(struct wimm_ctx *ctx, struct wimm_conn *conn, int64_t t0, int posting,
			      int *how)
{
	struct wimm_event ev[16];

	while (conf_now_ms() - t0 < 5000) {
		int n = wimm_poll(ctx, ev, 16);

		if (n < 0) {
			conf_fail(__FILE__, __LINE__, "wimm_poll: %s", wimm_err_name(n));
			return -1;
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].type == WIMM_EV_DISCONNECT && ev[i].conn == conn) {
				*how = WIMM_EV_DISCONNECT;
				return conf_now_ms() - t0;
			}
		}
		if (posting && wimm_write_imm(conn, NULL, 0, 0, 0, 7, 0) == WIMM_E_DISCONNECTED) {
			*how = 0;
			return conf_now_ms() - t0;
		}
		conf_sleep_us(200);
	}
	return -1;
}

/* After the death is known: the connection says so and refuses posts. */
static int check_dead(struct wimm_conn *conn)
{
	struct wimm_conn_info ci;
	int rc;

	if (wimm_conn_info(conn, &ci) || ci.connected != 0) {
		conf_fail(__FILE__, __LINE__, "conn_info.connected still 1 after the peer died");
		return -1;
	}
	rc = wimm_write_imm(conn, NULL, 0, 0, 0, 1, 0);
	if (rc != WIMM_E_DISCONNECTED) {
		conf_fail(__FILE__, __LINE__, "write_imm to a dead peer: %s, expected DISCONNECTED",
			  wimm_err_name(rc));
		return -1;
	}
	return 0;
}

/* In cleanup, where CHECK would jump back to it. */
static void close_ctx(struct wimm_ctx **ctx)
{
	int rc = wimm_ctx_close(ctx);

	if (rc)
		conf_fail(__FILE__, __LINE__, "wimm_ctx_close: %s", wimm_err_name(rc));
}

/* The client process streams into us, then is SIGKILLed. */
static void t_dead_client(const char *uri)
{
	struct wimm_ctx *ctx = NULL;
	struct wimm_listener *l = NULL;
	struct wimm_conn *s = NULL;
	char addr[300];
	pid_t pid = -1;
	int how = -1;

	if (srv_ctx_open(uri, NULL, &ctx))
		goto out;
	if (conf_listen(ctx, NULL, &l, addr, sizeof(addr)))
		goto out;
	CHECK(pipe(quiesce_pipe) == 0);
	pid = spawn_child("writer", uri, addr);
	CHECK(pid > 0);
	CHECK_OK(wimm_accept(l, CONNECT_TIMEOUT_MS, &s));
	if (warm_up(ctx, s) || quiesce_child(uri, pid, quiesce_pipe[0]))
		goto out;
	int64_t t0 = conf_now_ms();

	reap(&pid);
	int64_t ms = time_to_notice(ctx, s, t0, 0, &how);

	conf_diag("dead client noticed after %lld ms", (long long)ms);
	CHECKF(ms >= 0, "no DISCONNECT event within 5 s of SIGKILL");
	CHECKF(ms <= DEATH_LIMIT_MS, "DISCONNECT took %lld ms, limit %d", (long long)ms,
	       DEATH_LIMIT_MS);
	if (check_dead(s))
		goto out;
out:
	reap(&pid);
	close_quiesce_pipe();
	wimm_conn_delete(&s);
	wimm_listener_delete(&l);
	close_ctx(&ctx);
}

/* Read a number line from the child (a port, a pid) off the pipe, waiting
 * at most 10 s; -1 without one. */
static int read_number(int fd)
{
	char buf[32];
	size_t len = 0;
	int64_t deadline = conf_now_ms() + 10000;

	while (len < sizeof(buf) - 1 && conf_now_ms() < deadline) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};

		if (poll(&pfd, 1, 100) <= 0)
			continue;
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);

		if (n <= 0)
			break;
		len += (size_t)n;
		if (memchr(buf, '\n', len))
			break;
	}
	buf[len] = '\0';
	return memchr(buf, '\n', len) ? atoi(buf) : -1;
}

/* The server process streams into us, then is SIGKILLed; we notice as an
 * event or as a failing post. */
static void t_dead_server(const char *uri)
{
	struct wimm_ctx *ctx = NULL;
	struct wimm_conn *c = NULL;
	int fds[2] = {-1, -1};
	char addr[300], fdarg[16];
	pid_t pid = -1;
	int how = -1;

	if (srv_ctx_open(uri, NULL, &ctx))
		goto out;
	CHECK(pipe(fds) == 0);
	snprintf(fdarg, sizeof(fdarg), "%d", fds[1]);
	CHECK(pipe(quiesce_pipe) == 0);
	pid = spawn_child("server", uri, fdarg);
	CHECK(pid > 0);
	close(fds[1]);
	fds[1] = -1;
	int port = read_number(fds[0]);

	CHECKF(port > 0, "the server child reported no port");
	snprintf(addr, sizeof(addr), strchr(conf_host(), ':') ? "[%s]:%d" : "%s:%d", conf_host(),
		 port);
	CHECK_OK(wimm_connect(ctx, addr, NULL, CONNECT_TIMEOUT_MS, &c));
	if (warm_up(ctx, c) || quiesce_child(uri, pid, quiesce_pipe[0]))
		goto out;
	int64_t t0 = conf_now_ms();

	reap(&pid);
	int64_t ms = time_to_notice(ctx, c, t0, 1, &how);

	conf_diag("dead server noticed after %lld ms (%s)", (long long)ms,
		  how == WIMM_EV_DISCONNECT ? "DISCONNECT event" : "post failed DISCONNECTED");
	CHECKF(ms >= 0, "neither a DISCONNECT event nor a failing post within 5 s of SIGKILL");
	CHECKF(ms <= DEATH_LIMIT_MS, "noticing took %lld ms, limit %d", (long long)ms,
	       DEATH_LIMIT_MS);
	if (check_dead(c))
		goto out;
out:
	reap(&pid);
	close_quiesce_pipe();
	if (fds[0] >= 0)
		close(fds[0]);
	if (fds[1] >= 0)
		close(fds[1]);
	wimm_conn_delete(&c);
	close_ctx(&ctx);
}

/* ipc: a sender dies with a direct payload still in its memory, before the
 * receiver consumed it. A process it forked keeps the connection's socket
 * open, so the receiver can learn of the death only where it reads the
 * payload (process_vm_readv: ESRCH). What the sender posted before lands;
 * the payload and its doorbell are lost as on a dead link, the window keeps
 * what it had, and the connection goes down with DISCONNECTED. Where direct
 * payloads are not offered (WIMM_IPC_DIRECT=0) the payload went through
 * the ring and lands; the keeper's death then closes the socket. */
static void t_ipc_direct_sender_dies(const char *uri)
{
	static uint8_t win[2 * DIRECT_AT + DIRECT_LEN];
	const char *env = getenv("WIMM_IPC_DIRECT");
	int offered = !env || strcmp(env, "0") != 0;
	struct wimm_ctx *ctx = NULL;
	struct wimm_listener *l = NULL;
	struct wimm_conn *s = NULL;
	struct wimm_mr *mr = NULL;
	char addr[300];
	pid_t pid = -1, keeper = -1;
	int got1 = 0, got2 = 0, down = 0;

	if (strcmp(uri, "ipc") != 0) {
		conf_skip("direct payloads are the ipc fabric's");
		return;
	}
	memset(win, 0xCC, sizeof(win));
	if (srv_ctx_open(uri, NULL, &ctx))
		goto out;
	CHECK_OK(wimm_mr_reg(ctx, win, sizeof(win), WIMM_REMOTE_WRITE, &mr));
	struct wimm_conn_attr attr = {.window = mr};
	if (conf_listen(ctx, &attr, &l, addr, sizeof(addr)))
		goto out;
	CHECK(pipe(quiesce_pipe) == 0);
	pid = spawn_child("direct", uri, addr);
	CHECK(pid > 0);
	CHECK_OK(wimm_accept(l, CONNECT_TIMEOUT_MS, &s));
	keeper = read_number(quiesce_pipe[0]);
	CHECKF(keeper > 0, "the child did not name the process that keeps its socket");
	/* Dead (a zombie: no memory to read) before we poll again. */
	siginfo_t si;
	CHECK(kill(pid, SIGUSR2) == 0);
	CHECK(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT) == 0);
	CHECKF(si.si_code == CLD_KILLED && si.si_status == SIGKILL,
	       "the child did not post and die (exit code %d)", si.si_status);
	for (int64_t end = conf_now_ms() + 5000; !down && conf_now_ms() < end;) {
		struct wimm_event ev;
		if (next_event(ctx, NULL, &ev, 100) != 1)
			continue;
		got1 += ev.type == WIMM_EV_WRITE_IMM && ev.imm == 1;
		got2 += ev.type == WIMM_EV_WRITE_IMM && ev.imm == 2;
		if (got2 && keeper > 0) {
			kill(keeper, SIGKILL);
			keeper = -1;
		}
		if (ev.type == WIMM_EV_DISCONNECT) {
			down = 1;
			conf_diag("DISCONNECT: %s, provider code %d", wimm_err_name(ev.status),
				  ev.prov_err);
			CHECKF(ev.status == WIMM_E_DISCONNECTED, "down with %s",
			       wimm_err_name(ev.status));
			/* Offered: found gone where its payload was read. */
			CHECKF(!offered || ev.prov_err == ESRCH,
			       "down with provider code %d, not ESRCH", ev.prov_err);
		}
	}
	CHECKF(down, "no DISCONNECT within 5 s of the sender's death");
	CHECKF(got1 == 1, "the doorbell posted before the payload: %d delivered", got1);
	CHECKF(got2 == !offered, "the direct payload's doorbell: %d delivered, expected %d", got2,
	       !offered);
	CHECKF(win[0] == 0x5A && win[8] == 0xCC, "the 8-byte write did not land alone");
	CHECKF(win[DIRECT_AT] == (offered ? 0xCC : 0x5A) &&
		   win[DIRECT_AT + DIRECT_LEN - 1] == (offered ? 0xCC : 0x5A),
	       "the window at the payload holds %#x", win[DIRECT_AT]);
	CHECKF(win[DIRECT_AT + DIRECT_LEN] == 0xCC, "written past the payload");
	if (check_dead(s))
		goto out;
out:
	if (keeper > 0)
		kill(keeper, SIGKILL);
	reap(&pid);
	close_quiesce_pipe();
	wimm_conn_delete(&s);
	wimm_listener_delete(&l);
	wimm_mr_dereg(&mr);
	close_ctx(&ctx);
}

/* One side deletes its connection: the other gets exactly one DISCONNECT,
 * then its connection is down and refuses posts. */
static void close_one_side(const char *uri, int server_closes)
{
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct wimm_event ev;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	/* Traffic first, so the close is not on an idle connection only. */
	CHECK_OK(wimm_write_imm(p.c, NULL, 0, 0, 0, 1, 0));
	CHECK_EQ(wait_event(p.sctx, p.cctx, WIMM_EV_WRITE_IMM, p.s, &ev, 5000, NULL), 1);

	struct wimm_ctx *octx = server_closes ? p.cctx : p.sctx;
	struct wimm_ctx *cctx = server_closes ? p.sctx : p.cctx;
	struct wimm_conn **closer = server_closes ? &p.s : &p.c;
	struct wimm_conn *other = server_closes ? p.c : p.s;
	int64_t t0 = conf_now_ms();

	CHECK_OK(wimm_conn_delete(closer));
	CHECK(*closer == NULL);
	int rc = wait_event(octx, cctx, WIMM_EV_DISCONNECT, other, &ev, 5000, NULL);
	int64_t ms = conf_now_ms() - t0;

	CHECKF(rc == 1, "no DISCONNECT within 5 s of wimm_conn_delete");
	conf_diag("orderly close noticed after %lld ms", (long long)ms);
	CHECKF(ms <= DEATH_LIMIT_MS, "DISCONNECT took %lld ms", (long long)ms);
	CHECK(ev.user == (server_closes ? cattr.user : sattr.user));
	if (check_dead(other))
		goto out;
	/* Exactly one. */
	CHECK_EQ(drain_events(octx, cctx, 200), 0);
out:
	pair_close(&p);
}

static void t_orderly_close_client(const char *uri)
{
	close_one_side(uri, 0);
}

static void t_orderly_close_server(const char *uri)
{
	close_one_side(uri, 1);
}

/* One phase of the stalled-receiver test, ms long: the client polls and
 * rings a doorbell every ring_ms; the server polls too unless stalled.
 * Counts the server's doorbells in *got; *down: the status of a DISCONNECT
 * of the server's side (0: none). */
static int stall_phase(struct pair *p, int ms, int ring_ms, int stalled, int *got, int *down)
{
	struct wimm_event ev[8];
	int64_t next_ring = conf_now_ms();

	for (int64_t end = conf_now_ms() + ms; conf_now_ms() < end;) {
		if (conf_now_ms() >= next_ring) {
			int rc = wimm_write_imm(p->c, NULL, 0, 0, 0, 77, 0);
			if (rc && rc != WIMM_E_AGAIN)
				return rc;
			next_ring += ring_ms;
		}
		if (wimm_poll(p->cctx, ev, 8) < 0)
			return -1;
		int n = stalled ? 0 : wimm_poll(p->sctx, ev, 8);
		if (n < 0)
			return n;
		for (int i = 0; i < n; i++) {
			*got += ev[i].type == WIMM_EV_WRITE_IMM && ev[i].conn == p->s;
			if (ev[i].type == WIMM_EV_DISCONNECT && ev[i].conn == p->s)
				*down = ev[i].status ? ev[i].status : WIMM_E_DISCONNECTED;
		}
		conf_sleep_us(1000);
	}
	return 0;
}

/* A receiver that stops polling for four times its liveness bound while
 * its peer goes on ringing doorbells, each a sign of life: when it polls
 * again those signs are read before anyone is found silent (on ipc and
 * libfabric they wait in the rings or the provider until the receiver
 * drives them), so the connection stays up and every doorbell arrives.
 * (The client's own bound is long so that it never gives up on the
 * stalled server; it heartbeats at the server's pace, see
 * asymmetric_bounds.) */
static void t_stalled_receiver(const char *uri)
{
	struct pair p;
	int bound = (int)(300 * conf_scale()), ring = bound / 4;
	struct wimm_ctx_attr sattr = {.liveness_ms = (uint32_t)bound};
	struct wimm_ctx_attr cattr = {.liveness_ms = 600000};
	int got = 0, down = 0;

	if (pair_open_attr(&p, uri, &sattr, &cattr) || pair_connect(&p, NULL, NULL))
		goto out;
	CHECK_OK(stall_phase(&p, bound, ring, 0, &got, &down));
	int before = got;
	CHECK_OK(stall_phase(&p, 4 * bound, ring, 1, &got, &down));
	CHECK_OK(stall_phase(&p, 2 * bound, ring, 0, &got, &down));
	struct wimm_conn_stats cs;
	CHECK_OK(wimm_conn_stats(p.c, &cs));
	conf_diag("server stalled %d ms (bound %d): %d doorbells before, %d in all of %llu rung",
		  4 * bound, bound, before, got, (unsigned long long)cs.doorbells_out);
	CHECKF(!down, "the server dropped its live peer after its own stall: %s",
	       wimm_err_name(down));
	CHECKF((uint64_t)got == cs.doorbells_out, "%d of %llu doorbells arrived", got,
	       (unsigned long long)cs.doorbells_out);
	struct wimm_conn_info ci;
	CHECK_OK(wimm_conn_info(p.s, &ci));
	CHECK(ci.connected);
out:
	pair_close(&p);
}

/* Sides with far apart bounds: the server's is 300 ms, the client's ten
 * minutes, and the client sends nothing of its own. It must heartbeat at
 * the pace the server asks (a quarter of the server's bound), not at the
 * eighth of its own bound its context would tick at: the server keeps it
 * for eight of its bounds and sees its heartbeats come in. */
static void t_asymmetric_bounds(const char *uri)
{
	struct pair p;
	int bound = (int)(300 * conf_scale());
	struct wimm_ctx_attr sattr = {.liveness_ms = (uint32_t)bound};
	struct wimm_ctx_attr cattr = {.liveness_ms = 600000};
	int got = 0, down = 0;

	if (pair_open_attr(&p, uri, &sattr, &cattr) || pair_connect(&p, NULL, NULL))
		goto out;
	/* ring_ms past the phase: no doorbell after the first. */
	CHECK_OK(stall_phase(&p, 8 * bound, 100 * bound, 0, &got, &down));
	struct wimm_conn_stats cs, ss;
	CHECK_OK(wimm_conn_stats(p.c, &cs));
	CHECK_OK(wimm_conn_stats(p.s, &ss));
	conf_diag("client (bound 600 s) sent %llu heartbeats in %d ms, the server (bound %d ms) "
		  "saw %llu",
		  (unsigned long long)cs.heartbeats_out, 8 * bound, bound,
		  (unsigned long long)ss.heartbeats_in);
	CHECKF(!down, "the server dropped the client: %s", wimm_err_name(down));
	/* Every bound / 4 for 8 bounds is 32; ticks at half that period, so at
	 * least 16 even on a slow host. */
	CHECKF(ss.heartbeats_in >= 16, "the server saw %llu heartbeats",
	       (unsigned long long)ss.heartbeats_in);
	struct wimm_conn_info ci;
	CHECK_OK(wimm_conn_info(p.s, &ci));
	CHECK(ci.connected);
out:
	pair_close(&p);
}

const struct conf_test conf_tests_failure[] = {
    {"dead_client", t_dead_client, 0},
    {"dead_server", t_dead_server, 0},
    {"orderly_close_client", t_orderly_close_client, 0},
    {"orderly_close_server", t_orderly_close_server, 0},
    {"ipc_direct_sender_dies", t_ipc_direct_sender_dies, 0},
    {"stalled_receiver", t_stalled_receiver, 0},
    {"asymmetric_bounds", t_asymmetric_bounds, 0},
    {NULL, NULL, 0},
};
