/* Prepared operations (wimm_prep_*): checked once, posted many times, with
 * the events, bytes, credits and errors of the operation's own call. The
 * bytes are read at each post, so each round rewrites the source first. */
#include <string.h>

#include "conf.h"

#define LEN 3000 /* above any inline size: the bytes come from the source */
#define ROUNDS 40

/* Post a prepared write-with-imm ROUNDS times, each time with new bytes
 * and its own imm; the receiver sees each event with its bytes. */
static void prep_write_imm_run(const char *uri, int mapped_window)
{
	struct wimm_conn_attr sattr = {.rx_depth = 8}, cattr = {0};
	struct wimm_prep *w = NULL, *bell = NULL;
	struct wimm_event ev;
	struct region *win, *src;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	win = mapped_window ? pair_region_alloc(&p, p.sctx, 2 * LEN, WIMM_REMOTE_WRITE)
			    : pair_region(&p, p.sctx, 2 * LEN, WIMM_REMOTE_WRITE);
	src = pair_region(&p, p.cctx, LEN, WIMM_LOCAL);
	CHECK(win && src);
	sattr.window = win->mr;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_OK(wimm_prep_new(p.c, WIMM_OP_WRITE_IMM, src->mr, 0, LEN, LEN, &w));
	CHECK_OK(wimm_prep_new(p.c, WIMM_OP_WRITE_IMM, NULL, 0, 0, 0, &bell));
	for (uint32_t i = 0; i < ROUNDS; i++) {
		conf_fill(src->buf, LEN, 100 + i);
		/* Every other one signaled: its SEND_DONE names the operation. */
		CHECK_OK(wimm_prep_post(w, 0xA5000000u | i, i % 2 ? WIMM_F_SIGNAL : 0));
		CHECK_EQ(next_event(p.sctx, p.cctx, &ev, 5000), 1);
		CHECKF(ev.type == WIMM_EV_WRITE_IMM, "event %s", conf_ev_name(ev.type));
		CHECKF(ev.imm == (0xA5000000u | i), "imm 0x%08x, expected 0x%08x", ev.imm,
		       0xA5000000u | i);
		CHECK_EQ(ev.len, LEN);
		size_t bad = conf_verify((char *)win->buf + LEN, LEN, 100 + i);
		CHECKF(bad == 0, "round %u: byte %zu wrong", i, bad - 1);
		if (i % 2) {
			CHECK_EQ(
			    wait_event(p.cctx, p.sctx, WIMM_EV_SEND_DONE, p.c, &ev, 5000, NULL), 1);
			CHECK(ev.op == WIMM_OP_WRITE_IMM && ev.status == 0);
		}
		/* The pure doorbell, prepared, in between. */
		CHECK_OK(wimm_prep_post(bell, i, 0));
		CHECK_EQ(next_event(p.sctx, p.cctx, &ev, 5000), 1);
		CHECK(ev.type == WIMM_EV_WRITE_IMM && ev.imm == i && ev.len == 0);
	}
out:
	wimm_prep_delete(&w);
	wimm_prep_delete(&bell);
	CHECK(w == NULL && bell == NULL);
	pair_close(&p);
}

static void t_prep_write_imm(const char *uri)
{
	prep_write_imm_run(uri, 0);
}

/* The same into a window of wimm_mr_alloc memory (ipc maps it into the
 * writer, whose writes are then its own stores). */
static void t_prep_write_imm_mapped(const char *uri)
{
	prep_write_imm_run(uri, 1);
}

/* A prepared send-with-imm: the bytes in the event, each round's own. */
static void t_prep_send_imm(const char *uri)
{
	struct wimm_conn_attr sattr = {.rx_depth = 4, .recv_size = 4096}, cattr = {0};
	struct wimm_prep *s = NULL;
	struct wimm_event ev;
	struct region *src;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	src = pair_region(&p, p.cctx, 8192, WIMM_LOCAL);
	CHECK(src);
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_OK(wimm_prep_new(p.c, WIMM_OP_SEND_IMM, src->mr, 100, 0, 4096, &s));
	for (uint32_t i = 0; i < ROUNDS; i++) {
		conf_fill((char *)src->buf + 100, 4096, i);
		CHECK_OK(wimm_prep_post(s, ~i, 0));
		CHECK_EQ(next_event(p.sctx, p.cctx, &ev, 5000), 1);
		CHECKF(ev.type == WIMM_EV_SEND_IMM, "event %s", conf_ev_name(ev.type));
		CHECK(ev.imm == ~i && ev.len == 4096 && ev.data);
		size_t bad = conf_verify(ev.data, 4096, i);
		CHECKF(bad == 0, "round %u: byte %zu wrong", i, bad - 1);
	}
out:
	wimm_prep_delete(&s);
	pair_close(&p);
}

/* A prepared plain write, unsignaled (ipc stores it) and signaled: its
 * bytes are there by the doorbell that follows it, and no event of its own
 * reaches the receiver. */
static void prep_write_run(const char *uri, int mapped_window)
{
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct wimm_prep *w = NULL;
	struct wimm_event ev;
	struct region *win, *src;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	win = mapped_window ? pair_region_alloc(&p, p.sctx, 8192, WIMM_REMOTE_WRITE)
			    : pair_region(&p, p.sctx, 8192, WIMM_REMOTE_WRITE);
	src = pair_region(&p, p.cctx, 8192, WIMM_LOCAL);
	CHECK(win && src);
	sattr.window = win->mr;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_OK(wimm_prep_new(p.c, WIMM_OP_WRITE, src->mr, 8, 4000, 4100, &w));
	for (uint32_t i = 0; i < ROUNDS; i++) {
		int signaled = i % 3 == 0;

		conf_fill((char *)src->buf + 8, 4100, 7 * i);
		CHECK_OK(wimm_prep_post(w, 12345, signaled ? WIMM_F_SIGNAL : 0));
		if (signaled) {
			CHECK_EQ(
			    wait_event(p.cctx, p.sctx, WIMM_EV_SEND_DONE, p.c, &ev, 5000, NULL), 1);
			CHECK(ev.op == WIMM_OP_WRITE && ev.status == 0 && ev.len == 4100);
		}
		CHECK_OK(wimm_write_imm(p.c, NULL, 0, 0, 0, i, 0));
		CHECK_EQ(next_event(p.sctx, p.cctx, &ev, 5000), 1);
		CHECKF(ev.type == WIMM_EV_WRITE_IMM && ev.imm == i && ev.len == 0,
		       "the write made an event of its own: %s imm %u", conf_ev_name(ev.type),
		       ev.imm);
		size_t bad = conf_verify((char *)win->buf + 4000, 4100, 7 * i);
		CHECKF(bad == 0, "round %u: byte %zu wrong", i, bad - 1);
	}
out:
	wimm_prep_delete(&w);
	pair_close(&p);
}

static void t_prep_write(const char *uri)
{
	prep_write_run(uri, 0);
}

static void t_prep_write_mapped(const char *uri)
{
	prep_write_run(uri, 1);
}

/* Every check of the operations' own calls, at wimm_prep_new, with nothing
 * made; and at wimm_prep_post, the flags. */
static void t_prep_errors(const char *uri)
{
	struct wimm_conn_attr sattr = {.recv_size = 1024}, ro = {0}, nowin = {0}, cattr = {0};
	struct wimm_prep *x = NULL, *ok = NULL;
	struct region *win, *rwin, *src, *foreign;
	struct pair p, q, r;

	memset(&q, 0, sizeof(q));
	memset(&r, 0, sizeof(r));
	if (pair_open(&p, uri))
		goto out;
	win = pair_region(&p, p.sctx, 4096, WIMM_REMOTE_WRITE);
	src = pair_region(&p, p.cctx, 4096, WIMM_LOCAL);
	foreign = pair_region(&p, p.sctx, 4096, WIMM_LOCAL); /* the other context's */
	CHECK(win && src && foreign);
	sattr.window = win->mr;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;

	CHECK_RC(wimm_prep_new(NULL, WIMM_OP_WRITE_IMM, src->mr, 0, 0, 8, &x), WIMM_E_INVAL);
	CHECK_RC(wimm_prep_new(p.c, WIMM_OP_WRITE_IMM, src->mr, 0, 0, 8, NULL), WIMM_E_INVAL);
	CHECK_RC(wimm_prep_new(p.c, WIMM_OP_READ, src->mr, 0, 0, 8, &x), WIMM_E_INVAL);
	CHECK_RC(wimm_prep_new(p.c, WIMM_OP_FETCH_ADD, src->mr, 0, 0, 8, &x), WIMM_E_INVAL);
	CHECK_RC(wimm_prep_new(p.c, (enum wimm_op)99, src->mr, 0, 0, 8, &x), WIMM_E_INVAL);
	CHECK_RC(wimm_prep_new(p.c, WIMM_OP_WRITE_IMM, foreign->mr, 0, 0, 8, &x), WIMM_E_INVAL);
	CHECK_RC(wimm_prep_new(p.c, WIMM_OP_WRITE_IMM, NULL, 0, 0, 8, &x), WIMM_E_INVAL);
	CHECK_RC(wimm_prep_new(p.c, WIMM_OP_SEND_IMM, src->mr, 0, 8, 8, &x), WIMM_E_INVAL);
	CHECK_RC(wimm_prep_new(p.c, WIMM_OP_WRITE_IMM, src->mr, 4090, 0, 8, &x),
		 WIMM_E_LOCAL_BOUNDS);
	CHECK_RC(wimm_prep_new(p.c, WIMM_OP_WRITE, src->mr, 0, 4095, 2, &x), WIMM_E_BOUNDS);
	CHECK_RC(wimm_prep_new(p.c, WIMM_OP_WRITE_IMM, src->mr, 0, SIZE_MAX - 4, 8, &x),
		 WIMM_E_BOUNDS);
	CHECK_RC(wimm_prep_new(p.c, WIMM_OP_WRITE_IMM, src->mr, 0, 0, (size_t)1 << 40, &x),
		 WIMM_E_TOOBIG);
	CHECK_RC(wimm_prep_new(p.c, WIMM_OP_SEND_IMM, src->mr, 0, 0, 1025, &x), WIMM_E_TRUNC);
	CHECK(x == NULL);

	/* A good one: the flags of its post are checked, NULL is INVAL. */
	CHECK_OK(wimm_prep_new(p.c, WIMM_OP_WRITE_IMM, src->mr, 0, 0, 8, &ok));
	CHECK_RC(wimm_prep_post(ok, 1, 1u << 7), WIMM_E_INVAL);
	CHECK_RC(wimm_prep_post(NULL, 1, 0), WIMM_E_INVAL);
	CHECK_EQ(drain_events(p.sctx, p.cctx, 100), 0);
	CHECK_OK(wimm_prep_delete(&ok));
	CHECK_OK(wimm_prep_delete(&ok)); /* cleared: a second delete is a no-op */
	CHECK_OK(wimm_prep_delete(NULL));

	/* A peer without a window, one with a read-only window, one without
	 * receive buffers. */
	if (pair_open(&q, uri))
		goto out;
	rwin = pair_region(&q, q.sctx, 4096, WIMM_REMOTE_READ);
	src = pair_region(&q, q.cctx, 4096, WIMM_LOCAL);
	CHECK(rwin && src);
	ro.window = rwin->mr;
	if (pair_connect(&q, &ro, &cattr))
		goto out;
	CHECK_RC(wimm_prep_new(q.c, WIMM_OP_WRITE_IMM, src->mr, 0, 0, 8, &x), WIMM_E_PERM);
	CHECK_RC(wimm_prep_new(q.c, WIMM_OP_WRITE, src->mr, 0, 0, 8, &x), WIMM_E_PERM);
	CHECK_RC(wimm_prep_new(q.c, WIMM_OP_SEND_IMM, src->mr, 0, 0, 8, &x), WIMM_E_NORECV);

	if (pair_open(&r, uri))
		goto out;
	src = pair_region(&r, r.cctx, 4096, WIMM_LOCAL);
	CHECK(src);
	if (pair_connect(&r, &nowin, &cattr))
		goto out;
	CHECK_RC(wimm_prep_new(r.c, WIMM_OP_WRITE_IMM, src->mr, 0, 0, 8, &x), WIMM_E_NOWINDOW);
	CHECK_RC(wimm_prep_new(r.c, WIMM_OP_WRITE, src->mr, 0, 0, 0, &x), WIMM_E_NOWINDOW);
	/* A pure doorbell needs no window. */
	CHECK_OK(wimm_prep_new(r.c, WIMM_OP_WRITE_IMM, NULL, 0, 0, 0, &ok));
	CHECK_OK(wimm_prep_post(ok, 77, 0));
	struct wimm_event ev;
	CHECK_EQ(next_event(r.sctx, r.cctx, &ev, 5000), 1);
	CHECK(ev.type == WIMM_EV_WRITE_IMM && ev.imm == 77);
	CHECK(x == NULL);
out:
	wimm_prep_delete(&x);
	wimm_prep_delete(&ok);
	pair_close(&r);
	pair_close(&q);
	pair_close(&p);
}

/* The source region is held: its dereg is BUSY while a prepared operation
 * sends from it, its connection deleted or not, and fine after. A prepared
 * operation is an object of its context: the context's close is BUSY
 * while one is alive. */
static void t_prep_holds_region(const char *uri)
{
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct wimm_prep *w = NULL, *bell = NULL;
	struct wimm_mr *mr = NULL;
	struct region *win;
	static char buf[4096];
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	win = pair_region(&p, p.sctx, 4096, WIMM_REMOTE_WRITE);
	CHECK(win);
	CHECK_OK(wimm_mr_reg(p.cctx, buf, sizeof(buf), WIMM_LOCAL, &mr));
	sattr.window = win->mr;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_OK(wimm_prep_new(p.c, WIMM_OP_WRITE_IMM, mr, 0, 0, 64, &w));
	CHECK_OK(wimm_prep_new(p.c, WIMM_OP_WRITE_IMM, NULL, 0, 0, 0, &bell));
	CHECK_RC(wimm_mr_dereg(&mr), WIMM_E_BUSY);
	CHECK(mr != NULL);
	/* Its connection deleted, the prepared operation still holds it. */
	CHECK_OK(wimm_conn_delete(&p.c));
	CHECK_RC(wimm_mr_dereg(&mr), WIMM_E_BUSY);
	CHECK_OK(wimm_prep_delete(&w));
	CHECK_OK(wimm_mr_dereg(&mr));
	/* Nothing of the client's context is left but the pure doorbell. */
	CHECK_RC(wimm_ctx_close(&p.cctx), WIMM_E_BUSY);
	CHECK(p.cctx != NULL);
	CHECK_OK(wimm_prep_delete(&bell));
out:
	wimm_prep_delete(&w);
	wimm_prep_delete(&bell);
	wimm_mr_dereg(&mr);
	pair_close(&p);
}

/* A connection deleted first leaves its prepared operations posting
 * nothing (DISCONNECTED); one whose peer went away says DISCONNECTED at
 * its post too, and at wimm_prep_new. */
static void t_prep_orphan(const char *uri)
{
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct wimm_prep *a = NULL, *b = NULL, *x = NULL;
	struct region *win, *src;
	struct wimm_event ev;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	win = pair_region(&p, p.sctx, 4096, WIMM_REMOTE_WRITE);
	src = pair_region(&p, p.cctx, 4096, WIMM_LOCAL);
	CHECK(win && src);
	sattr.window = win->mr;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_OK(wimm_prep_new(p.c, WIMM_OP_WRITE_IMM, src->mr, 0, 0, 16, &a));
	CHECK_OK(wimm_prep_new(p.c, WIMM_OP_WRITE, src->mr, 0, 0, 16, &b));
	CHECK_OK(wimm_prep_post(a, 1, 0));
	CHECK_EQ(next_event(p.sctx, p.cctx, &ev, 5000), 1);

	/* The peer goes: the client learns it, and its posts say so. */
	CHECK_OK(wimm_conn_delete(&p.s));
	CHECK_EQ(wait_event(p.cctx, p.sctx, WIMM_EV_DISCONNECT, p.c, &ev, 10000, NULL), 1);
	CHECK_RC(wimm_prep_post(a, 2, 0), WIMM_E_DISCONNECTED);
	CHECK_RC(wimm_prep_new(p.c, WIMM_OP_WRITE_IMM, src->mr, 0, 0, 16, &x), WIMM_E_DISCONNECTED);

	/* Our connection deleted: both orphaned, posting nothing. */
	CHECK_OK(wimm_conn_delete(&p.c));
	CHECK_RC(wimm_prep_post(a, 3, 0), WIMM_E_DISCONNECTED);
	CHECK_RC(wimm_prep_post(b, 0, WIMM_F_SIGNAL), WIMM_E_DISCONNECTED);
	CHECK_RC(wimm_prep_post(b, 0, 1u << 9), WIMM_E_INVAL);
	CHECK_EQ(drain_events(p.cctx, p.sctx, 100), 0);
out:
	wimm_prep_delete(&a);
	wimm_prep_delete(&b);
	wimm_prep_delete(&x);
	pair_close(&p);
}

/* A prepared doorbell takes a credit as wimm_write_imm does: AGAIN once the
 * receiver's window is full, nothing lost, and on again after it polls. */
static void t_prep_credits(const char *uri)
{
	const uint32_t depth = 8;
	struct wimm_conn_attr sattr = {.rx_depth = depth}, cattr = {0};
	struct wimm_prep *bell = NULL;
	struct wimm_event ev;
	uint32_t sent = 0, got = 0;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_OK(wimm_prep_new(p.c, WIMM_OP_WRITE_IMM, NULL, 0, 0, 0, &bell));
	while (sent < depth)
		CHECK_OK(wimm_prep_post(bell, sent++, 0));
	CHECK_RC(wimm_prep_post(bell, sent, 0), WIMM_E_AGAIN);
	/* The receiver takes them all; the credits come back. */
	int64_t deadline = conf_now_ms() + 20000;
	while (got < 3 * depth) {
		CHECKF(conf_now_ms() < deadline, "%u of %u doorbells in 20 s", got, 3 * depth);
		int rc = sent < 3 * depth ? wimm_prep_post(bell, sent, 0) : WIMM_E_AGAIN;
		if (rc == 0)
			sent++;
		else
			CHECK_RC(rc, WIMM_E_AGAIN);
		if (next_event(p.sctx, p.cctx, &ev, 0) == 1) {
			CHECKF(ev.type == WIMM_EV_WRITE_IMM && ev.imm == got,
			       "%s imm %u where doorbell %u was due", conf_ev_name(ev.type), ev.imm,
			       got);
			got++;
		}
		wimm_progress(p.cctx);
	}
	CHECK_EQ(drain_events(p.sctx, p.cctx, 100), 0);
out:
	wimm_prep_delete(&bell);
	pair_close(&p);
}

const struct conf_test conf_tests_prep[] = {
    {"prep_write_imm", t_prep_write_imm, 0},
    {"prep_write_imm_mapped", t_prep_write_imm_mapped, 0},
    {"prep_send_imm", t_prep_send_imm, 0},
    {"prep_write", t_prep_write, 0},
    {"prep_write_mapped", t_prep_write_mapped, 0},
    {"prep_errors", t_prep_errors, 0},
    {"prep_holds_region", t_prep_holds_region, 0},
    {"prep_orphan", t_prep_orphan, 0},
    {"prep_credits", t_prep_credits, 60},
    {NULL, NULL, 0},
};
