/* Data-path conformance: the imm, the bytes and the length of each
 * operation arrive intact and in order (docs/design.md, contract items 1-4;
 * docs/errata.md E3, E4). */
#include <stdlib.h>
#include <string.h>

#include "conf.h"

#define MiB (1024u * 1024u)

/* Zero-length and sized doorbells carry host-order imm values unchanged
 * (E4: 0x11223344 has four distinct bytes, so any swap shows). */
static void t_imm_round_trip(const char *uri)
{
	static const uint32_t imms[] = {0x11223344u, 0, 0xFFFFFFFFu, 0x80000001u, 0x000000FFu};
	struct wimm_conn_attr sattr = {.user = &sattr}, cattr = {0};
	struct wimm_event ev;
	struct region *win, *src;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	win = pair_region(&p, p.sctx, 4096, WIMM_REMOTE_WRITE);
	src = pair_region(&p, p.cctx, 4096, WIMM_LOCAL);
	CHECK(win && src);
	sattr.window = win->mr;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	for (int sized = 0; sized < 2; sized++) {
		for (size_t i = 0; i < sizeof(imms) / sizeof(imms[0]); i++) {
			size_t len = sized ? 8 : 0;

			CHECK_OK(wimm_write_imm(p.c, src->mr, 0, 0, len, imms[i], 0));
			CHECK_EQ(next_event(p.sctx, p.cctx, &ev, 5000), 1);
			CHECKF(ev.type == WIMM_EV_WRITE_IMM, "event %s, expected WRITE_IMM",
			       conf_ev_name(ev.type));
			CHECKF(ev.imm == imms[i], "imm 0x%08x arrived as 0x%08x", imms[i], ev.imm);
			CHECKF(ev.len == len, "len %u, expected %zu", ev.len, len);
			CHECK(ev.conn == p.s);
			CHECK(ev.user == &sattr);
		}
	}
	CHECK(wimm_conn_user(p.s) == &sattr);
	CHECK(wimm_conn_user(p.c) == NULL);
out:
	pair_close(&p);
}

/* What each side learns of the other from the handshake. */
static void t_conn_info(const char *uri)
{
	struct wimm_conn_attr sattr = {.rx_depth = 8, .recv_size = 512}, cattr = {.rx_depth = 32};
	struct wimm_conn_info ci, si;
	struct region *win;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	CHECK(wimm_ctx_fabric(p.sctx) != NULL);
	CHECKF(strcmp(wimm_ctx_fabric(p.sctx), uri) == 0, "wimm_ctx_fabric gave \"%s\" for %s",
	       wimm_ctx_fabric(p.sctx), uri);
	win = pair_region(&p, p.sctx, 3 * 4096, WIMM_REMOTE_WRITE | WIMM_REMOTE_READ);
	CHECK(win);
	sattr.window = win->mr;
	sattr.window_off = 4096;
	sattr.window_len = 5000;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_OK(wimm_conn_info(p.c, &ci));
	CHECK_OK(wimm_conn_info(p.s, &si));
	CHECKF(ci.peer_window_len == 5000, "peer_window_len %zu", ci.peer_window_len);
	CHECK(ci.peer_window_access == (WIMM_REMOTE_WRITE | WIMM_REMOTE_READ));
	CHECK_EQ((int)ci.peer_rx_depth, 8);
	CHECK_EQ((int)ci.peer_recv_size, 512);
	CHECK_EQ((int)ci.credits, 8);
	CHECK_EQ(ci.connected, 1);
	CHECK(si.peer_window_len == 0);
	CHECK(si.peer_window_access == 0);
	CHECK_EQ((int)si.peer_rx_depth, 32);
	CHECK_EQ((int)si.peer_recv_size, 0);
	CHECK_EQ((int)si.credits, 32);
	CHECK_EQ(si.connected, 1);
	CHECK_RC(wimm_conn_info(NULL, &ci), WIMM_E_INVAL);
	CHECK_RC(wimm_conn_info(p.c, NULL), WIMM_E_INVAL);
out:
	pair_close(&p);
}

/* Checksummed payloads of sizes 0, 1, 4 KiB, 1 MiB (and odd ones) land
 * exactly where they were aimed, nothing around them changes, and the event
 * says how many bytes were written (E3). */
static void t_integrity(const char *uri)
{
	static const size_t sizes[] = {0, 1, 4096, MiB, 3, 4095, 65537, MiB - 1};
	const size_t guard = 64;
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct region *win, *src;
	struct wimm_event ev;
	uint64_t expect_seq = 0;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	win = pair_region(&p, p.sctx, 2 * MiB, WIMM_REMOTE_WRITE);
	src = pair_region(&p, p.cctx, 2 * MiB, WIMM_LOCAL);
	CHECK(win && src);
	sattr.window = win->mr;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t len = sizes[i];
		/* Unaligned offsets on both sides for every other size. */
		size_t src_off = (i & 1) ? 13 : 0, dst_off = guard + ((i & 1) ? 7 : 0);
		uint64_t seed = 1000 + i;
		uint8_t *dst = (uint8_t *)win->buf;

		memset(win->buf, 0xEE, win->len);
		conf_fill((uint8_t *)src->buf + src_off, len, seed);
		CHECK_OK(wimm_write_imm(p.c, src->mr, src_off, dst_off, len, (uint32_t)i,
					WIMM_F_SIGNAL));
		CHECK_EQ(wait_event(p.sctx, p.cctx, WIMM_EV_WRITE_IMM, p.s, &ev, 10000, NULL), 1);
		CHECK_EQ((int)ev.imm, (int)i);
		CHECKF(ev.len == len, "size %zu: event len %u (E3)", len, ev.len);
		size_t bad = conf_verify(dst + dst_off, len, seed);

		CHECKF(bad == 0, "size %zu: byte %zu differs at the receiver", len, bad - 1);
		for (size_t k = 0; k < dst_off; k++)
			CHECKF(dst[k] == 0xEE, "size %zu: byte before the target changed", len);
		for (size_t k = dst_off + len; k < dst_off + len + guard; k++)
			CHECKF(dst[k] == 0xEE, "size %zu: byte %zu after the target changed", len,
			       k - dst_off - len);
		/* The signaled completion names the operation and its number. */
		CHECK_EQ(wait_event(p.cctx, p.sctx, WIMM_EV_SEND_DONE, p.c, &ev, 10000, NULL), 1);
		CHECK(ev.op == WIMM_OP_WRITE_IMM);
		CHECK_RC(ev.status, 0);
		CHECKF(ev.op_seq == expect_seq, "op_seq %llu, expected %llu",
		       (unsigned long long)ev.op_seq, (unsigned long long)expect_seq);
		expect_seq++;
	}
out:
	pair_close(&p);
}

/* A pure doorbell needs no window at the peer (contract item 2). */
static void t_zero_length_no_window(const char *uri)
{
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct wimm_conn_info ci;
	struct wimm_event ev;
	struct region *src;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	src = pair_region(&p, p.cctx, 64, WIMM_LOCAL);
	CHECK(src);
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_OK(wimm_conn_info(p.c, &ci));
	CHECK(ci.peer_window_len == 0);
	for (uint32_t i = 0; i < 100; i++) {
		CHECK_OK(wimm_write_imm(p.c, src->mr, 0, 0, 0, 0xD0000000u + i, 0));
		CHECK_EQ(next_event(p.sctx, p.cctx, &ev, 5000), 1);
		CHECK(ev.type == WIMM_EV_WRITE_IMM);
		CHECK(ev.imm == 0xD0000000u + i);
		CHECK_EQ((int)ev.len, 0);
	}
	/* And the other direction: the client exposes nothing either. */
	CHECK_OK(wimm_write_imm(p.s, NULL, 0, 0, 0, 42, 0));
	CHECK_EQ(next_event(p.cctx, p.sctx, &ev, 5000), 1);
	CHECK(ev.type == WIMM_EV_WRITE_IMM && ev.imm == 42 && ev.len == 0 && ev.conn == p.c);
out:
	pair_close(&p);
}

/* Post as many doorbells as credits allow, then take the receiver's events,
 * checking each imm against the next expected number. One thread drives
 * both sides, so the receiver's polls are what return credits. */
static void t_ordering(const char *uri)
{
	const uint32_t total = conf_quick() ? 1000 : 10000;
	struct wimm_conn_attr sattr = {.rx_depth = 64}, cattr = {0};
	struct wimm_event ev[32];
	uint32_t sent = 0, got = 0;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	int64_t deadline = conf_now_ms() + 60000;

	while (got < total) {
		CHECKF(conf_now_ms() < deadline, "only %u of %u doorbells arrived in 60 s", got,
		       total);
		while (sent < total) {
			int rc = wimm_write_imm(p.c, NULL, 0, 0, 0, sent, 0);

			if (rc == WIMM_E_AGAIN)
				break;
			CHECK_OK(rc);
			sent++;
		}
		int n = wimm_poll(p.sctx, ev, 32);

		CHECK(n >= 0);
		for (int i = 0; i < n; i++) {
			CHECKF(ev[i].type == WIMM_EV_WRITE_IMM, "event %s",
			       conf_ev_name(ev[i].type));
			CHECKF(ev[i].imm == got, "doorbell %u arrived where %u was due", ev[i].imm,
			       got);
			got++;
		}
		wimm_progress(p.cctx);
	}
	CHECK_EQ(drain_events(p.sctx, p.cctx, 100), 0);
out:
	pair_close(&p);
}

/* A connected pair whose server offers a len-byte window, with a source
 * region of the same size on the client; ring[0] and ring[1]: WIMM_OFI_RING
 * for the server's and the client's context (NULL: as it is). Returns
 * nonzero (the failure recorded) when any step fails. */
static int pair_with_window(struct pair *p, const char *uri, const char *const ring[2],
			    struct wimm_conn_attr *sattr, size_t len, struct region **win,
			    struct region **src)
{
	struct wimm_conn_attr cattr = {0};

	if (pair_open_env(p, uri, "WIMM_OFI_RING", ring[0], ring[1]))
		return -1;
	*win = pair_region(p, p->sctx, len, WIMM_REMOTE_WRITE);
	*src = pair_region(p, p->cctx, len, WIMM_LOCAL);
	if (!*win || !*src) {
		conf_fail(__FILE__, __LINE__, "regions of %zu bytes", len);
		return -1;
	}
	sattr->window = (*win)->mr;
	return pair_connect(p, sattr, &cattr);
}

static const char *const ring_as_is[2] = {NULL, NULL};

/* Write-with-imm and send-with-imm in a random mix, each with its data:
 * the receiver gets them in the order they were posted, as the kind they
 * were posted as. (On ofi:tcp the two come by different paths, the ring and
 * the CQ, which the receiver merges.) */
static void mixed_order_run(const char *uri, const char *const ring[2], uint32_t total)
{
	struct wimm_conn_attr sattr = {.rx_depth = 16, .recv_size = 64};
	struct region *win, *src;
	struct wimm_event ev[16];
	uint32_t sent = 0, got = 0;
	uint8_t *kind;
	uint64_t rng = 11;
	struct pair p;

	kind = calloc(total, 1);
	if (pair_with_window(&p, uri, ring, &sattr, 16 * 64, &win, &src))
		goto out;
	CHECK(kind);
	int64_t deadline = conf_now_ms() + 60000;

	while (got < total) {
		CHECKF(conf_now_ms() < deadline, "only %u of %u doorbells arrived in 60 s", got,
		       total);
		while (sent < total) {
			/* Slot sent % 16 of the window and the source: 16 credits
			 * keep an unread one from being overwritten. */
			size_t off = (sent % 16) * 64, len = (sent % 7) * 9;
			int rc;

			if (!kind[sent])
				kind[sent] = (uint8_t)(1 + conf_rand(&rng) % 2);
			conf_fill((uint8_t *)src->buf + off, len, sent);
			rc = kind[sent] == 1 ? wimm_write_imm(p.c, src->mr, off, off, len, sent, 0)
					     : wimm_send_imm(p.c, src->mr, off, len, sent, 0);
			if (rc == WIMM_E_AGAIN)
				break;
			CHECK_OK(rc);
			sent++;
		}
		int n = wimm_poll(p.sctx, ev, 16);

		CHECK(n >= 0);
		for (int i = 0; i < n; i++) {
			size_t len = (got % 7) * 9, bad;
			int write = kind[got] == 1;

			CHECKF(ev[i].imm == got, "doorbell %u (%s) arrived where %u (%s) was due",
			       ev[i].imm, conf_ev_name(ev[i].type), got,
			       write ? "write_imm" : "send_imm");
			CHECKF(ev[i].type == (write ? WIMM_EV_WRITE_IMM : WIMM_EV_SEND_IMM),
			       "doorbell %u: event %s, posted as %s", got, conf_ev_name(ev[i].type),
			       write ? "write_imm" : "send_imm");
			CHECK_EQ(ev[i].len, len);
			bad = conf_verify(
			    write ? (uint8_t *)win->buf + (got % 16) * 64 : ev[i].data, len, got);
			CHECKF(bad == 0, "doorbell %u: byte %zu wrong", got, bad - 1);
			got++;
		}
		wimm_progress(p.cctx);
	}
	CHECK_EQ(drain_events(p.sctx, p.cctx, 100), 0);
out:
	free(kind);
	pair_close(&p);
}

static void t_mixed_order(const char *uri)
{
	mixed_order_run(uri, ring_as_is, conf_quick() ? 1000 : 6000);
}

/* The same between peers of which one or both keep ofi:tcp's doorbells in
 * remote CQ data (WIMM_OFI_RING=0): a receiver without a ring takes every
 * doorbell from its CQ, a sender whose peer offered none sends CQ data, and
 * order holds either way. (Elsewhere the variable changes nothing.) */
static void t_mixed_order_ring_off(const char *uri)
{
	static const char *const combos[][2] = {{"0", "1"}, {"1", "0"}, {"0", "0"}};

	for (size_t i = 0; i < sizeof(combos) / sizeof(combos[0]) && !conf_failed(); i++)
		mixed_order_run(uri, combos[i], conf_quick() ? 500 : 2000);
}

/* A log ring: writes of varying size at increasing offsets; the receiver
 * finds each entry where per-connection order says it must be (docs/design.md's
 * "what the receiver does not get": no address in the event). */
static void t_ring_offsets(const char *uri)
{
	const uint32_t total = conf_quick() ? 500 : 5000;
	const size_t ring = 64 * 1024, maxlen = 700;
	struct wimm_conn_attr sattr = {.rx_depth = 16};
	size_t tx_tail = 0, rx_head = 0, next_len = 0;
	struct region *win, *src;
	struct wimm_event ev[16];
	uint32_t sent = 0, got = 0;
	uint64_t rng = 7;
	struct pair p;

	if (pair_with_window(&p, uri, ring_as_is, &sattr, ring, &win, &src))
		goto out;
	int64_t deadline = conf_now_ms() + 60000;

	while (got < total) {
		CHECKF(conf_now_ms() < deadline, "only %u of %u entries arrived in 60 s", got,
		       total);
		while (sent < total) {
			/* A refused entry is retried with the same length. */
			if (!next_len)
				next_len = 1 + (size_t)(conf_rand(&rng) % maxlen);
			size_t len = next_len;

			if (tx_tail + len > ring)
				tx_tail = 0;
			/* The source slot mirrors the ring slot, so an in-flight
			 * entry's source is never rewritten (16 credits x 700 B
			 * is far less than the ring). */
			conf_fill((uint8_t *)src->buf + tx_tail, len, sent);
			int rc = wimm_write_imm(p.c, src->mr, tx_tail, tx_tail, len, sent, 0);

			if (rc == WIMM_E_AGAIN)
				break;
			CHECK_OK(rc);
			tx_tail += len;
			next_len = 0;
			sent++;
		}
		int n = wimm_poll(p.sctx, ev, 16);

		CHECK(n >= 0);
		for (int i = 0; i < n; i++) {
			CHECK(ev[i].type == WIMM_EV_WRITE_IMM);
			CHECKF(ev[i].imm == got, "entry %u arrived where %u was due", ev[i].imm,
			       got);
			if (rx_head + ev[i].len > ring)
				rx_head = 0;
			size_t bad = conf_verify((uint8_t *)win->buf + rx_head, ev[i].len, got);

			CHECKF(bad == 0, "entry %u (%u bytes at %zu): byte %zu wrong", got,
			       ev[i].len, rx_head, bad - 1);
			rx_head += ev[i].len;
			got++;
		}
		wimm_progress(p.cctx);
	}
out:
	pair_close(&p);
}

/* Two-sided send-with-imm: bytes, imm and length arrive in a receive
 * buffer; buffers are recycled (more messages than buffers). */
static void t_send_imm(const char *uri)
{
	static const size_t lens[] = {0, 1, 100, 4096, 4095};
	struct wimm_conn_attr sattr = {.rx_depth = 4, .recv_size = 4096}, cattr = {0};
	struct wimm_event ev;
	struct region *src;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	src = pair_region(&p, p.cctx, 8192, WIMM_LOCAL);
	CHECK(src);
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	for (uint32_t i = 0; i < 40; i++) {
		size_t len = lens[i % 5];

		conf_fill(src->buf, len, i);
		CHECK_OK(wimm_send_imm(p.c, src->mr, 0, len, 0x11223344u ^ i, 0));
		CHECK_EQ(next_event(p.sctx, p.cctx, &ev, 5000), 1);
		CHECKF(ev.type == WIMM_EV_SEND_IMM, "event %s", conf_ev_name(ev.type));
		CHECK(ev.imm == (0x11223344u ^ i));
		CHECKF(ev.len == len, "len %u, expected %zu", ev.len, len);
		CHECK(ev.conn == p.s);
		CHECK(len == 0 || ev.data != NULL);
		if (len) {
			size_t bad = conf_verify(ev.data, len, i);

			CHECKF(bad == 0, "message %u: byte %zu wrong", i, bad - 1);
		}
	}
out:
	pair_close(&p);
}

/* send_imm to a peer without receive buffers, and longer than them. */
static void t_send_imm_errors(const char *uri)
{
	struct wimm_conn_attr s1 = {.recv_size = 0}, s2 = {.recv_size = 1024}, cattr = {0};
	struct wimm_conn_info before, after;
	struct region *src;
	struct wimm_event ev;
	struct pair p, q;

	memset(&q, 0, sizeof(q));
	if (pair_open(&p, uri))
		goto out;
	src = pair_region(&p, p.cctx, 4096, WIMM_LOCAL);
	CHECK(src);
	if (pair_connect(&p, &s1, &cattr))
		goto out;
	CHECK_OK(wimm_conn_info(p.c, &before));
	CHECK_RC(wimm_send_imm(p.c, src->mr, 0, 10, 1, 0), WIMM_E_NORECV);
	CHECK_RC(wimm_send_imm(p.c, src->mr, 0, 0, 1, 0), WIMM_E_NORECV);
	CHECK_OK(wimm_conn_info(p.c, &after));
	CHECK(after.credits == before.credits);
	CHECK_EQ(drain_events(p.sctx, p.cctx, 100), 0);

	if (pair_open(&q, uri))
		goto out;
	src = pair_region(&q, q.cctx, 4096, WIMM_LOCAL);
	CHECK(src);
	if (pair_connect(&q, &s2, &cattr))
		goto out;
	CHECK_RC(wimm_send_imm(q.c, src->mr, 0, 1025, 1, 0), WIMM_E_TRUNC);
	CHECK_RC(wimm_send_imm(q.c, src->mr, 0, 4096, 1, 0), WIMM_E_TRUNC);
	CHECK_EQ(drain_events(q.sctx, q.cctx, 100), 0);
	/* Exactly recv_size still fits. */
	CHECK_OK(wimm_send_imm(q.c, src->mr, 0, 1024, 2, 0));
	CHECK_EQ(next_event(q.sctx, q.cctx, &ev, 5000), 1);
	CHECK(ev.type == WIMM_EV_SEND_IMM && ev.imm == 2 && ev.len == 1024);
out:
	pair_close(&q);
	pair_close(&p);
}

/* A plain write lands without an event; a read brings bytes back. */
static void t_write_read(const char *uri)
{
	const size_t len = 10000, off = 100;
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct region *win, *src, *dst;
	struct wimm_event ev;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	win = pair_region(&p, p.sctx, 65536, WIMM_REMOTE_WRITE | WIMM_REMOTE_READ);
	src = pair_region(&p, p.cctx, 65536, WIMM_LOCAL);
	dst = pair_region(&p, p.cctx, 65536, WIMM_LOCAL);
	CHECK(win && src && dst);
	sattr.window = win->mr;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	conf_fill((uint8_t *)src->buf + 5, len, 77);
	CHECK_OK(wimm_write(p.c, src->mr, 5, off, len, WIMM_F_SIGNAL));
	CHECK_EQ(wait_event(p.cctx, p.sctx, WIMM_EV_SEND_DONE, p.c, &ev, 5000, NULL), 1);
	CHECK(ev.op == WIMM_OP_WRITE && ev.status == 0);
	/* The bytes reach the window (progress may need the target's help). */
	int64_t deadline = conf_now_ms() + 5000;

	while (conf_verify((uint8_t *)win->buf + off, len, 77) != 0 && conf_now_ms() < deadline)
		wimm_progress(p.sctx);
	CHECK_EQ((int)conf_verify((uint8_t *)win->buf + off, len, 77), 0);
	/* A plain write rings no doorbell. */
	CHECK_EQ(drain_events(p.sctx, p.cctx, 100), 0);

	/* The receiver changes its memory; the reader sees the new bytes. */
	conf_fill((uint8_t *)win->buf + 30000, len, 78);
	CHECK_OK(wimm_read(p.c, dst->mr, 1, 30000, len, 0));
	CHECK_EQ(wait_event(p.cctx, p.sctx, WIMM_EV_SEND_DONE, p.c, &ev, 5000, NULL), 1);
	CHECK(ev.op == WIMM_OP_READ);
	CHECK_RC(ev.status, 0);
	CHECKF(ev.len == len, "read completion len %u, expected %zu", ev.len, len);
	size_t bad = conf_verify((uint8_t *)dst->buf + 1, len, 78);

	CHECKF(bad == 0, "read: byte %zu wrong", bad - 1);
	/* The read asked nothing of the peer's application. */
	CHECK_EQ(drain_events(p.sctx, p.cctx, 100), 0);
out:
	pair_close(&p);
}

/* A send queue of 1, 2 and 8 keeps flowing with nothing signaled: the
 * sender gets its slots back while the receiver polls (on ipc the
 * receiver tells its consumer index only when the sender asks for it,
 * docs/design.md), and every write lands in order. */
static void small_sq_run(const char *uri, uint32_t depth)
{
	const uint32_t total = conf_quick() ? 2000 : 20000;
	struct wimm_conn_attr sattr = {.rx_depth = 16}, cattr = {.sq_depth = depth};
	struct wimm_event ev[32];
	struct region *win, *src;
	uint32_t sent = 0, got = 0;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	win = pair_region(&p, p.sctx, 4096, WIMM_REMOTE_WRITE);
	src = pair_region(&p, p.cctx, 4096, WIMM_LOCAL);
	CHECK(win && src);
	sattr.window = win->mr;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	int64_t deadline = conf_now_ms() + 60000;

	/* Plain writes of the message number at offset 8 * (i % 64), a
	 * doorbell after every 16th: the doorbell says the 16 are there. */
	while (got < total / 16) {
		CHECKF(conf_now_ms() < deadline, "sq_depth %u: %u of %u doorbells in 60 s", depth,
		       got, total / 16);
		while (sent < total) {
			uint32_t v = sent + 1;
			size_t off = 8 * (size_t)(sent % 64);
			int rc;

			memcpy((uint8_t *)src->buf + off, &v, sizeof(v));
			if (sent % 16 == 15)
				rc = wimm_write_imm(p.c, src->mr, off, off, 8, sent / 16, 0);
			else
				rc = wimm_write(p.c, src->mr, off, off, 8, 0);
			if (rc == WIMM_E_AGAIN)
				break;
			CHECK_OK(rc);
			sent++;
		}
		int n = wimm_poll(p.sctx, ev, 32);

		CHECK(n >= 0);
		for (int i = 0; i < n; i++) {
			CHECKF(ev[i].type == WIMM_EV_WRITE_IMM && ev[i].imm == got,
			       "sq_depth %u: %s imm %u where doorbell %u was due", depth,
			       conf_ev_name(ev[i].type), ev[i].imm, got);
			/* The 16 writes up to it are in place (or a later one). */
			for (uint32_t k = got * 16; k < got * 16 + 16; k++) {
				uint32_t v;

				memcpy(&v, (uint8_t *)win->buf + 8 * (size_t)(k % 64), sizeof(v));
				CHECKF(v >= k + 1, "sq_depth %u: write %u not landed (%u)", depth,
				       k, v);
			}
			got++;
		}
		wimm_progress(p.cctx);
	}
	CHECK_EQ(drain_events(p.sctx, p.cctx, 100), 0);
out:
	pair_close(&p);
}

static void t_small_sq(const char *uri)
{
	small_sq_run(uri, 1);
	small_sq_run(uri, 2);
	small_sq_run(uri, 8);
}

/* The peer's window grants write or read, not both: the other is PERM. */
static void t_access_perm(const char *uri)
{
	struct wimm_conn_attr wo = {0}, ro = {0}, cattr = {0};
	struct region *w1, *w2, *dst;
	struct pair p, q;

	memset(&q, 0, sizeof(q));
	if (pair_open(&p, uri))
		goto out;
	w1 = pair_region(&p, p.sctx, 4096, WIMM_REMOTE_WRITE);
	dst = pair_region(&p, p.cctx, 4096, WIMM_LOCAL);
	CHECK(w1 && dst);
	wo.window = w1->mr;
	if (pair_connect(&p, &wo, &cattr))
		goto out;
	CHECK_RC(wimm_read(p.c, dst->mr, 0, 0, 16, 0), WIMM_E_PERM);
	CHECK_EQ(drain_events(p.cctx, p.sctx, 100), 0);

	if (pair_open(&q, uri))
		goto out;
	w2 = pair_region(&q, q.sctx, 4096, WIMM_REMOTE_READ);
	dst = pair_region(&q, q.cctx, 4096, WIMM_LOCAL);
	CHECK(w2 && dst);
	ro.window = w2->mr;
	if (pair_connect(&q, &ro, &cattr))
		goto out;
	CHECK_RC(wimm_write(q.c, dst->mr, 0, 0, 16, 0), WIMM_E_PERM);
	CHECK_RC(wimm_write_imm(q.c, dst->mr, 0, 0, 16, 1, 0), WIMM_E_PERM);
	CHECK_EQ(drain_events(q.sctx, q.cctx, 100), 0);
	/* A pure doorbell touches no window and is still fine. */
	CHECK_OK(wimm_write_imm(q.c, NULL, 0, 0, 0, 9, 0));
	struct wimm_event ev;

	CHECK_EQ(next_event(q.sctx, q.cctx, &ev, 5000), 1);
	CHECKF(ev.type == WIMM_EV_WRITE_IMM && ev.imm == 9,
	       "doorbell to a read-only window's owner: got %s imm %u status %s",
	       conf_ev_name(ev.type), ev.imm, wimm_err_name(ev.status));
out:
	pair_close(&q);
	pair_close(&p);
}

const struct conf_test conf_tests_data[] = {
    {"imm_round_trip", t_imm_round_trip, 0},
    {"conn_info", t_conn_info, 0},
    {"integrity", t_integrity, 0},
    {"zero_length_no_window", t_zero_length_no_window, 0},
    {"ordering", t_ordering, 120},
    {"mixed_order", t_mixed_order, 120},
    {"mixed_order_ring_off", t_mixed_order_ring_off, 120},
    {"ring_offsets", t_ring_offsets, 120},
    {"send_imm", t_send_imm, 0},
    {"send_imm_errors", t_send_imm_errors, 0},
    {"write_read", t_write_read, 0},
    {"access_perm", t_access_perm, 0},
    {"small_sq", t_small_sq, 120},
    {NULL, NULL, 0},
};
