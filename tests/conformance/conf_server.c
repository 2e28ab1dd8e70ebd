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
 * - server_wait_forever: timeouts of -1 in wimm_accept and wimm_conn_close.
 * The load tests (the event-loop matrix, 1,000 connections, connect cycles)
 * are in conf_server_scale.c, conf_server_event_loop.c and
 * conf_server_cycles.c; the child-process plumbing all use is in
 * conf_server_peer.c, the small server loop these tests serve with in
 * conf_server_loop.c. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf.h"

/* Bounds the contract sets (issue 6), scaled for slow machines. */
#define CONNECT_LIMIT_MS ((int64_t)(1000 * conf_scale()))
#define DEATH_LIMIT_MS ((int64_t)(1000 * conf_scale()))
#define SILENCE_MS 1500u

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
	int rc;

	if (srv_ctx_open(uri, NULL, &ctx))
		return;
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
