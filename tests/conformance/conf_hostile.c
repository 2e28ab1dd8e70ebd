/* Hostile peers: a raw provider peer (tests/common/raw_peer.h: libfabric
 * tcp or shm, rdma_cm + verbs; or the ipc one of conf_hostile_ipc.c) that
 * does wimm's handshake itself and then ignores everything the honest
 * sender checks: it writes outside its window, uses the key of an earlier
 * connection, posts doorbells beyond its credits. The receiver enforces
 * (docs/design.md, "windows"): the writes fail at the transport, the
 * server's memory outside the window stays as it was, the overdraft drops
 * that connection, and an honest client of the same server goes on.
 *
 * The server (wimm) and the raw peer live in one thread: every wait drives
 * both. On ofi:shm the raw peer is an RDM endpoint that speaks wimm's side
 * channel (a TCP socket carrying one length-prefixed handshake each way).
 * On ipc the raw peer maps the rings itself and writes entries that name
 * anything (src/ipc/ipc_wire.h): the server checks each one it consumes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "core/handshake.h"
#include "conf_hostile.h"

/* Drive the server for ms (taking requests and accepting them with the
 * listener's attributes), counting events of the tracked connections. */
void pump(struct wimm_ctx *ctx, struct wimm_listener *l, struct wimm_conn **accepted,
	  struct seen *s, int ns, int ms)
{
	int64_t until = conf_now_ms() + ms;
	struct wimm_event ev[16];

	do {
		struct wimm_request *r = NULL;
		if (l && accepted && !*accepted && wimm_listener_request(l, 0, &r) == 0)
			wimm_request_accept(&r, NULL, accepted);
		int n = wimm_poll(ctx, ev, 16);
		for (int i = 0; i < n; i++)
			for (int j = 0; j < ns; j++) {
				if (ev[i].conn != s[j].conn)
					continue;
				if (ev[i].type == WIMM_EV_WRITE_IMM)
					s[j].doorbells++;
				if (ev[i].type == WIMM_EV_DISCONNECT) {
					s[j].down = 1;
					s[j].down_status = ev[i].status;
				}
			}
		if (n == 0)
			conf_sleep_us(100);
	} while (conf_now_ms() < until);
}

int raw_alloc(struct hostile_peer *r, int kind)
{
	memset(r, 0, sizeof(*r));
	r->raw.kind = kind;
	r->raw.src_len = RAW_SRC;
	if (posix_memalign(&r->raw.src, 4096, RAW_SRC))
		return -1;
	memset(r->raw.src, 0, RAW_SRC);
	return 0;
}

int raw_reply(struct hostile_peer *r, const uint8_t *b, size_t n)
{
	int rc = wimm_hs_decode(b, wimm_hs_wire_len(b, n), &r->raw.srv);
	if (rc)
		snprintf(r->raw.text, sizeof(r->raw.text), "the server's reply does not decode: %s",
			 wimm_err_name(rc));
	return rc;
}

/* What the raw peer runs between its looks at the CM: the server, taking
 * the raw peer's request into *sconn. */
struct server_pump {
	struct wimm_ctx *ctx;
	struct wimm_listener *l;
	struct wimm_conn **sconn;
};

static void server_pump(void *arg)
{
	struct server_pump *sp = arg;
	pump(sp->ctx, sp->l, sp->sconn, NULL, 0, 1);
}

/* Which raw peer speaks to the listener of `uri`, or 0 (with a reason). */
static int raw_kind(const char *uri, const char **why)
{
	if (!strcmp(uri, "ipc"))
		return RAW_IPC;
	int kind = raw_peer_kind_of(uri, why);
	if (!kind)
		*why = "no raw peer for this fabric here (ofi:shm: RDM behind wimm's side channel)";
	return kind;
}

int raw_connect_hs(struct hostile_peer *r, const char *uri, const char *addr, struct wimm_ctx *ctx,
		   struct wimm_listener *l, struct wimm_conn **sconn,
		   const struct wimm_handshake *hs)
{
	struct server_pump sp = {ctx, l, sconn};
	char host[256], port[16];
	const char *colon = strrchr(addr, ':');

	snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
	snprintf(port, sizeof(port), "%s", colon + 1);
	*sconn = NULL;
	if (r->raw.kind == RAW_IPC)
		return raw_ipc_connect(r, addr, ctx, l, sconn);
	struct raw_peer_attr a = {
	    .kind = r->raw.kind, .prov = uri + 4, .src = r->raw.src, .src_len = r->raw.src_len};
	if (r->raw.kind == RAW_PEER_OFI_MSG) {
		a.node = host;
		a.service = port;
	}
	if (raw_peer_open(&r->raw, &a))
		return -1;
	return raw_peer_connect(&r->raw, host, port, hs, server_pump, &sp, CONNECT_TIMEOUT_MS);
}

/* Our half of the handshake: no window, a receive window of 64, credits
 * returned into the raw peer's credit word. */
static int raw_connect(struct hostile_peer *r, const char *uri, const char *addr,
		       struct wimm_ctx *ctx, struct wimm_listener *l, struct wimm_conn **sconn)
{
	struct wimm_handshake hs = {.rx_depth = 64};

	return raw_connect_hs(r, uri, addr, ctx, l, sconn, &hs);
}

static int raw_write(struct hostile_peer *r, uint64_t addr, uint64_t key, size_t len, int doorbell,
		     uint32_t imm)
{
	if (r->raw.kind == RAW_IPC)
		return raw_ipc_write(r, addr, key, len, doorbell, imm);
	return raw_peer_write(&r->raw, addr, key, len, doorbell, imm) ? -1 : 0;
}

static void raw_progress(struct hostile_peer *r)
{
	if (r->raw.kind == RAW_IPC)
		raw_ipc_progress(r);
	else
		raw_peer_progress(&r->raw);
}

void raw_close(struct hostile_peer *r)
{
	void *src = r->raw.src;

	if (r->raw.kind == RAW_IPC)
		raw_ipc_close(r);
	raw_peer_close(&r->raw);
	free(src);
	memset(r, 0, sizeof(*r));
}

/* What a test opened with hostile_open, closed. */
void hostile_close(struct wimm_conn **hc, struct hostile_peer *r, struct arena *a)
{
	wimm_conn_delete(hc);
	raw_close(r);
	pair_close(&a->p);
}

/* Pump the server and the raw peer together for ms. */
void pump_both(struct wimm_ctx *ctx, struct hostile_peer *r, struct seen *s, int ns, int ms)
{
	int64_t until = conf_now_ms() + ms;

	while (conf_now_ms() < until) {
		pump(ctx, NULL, NULL, s, ns, 1);
		raw_progress(r);
	}
}

/* ------------------------------------------------------------ the tests */

/* A server whose listener exposes [0, HALF) of an 8 KiB region (the second
 * half a canary), and an honest client connected to it. */
int arena_open(struct arena *a, const char *uri, uint32_t rx_depth, int alloc)
{
	struct wimm_conn_attr sattr = {.rx_depth = rx_depth, .window_len = HALF};

	memset(a, 0, sizeof(*a));
	if (pair_open(&a->p, uri))
		return -1;
	a->win = alloc ? pair_region_alloc(&a->p, a->p.sctx, 2 * HALF, WIMM_REMOTE_WRITE)
		       : pair_region(&a->p, a->p.sctx, 2 * HALF, WIMM_REMOTE_WRITE);
	if (!a->win)
		return -1;
	memset(a->win->buf, 0xCC, 2 * HALF);
	sattr.window = a->win->mr;
	if (conf_listen(a->p.sctx, &sattr, &a->p.l, a->addr, sizeof(a->addr)))
		return -1;
	return pair_connect_on(&a->p, a->addr, NULL);
}

/* The honest client still gets its doorbells through. */
int honest_ok(struct arena *a)
{
	struct wimm_event ev;
	int got = 0;

	for (int i = 0; i < 10; i++) {
		int rc = wimm_write_imm(a->p.c, NULL, 0, 0, 0, 1000u + (uint32_t)i, WIMM_F_WAIT);
		if (rc) {
			conf_diag("honest client: doorbell %d: %s", i, wimm_err_name(rc));
			return 0;
		}
	}
	int w = 1;
	while (got < 10 && (w = wait_event(a->p.sctx, a->p.cctx, WIMM_EV_WRITE_IMM, a->p.s, &ev,
					   5000, NULL)) == 1) {
		if (ev.imm != 1000u + (uint32_t)got)
			conf_diag("honest client: doorbell %u where %u was due", ev.imm,
				  1000u + (uint32_t)got);
		got += ev.imm == 1000u + (uint32_t)got;
	}
	if (got != 10) {
		struct wimm_conn_stats cs = {0}, ss = {0};
		wimm_conn_stats(a->p.c, &cs);
		wimm_conn_stats(a->p.s, &ss);
		struct wimm_ctx_stats sx = {0};
		wimm_ctx_stats(a->p.sctx, &sx);
		if (w < 0)
			conf_diag("honest client: the server's poll failed: %s", wimm_err_name(w));
		/* What the client's side says of it. */
		for (int k = 0; k < 4 && next_event(a->p.cctx, NULL, &ev, 100) == 1; k++)
			conf_diag("honest client: event %d status %s provider code %d", ev.type,
				  wimm_err_name(ev.status), ev.prov_err);
		conf_diag("honest client: %d of 10 doorbells reached the server (client: %llu "
			  "doorbells out, %llu errors; server: %llu in, %llu errors; server "
			  "context: %llu doorbells in, %llu events, %llu dropped for silence)",
			  got, (unsigned long long)cs.doorbells_out, (unsigned long long)cs.errors,
			  (unsigned long long)ss.doorbells_in, (unsigned long long)ss.errors,
			  (unsigned long long)sx.total.doorbells_in, (unsigned long long)sx.events,
			  (unsigned long long)sx.dropped_silent);
	}
	return got == 10;
}

size_t canary_damage(const struct arena *a)
{
	const uint8_t *b = (const uint8_t *)a->win->buf + HALF;

	for (size_t i = 0; i < HALF; i++)
		if (b[i] != 0xCC)
			return i + 1;
	return 0;
}

/* Measured here: libfabric 1.17's shm does not check a write's range at the
 * target (a raw shm peer wrote past its window into the canary), and a
 * process of the same user on the same host can write another's memory
 * anyway (process_vm_writev, ptrace). On shm the window is the honest
 * sender's promise only; docs/design.md says so. */
static int shm_unenforced(int kind)
{
	if (kind != RAW_PEER_OFI_RDM)
		return 0;
	conf_skip("libfabric shm does not enforce registrations at the target (measured: a raw "
		  "peer wrote past its window); same-host peers of one user are trusted");
	return 1;
}

/* The arena, a raw peer of the fabric's kind, connected: 0, or 1 when the
 * test does not apply here (skipped), or -1 (a failure is recorded). */
int hostile_open(const char *uri, uint32_t depth, int need_windows, struct arena *a,
		 struct hostile_peer *r, struct wimm_conn **hc, int *kind)
{
	const char *why;

	/* Zeroed first: hostile_close undoes whatever was reached. */
	memset(a, 0, sizeof(*a));
	memset(r, 0, sizeof(*r));
	*hc = NULL;
	*kind = raw_kind(uri, &why);
	if (!*kind) {
		conf_skip("%s", why);
		return 1;
	}
	if ((need_windows & 1) && shm_unenforced(*kind))
		return 1;
	if (arena_open(a, uri, depth, need_windows & HOSTILE_ALLOC) || raw_alloc(r, *kind))
		return -1;
	if (raw_connect(r, uri, a->addr, a->p.sctx, a->p.l, hc) || !*hc) {
		conf_fail(__FILE__, __LINE__, "raw peer: %s", r->raw.text);
		return -1;
	}
	return 0;
}

/* A hostile test's body: the arena, the raw peer connected to it, the
 * server's side of that connection, the raw peer's kind. */
typedef void (*hostile_body)(const char *uri, struct arena *a, struct hostile_peer *r,
			     struct wimm_conn **hc, int kind);

/* The body on a fresh arena and raw peer, unless the test does not apply
 * here (skipped) or they could not be had (failed); all closed after. */
static void hostile_run(const char *uri, uint32_t depth, int need_windows, hostile_body body)
{
	struct arena a;
	struct hostile_peer r;
	struct wimm_conn *hc;
	int kind;

	if (hostile_open(uri, depth, need_windows, &a, &r, &hc, &kind) == 0)
		body(uri, &a, &r, &hc, kind);
	hostile_close(&hc, &r, &a);
}

static void outside_window(const char *uri, struct arena *a, struct hostile_peer *r,
			   struct wimm_conn **hc, int kind)
{
	(void)uri;
	CHECK(*hc != NULL);
	CHECK_EQ(r->raw.srv.window_len, HALF);
	struct seen s = {.conn = *hc};
	/* The control: a write inside the window lands. */
	memset(r->raw.src, 0x5A, 64);
	CHECK(raw_write(r, r->raw.srv.window_addr, r->raw.srv.window_key, 64, 0, 0) == 0);
	/* The raw peer's own bound: more than its source is refused, unsent. */
	if (kind != RAW_IPC) {
		CHECK_EQ(raw_peer_write(&r->raw, r->raw.srv.window_addr, r->raw.srv.window_key,
					RAW_SRC + 1, 0, 0),
			 -EINVAL);
		CHECK_EQ(r->raw.posted, 1);
	}
	pump_both(a->p.sctx, r, &s, 1, 300);
	CHECKF(((uint8_t *)a->win->buf)[0] == 0x5A && ((uint8_t *)a->win->buf)[63] == 0x5A,
	       "the raw peer's write inside its window did not land");
	/* Just past the end, straddling the end, and far beyond: all with the
	 * window's own key, all inside the application's registration. */
	memset(r->raw.src, 0xEE, RAW_SRC);
	raw_write(r, r->raw.srv.window_addr + HALF, r->raw.srv.window_key, 64, 0, 0);
	raw_write(r, r->raw.srv.window_addr + HALF - 32, r->raw.srv.window_key, 64, 0, 0);
	raw_write(r, r->raw.srv.window_addr + HALF + 1024, r->raw.srv.window_key, 8, 1, 7);
	pump_both(a->p.sctx, r, &s, 1, 1000);
	size_t bad = canary_damage(a);
	CHECKF(bad == 0, "the server's memory past the window changed at byte %zu", bad - 1);
	conf_diag("raw peer: %d posted, %d completed, %d failed; server: %d doorbells, %s",
		  r->raw.posted, r->raw.done, r->raw.failed, s.doorbells,
		  s.down ? "dropped" : "still up");
	CHECKF(s.doorbells == 0, "a doorbell outside the window reached the application");
	CHECK(honest_ok(a));
out:;
}

static void t_hostile_outside_window(const char *uri)
{
	hostile_run(uri, 64, 1, outside_window);
}

static void old_key(const char *uri, struct arena *a, struct hostile_peer *r, struct wimm_conn **hc,
		    int kind)
{
	struct wimm_handshake first = r->raw.srv;
	struct seen s = {.conn = *hc};
	raw_close(r);
	pump(a->p.sctx, NULL, NULL, &s, 1, 300);
	for (int i = 0; i < 50 && !s.down; i++)
		pump(a->p.sctx, NULL, NULL, &s, 1, 100);
	CHECKF(s.down, "the server did not see the raw peer go");
	wimm_conn_delete(hc);
	/* Again, and this time with the first connection's key. */
	CHECK(raw_alloc(r, kind) == 0);
	CHECKF(raw_connect(r, uri, a->addr, a->p.sctx, a->p.l, hc) == 0, "%s", r->raw.text);
	s = (struct seen){.conn = *hc};
	conf_diag("window keys: first %#llx, second %#llx", (unsigned long long)first.window_key,
		  (unsigned long long)r->raw.srv.window_key);
	CHECK(first.window_key != r->raw.srv.window_key);
	memset(r->raw.src, 0x66, 64);
	CHECK(raw_write(r, r->raw.srv.window_addr, r->raw.srv.window_key, 64, 0, 0) == 0);
	pump_both(a->p.sctx, r, &s, 1, 300);
	CHECKF(((uint8_t *)a->win->buf)[0] == 0x66, "a write with the current key did not land");
	memset(r->raw.src, 0x77, 64);
	raw_write(r, first.window_addr, first.window_key, 64, 0, 0);
	pump_both(a->p.sctx, r, &s, 1, 1000);
	for (int i = 0; i < 64; i++)
		CHECKF(((uint8_t *)a->win->buf)[i] == 0x66,
		       "the old key wrote byte %d of the window", i);
	CHECK(canary_damage(a) == 0);
	CHECK(honest_ok(a));
out:;
}

static void t_hostile_old_key(const char *uri)
{
	hostile_run(uri, 64, 1, old_key);
}

/* The overdraft test's receive window, and ten windows' worth of doorbells. */
enum { OVERDRAFT_DEPTH = 16, OVERDRAFT_SENT = 160 };

static void overdraft(const char *uri, struct arena *a, struct hostile_peer *r,
		      struct wimm_conn **hc, int kind)
{
	(void)uri;
	CHECK_EQ(r->raw.srv.rx_depth, OVERDRAFT_DEPTH);
	struct seen s = {.conn = *hc};
	/* Ten windows' worth of doorbells, no look at the credit word. */
	int64_t t0 = conf_now_ms();
	for (int i = 0; i < OVERDRAFT_SENT; i++)
		if (raw_write(r, r->raw.srv.window_addr, r->raw.srv.window_key, 8, 1, (uint32_t)i))
			break;
	conf_diag("raw peer posted %d doorbells in %lld ms", r->raw.posted,
		  (long long)(conf_now_ms() - t0));
	/* Up to 5 s: the honest client is polled too (its heartbeats go out
	 * from its polls), or its silence would reach the server's liveness
	 * bound (5 s) when the peer is kept, and the server would drop it. */
	for (int i = 0; i < 50 && !s.down; i++) {
		struct wimm_event ev[8];
		pump_both(a->p.sctx, r, &s, 1, 100);
		wimm_poll(a->p.cctx, ev, 8);
	}
	conf_diag("server: %d doorbells delivered, %s (%s); raw peer: %d completed, %d failed",
		  s.doorbells, s.down ? "dropped" : "still up", wimm_err_name(s.down_status),
		  r->raw.done, r->raw.failed);
	if (kind == RAW_PEER_VERBS_CM) {
		/* On verbs the responder's receive queue bounds the peer itself
		 * (a doorbell finds a posted receive or is refused with RNR);
		 * the receiver's count drops the peer when doorbells beyond its
		 * credits landed in the queue's slack (27 of 30 runs), but a
		 * server that reposts receives as fast as the peer's RNR retries
		 * come may take them all, each within its credits (3 of 30: 136
		 * to 160 of 160). Either way nothing reaches the application
		 * that the transport did not acknowledge, a drop is an
		 * overdraft, and a peer kept is one that lost nothing. */
		CHECKF(s.doorbells <= r->raw.done, "%d doorbells delivered, %d acknowledged",
		       s.doorbells, r->raw.done);
		if (s.down)
			CHECK_RC(s.down_status, WIMM_E_OVERDRAFT);
		else
			CHECKF(s.doorbells == r->raw.done,
			       "kept, but %d doorbells delivered of %d acknowledged", s.doorbells,
			       r->raw.done);
	} else {
		/* The receiver's own count drops the peer: never more than the
		 * window plus what was returned in time. */
		CHECKF(s.doorbells < OVERDRAFT_SENT,
		       "all %d doorbells beyond the credits were delivered", OVERDRAFT_SENT);
		CHECKF(s.down, "the peer that ignored its credits is still connected");
		CHECK_RC(s.down_status, WIMM_E_OVERDRAFT);
	}
	struct wimm_ctx_stats st;
	CHECK_OK(wimm_ctx_stats(a->p.sctx, &st));
	if (kind != RAW_PEER_VERBS_CM)
		CHECK_EQ(st.dropped_overdraft, 1);
	CHECK(honest_ok(a));
out:;
}

static void t_hostile_overdraft(const char *uri)
{
	hostile_run(uri, OVERDRAFT_DEPTH, 0, overdraft);
}

const struct conf_test conf_tests_hostile[] = {
    {"hostile_outside_window", t_hostile_outside_window, 60},
    {"hostile_old_key", t_hostile_old_key, 60},
    {"hostile_overdraft", t_hostile_overdraft, 60},
    {"hostile_ring_entries", t_hostile_ring_entries, 120},
    {"hostile_ring_offer", t_hostile_ring_offer, 60},
    {"hostile_ipc_ring", t_hostile_ipc_ring, 60},
    {"hostile_ipc_direct", t_hostile_ipc_direct, 60},
    {"hostile_ipc_mapped", t_hostile_ipc_mapped, 60},
    {"hostile_ipc_fds", t_hostile_ipc_fds, 60},
    {"ipc_addresses", t_ipc_addresses, 60},
    {NULL, NULL, 0},
};
