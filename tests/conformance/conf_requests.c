/* A server's contract, in one process: connection requests with private
 * data and a window each, reject reasons the connector receives, accept
 * that never blocks, graceful close, operations of an aborted connection
 * completing with errors, counters, the log hook, heartbeats that keep an
 * idle connection alive, arm handing slots back, a CQ that grows. */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "conf.h"

/* ---------------------------------------------------------- client side */

/* A client in a process of its own (libfabric's shm maps a peer in the
 * same process directly, and its provider state is not safe to share
 * between threads of one process): it connects, posts `count` write_imm of
 * `len` bytes (imm = imm_base + i, bytes from conf_fill(seed)), optionally
 * checks its window is `half` bytes long, then keeps progressing until the
 * test stops it (or closes gracefully at once). */
struct client {
	const char *uri;
	const char *addr;
	uint32_t rx_depth;
	const char *priv; /* private data (a string), NULL: none */
	uint32_t priv_len;
	uint32_t liveness_ms;
	size_t len;
	int count;
	uint32_t imm_base;
	uint64_t seed;
	size_t half;	    /* expected peer window length, 0: no check */
	int close_graceful; /* wimm_conn_close at the end instead of waiting */
	/* results, read by client_stop */
	int rc, post_rc, close_rc, check_rc;
	int connected;
	pid_t pid;
	int ctl, rep; /* our ends: control (close = stop), reports */
};

static int client_body(const char *uri, const char *addr, const struct client *k, int rep)
{
	struct wimm_ctx_attr cattr = {.liveness_ms = k->liveness_ms};
	struct wimm_conn_attr attr = {
	    .rx_depth = k->rx_depth, .private_data = k->priv, .private_len = k->priv_len};
	struct wimm_ctx *ctx = NULL;
	struct wimm_conn *c = NULL;
	struct wimm_mr *src = NULL;
	struct wimm_event ev[16];
	void *buf = NULL;
	int rc, post_rc = 0, close_rc = 0, check_rc = 0;

	rc = wimm_ctx_open(uri, &cattr, &ctx);
	if (!rc)
		rc = wimm_connect(ctx, addr, &attr, CONNECT_TIMEOUT_MS, &c);
	if (rc)
		goto report;
	dprintf(rep, "C\n");
	if (k->len) {
		buf = calloc(1, k->len);
		if (!buf || wimm_mr_reg(ctx, buf, k->len, WIMM_LOCAL, &src))
			post_rc = WIMM_E_NOMEM;
		else
			conf_fill(buf, k->len, k->seed);
	}
	for (int i = 0; i < k->count && !post_rc; i++)
		post_rc =
		    wimm_write_imm(c, src, 0, 0, k->len, k->imm_base + (uint32_t)i, WIMM_F_WAIT);
	if (k->half) {
		struct wimm_conn_info ci;
		check_rc = wimm_conn_info(c, &ci);
		if (!check_rc && ci.peer_window_len != k->half)
			check_rc = WIMM_E_INVAL;
		/* Past the end of its own window: refused before posting. */
		if (!check_rc && wimm_write(c, NULL, 0, k->half + 1, 0, 0) != WIMM_E_BOUNDS)
			check_rc = WIMM_E_PROTO;
	}
	if (k->close_graceful) {
		close_rc = wimm_conn_close(&c, 5000);
	} else {
		/* Until the test closes our control pipe (stdin). */
		for (;;) {
			struct pollfd pf = {.fd = 0, .events = POLLIN};
			if (poll(&pf, 1, 0) > 0)
				break;
			if (wimm_poll(ctx, ev, 16) == 0)
				conf_sleep_us(100);
		}
	}
report:
	dprintf(rep, "R %d %d %d %d\n", rc, post_rc, close_rc, check_rc);
	wimm_conn_delete(&c);
	wimm_mr_dereg(&src);
	free(buf);
	wimm_ctx_close(&ctx);
	return 0;
}

/* --child client URI ADDR PARAMS (see client_start) */
int conf_requests_child(int argc, char **argv)
{
	struct client k;
	char priv[80] = "";
	unsigned long long seed, len, half;
	const char *rep_env = getenv("WIMM_CONF_REPORT_FD");

	if (argc != 4 || !rep_env)
		return 2;
	memset(&k, 0, sizeof(k));
	if (sscanf(argv[3], "%llu,%d,%u,%llu,%d,%u,%u,%llu,%u,%79s", &len, &k.count, &k.imm_base,
		   &seed, &k.close_graceful, &k.rx_depth, &k.priv_len, &half, &k.liveness_ms,
		   priv) < 9)
		return 2;
	k.len = (size_t)len;
	k.seed = seed;
	k.half = (size_t)half;
	k.priv = k.priv_len ? priv : NULL;
	return client_body(argv[1], argv[2], &k, atoi(rep_env));
}

static int client_start(struct client *k)
{
	int ctl[2], rep[2];
	char params[256];

	snprintf(params, sizeof(params), "%zu,%d,%u,%llu,%d,%u,%u,%zu,%u,%s", k->len, k->count,
		 k->imm_base, (unsigned long long)k->seed, k->close_graceful, k->rx_depth,
		 k->priv_len, k->half, k->liveness_ms, k->priv ? k->priv : "-");
	/* Close-on-exec: a later client must not hold this one's pipes open. */
	if (pipe2(ctl, O_CLOEXEC) || pipe2(rep, O_CLOEXEC)) {
		conf_fail(__FILE__, __LINE__, "pipe failed");
		return -1;
	}
	fflush(stdout);
	fflush(stderr);
	k->pid = fork();
	if (k->pid == 0) {
		char fd[16];
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(ctl[0], 0);
		fcntl(rep[1], F_SETFD, 0);
		snprintf(fd, sizeof(fd), "%d", rep[1]);
		setenv("WIMM_CONF_REPORT_FD", fd, 1);
		char *const argv[] = {(char *)conf_self, "--child", "client", (char *)k->uri,
				      (char *)k->addr,	 params,    NULL};
		execv(conf_self, argv);
		_exit(127);
	}
	close(ctl[0]);
	close(rep[1]);
	k->ctl = ctl[1];
	k->rep = rep[0];
	if (k->pid < 0) {
		conf_fail(__FILE__, __LINE__, "fork failed");
		return -1;
	}
	return 0;
}

/* Read the child's reports (non-blocking unless `until_eof`). */
static void client_read(struct client *k, int until_eof)
{
	char buf[256];
	size_t got = 0;

	for (;;) {
		struct pollfd pf = {.fd = k->rep, .events = POLLIN};
		if (poll(&pf, 1, until_eof ? 20000 : 0) <= 0)
			break;
		ssize_t r = read(k->rep, buf + got, sizeof(buf) - 1 - got);
		if (r <= 0)
			break;
		got += (size_t)r;
		buf[got] = '\0';
		if (strstr(buf, "C\n"))
			k->connected = 1;
		char *rline = strstr(buf, "R ");
		if (rline && strchr(rline, '\n')) {
			sscanf(rline, "R %d %d %d %d", &k->rc, &k->post_rc, &k->close_rc,
			       &k->check_rc);
			break;
		}
		if (!until_eof && k->connected)
			break;
	}
}

/* 1 once the child has connected (reads its report without waiting). */
static int client_connected(struct client *k)
{
	if (!k->connected)
		client_read(k, 0);
	return k->connected;
}

static void client_stop(struct client *k)
{
	int status;

	if (k->pid <= 0)
		return;
	close(k->ctl);
	k->rc = WIMM_E_PROVIDER; /* unless the report says otherwise */
	client_read(k, 1);
	close(k->rep);
	waitpid(k->pid, &status, 0);
	k->pid = 0;
}

static int open_server(const char *uri, const struct wimm_ctx_attr *attr, struct wimm_ctx **ctx)
{
	int rc = wimm_ctx_open(uri, attr, ctx);

	if (rc)
		conf_fail(__FILE__, __LINE__, "wimm_ctx_open(%s): %s", uri, wimm_err_name(rc));
	return rc;
}

/* A client of default parameters for addr; the test sets the rest. */
static void client_init(struct client *k, const char *uri, const char *addr)
{
	memset(k, 0, sizeof(*k));
	k->uri = uri;
	k->addr = addr;
}

/* A server listening with sattr, and one client (o->k) to start on it;
 * server_one_close undoes whatever was reached. */
struct server_one {
	struct wimm_ctx *ctx;
	struct wimm_listener *l;
	struct wimm_conn *s;
	struct client k;
	char addr[300];
};

static int server_one_open(struct server_one *o, const char *uri,
			   const struct wimm_conn_attr *sattr)
{
	memset(o, 0, sizeof(*o));
	if (open_server(uri, NULL, &o->ctx) ||
	    conf_listen(o->ctx, sattr, &o->l, o->addr, sizeof(o->addr)))
		return -1;
	client_init(&o->k, uri, o->addr);
	return 0;
}

static void server_one_close(struct server_one *o)
{
	client_stop(&o->k); /* nothing when it was not started or is stopped */
	wimm_conn_delete(&o->s);
	wimm_listener_delete(&o->l);
	wimm_ctx_close(&o->ctx);
}

/* A client (liveness bound liveness_ms) connects to addr, and its request
 * is rejected with `why`, or with why 0 left undecided while *l goes: 0 or
 * the listener's error; what the connector was told in *told. */
static int client_refused(const char *uri, const char *addr, struct wimm_listener **l,
			  uint32_t liveness_ms, int why, int *told)
{
	struct wimm_request *r = NULL;
	struct client k;

	client_init(&k, uri, addr);
	k.liveness_ms = liveness_ms;
	if (client_start(&k))
		return WIMM_E_PROVIDER;
	int rc = wimm_listener_request(*l, CONNECT_TIMEOUT_MS, &r);
	if (rc == 0 && why)
		rc = wimm_request_reject(&r, why);
	if (!why)
		wimm_listener_delete(l);
	client_stop(&k);
	*told = k.rc;
	return rc;
}

/* ------------------------------------------------------------ the tests */

/* Two connectors say who they are in private data; the server gives each
 * its own half of one region as its window; each writes its half, and
 * nothing lands in the other's. */
static void t_request_private_window(const char *uri)
{
	struct wimm_ctx *ctx = NULL;
	struct wimm_listener *l = NULL;
	struct wimm_mr *mr = NULL;
	struct wimm_conn *sc[2] = {NULL, NULL};
	struct wimm_request *r = NULL;
	struct wimm_fabric_limits lim;
	struct client k[2];
	char addr[300];
	const size_t half = 4096;
	uint8_t *region = NULL;
	int started = 0;

	memset(k, 0, sizeof(k));
	if (open_server(uri, NULL, &ctx))
		goto out;
	CHECK_OK(wimm_ctx_limits(ctx, &lim));
	region = calloc(1, 2 * half);
	CHECK(region);
	CHECK_OK(wimm_mr_reg(ctx, region, 2 * half, WIMM_REMOTE_WRITE, &mr));
	if (conf_listen(ctx, NULL, &l, addr, sizeof(addr)))
		goto out;
	/* One byte too much private data is refused before anything is sent. */
	{
		struct wimm_ctx *cx = NULL;
		struct wimm_conn *cc = NULL;
		uint8_t big[128] = {0};
		struct wimm_conn_attr a = {.private_data = big, .private_len = lim.private_max + 1};
		CHECK_OK(wimm_ctx_open(uri, NULL, &cx));
		int rc = wimm_connect(cx, addr, &a, CONNECT_TIMEOUT_MS, &cc);
		wimm_ctx_close(&cx);
		CHECK_RC(rc, WIMM_E_TOOBIG);
	}
	static const char *names[2] = {"client-A", "client-B"};
	size_t plen = lim.private_max < 8 ? lim.private_max : 8;
	conf_diag("private_max %u on %s", lim.private_max, uri);
	for (int i = 0; i < 2; i++) {
		client_init(&k[i], uri, addr);
		k[i].priv = names[i];
		k[i].priv_len = (uint32_t)plen;
		k[i].half = half;
		k[i].len = half;
		k[i].count = 1;
		k[i].imm_base = 100u * (unsigned)(i + 1);
		k[i].seed = 7u + (unsigned)i;
		if (client_start(&k[i]))
			goto out;
		started++;
	}
	/* sc[j] is the j-th accepted connection, given half j of the region;
	 * with private data, j must be the client that says who it is. */
	for (int j = 0; j < 2; j++) {
		struct wimm_request_info info;
		CHECK_OK(wimm_listener_request(l, CONNECT_TIMEOUT_MS, &r));
		CHECK_OK(wimm_request_info(r, &info));
		CHECKF(strchr(info.peer_addr, ':') != NULL, "peer_addr '%s'", info.peer_addr);
		CHECK_EQ(info.private_len, plen);
		CHECK_EQ(info.peer_rx_depth, 64);
		int slot = j;
		if (plen) {
			CHECK(info.private_data);
			slot = memcmp(info.private_data, names[1], plen) == 0;
			CHECKF(memcmp(info.private_data, names[slot], plen) == 0,
			       "private data not what a client sent");
			CHECK(sc[slot] == NULL);
		}
		struct wimm_conn_attr wa = {
		    .window = mr, .window_off = (size_t)slot * half, .window_len = half};
		CHECK_OK(wimm_request_accept(&r, &wa, &sc[slot]));
		CHECK(r == NULL);
	}
	/* Each client's write lands in the half its connection was given. */
	int events = 0;
	int64_t deadline = conf_now_ms() + 10000;
	while (events < 2 && conf_now_ms() < deadline) {
		struct wimm_event ev;
		if (next_event(ctx, NULL, &ev, 100) != 1)
			continue;
		if (ev.type != WIMM_EV_WRITE_IMM)
			continue;
		events++;
		int client = ev.imm == 200, slot = ev.conn == sc[1];
		CHECK_EQ(ev.len, half);
		CHECKF(ev.conn == sc[slot], "a doorbell on no accepted connection");
		if (plen)
			CHECKF(slot == client, "imm %u on the other client's connection", ev.imm);
		size_t bad = conf_verify(region + (size_t)slot * half, half, k[client].seed);
		CHECKF(bad == 0, "half %d wrong at byte %zu", slot, bad - 1);
	}
	CHECK_EQ(events, 2);
out:
	for (int i = 0; i < started; i++)
		client_stop(&k[i]);
	for (int i = 0; i < started; i++)
		if (k[i].rc || k[i].post_rc || k[i].check_rc)
			conf_fail(__FILE__, __LINE__, "client %d: connect %s, post %s, window %s",
				  i, wimm_err_name(k[i].rc), wimm_err_name(k[i].post_rc),
				  wimm_err_name(k[i].check_rc));
	wimm_conn_delete(&sc[0]);
	wimm_conn_delete(&sc[1]);
	wimm_listener_delete(&l);
	wimm_mr_dereg(&mr);
	free(region);
	wimm_ctx_close(&ctx);
}

/* The connector's wimm_connect returns the reason the listener gave. */
static void t_request_reject_reason(const char *uri)
{
	static const struct {
		int given, seen;
	} cases[] = {
	    {WIMM_E_PERM, WIMM_E_PERM},
	    {WIMM_E_AGAIN, WIMM_E_AGAIN},
	    {12345, WIMM_E_REFUSED}, /* no WIMM_E_* code */
	};
	struct server_one o;
	int told;

	if (server_one_open(&o, uri, NULL))
		goto out;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		CHECK_OK(client_refused(uri, o.addr, &o.l, 0, cases[i].given, &told));
		CHECKF(told == cases[i].seen, "rejected with %d: connector got %s, expected %s",
		       cases[i].given, wimm_err_name(told), wimm_err_name(cases[i].seen));
	}
	/* A request still undecided when the listener goes is refused. */
	CHECK_OK(client_refused(uri, o.addr, &o.l, 0, 0, &told));
	CHECK_RC(told, WIMM_E_REFUSED);
	struct wimm_ctx_stats st;
	CHECK_OK(wimm_ctx_stats(o.ctx, &st));
	CHECK_EQ(st.rejected, 4);
	CHECK_EQ(st.accepted, 0);
out:
	server_one_close(&o);
}

/* wimm_accept(l, 0) never blocks; a connection returned before it is up
 * is announced by WIMM_EV_ESTABLISHED, and posts on it work after. */
static void t_accept_nonblocking(const char *uri)
{
	struct server_one o;
	int calls = 0;
	int64_t slowest = 0;

	if (server_one_open(&o, uri, NULL))
		goto out;
	o.k.rx_depth = 8;
	if (client_start(&o.k))
		goto out;
	int64_t deadline = conf_now_ms() + CONNECT_TIMEOUT_MS;
	int rc = WIMM_E_AGAIN;
	while (rc == WIMM_E_AGAIN && conf_now_ms() < deadline) {
		int64_t t0 = conf_now_ms();
		rc = wimm_accept(o.l, 0, &o.s);
		if (conf_now_ms() - t0 > slowest)
			slowest = conf_now_ms() - t0;
		calls++;
		if (rc == WIMM_E_AGAIN)
			conf_sleep_us(200);
	}
	CHECK_OK(rc);
	conf_diag("%d accept(0) calls, the slowest %lld ms", calls, (long long)slowest);
	/* A bound for a call that never waits, scaled like every other bound
	 * (a descheduled call on a loaded host, or under the sanitizer). */
	CHECKF(slowest < (int64_t)(100 * conf_scale()), "wimm_accept(l, 0) blocked %lld ms",
	       (long long)slowest);
	struct wimm_conn_info ci;
	CHECK_OK(wimm_conn_info(o.s, &ci));
	if (!ci.connected) {
		CHECK(ci.establishing);
		struct wimm_event ev;
		CHECK_EQ(wait_event(o.ctx, NULL, WIMM_EV_ESTABLISHED, o.s, &ev, 5000, NULL), 1);
		CHECK_OK(wimm_conn_info(o.s, &ci));
		CHECK(ci.connected);
	} else {
		conf_diag("the connection was up when accept returned");
	}
	/* The server's own doorbell reaches the client. */
	CHECK_OK(wimm_write_imm(o.s, NULL, 0, 0, 0, 77, WIMM_F_WAIT));
	for (int i = 0; i < 2000 && !client_connected(&o.k); i++)
		conf_sleep_us(1000);
	CHECK(client_connected(&o.k));
out:
	server_one_close(&o);
}

/* wimm_conn_close lets what was posted complete: the peer gets all of it,
 * then the disconnect. */
static void t_graceful_close(const char *uri)
{
	struct wimm_conn_attr sattr = {.rx_depth = 128};
	struct server_one o;
	int got = 0, n = 100;

	if (server_one_open(&o, uri, &sattr))
		goto out;
	o.k.count = n;
	o.k.close_graceful = 1;
	if (client_start(&o.k))
		goto out;
	CHECK_OK(wimm_accept(o.l, CONNECT_TIMEOUT_MS, &o.s));
	struct wimm_event ev;
	int64_t deadline = conf_now_ms() + 10000;
	int down = 0;
	while (!down && conf_now_ms() < deadline) {
		if (next_event(o.ctx, NULL, &ev, 100) != 1)
			continue;
		if (ev.type == WIMM_EV_WRITE_IMM) {
			CHECKF(ev.imm == (uint32_t)got, "doorbell %u, expected %d", ev.imm, got);
			got++;
		}
		if (ev.type == WIMM_EV_DISCONNECT)
			down = 1;
	}
	client_stop(&o.k);
	CHECK_OK(o.k.post_rc);
	CHECK_OK(o.k.close_rc);
	CHECK_EQ(got, n);
	CHECK(down);
out:
	server_one_close(&o);
}

/* Signaled operations of a connection that goes down each complete,
 * successfully or with an error, before its DISCONNECT, and none after. */
static void t_abort_completes_pending(const char *uri)
{
	struct pair p;
	struct wimm_conn_attr sattr = {.rx_depth = 64};
	const size_t len = 64 * 1024;
	const int n = 32;
	int done = 0, failed = 0, after = 0, down = 0;

	if (pair_open(&p, uri))
		goto out;
	struct region *win = pair_region(&p, p.sctx, len, WIMM_REMOTE_WRITE);
	struct region *src = pair_region(&p, p.cctx, len, WIMM_LOCAL);
	CHECK(win && src);
	sattr.window = win->mr;
	if (pair_connect(&p, &sattr, NULL))
		goto out;
	for (int i = 0; i < n; i++)
		CHECK_OK(wimm_write_imm(p.c, src->mr, 0, 0, len, (uint32_t)i, WIMM_F_SIGNAL));
	/* The server goes away without ever polling. */
	wimm_conn_delete(&p.s);
	int64_t deadline = conf_now_ms() + 10000;
	while (conf_now_ms() < deadline && !(down && conf_now_ms() > deadline - 9000)) {
		struct wimm_event ev;
		if (next_event(p.cctx, p.sctx, &ev, 50) != 1) {
			if (down)
				break;
			continue;
		}
		if (ev.type == WIMM_EV_SEND_DONE || ev.type == WIMM_EV_ERROR) {
			if (down)
				after++;
			else if (ev.type == WIMM_EV_SEND_DONE)
				done++;
			else
				failed++;
		}
		if (ev.type == WIMM_EV_DISCONNECT)
			down = 1;
	}
	conf_diag("%d completed, %d failed before the DISCONNECT", done, failed);
	CHECK(down);
	CHECK_EQ(done + failed, n);
	CHECK_EQ(after, 0);
out:
	pair_close(&p);
}

static void log_line(void *arg, enum wimm_log_level level, const char *msg)
{
	char *buf = arg;
	size_t used = strlen(buf);

	(void)level;
	snprintf(buf + used, 2048 - used, "%s\n", msg);
}

/* Counters add up; heartbeats keep an idle connection alive past its
 * liveness bound; the log hook says why a connect was refused. */
static void t_stats_heartbeats_log(const char *uri)
{
	static char slog[2048], clog[2048];
	/* A bound a loaded machine (or valgrind) keeps easily: this is about
	 * heartbeats keeping an idle connection, not about the bound. */
	uint32_t bound = (uint32_t)(1000 * conf_scale());
	struct wimm_ctx_attr sa = {.liveness_ms = bound, .log = log_line, .log_arg = slog};
	struct wimm_ctx_attr ca = {.liveness_ms = bound, .log = log_line, .log_arg = clog};
	struct wimm_conn_stats cs, ss;
	struct wimm_ctx_stats xs, xc;
	struct pair p;
	int got = 0;

	slog[0] = clog[0] = '\0';
	if (pair_open_attr(&p, uri, &sa, &ca))
		goto out;
	struct region *win = pair_region(&p, p.sctx, 4096, WIMM_REMOTE_WRITE);
	struct region *src = pair_region(&p, p.cctx, 100, WIMM_LOCAL);
	CHECK(win && src);
	struct wimm_conn_attr wa = {.window = win->mr};
	if (pair_connect(&p, &wa, NULL))
		goto out;
	for (int i = 0; i < 10; i++)
		CHECK_OK(wimm_write_imm(p.c, src->mr, 0, 0, 100, (uint32_t)i, WIMM_F_WAIT));
	struct wimm_event ev;
	while (got < 10 && wait_event(p.sctx, p.cctx, WIMM_EV_WRITE_IMM, p.s, &ev, 5000, NULL) == 1)
		got++;
	CHECK_EQ(got, 10);
	/* Idle for two liveness bounds, both polling: heartbeats only. */
	int64_t until = conf_now_ms() + 2 * bound;
	while (conf_now_ms() < until) {
		CHECKF(next_event(p.sctx, p.cctx, &ev, 20) == 0, "server event %s",
		       conf_ev_name(ev.type));
		CHECKF(next_event(p.cctx, p.sctx, &ev, 20) == 0, "client event %s",
		       conf_ev_name(ev.type));
	}
	CHECK_OK(wimm_conn_stats(p.c, &cs));
	CHECK_OK(wimm_conn_stats(p.s, &ss));
	CHECK_EQ(cs.doorbells_out, 10);
	CHECK_EQ(cs.ops_out, 10);
	CHECK_EQ(cs.bytes_out, 1000);
	CHECK_EQ(ss.doorbells_in, 10);
	CHECK_EQ(ss.bytes_in, 1000);
	conf_diag("heartbeats: client %llu out / %llu in, server %llu out / %llu in",
		  (unsigned long long)cs.heartbeats_out, (unsigned long long)cs.heartbeats_in,
		  (unsigned long long)ss.heartbeats_out, (unsigned long long)ss.heartbeats_in);
	CHECK(cs.heartbeats_out >= 3 && ss.heartbeats_out >= 3);
	CHECK(cs.heartbeats_in >= 2 && ss.heartbeats_in >= 2);
	CHECK_OK(wimm_ctx_stats(p.sctx, &xs));
	CHECK_OK(wimm_ctx_stats(p.cctx, &xc));
	CHECK_EQ(xs.accepted, 1);
	CHECK_EQ(xc.connected, 1);
	CHECK_EQ(xs.conns_open, 1);
	CHECK_EQ(xs.total.doorbells_in, 10);
	CHECK_EQ(xs.disconnects, 0);
	CHECK(xs.cq_capacity >= xs.cq_reserved && xs.cq_reserved > 0);
	/* A refused connect: the listener's log says so. */
	slog[0] = '\0';
	{
		char addr[300];
		struct wimm_listener *l2 = NULL;
		int told;
		if (conf_listen(p.sctx, NULL, &l2, addr, sizeof(addr)))
			goto out;
		int rc = client_refused(uri, addr, &l2, ca.liveness_ms, WIMM_E_PERM, &told);
		wimm_listener_delete(&l2);
		CHECK_OK(rc);
		CHECK_RC(told, WIMM_E_PERM);
		CHECKF(strstr(slog, "rejected") != NULL, "server log: '%s'", slog);
	}
out:
	pair_close(&p);
}

/* The event-loop contract: a receiver with a window of 4 that takes up to
 * 16 events per poll and then sleeps on the fd after wimm_ctx_arm
 * returned 0 is never left waiting by a sender that needs credit. */
static void t_arm_returns_credit(const char *uri)
{
	static const int arrays[] = {16, 1, 4};
	struct wimm_ctx *ctx = NULL;
	struct wimm_listener *l = NULL;
	struct wimm_conn *s = NULL;
	struct wimm_conn_attr sattr = {.rx_depth = 4};
	char addr[300];
	int efd = -1;

	if (open_server(uri, NULL, &ctx))
		goto out;
	int fd;
	CHECK_OK(wimm_ctx_fd(ctx, &fd));
	efd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ee = {.events = EPOLLIN};
	CHECK(efd >= 0 && epoll_ctl(efd, EPOLL_CTL_ADD, fd, &ee) == 0);
	if (conf_listen(ctx, &sattr, &l, addr, sizeof(addr)))
		goto out;
	for (size_t round = 0; round < sizeof(arrays) / sizeof(arrays[0]); round++) {
		struct client a;
		struct wimm_event ev[16];
		int got = 0, sleeps = 0, down = 0;
		client_init(&a, uri, addr);
		a.count = 2000;
		a.close_graceful = 1;
		CHECK(client_start(&a) == 0);
		int rc = wimm_accept(l, CONNECT_TIMEOUT_MS, &s);
		int64_t last = conf_now_ms();
		while (rc == 0 && !down && conf_now_ms() - last < 10000) {
			int n = wimm_poll(ctx, ev, arrays[round]);
			if (n < 0) {
				rc = n;
				break;
			}
			for (int i = 0; i < n; i++) {
				if (ev[i].type == WIMM_EV_WRITE_IMM && ev[i].imm == (uint32_t)got) {
					got++;
					last = conf_now_ms();
				}
				if (ev[i].type == WIMM_EV_DISCONNECT)
					down = 1;
			}
			if (n > 0)
				continue;
			int ar = wimm_ctx_arm(ctx);
			if (ar == WIMM_E_AGAIN)
				continue;
			if (ar) {
				rc = ar;
				break;
			}
			/* Armed: sleeping is safe; the 1 s cap only bounds a bug. */
			struct epoll_event out;
			epoll_wait(efd, &out, 1, 1000);
			sleeps++;
		}
		client_stop(&a);
		wimm_conn_delete(&s);
		conf_diag("array %d: %d of 2000 doorbells, %d sleeps", arrays[round], got, sleeps);
		CHECK_OK(rc);
		CHECK_OK(a.rc);
		CHECK_OK(a.post_rc);
		CHECKF(got == 2000, "array of %d: stalled after %d doorbells", arrays[round], got);
	}
out:
	if (efd >= 0)
		close(efd);
	wimm_conn_delete(&s);
	wimm_listener_delete(&l);
	wimm_ctx_close(&ctx);
}

/* With default attributes the CQ grows: more connections than the old
 * fixed budget (4096 / 196 = 20). With a budget, the connection past it
 * is refused and the connector is told AGAIN. */
static void t_cq_grows(const char *uri)
{
	enum { N = 40 };
	struct pair p;
	struct wimm_conn *s[N] = {0}, *c[N] = {0};
	struct wimm_ctx_attr small = {.cq_budget = 400};
	struct wimm_ctx *bctx = NULL;
	struct wimm_listener *bl = NULL;
	struct wimm_conn *bc[3] = {0};
	struct client k[3];
	char addr[300];
	int made = 0, started = 0;

	if (pair_open(&p, uri))
		goto out;
	char paddr[300];
	if (conf_listen(p.sctx, NULL, &p.l, paddr, sizeof(paddr)))
		goto out;
	for (made = 0; made < N; made++) {
		if (pair_connect_on(&p, paddr, NULL))
			goto out;
		s[made] = p.s;
		c[made] = p.c;
		p.s = p.c = NULL;
	}
	struct wimm_ctx_stats st;
	CHECK_OK(wimm_ctx_stats(p.sctx, &st));
	conf_diag("%d connections: CQ capacity %u, reserved %u", N, st.cq_capacity, st.cq_reserved);
	CHECK(st.cq_reserved >= N * 196u);
	/* A budget of 400 holds two default connections (2 x 196), not three:
	 * the third is refused, and its connector is told AGAIN. */
	CHECK_OK(wimm_ctx_open(uri, &small, &bctx));
	CHECK(conf_listen(bctx, NULL, &bl, addr, sizeof(addr)) == 0);
	for (int i = 0; i < 3; i++) {
		client_init(&k[i], uri, addr);
		CHECK(client_start(&k[i]) == 0);
		started++;
		int rc = wimm_accept(bl, CONNECT_TIMEOUT_MS, &bc[i]);
		if (i < 2) {
			CHECK_OK(rc);
		} else {
			CHECK_RC(rc, WIMM_E_AGAIN);
			client_stop(&k[i]);
			CHECK_RC(k[i].rc, WIMM_E_AGAIN);
		}
	}
out:
	for (int i = 0; i < 3; i++)
		wimm_conn_delete(&bc[i]);
	for (int i = 0; i < started; i++)
		client_stop(&k[i]);
	for (int i = 0; i < made; i++) {
		wimm_conn_delete(&c[i]);
		wimm_conn_delete(&s[i]);
	}
	wimm_listener_delete(&bl);
	wimm_ctx_close(&bctx);
	pair_close(&p);
}

const struct conf_test conf_tests_requests[] = {
    {"request_private_window", t_request_private_window, 60},
    {"request_reject_reason", t_request_reject_reason, 60},
    {"accept_nonblocking", t_accept_nonblocking, 60},
    {"graceful_close", t_graceful_close, 60},
    {"abort_completes_pending", t_abort_completes_pending, 60},
    {"stats_heartbeats_log", t_stats_heartbeats_log, 60},
    {"arm_returns_credit", t_arm_returns_credit, 120},
    {"cq_grows", t_cq_grows, 120},
    {NULL, NULL, 0},
};
