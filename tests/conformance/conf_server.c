/* The core as the engine of a server (issue 6): one server context, client
 * peers that are separate processes (this program re-run with
 * --server-child), traffic that never stops, event loops, peers that die.
 *
 * - server_control_plane: a newcomer connects within 1 s while another
 *   client streams at full rate; that client's SIGKILL is reported within
 *   1 s while the newcomer keeps streaming.
 * - server_silent_death_frozen / _link: a peer that dies without a word
 *   (SIGSTOPped; or behind a veth pair whose link is cut, ofi:tcp) is
 *   reported as DISCONNECT(TIMEDOUT) after about liveness_ms, before 2x.
 * The load tests (the event-loop matrix, 1,000 connections, connect cycles)
 * are in conf_server_scale.c; the child-process plumbing both use is here. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf.h"

/* In a child: where it reports ("connected 12", "parked", "fail ...") and
 * where the test's commands come from. */
#define CHILD_STATUS_FD 3
#define CHILD_CMD_FD 4

/* Bounds the contract sets (issue 6), scaled for slow machines. */
#define CONNECT_LIMIT_MS ((int64_t)(1000 * conf_scale()))
#define DEATH_LIMIT_MS ((int64_t)(1000 * conf_scale()))
#define SILENCE_MS 1500u

/* -------------------------------------------------------- child peers */

void srv_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* fd onto target with close-on-exec cleared, whatever fd was. */
static void move_fd(int fd, int target)
{
	if (fd == target)
		fcntl(fd, F_SETFD, 0);
	else
		dup2(fd, target);
}

int srv_peer_spawn(struct srv_peer *p, const char *netns, const char *const *argv)
{
	int st[2] = {-1, -1}, cmd[2] = {-1, -1};
	const char *full[24];
	int n = 0;

	memset(p, 0, sizeof(*p));
	p->pid = -1;
	p->st = p->cmd = -1;
	if (pipe2(st, O_CLOEXEC) || pipe2(cmd, O_CLOEXEC)) {
		conf_fail(__FILE__, __LINE__, "pipe2: %s", strerror(errno));
		goto fail;
	}
	if (netns) {
		full[n++] = "ip";
		full[n++] = "netns";
		full[n++] = "exec";
		full[n++] = netns;
	}
	full[n++] = conf_self;
	full[n++] = "--server-child";
	for (int i = 0; argv[i] && n < 23; i++)
		full[n++] = argv[i];
	full[n] = NULL;
	fflush(stdout);
	fflush(stderr);
	p->pid = fork();
	if (p->pid < 0) {
		conf_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
		goto fail;
	}
	if (p->pid == 0) {
		char ppid[24];
		/* Out of the way of 3 and 4 first, then onto them. */
		int s = fcntl(st[1], F_DUPFD_CLOEXEC, 64), c = fcntl(cmd[0], F_DUPFD_CLOEXEC, 64);

		if (s < 0 || c < 0)
			_exit(126);
		move_fd(s, CHILD_STATUS_FD);
		move_fd(c, CHILD_CMD_FD);
		snprintf(ppid, sizeof(ppid), "%d", (int)getppid());
		setenv("WIMM_CONF_PARENT", ppid, 1);
		execvp(full[0], (char *const *)full);
		_exit(127);
	}
	close(st[1]);
	close(cmd[0]);
	p->st = st[0];
	p->cmd = cmd[1];
	fcntl(p->st, F_SETFL, O_NONBLOCK);
	return 0;
fail:
	for (int i = 0; i < 2; i++) {
		if (st[i] >= 0)
			close(st[i]);
		if (cmd[i] >= 0)
			close(cmd[i]);
	}
	return -1;
}

int srv_peer_line(struct srv_peer *p, char *line, size_t len)
{
	for (;;) {
		char *nl = memchr(p->buf, '\n', p->len);

		if (nl) {
			size_t k = (size_t)(nl - p->buf);

			snprintf(line, len, "%.*s", (int)k, p->buf);
			memmove(p->buf, nl + 1, p->len - k - 1);
			p->len -= k + 1;
			if (strncmp(line, "fail ", 5) == 0)
				snprintf(p->why, sizeof(p->why), "%s", line + 5);
			if (strncmp(line, "log ", 4) == 0) {
				conf_diag("client %d: %s", (int)p->pid, line + 4);
				continue;
			}
			return 1;
		}
		if (p->st < 0 || p->eof)
			return p->eof ? -1 : 0;
		if (p->len == sizeof(p->buf))
			p->len = 0; /* a runaway line: drop it */
		ssize_t k = read(p->st, p->buf + p->len, sizeof(p->buf) - p->len);

		if (k > 0) {
			p->len += (size_t)k;
			continue;
		}
		if (k == 0)
			p->eof = 1;
		return k == 0 ? -1 : 0;
	}
}

int srv_peer_cmd(struct srv_peer *p, char c)
{
	return p->cmd >= 0 && write(p->cmd, &c, 1) == 1 ? 0 : -1;
}

int srv_peer_exit(struct srv_peer *p, int timeout_ms)
{
	int64_t deadline = conf_now_ms() + timeout_ms;
	int ws = 0;

	if (p->pid <= 0)
		return -1;
	for (;;) {
		pid_t w = waitpid(p->pid, &ws, WNOHANG);

		if (w == p->pid)
			break;
		if (w < 0 || conf_now_ms() >= deadline)
			return -1;
		conf_sleep_us(2000);
	}
	remove_shm_regions(p->pid);
	p->pid = -1;
	if (WIFEXITED(ws))
		return WEXITSTATUS(ws);
	return 128 + WTERMSIG(ws);
}

void srv_peer_kill(struct srv_peer *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
		remove_shm_regions(p->pid);
		p->pid = -1;
	}
}

void srv_peer_reap(struct srv_peer *p)
{
	srv_peer_kill(p);
	if (p->st >= 0)
		close(p->st);
	if (p->cmd >= 0)
		close(p->cmd);
	p->st = p->cmd = -1;
}

/* libfabric 1.17's shm provider takes a spinlock inside the shared region
 * on every post and progress call; a process killed or stopped while
 * holding it leaves its peer spinning inside the provider for ever (see
 * conf_failure.c). There the child is parked between two wimm calls first. */
int srv_needs_park(const char *uri)
{
	return strncmp(uri, "ofi:shm", 7) == 0;
}

/* ---------------------------------------------------- the child's side */

static volatile sig_atomic_t park_requested;

static void on_park(int sig)
{
	(void)sig;
	park_requested = 1;
}

void child_say(const char *fmt, ...)
{
	char buf[400];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	if (write(CHILD_STATUS_FD, buf, (size_t)n) != n)
		_exit(9);
}

int child_fail(struct wimm_ctx *ctx, const char *what, int rc)
{
	const char *text = "";

	if (ctx)
		wimm_provider_error(ctx, &text);
	child_say("fail %s: %s (%s)", what, wimm_err_name(rc), text ? text : "");
	return 1;
}

int child_cmd(int block)
{
	char c;

	if (!block) {
		struct pollfd pfd = {.fd = CHILD_CMD_FD, .events = POLLIN};

		if (poll(&pfd, 1, 0) != 1)
			return 0;
	}
	ssize_t n = read(CHILD_CMD_FD, &c, 1);

	if (n == 0)
		_exit(0); /* the test is gone */
	return n == 1 ? c : 0;
}

/* What the library says about dropped and refused connections, passed on
 * to the test (the first few lines). */
static void child_log(void *arg, enum wimm_log_level level, const char *msg)
{
	static int lines;

	(void)arg;
	if (level <= WIMM_LOG_WARN && lines++ < 5)
		child_say("log %s", msg);
}

void srv_log(void *arg, enum wimm_log_level level, const char *msg)
{
	static int lines;

	(void)arg;
	if (level <= WIMM_LOG_WARN && lines++ < 5)
		conf_diag("server log: %s", msg);
}

int child_open(const char *uri, uint32_t liveness_ms, struct wimm_ctx **ctx)
{
	struct wimm_ctx_attr attr = {.liveness_ms = liveness_ms, .log = child_log};

	int rc = wimm_ctx_open(uri, &attr, ctx);
	if (rc)
		return child_fail(NULL, "wimm_ctx_open", rc);
	return 0;
}

/* Connect, say how long it took, then ring doorbells 0, 1, 2 ... every
 * pace_us (0: as fast as credits allow), handling our events. */
static int child_stream(const char *uri, const char *addr, unsigned pace_us, uint32_t liveness)
{
	struct wimm_ctx *ctx = NULL;
	struct wimm_conn *c = NULL;
	struct wimm_event ev[16];
	uint32_t seq = 0;

	if (child_open(uri, liveness, &ctx))
		return 1;
	uint64_t t0 = conf_now_us();
	int rc = wimm_connect(ctx, addr, NULL, CONNECT_TIMEOUT_MS, &c);
	if (rc)
		return child_fail(ctx, "wimm_connect", rc);
	child_say("connected %llu", (unsigned long long)(conf_now_us() - t0));
	for (;;) {
		if (park_requested) {
			child_say("parked");
			for (;;)
				pause();
		}
		rc = wimm_write_imm(c, NULL, 0, 0, 0, seq, 0);
		if (rc == 0)
			seq++;
		else if (rc != WIMM_E_AGAIN)
			return child_fail(ctx, "wimm_write_imm", rc);
		int n = wimm_poll(ctx, ev, 16);
		if (n < 0)
			return child_fail(ctx, "wimm_poll", n);
		for (int i = 0; i < n; i++)
			if (ev[i].type == WIMM_EV_DISCONNECT)
				return child_fail(ctx, "stream", ev[i].status);
		if (pace_us && rc == 0)
			conf_sleep_us(pace_us);
	}
}

/* --server-child ROLE URI ARGS... */
int conf_server_child_main(int argc, char **argv)
{
	const char *parent = getenv("WIMM_CONF_PARENT");

	/* Never outlive the test, whatever happens to it. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (parent && atoi(parent) != (int)getppid())
		return 8;
	alarm((unsigned)(300 * conf_scale()));
	signal(SIGPIPE, SIG_IGN);
	signal(SIGUSR1, on_park);
	srv_raise_nofile();
	if (argc < 2)
		return 2;
	const char *role = argv[0], *uri = argv[1];

	if (strcmp(role, "stream") == 0 && argc == 5)
		return child_stream(uri, argv[2], (unsigned)atoi(argv[3]), (uint32_t)atol(argv[4]));
	return conf_server_scale_child(argc, argv);
}

/* ------------------------------------------------ a small server loop */

#define SRV_MAX 4

/* One context, one listener, a few connections told apart by their conn
 * pointer; every event goes through srv_turn. */
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

static int srv_open(struct srv *s, const char *uri, uint32_t liveness_ms, const char *listen_addr)
{
	struct wimm_ctx_attr attr = {.liveness_ms = liveness_ms, .log = srv_log};

	memset(s, 0, sizeof(*s));
	int rc = wimm_ctx_open(uri, &attr, &s->ctx);
	if (rc == WIMM_E_NOFABRIC || rc == WIMM_E_NODEV) {
		conf_skip("fabric %s not available here (%s)", uri, wimm_err_name(rc));
		return -1;
	}
	if (rc) {
		conf_fail(__FILE__, __LINE__, "wimm_ctx_open(%s): %s", uri, wimm_err_name(rc));
		return -1;
	}
	if (!listen_addr)
		return conf_listen(s->ctx, NULL, &s->l, s->addr, sizeof(s->addr)) ? -1 : 0;
	rc = wimm_listen(s->ctx, listen_addr, NULL, &s->l);
	if (rc) {
		const char *text = "";

		wimm_provider_error(s->ctx, &text);
		conf_fail(__FILE__, __LINE__, "wimm_listen(%s): %s (%s)", listen_addr,
			  wimm_err_name(rc), text ? text : "");
		return -1;
	}
	char host[64];

	snprintf(host, sizeof(host), "%s", listen_addr);
	char *colon = strrchr(host, ':');
	if (colon)
		*colon = '\0';
	snprintf(s->addr, sizeof(s->addr), "%s:%d", host, wimm_listener_port(s->l));
	return 0;
}

static void srv_close(struct srv *s)
{
	for (int i = 0; i < s->n; i++)
		wimm_conn_delete(&s->p[i].c);
	wimm_listener_delete(&s->l);
	if (s->ctx) {
		int rc = wimm_ctx_close(&s->ctx);

		if (rc)
			conf_fail(__FILE__, __LINE__, "wimm_ctx_close: %s", wimm_err_name(rc));
	}
}

static int srv_index(const struct srv *s, const struct wimm_conn *c)
{
	for (int i = 0; i < s->n; i++)
		if (s->p[i].c == c)
			return i;
	return -1;
}

/* One wimm_wait (up to wait_ms) and what it returned. -1 on a failure
 * (recorded). Doorbells must come in order 0, 1, 2 ... per connection. */
static int srv_turn(struct srv *s, int wait_ms)
{
	struct wimm_event ev[32];
	int n = wimm_wait(s->ctx, ev, 32, WIMM_WAIT_ADAPTIVE, wait_ms);

	if (n < 0) {
		conf_fail(__FILE__, __LINE__, "wimm_wait: %s", wimm_err_name(n));
		return -1;
	}
	int64_t now = conf_now_ms();

	for (int i = 0; i < n; i++) {
		int k = srv_index(s, ev[i].conn);

		switch (ev[i].type) {
		case WIMM_EV_CONNECT:
			s->connect_ev_ms = now;
			for (;;) {
				struct wimm_conn *c = NULL;
				int rc = wimm_accept(s->l, 0, &c);

				if (rc == WIMM_E_AGAIN || rc == WIMM_E_TIMEDOUT)
					break;
				if (rc) {
					conf_fail(__FILE__, __LINE__, "wimm_accept: %s",
						  wimm_err_name(rc));
					return -1;
				}
				if (s->n == SRV_MAX) {
					conf_fail(__FILE__, __LINE__,
						  "more connections than peers");
					wimm_conn_delete(&c);
					return -1;
				}
				s->p[s->n].c = c;
				s->p[s->n].accepted_ms = now;
				s->n++;
			}
			break;
		case WIMM_EV_ESTABLISHED:
			if (k < 0)
				break;
			s->p[k].established = 1;
			s->p[k].established_ms = now;
			break;
		case WIMM_EV_WRITE_IMM:
			if (k < 0 || ev[i].imm != (uint32_t)s->p[k].rx) {
				conf_fail(__FILE__, __LINE__,
					  "doorbell %u on connection %d where %llu was due",
					  ev[i].imm, k,
					  (unsigned long long)(k < 0 ? 0 : s->p[k].rx));
				return -1;
			}
			s->p[k].rx++;
			break;
		case WIMM_EV_DISCONNECT:
			if (k < 0)
				break;
			s->p[k].down = 1;
			s->p[k].down_ms = now;
			s->p[k].status = ev[i].status;
			break;
		default:
			conf_fail(__FILE__, __LINE__, "unexpected %s event (%s)",
				  conf_ev_name(ev[i].type), wimm_err_name(ev[i].status));
			return -1;
		}
	}
	return n;
}

/* Serve until *flag becomes non-zero (or fn says so), at most timeout_ms;
 * 1 when it did, 0 on timeout, -1 on failure. */
typedef int (*srv_cond)(struct srv *s, void *arg);

static int srv_until(struct srv *s, srv_cond cond, void *arg, int timeout_ms)
{
	int64_t deadline = conf_now_ms() + timeout_ms;

	while (!cond(s, arg)) {
		if (conf_now_ms() > deadline)
			return 0;
		if (srv_turn(s, 10) < 0)
			return -1;
	}
	return 1;
}

struct rx_goal {
	int k;
	uint64_t n;
};

static int cond_rx(struct srv *s, void *arg)
{
	struct rx_goal *g = arg;

	return s->n > g->k && s->p[g->k].rx >= g->n;
}

static int cond_down(struct srv *s, void *arg)
{
	int k = *(int *)arg;

	return s->n > k && s->p[k].down;
}

struct line_goal {
	struct srv_peer *peer;
	const char *prefix;
	char line[256];
	int failed;
};

static int cond_line(struct srv *s, void *arg)
{
	struct line_goal *g = arg;
	int rc;

	(void)s;
	while ((rc = srv_peer_line(g->peer, g->line, sizeof(g->line))) == 1)
		if (strncmp(g->line, g->prefix, strlen(g->prefix)) == 0)
			return 1;
	if (rc < 0)
		g->failed = 1;
	return g->failed;
}

/* Serve until the peer says prefix; 0 when it did, else a failure is
 * recorded. */
static int srv_expect(struct srv *s, struct srv_peer *peer, const char *prefix, char *line,
		      size_t len, int timeout_ms, const char *who)
{
	struct line_goal g = {.peer = peer, .prefix = prefix};
	int rc = srv_until(s, cond_line, &g, timeout_ms);

	if (rc < 0)
		return -1;
	if (rc == 0 || g.failed) {
		conf_fail(__FILE__, __LINE__, "%s did not say \"%s\" within %d ms%s%s", who, prefix,
			  timeout_ms, peer->why[0] ? ": " : "", peer->why);
		return -1;
	}
	if (line)
		snprintf(line, len, "%s", g.line);
	return 0;
}

static int spawn_stream(struct srv_peer *p, const char *netns, const char *uri, const char *addr,
			unsigned pace_us, uint32_t liveness)
{
	char pace[16], live[16];

	snprintf(pace, sizeof(pace), "%u", pace_us);
	snprintf(live, sizeof(live), "%u", liveness);
	const char *argv[] = {"stream", uri, addr, pace, live, NULL};

	return srv_peer_spawn(p, netns, argv);
}

/* Park the child between two wimm calls where the fabric needs it,
 * serving meanwhile; 0 when parked or not needed. */
static int srv_park(struct srv *s, struct srv_peer *peer, const char *uri, const char *who)
{
	if (!srv_needs_park(uri))
		return 0;
	kill(peer->pid, SIGUSR1);
	return srv_expect(s, peer, "parked", NULL, 0, 5000, who);
}

/* ----------------------------------------------- server_control_plane */

static void t_server_control_plane(const char *uri)
{
	struct srv_peer a = {.pid = -1, .st = -1, .cmd = -1}, b = a;
	struct rx_goal goal;
	struct srv s;
	char line[256];
	int ka = 0, kb = 1;

	if (srv_open(&s, uri, 0, NULL))
		goto out;
	/* A streams at full rate. */
	if (spawn_stream(&a, NULL, uri, s.addr, 0, 0))
		goto out;
	if (srv_expect(&s, &a, "connected", NULL, 0, CONNECT_TIMEOUT_MS, "client A"))
		goto out;
	goal = (struct rx_goal){ka, 2000};
	CHECKF(srv_until(&s, cond_rx, &goal, 10000) == 1, "client A: %llu doorbells in 10 s",
	       (unsigned long long)(s.n > 0 ? s.p[0].rx : 0));

	/* B connects meanwhile. */
	uint64_t a_before = s.p[ka].rx;
	int64_t t_spawn = conf_now_ms();

	if (spawn_stream(&b, NULL, uri, s.addr, 0, 0))
		goto out;
	if (srv_expect(&s, &b, "connected", line, sizeof(line), CONNECT_TIMEOUT_MS, "client B"))
		goto out;
	double b_ms = atof(line + 10) / 1000.0;
	uint64_t a_during = s.p[ka].rx - a_before;

	goal = (struct rx_goal){kb, 1};
	CHECKF(srv_until(&s, cond_rx, &goal, 5000) == 1, "no doorbell of client B in 5 s");
	CHECKF(s.p[kb].established, "B's doorbell came before its ESTABLISHED");
	conf_diag("B's wimm_connect took %.1f ms (spawned %lld ms before it said so); server: "
		  "CONNECT to ESTABLISHED %lld ms; A rang %llu doorbells meanwhile",
		  b_ms, (long long)(conf_now_ms() - t_spawn),
		  (long long)(s.p[kb].established_ms - s.p[kb].accepted_ms),
		  (unsigned long long)a_during);
	CHECKF(b_ms <= (double)CONNECT_LIMIT_MS, "B's connect took %.1f ms under load, limit %lld",
	       b_ms, (long long)CONNECT_LIMIT_MS);
	CHECKF(a_during > 0, "A was not streaming while B connected");

	/* Both stream; then A dies. */
	goal = (struct rx_goal){kb, s.p[kb].rx + 1000};
	CHECKF(srv_until(&s, cond_rx, &goal, 10000) == 1, "client B: under 1000 doorbells in 10 s");
	if (srv_park(&s, &a, uri, "client A"))
		goto out;
	uint64_t a_total = s.p[ka].rx, b_at_kill = s.p[kb].rx;
	int64_t t0 = conf_now_ms();

	kill(a.pid, SIGKILL);
	int rc = srv_until(&s, cond_down, &ka, (int)(5 * DEATH_LIMIT_MS));

	CHECK(rc >= 0);
	int64_t dead_ms = s.p[ka].down_ms - t0;

	CHECKF(rc == 1, "no DISCONNECT of A within %lld ms of its SIGKILL",
	       (long long)(5 * DEATH_LIMIT_MS));
	uint64_t b_to_disc = s.p[kb].rx - b_at_kill;
	int64_t t1 = conf_now_ms();

	goal = (struct rx_goal){kb, s.p[kb].rx + 500};
	rc = srv_until(&s, cond_rx, &goal, 5000);
	CHECK(rc >= 0);
	int64_t after_ms = conf_now_ms() - t1;

	conf_diag("A (%llu doorbells) SIGKILLed: DISCONNECT (%s) after %lld ms; B rang %llu "
		  "doorbells until then and 500 more in %lld ms after",
		  (unsigned long long)a_total, wimm_err_name(s.p[ka].status), (long long)dead_ms,
		  (unsigned long long)b_to_disc, (long long)after_ms);
	CHECKF(dead_ms <= DEATH_LIMIT_MS, "A's DISCONNECT took %lld ms, limit %lld",
	       (long long)dead_ms, (long long)DEATH_LIMIT_MS);
	CHECKF(rc == 1, "B's doorbells stopped after A died (%llu in 5 s)",
	       (unsigned long long)(s.p[kb].rx - b_at_kill));
	CHECKF(!s.p[kb].down, "B was disconnected too (%s)", wimm_err_name(s.p[kb].status));
	CHECKF(s.n == 2, "%d connections accepted, expected 2", s.n);
out:
	srv_peer_reap(&a);
	srv_peer_reap(&b);
	srv_close(&s);
}

/* ------------------------------------------------ server_silent_death */

/* Serve until connection k goes down; check that it is TIMEDOUT, not
 * before about SILENCE_MS after t0 and before twice that. */
static int expect_silent_drop(struct srv *s, int k, int64_t t0, const char *how)
{
	int64_t limit = (int64_t)(2 * SILENCE_MS * conf_scale());
	int rc = srv_until(s, cond_down, &k, (int)limit + 3000);

	if (rc < 0)
		return -1;
	if (rc == 0) {
		conf_fail(__FILE__, __LINE__, "%s: no DISCONNECT within %lld ms (liveness_ms %u)",
			  how, (long long)limit + 3000, SILENCE_MS);
		return -1;
	}
	int64_t ms = s->p[k].down_ms - t0;
	struct wimm_ctx_stats st;

	wimm_ctx_stats(s->ctx, &st);
	conf_diag("%s: DISCONNECT (%s) %lld ms later (liveness_ms %u, accepted until %lld); "
		  "ctx dropped_silent %llu",
		  how, wimm_err_name(s->p[k].status), (long long)ms, SILENCE_MS, (long long)limit,
		  (unsigned long long)st.dropped_silent);
	if (s->p[k].status != WIMM_E_TIMEDOUT) {
		conf_fail(__FILE__, __LINE__, "%s: DISCONNECT with status %s, expected TIMEDOUT",
			  how, wimm_err_name(s->p[k].status));
		return -1;
	}
	/* The silence begins at the last arrival, just before t0. */
	if (ms < (int64_t)SILENCE_MS * 85 / 100 || ms > limit) {
		conf_fail(__FILE__, __LINE__, "%s: dropped after %lld ms, expected %u..%lld", how,
			  (long long)ms, SILENCE_MS * 85 / 100, (long long)limit);
		return -1;
	}
	if (st.dropped_silent != 1) {
		conf_fail(__FILE__, __LINE__, "ctx_stats.dropped_silent %llu, expected 1",
			  (unsigned long long)st.dropped_silent);
		return -1;
	}
	return 0;
}

/* Variant a: the peer is frozen by SIGSTOP (no FIN, no heartbeat). */
static void t_server_silent_death_frozen(const char *uri)
{
	struct srv_peer c = {.pid = -1, .st = -1, .cmd = -1};
	struct rx_goal goal = {0, 200};
	struct srv s;

	if (srv_open(&s, uri, SILENCE_MS, NULL))
		goto out;
	if (spawn_stream(&c, NULL, uri, s.addr, 500, SILENCE_MS))
		goto out;
	if (srv_expect(&s, &c, "connected", NULL, 0, CONNECT_TIMEOUT_MS, "the client"))
		goto out;
	CHECKF(srv_until(&s, cond_rx, &goal, 10000) == 1, "under 200 doorbells in 10 s");
	if (srv_park(&s, &c, uri, "the client"))
		goto out;
	int64_t t0 = conf_now_ms();

	CHECK(kill(c.pid, SIGSTOP) == 0);
	if (expect_silent_drop(&s, 0, t0, "SIGSTOPped peer"))
		goto out;
out:
	srv_peer_reap(&c);
	srv_close(&s);
}

/* Variant b: a veth pair across two network namespaces, the client in the
 * other one; the link is cut, then the client is killed: no FIN reaches us.
 * Everything the test makes is removed by a janitor process that outlives
 * the test if it has to (the runner kills the test's process group). */
struct netlab {
	char ns[32], va[16], vb[16], a1[20], a2[20], net[24];
	int janitor_fd;
	pid_t janitor;
};

/* Run a shell command; 0 on success, else its output goes into why. */
static int sh(char *why, size_t len, const char *fmt, ...)
{
	char cmd[512], out[256];
	va_list ap;
	size_t got = 0;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd) - 8, fmt, ap);
	va_end(ap);
	strcat(cmd, " 2>&1");
	FILE *f = popen(cmd, "r");
	if (!f) {
		snprintf(why, len, "popen: %s", strerror(errno));
		return -1;
	}
	got = fread(out, 1, sizeof(out) - 1, f);
	out[got] = '\0';
	int st = pclose(f);
	if (st != 0) {
		char *nl = strchr(out, '\n');

		if (nl)
			*nl = '\0';
		snprintf(why, len, "`%.120s` failed: %.150s", cmd, out);
		return -1;
	}
	return 0;
}

static void netlab_remove(const struct netlab *n)
{
	char why[300];

	sh(why, sizeof(why), "ip netns del %s", n->ns);
	sh(why, sizeof(why), "ip link del %s", n->va);
	sh(why, sizeof(why), "ip route del blackhole %s", n->net);
}

static void netlab_janitor(struct netlab *n)
{
	int fds[2];

	n->janitor = -1;
	n->janitor_fd = -1;
	if (pipe2(fds, O_CLOEXEC))
		return;
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid == 0) {
		char b;

		/* Out of the test's process group: the runner kills that. */
		setsid();
		close(fds[1]);
		while (read(fds[0], &b, 1) != 0)
			;
		netlab_remove(n);
		_exit(0);
	}
	close(fds[0]);
	if (pid < 0) {
		close(fds[1]);
		return;
	}
	n->janitor = pid;
	n->janitor_fd = fds[1];
}

static void netlab_done(struct netlab *n)
{
	if (n->janitor_fd >= 0)
		close(n->janitor_fd);
	n->janitor_fd = -1;
	if (n->janitor > 0)
		waitpid(n->janitor, NULL, 0);
	n->janitor = -1;
}

static int netlab_make(struct netlab *n, char *why, size_t len)
{
	unsigned pid = (unsigned)getpid();
	/* 169.254.X.Y/30, unique per pid within a run of 16,256 pids. */
	unsigned x = 1 + (pid / 64) % 254, y = (pid % 64) * 4;

	snprintf(n->ns, sizeof(n->ns), "wimmconf%u", pid);
	snprintf(n->va, sizeof(n->va), "wca%u", pid % 10000000);
	snprintf(n->vb, sizeof(n->vb), "wcb%u", pid % 10000000);
	snprintf(n->a1, sizeof(n->a1), "169.254.%u.%u", x, y + 1);
	snprintf(n->a2, sizeof(n->a2), "169.254.%u.%u", x, y + 2);
	snprintf(n->net, sizeof(n->net), "169.254.%u.%u/30", x, y);
	netlab_janitor(n);
	if (n->janitor < 0) {
		snprintf(why, len, "cannot start the clean-up process");
		return -1;
	}
	if (sh(why, len, "ip netns add %s", n->ns) ||
	    sh(why, len, "ip link add %s type veth peer name %s netns %s", n->va, n->vb, n->ns) ||
	    sh(why, len, "ip addr add %s/30 dev %s", n->a1, n->va) ||
	    sh(why, len, "ip link set %s up", n->va) ||
	    sh(why, len, "ip netns exec %s ip addr add %s/30 dev %s", n->ns, n->a2, n->vb) ||
	    sh(why, len, "ip netns exec %s ip link set %s up", n->ns, n->vb) ||
	    sh(why, len, "ip netns exec %s ip link set lo up", n->ns) ||
	    /* Once the link is down our packets to the client must go
	     * nowhere, not out of the default route. */
	    sh(why, len, "ip route add blackhole %s metric 4000", n->net))
		return -1;
	return 0;
}

static void t_server_silent_death_link(const char *uri)
{
	struct srv_peer c = {.pid = -1, .st = -1, .cmd = -1};
	struct netlab n = {.janitor = -1, .janitor_fd = -1};
	struct rx_goal goal = {0, 200};
	struct srv s = {0};
	char why[300], laddr[64];

	if (strcmp(uri, "ofi:tcp") != 0) {
		conf_skip("the cut link is an ofi:tcp test (here: the frozen peer)");
		return;
	}
	CHECKF(geteuid() == 0, "needs root for network namespaces (euid %d)", (int)geteuid());
	CHECKF(netlab_make(&n, why, sizeof(why)) == 0, "cannot build the veth pair: %s", why);
	snprintf(laddr, sizeof(laddr), "%s:0", n.a1);
	if (srv_open(&s, uri, SILENCE_MS, laddr))
		goto out;
	if (spawn_stream(&c, n.ns, uri, s.addr, 500, SILENCE_MS))
		goto out;
	if (srv_expect(&s, &c, "connected", NULL, 0, CONNECT_TIMEOUT_MS,
		       "the client in the namespace"))
		goto out;
	CHECKF(srv_until(&s, cond_rx, &goal, 10000) == 1, "under 200 doorbells in 10 s");
	int64_t t0 = conf_now_ms();

	CHECKF(sh(why, sizeof(why), "ip netns exec %s ip link set %s down", n.ns, n.vb) == 0 &&
		   sh(why, sizeof(why), "ip link set %s down", n.va) == 0,
	       "cutting the link: %s", why);
	int64_t cut_ms = conf_now_ms() - t0;

	srv_peer_kill(&c);
	conf_diag("link %s/%s cut in %lld ms, the client killed", n.va, n.vb, (long long)cut_ms);
	if (expect_silent_drop(&s, 0, t0, "cut link, killed peer"))
		goto out;
out:
	srv_peer_reap(&c);
	srv_close(&s);
	netlab_done(&n);
}

/* Timeouts of -1 wait for ever: accept with -1 returns the connection
 * however long its set-up takes (on shm it needs the peer's progress), and
 * a graceful close with -1 waits for its fence. (-1 once made a deadline
 * in the past: accept timed out at once on shm.) */
static void t_server_wait_forever(const char *uri)
{
	struct srv_peer c = {.pid = -1, .st = -1, .cmd = -1};
	struct wimm_ctx *ctx = NULL;
	struct wimm_listener *l = NULL;
	struct wimm_conn *conn = NULL;
	char addr[300];
	int rc = wimm_ctx_open(uri, NULL, &ctx);

	if (rc == WIMM_E_NOFABRIC || rc == WIMM_E_NODEV) {
		conf_skip("fabric %s not available here (%s)", uri, wimm_err_name(rc));
		return;
	}
	CHECK_OK(rc);
	if (conf_listen(ctx, NULL, &l, addr, sizeof(addr)))
		goto out;
	if (spawn_stream(&c, NULL, uri, addr, 1000, 0))
		goto out;
	CHECK_OK(wimm_accept(l, -1, &conn));
	CHECK(conn != NULL);
	/* Its doorbells arrive on the accepted connection. */
	struct wimm_event ev[16];
	int got = 0;
	for (int64_t until = conf_now_ms() + 10000 * conf_scale(); !got && conf_now_ms() < until;) {
		int n = wimm_wait(ctx, ev, 16, WIMM_WAIT_ADAPTIVE, 100);
		CHECKF(n >= 0, "wimm_wait: %s", wimm_err_name(n));
		for (int i = 0; i < n; i++)
			got += ev[i].type == WIMM_EV_WRITE_IMM && ev[i].conn == conn;
	}
	CHECKF(got, "no doorbell on the connection accepted with timeout -1");
	/* Closed while the peer still streams (its progress serves the fence);
	 * it then leaves on its own, never killed inside shm's lock. */
	rc = wimm_conn_close(&conn, -1);
	CHECKF(rc == 0 || rc == WIMM_E_DISCONNECTED, "wimm_conn_close(-1): %s", wimm_err_name(rc));
	CHECK(conn == NULL);
	CHECKF(srv_peer_exit(&c, 10000 * conf_scale()) >= 0, "the client did not leave");
out:
	wimm_conn_delete(&conn);
	srv_peer_reap(&c);
	wimm_listener_delete(&l);
	wimm_ctx_close(&ctx);
}

const struct conf_test conf_tests_server[] = {
    {"server_wait_forever", t_server_wait_forever, 60},
    {"server_control_plane", t_server_control_plane, 60},
    {"server_silent_death_frozen", t_server_silent_death_frozen, 60},
    {"server_silent_death_link", t_server_silent_death_link, 60},
    {NULL, NULL, 0},
};
