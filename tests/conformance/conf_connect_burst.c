/* Connection set-up in bursts, clients in processes of their own:
 * - burst_attribution: one client process opens BURST_PAIR_CONNS
 *   connections to one server in rounds, each ringing a send-with-imm that
 *   names it as soon as wimm_connect returns, while the others of its round
 *   come up; each must arrive on its own connection, and so must the
 *   server's welcome, sent as soon as a connection is up. (ofi:shm
 *   delivered such a first send to another connection of the same two
 *   processes once a lane's AV slot had been reused, and dropped a welcome
 *   that came before the client knew the server's lane: ofi_lane.c.)
 * - burst_64_clients: 64 client processes connect at once, two connections
 *   each, to one server whose connections keep receive buffers posted (as
 *   the log service's do); every connection is accepted and delivers its
 *   hello and its doorbells. (ofi:shm refused them with WIMM_E_NOMEM once
 *   one lane's pool of posted receives was full.)
 * - burst_stalled_connector (ofi:shm, ipc): a connector that stops half-way
 *   through its handshake holds up no other and is dropped in its time.
 * Every event of a connection names the client and its connection (in the
 * imm), so a doorbell on the wrong connection is seen whatever the fabric
 * carries as private data. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conf.h"

#define BURST_MAGIC 0x4255u /* "BU" */
#define BURST_PAIR_CONNS 8
#define BURST_PAIR_ROUNDS 4
#define BURST_PROCS 64
#define BURST_PROC_CONNS 2
#define BURST_DOORBELLS 8
#define BURST_HELLO 0xffffu   /* the low half of a hello's imm */
#define BURST_WELCOME 0xfffeu /* ... of the server's first doorbell */
#define BURST_RX_DEPTH 64
#define BURST_RECV_SIZE 16
#define BURST_WAIT_MS ((int)(120000 * conf_scale()))

/* Who a connection is: client process and its connection number. */
struct burst_id {
	uint16_t magic, proc;
	uint32_t idx;
};

static uint32_t burst_key(uint32_t proc, uint32_t idx)
{
	return proc * 64 + idx;
}

/* ------------------------------------------------------------ the client */

/* The connections of this round, and the server's welcomes they got. */
static struct wimm_conn *burst_c[BURST_PAIR_CONNS];
static uint32_t burst_keys[BURST_PAIR_CONNS];
static int burst_nconn, burst_welcomed;

/* Take what events there are; none may say that a connection failed, and
 * the server's welcome must name the connection it arrives on. */
static int burst_poll(struct wimm_ctx *ctx)
{
	struct wimm_event ev[32];
	int n = wimm_poll(ctx, ev, 32);

	if (n < 0)
		return child_fail(ctx, "wimm_poll", n);
	for (int i = 0; i < n; i++) {
		if (ev[i].type == WIMM_EV_DISCONNECT || ev[i].type == WIMM_EV_ERROR)
			return child_fail(ctx, "a connection failed", ev[i].status);
		if (ev[i].type != WIMM_EV_WRITE_IMM)
			continue;
		int k = 0;
		while (k < burst_nconn && burst_c[k] != ev[i].conn)
			k++;
		if (k == burst_nconn || ev[i].imm != (burst_keys[k] << 16 | BURST_WELCOME)) {
			child_say("fail the welcome %#x arrived on connection %d (key %u)",
				  ev[i].imm, k, k < burst_nconn ? burst_keys[k] : 0);
			return 1;
		}
		burst_welcomed++;
	}
	return 0;
}

/* Poll until the test sends a command byte; that byte. */
static int burst_await(struct wimm_ctx *ctx)
{
	for (;;) {
		int cmd = child_cmd(0);

		if (cmd)
			return cmd;
		if (burst_poll(ctx))
			return -1;
		conf_sleep_us(1000);
	}
}

/* One round: nconn connections, each saying hello by send-with-imm right
 * after it connects (before any poll), then the doorbells of them all. */
static int burst_round(struct wimm_ctx *ctx, const char *addr, uint32_t proc, uint32_t first,
		       int nconn, struct wimm_mr *hello, struct wimm_conn **c)
{
	struct burst_id *ids = wimm_mr_addr(hello);
	struct wimm_fabric_limits lim;
	char what[64];
	int rc;

	burst_nconn = burst_welcomed = 0;
	if ((rc = wimm_ctx_limits(ctx, &lim)))
		return child_fail(ctx, "wimm_ctx_limits", rc);
	for (int i = 0; i < nconn; i++) {
		uint32_t key = burst_key(proc, first + (uint32_t)i);
		struct burst_id *id = &ids[i];
		struct wimm_conn_attr attr = {.rx_depth = 4, .sq_depth = 16};

		*id = (struct burst_id){BURST_MAGIC, (uint16_t)proc, first + (uint32_t)i};
		/* verbs carries no private data: the imm alone names it. */
		if (lim.private_max >= sizeof(*id)) {
			attr.private_data = id;
			attr.private_len = sizeof(*id);
		}
		rc = wimm_connect(ctx, addr, &attr, CONNECT_TIMEOUT_MS, &c[i]);
		snprintf(what, sizeof(what), "connection %u of process %u", first + i, proc);
		if (rc)
			return child_fail(ctx, what, rc);
		burst_c[i] = c[i];
		burst_keys[i] = key;
		burst_nconn = i + 1;
		rc = wimm_send_imm(c[i], hello, (size_t)i * sizeof(*id), sizeof(*id),
				   key << 16 | BURST_HELLO, WIMM_F_WAIT);
		if (rc)
			return child_fail(ctx, what, rc);
	}
	for (int i = 0; i < nconn; i++)
		for (uint32_t k = 0; k < BURST_DOORBELLS; k++) {
			uint32_t key = burst_key(proc, first + (uint32_t)i);

			rc = wimm_write_imm(c[i], NULL, 0, 0, 0, key << 16 | k, WIMM_F_WAIT);
			if (rc)
				return child_fail(ctx, "doorbell", rc);
		}
	/* The server's welcome, one per connection, each on its own. */
	for (int64_t end = conf_now_ms() + CONNECT_TIMEOUT_MS; burst_welcomed < nconn;) {
		if (conf_now_ms() > end)
			return child_fail(ctx, "waiting for the welcomes", WIMM_E_TIMEDOUT);
		if (burst_poll(ctx))
			return 1;
		conf_sleep_us(1000);
	}
	return 0;
}

/* burst URI ADDR PROC NCONN ROUNDS: say "ready", wait for 'g'; per round
 * connect and ring (burst_round), say "sent", close all on 'c', say
 * "closed", wait for 'g' again; after the last round, exit on 'q'. */
static int child_burst(const char *uri, const char *addr, uint32_t proc, int nconn, int rounds)
{
	struct wimm_conn *c[BURST_PAIR_CONNS] = {0};
	struct burst_id ids[BURST_PAIR_CONNS];
	struct wimm_ctx *ctx = NULL;
	struct wimm_mr *hello = NULL;
	int rc;

	if (nconn > BURST_PAIR_CONNS || nconn * rounds > 64)
		return child_fail(NULL, "too many connections asked", WIMM_E_INVAL);
	if (child_open(uri, 0, &ctx))
		return 1;
	if ((rc = wimm_mr_reg(ctx, ids, sizeof(ids), WIMM_LOCAL, &hello)))
		return child_fail(ctx, "wimm_mr_reg", rc);
	child_say("ready");
	for (int r = 0; r < rounds; r++) {
		/* Not polling meanwhile: the next round's connections come right
		 * after the last ones went, as a client's next connect does. */
		if (child_cmd(1) != 'g')
			return child_fail(ctx, "expected 'g'", WIMM_E_INVAL);
		if (burst_round(ctx, addr, proc, (uint32_t)(r * nconn), nconn, hello, c))
			return 1;
		child_say("sent");
		if (burst_await(ctx) != 'c')
			return child_fail(ctx, "expected 'c'", WIMM_E_INVAL);
		for (int i = 0; i < nconn; i++)
			if ((rc = wimm_conn_close(&c[i], 5000)))
				return child_fail(ctx, "wimm_conn_close", rc);
		child_say("closed");
	}
	if (burst_await(ctx) != 'q')
		return child_fail(ctx, "expected 'q'", WIMM_E_INVAL);
	wimm_mr_dereg(&hello);
	rc = wimm_ctx_close(&ctx);
	return rc ? child_fail(NULL, "wimm_ctx_close", rc) : 0;
}

int conf_burst_child(int argc, char **argv)
{
	if (argc != 6)
		return 2;
	return child_burst(argv[1], argv[2], (uint32_t)atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
}

/* ------------------------------------------------------------ the server */

struct burst_conn {
	struct wimm_conn *c;
	int welcomed;
	int key_req;  /* from the request's private data, -1 if none */
	int key_seen; /* from its hello, -1 before */
	uint32_t doorbells;
	int up, down;
};

struct burst {
	struct wimm_ctx *ctx;
	struct wimm_listener *l;
	struct burst_conn *bc;
	int nbc, cap;
	unsigned char *seen; /* keys whose hello arrived */
	int accepted, hellos, doorbells, disconnects, closing;
};

/* The server's first doorbell on k, naming the client connection it
 * believes k is (known from the request, or else from the hello). */
static int burst_welcome(struct burst_conn *k, int key)
{
	if (k->welcomed || key < 0)
		return 0;
	k->welcomed = 1;
	/* Signaled: a connection that goes down with a write outstanding
	 * would retire its shm lane, and the next round must find it. */
	CHECK_OK(wimm_write_imm(k->c, NULL, 0, 0, 0, (uint32_t)key << 16 | BURST_WELCOME,
				WIMM_F_WAIT | WIMM_F_SIGNAL));
	return 0;
out:
	return -1;
}

/* Every request there is, accepted at once (as the log server does). */
static int burst_accept(struct burst *b)
{
	for (;;) {
		struct wimm_request *r = NULL;
		struct wimm_request_info info;
		int rc = wimm_listener_request(b->l, 0, &r);

		if (rc == WIMM_E_AGAIN || rc == WIMM_E_TIMEDOUT)
			return 0;
		CHECKF(rc == 0, "wimm_listener_request after %d accepted: %s", b->accepted,
		       wimm_err_name(rc));
		CHECKF(b->nbc < b->cap, "more requests than connections (%d)", b->cap);
		CHECK_OK(wimm_request_info(r, &info));
		struct burst_conn *k = &b->bc[b->nbc];
		struct burst_id id;

		*k = (struct burst_conn){.key_req = -1, .key_seen = -1};
		if (info.private_len) {
			CHECKF(info.private_len == sizeof(id), "%u bytes of private data",
			       info.private_len);
			memcpy(&id, info.private_data, sizeof(id));
			CHECKF(id.magic == BURST_MAGIC && id.idx < 64 && id.proc < BURST_PROCS,
			       "a request naming %u/%u", id.proc, id.idx);
			k->key_req = (int)burst_key(id.proc, id.idx);
		}
		struct wimm_conn_attr attr = {
		    .rx_depth = BURST_RX_DEPTH, .recv_size = BURST_RECV_SIZE, .user = k};
		rc = wimm_request_accept(&r, &attr, &k->c);
		if (rc) {
			const char *text = "";

			wimm_provider_error(b->ctx, &text);
			CHECKF(0, "accepting connection %d (%d accepted): %s (%s)", b->nbc,
			       b->accepted, wimm_err_name(rc), text ? text : "");
		}
		b->nbc++;
		b->accepted++;
		/* At once, as a server that greets its clients does (ps): the
		 * client may not even have read our answer yet. */
		if (burst_welcome(k, k->key_req))
			goto out;
	}
out:
	return -1;
}

/* One event of connection k: its hello first, then its doorbells in
 * order, every one naming k's client. */
static int burst_event(struct burst *b, struct burst_conn *k, const struct wimm_event *ev)
{
	uint32_t key = ev->imm >> 16, low = ev->imm & 0xffffu;

	switch (ev->type) {
	case WIMM_EV_ESTABLISHED:
		k->up = 1;
		return 0;
	case WIMM_EV_SEND_IMM:
		CHECKF(low == BURST_HELLO && ev->len == sizeof(struct burst_id),
		       "send-with-imm %#x (%u bytes) is no hello", ev->imm, ev->len);
		CHECKF(k->key_seen < 0, "a second hello (from %u) on the connection of %d", key,
		       k->key_seen);
		CHECKF(k->key_req < 0 || (int)key == k->key_req,
		       "the hello of client connection %u/%u arrived on the connection of "
		       "%d/%d",
		       key / 64, key % 64, k->key_req / 64, k->key_req % 64);
		CHECKF(!b->seen[key], "client connection %u/%u said hello twice", key / 64,
		       key % 64);
		b->seen[key] = 1;
		k->key_seen = (int)key;
		k->up = 1; /* data first counts as up */
		b->hellos++;
		return burst_welcome(k, k->key_seen);
	case WIMM_EV_WRITE_IMM:
		CHECKF(k->key_seen >= 0 && (int)key == k->key_seen,
		       "doorbell %#x (client connection %u/%u) on the connection of %d/%d", ev->imm,
		       key / 64, key % 64, k->key_seen / 64, k->key_seen % 64);
		CHECKF(low == k->doorbells, "doorbell %u of %u/%u after %u", low, key / 64,
		       key % 64, k->doorbells);
		k->doorbells++;
		b->doorbells++;
		return 0;
	case WIMM_EV_SEND_DONE:
		CHECKF(k->welcomed == 1, "a second SEND_DONE");
		k->welcomed = 2;
		return 0;
	case WIMM_EV_DISCONNECT:
		CHECKF(b->closing, "connection of %d/%d dropped: %s", k->key_seen / 64,
		       k->key_seen % 64, wimm_err_name(ev->status));
		k->down = 1;
		wimm_conn_delete(&k->c);
		b->disconnects++;
		return 0;
	default:
		CHECKF(0, "unexpected %s (%s)", conf_ev_name(ev->type), wimm_err_name(ev->status));
	}
out:
	return -1;
}

static int burst_turn(struct burst *b)
{
	struct wimm_event ev[64];
	int n = wimm_wait(b->ctx, ev, 64, WIMM_WAIT_ADAPTIVE, 10);

	CHECKF(n >= 0, "wimm_wait: %s", wimm_err_name(n));
	for (int i = 0; i < n; i++) {
		if (ev[i].type == WIMM_EV_CONNECT) {
			if (burst_accept(b))
				goto out;
			continue;
		}
		CHECKF(ev[i].user, "%s without a connection", conf_ev_name(ev[i].type));
		if (burst_event(b, ev[i].user, &ev[i]))
			goto out;
	}
	return 0;
out:
	return -1;
}

/* Serve until *count reaches goal (the clients' lines read meanwhile: a
 * failed client fails the test); -1 on failure or after BURST_WAIT_MS. */
static int burst_until(struct burst *b, struct srv_peer *p, int np, const int *count, int goal,
		       const char *what)
{
	int64_t deadline = conf_now_ms() + BURST_WAIT_MS;
	char line[256];

	while (*count < goal) {
		CHECKF(conf_now_ms() < deadline,
		       "%s: %d of %d after %d ms (%d accepted, %d hellos, %d doorbells)", what,
		       *count, goal, BURST_WAIT_MS, b->accepted, b->hellos, b->doorbells);
		if (burst_turn(b))
			goto out;
		for (int i = 0; i < np; i++) {
			int rc;

			while ((rc = srv_peer_line(&p[i], line, sizeof(line))) == 1)
				;
			CHECKF(!p[i].why[0], "client process %d: %s", i, p[i].why);
			CHECKF(rc >= 0, "client process %d ended (exit %d)", i,
			       srv_peer_exit(&p[i], 1000));
		}
	}
	return 0;
out:
	return -1;
}

/* np client processes of nconn connections each, `rounds` rounds: every
 * connection accepted, its hello and doorbells on it, and closed. */
static void burst_run(const char *uri, int np, int nconn, int rounds)
{
	struct srv_peer *p = calloc((size_t)np, sizeof(*p));
	struct burst b = {0};
	char addr[300], line[256];
	int spawned = 0, ready = 0, rc;

	CHECK(p);
	b.cap = np * nconn * rounds;
	b.bc = calloc((size_t)b.cap, sizeof(*b.bc));
	b.seen = calloc((size_t)BURST_PROCS * 64, 1);
	CHECK(b.bc && b.seen);
	srv_raise_nofile();
	struct wimm_ctx_attr cattr = {.log = srv_log};

	if (srv_ctx_open(uri, &cattr, &b.ctx))
		goto out;
	if (conf_listen(b.ctx, NULL, &b.l, addr, sizeof(addr)))
		goto out;
	for (; spawned < np; spawned++) {
		char proc[16], conns[16], rnds[16];

		snprintf(proc, sizeof(proc), "%d", spawned);
		snprintf(conns, sizeof(conns), "%d", nconn);
		snprintf(rnds, sizeof(rnds), "%d", rounds);
		const char *argv[] = {"burst", uri, addr, proc, conns, rnds, NULL};

		if (srv_peer_spawn(&p[spawned], NULL, argv))
			goto out;
	}
	/* Every client has its context open: then all connect at once. */
	int64_t deadline = conf_now_ms() + BURST_WAIT_MS;

	for (int i = 0; i < np; i++) {
		while ((rc = srv_peer_line(&p[i], line, sizeof(line))) == 0) {
			CHECKF(conf_now_ms() < deadline, "client process %d not ready", i);
			conf_sleep_us(2000);
		}
		CHECKF(rc == 1 && strcmp(line, "ready") == 0, "client process %d: %s", i,
		       p[i].why[0] ? p[i].why : line);
		ready++;
	}
	int64_t t0 = conf_now_ms();

	for (int r = 0; r < rounds; r++) {
		int per_round = np * nconn;

		for (int i = 0; i < np; i++)
			CHECK(srv_peer_cmd(&p[i], 'g') == 0);
		if (burst_until(&b, p, np, &b.doorbells, (r + 1) * per_round * BURST_DOORBELLS,
				"doorbells"))
			goto out;
		CHECK_EQ(b.hellos, (r + 1) * per_round);
		b.closing = 1;
		for (int i = 0; i < np; i++)
			CHECK(srv_peer_cmd(&p[i], 'c') == 0);
		if (burst_until(&b, p, np, &b.disconnects, (r + 1) * per_round, "disconnects"))
			goto out;
		b.closing = 0;
	}
	conf_diag("%d client processes x %d connections x %d rounds: %d accepted, %d hellos and "
		  "%d doorbells each on its own connection, %lld ms",
		  np, nconn, rounds, b.accepted, b.hellos, b.doorbells,
		  (long long)(conf_now_ms() - t0));
	for (int i = 0; i < np; i++) {
		CHECK(srv_peer_cmd(&p[i], 'q') == 0);
	}
	for (int i = 0; i < np; i++) {
		int ex = srv_peer_exit(&p[i], 10000);

		CHECKF(ex == 0, "client process %d: exit %d%s%s", i, ex, p[i].why[0] ? ": " : "",
		       p[i].why);
	}
	struct wimm_ctx_stats st;

	CHECK_OK(wimm_ctx_stats(b.ctx, &st));
	CHECK_EQ(st.conns_open, 0);
out:
	(void)ready;
	for (int i = 0; i < spawned; i++)
		srv_peer_reap(&p[i]);
	for (int k = 0; b.bc && k < b.nbc; k++)
		wimm_conn_delete(&b.bc[k].c);
	wimm_listener_delete(&b.l);
	if (b.ctx && (rc = wimm_ctx_close(&b.ctx)))
		conf_fail(__FILE__, __LINE__, "wimm_ctx_close: %s", wimm_err_name(rc));
	free(b.bc);
	free(b.seen);
	free(p);
}

static void t_burst_attribution(const char *uri)
{
	burst_run(uri, 1, BURST_PAIR_CONNS, BURST_PAIR_ROUNDS);
}

static void t_burst_64_clients(const char *uri)
{
	/* Soft-RoCE under TCG starts 64 verbs processes too slowly: 16 there. */
	int procs = strncmp(uri, "verbs:rxe", 9) == 0 ? BURST_PROCS / 4 : BURST_PROCS;

	burst_run(uri, procs, BURST_PROC_CONNS, 1);
}

/* 1 when the server closed its end of fd (EOF or reset), 0 while open. */
static int burst_closed(int fd)
{
	char b;
	ssize_t r = recv(fd, &b, 1, MSG_DONTWAIT);

	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* The fabrics whose listener reads handshakes itself (a side channel):
 * a connector that stalls half-way holds up no other, and is dropped
 * with WIMM_E_TIMEDOUT once its time to finish (2 s) is over; the
 * listener stays usable. */
static void t_burst_stalled_connector(const char *uri)
{
	static const uint8_t half[2] = {0, 0}; /* half a frame's length */
	int ipc = strcmp(uri, "ipc") == 0, fd = -1;
	struct wimm_request *r = NULL;
	char addr[300];
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	if (!ipc && strcmp(uri, "ofi:shm") != 0) {
		conf_skip("%s: the provider's CM reads handshakes", uri);
		goto out;
	}
	if (conf_listen(p.sctx, NULL, &p.l, addr, sizeof(addr)))
		goto out;
	/* ipc reads a handshake as one message: a connector that sends none. */
	fd = conf_raw_send(uri, addr, ipc ? NULL : half, ipc ? 0 : sizeof(half));
	CHECKF(fd >= 0, "cannot reach the listener at %s", addr);
	int64_t t0 = conf_now_ms();

	if (pair_connect_on(&p, addr, NULL))
		goto out;
	int64_t took = conf_now_ms() - t0;
	/* Accepted while the stalled one still waits, unless this host took
	 * longer than the stalled one's 2 s (then nothing can be told). */
	CHECKF(took >= 1900 || !burst_closed(fd),
	       "the stalled connector was dropped before another was accepted (%lld ms)",
	       (long long)took);
	CHECK_OK(wimm_write_imm(p.c, NULL, 0, 0, 0, 5, 0));
	struct wimm_event ev;
	CHECK_EQ(next_event(p.sctx, p.cctx, &ev, 5000), 1);
	CHECK(ev.type == WIMM_EV_WRITE_IMM && ev.imm == 5);
	/* Its error, once, when its time is over; it names what failed. */
	const char *text = NULL;
	int rc = wimm_listener_request(p.l, (int)(10000 * conf_scale()), &r);

	wimm_provider_error(p.sctx, &text);
	CHECKF(rc == WIMM_E_TIMEDOUT && text && strstr(text, "reading handshake"),
	       "the stalled connector: %s (%s)", wimm_err_name(rc), text ? text : "");
	CHECK(r == NULL);
	CHECKF(burst_closed(fd), "the stalled connector's socket is still open");
	CHECK_RC(wimm_listener_request(p.l, 0, &r), WIMM_E_AGAIN);
	/* The listener still takes connections. */
	wimm_conn_delete(&p.c);
	wimm_conn_delete(&p.s);
	if (pair_connect_on(&p, addr, NULL))
		goto out;
	conf_diag("a real connector accepted %lld ms after the stalled one came", (long long)took);
out:
	if (fd >= 0)
		close(fd);
	pair_close(&p);
}

const struct conf_test conf_tests_connect_burst[] = {
    {"burst_attribution", t_burst_attribution, 120},
    {"burst_64_clients", t_burst_64_clients, 300},
    {"burst_stalled_connector", t_burst_stalled_connector, 60},
    {NULL, NULL, 0},
};
