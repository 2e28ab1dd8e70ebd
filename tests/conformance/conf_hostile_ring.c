/* Hostile peers and ofi:tcp's doorbell ring (src/ofi/ofi_ring_wire.h): a
 * wimm server on tcp offers a ring in its handshake, and a raw libfabric
 * peer that reads the offer may write anything into it. The receiver takes
 * an entry only with the seal it expects, in the order the CQ's doorbells
 * allow and within its window; a peer that breaks those rules is dropped
 * with WIMM_E_PROTO and delivers nothing false, and an honest client of the
 * same server goes on. A malformed offer from a connector is refused. */
#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "conf_hostile.h"
#include "ofi/ofi_ring_wire.h"

/* One entry of our making into slot `slot` of the server's ring. */
static int ring_write(struct hostile_peer *r, const struct ofi_ring_offer *o, uint32_t slot,
		      uint32_t imm, uint32_t len, uint32_t sends_before, uint8_t seal)
{
	struct ofi_ring_entry e = {
	    .imm = htole32(imm),
	    .len = htole32(len),
	    .sends_before = htole32(sends_before),
	    .seal = seal,
	};

	memcpy(r->raw.src, &e, sizeof(e));
	return raw_peer_write(&r->raw, o->addr + (uint64_t)slot * OFI_RING_ENTRY_LEN, o->key,
			      sizeof(e), 0, 0);
}

/* Drive the server and the raw peer for ms: the imm values of the raw
 * peer's connection's doorbells in *imm (up to 8, *n of them), its loss
 * in s. */
static void pump_imm(struct arena *a, struct hostile_peer *r, struct seen *s, uint32_t *imm, int *n,
		     int ms)
{
	int64_t until = conf_now_ms() + ms;
	struct wimm_event ev[16];

	while (conf_now_ms() < until) {
		int k = wimm_poll(a->p.sctx, ev, 16);

		for (int i = 0; i < k; i++) {
			if (ev[i].conn != s->conn)
				continue;
			if (ev[i].type == WIMM_EV_WRITE_IMM) {
				if (*n < 8)
					imm[*n] = ev[i].imm;
				++*n;
			}
			if (ev[i].type == WIMM_EV_DISCONNECT) {
				s->down = 1;
				s->down_status = ev[i].status;
			}
		}
		raw_peer_progress(&r->raw);
		/* The honest client's heartbeats go out from its polls. */
		wimm_poll(a->p.cctx, ev, 16);
		if (k == 0)
			conf_sleep_us(100);
	}
}

/* What the raw peer writes, and what the server must make of it. */
struct ring_case {
	const char *name;
	int cq_doorbell;       /* first a doorbell as remote CQ data (imm 0xC0) */
	uint8_t seal;	       /* 0: the one expected of entry 0 */
	uint32_t len;	       /* bytes the entry claims */
	uint32_t sends_before; /* CQ doorbells it says come first */
	int delivered;	       /* doorbells the application gets */
	int dropped;	       /* the connection is dropped with PROTO */
};

static const struct ring_case ring_cases[] = {
    {"a valid entry (the control)", 0, 0, 8, 0, 1, 0},
    {"a valid entry after a CQ doorbell", 1, 0, 8, 1, 2, 0},
    {"an entry claiming more than the window", 0, 0, HALF + 1, 0, 0, 1},
    {"an entry waiting for CQ doorbells never sent", 0, 0, 8, 3, 0, 1},
    {"an entry placed before a CQ doorbell already delivered", 1, 0, 8, 0, 1, 1},
    {"an entry with the seal of the next lap", 0, 2, 8, 0, 0, 0},
    {"an entry with a seal no lap has", 0, 0xEE, 8, 0, 0, 0},
};

static void ring_case_run(const char *uri, const struct ring_case *rc)
{
	struct arena a;
	struct hostile_peer r;
	struct wimm_conn *hc;
	struct ofi_ring_offer o;
	uint32_t imm[8] = {0};
	int kind, n = 0;

	conf_diag("case: %s", rc->name);
	if (hostile_open(uri, 64, 0, &a, &r, &hc, &kind))
		goto out;
	CHECKF(ofi_ring_offer_decode(r.raw.srv.addr, r.raw.srv.addr_len, &o) == 0,
	       "the server offered no doorbell ring");
	CHECK(o.entries >= r.raw.srv.rx_depth);
	struct seen s = {.conn = hc};
	if (rc->cq_doorbell) {
		CHECK(raw_peer_write(&r.raw, r.raw.srv.window_addr, r.raw.srv.window_key, 8, 1,
				     0xC0) == 0);
		pump_imm(&a, &r, &s, imm, &n, 300);
		CHECK_EQ(n, 1);
	}
	CHECK(ring_write(&r, &o, 0, 0xE0, rc->len, rc->sends_before,
			 rc->seal ? rc->seal : OFI_RING_FIRST_SEAL) == 0);
	pump_imm(&a, &r, &s, imm, &n, 1000);
	conf_diag("server: %d doorbells (first imm %#x), %s (%s); raw peer: %d of %d writes done",
		  n, imm[0], s.down ? "dropped" : "kept", wimm_err_name(s.down_status), r.raw.done,
		  r.raw.posted);
	CHECKF(n == rc->delivered, "%d doorbells delivered, %d expected", n, rc->delivered);
	if (rc->delivered == 2)
		CHECKF(imm[0] == 0xC0 && imm[1] == 0xE0, "out of post order: %#x, then %#x", imm[0],
		       imm[1]);
	else if (rc->delivered == 1 && !rc->cq_doorbell)
		CHECK_EQ(imm[0], 0xE0);
	CHECKF(s.down == rc->dropped, "the connection was %s", s.down ? "dropped" : "kept");
	if (rc->dropped)
		CHECK_RC(s.down_status, WIMM_E_PROTO);
	if (!rc->dropped && !rc->delivered) {
		/* Not taken: the right entry in the same slot still is. */
		CHECK(ring_write(&r, &o, 0, 0xE1, 8, 0, OFI_RING_FIRST_SEAL) == 0);
		pump_imm(&a, &r, &s, imm, &n, 1000);
		CHECKF(n == 1 && imm[0] == 0xE1, "the valid entry after it: %d doorbells", n);
	}
	CHECK(canary_damage(&a) == 0);
	CHECK(honest_ok(&a));
out:
	hostile_close(&hc, &r, &a);
}

static int ring_applies(const char *uri)
{
	if (strcmp(uri, "ofi:tcp") != 0) {
		conf_skip("the doorbell ring is libfabric tcp's");
		return 0;
	}
	return 1;
}

void t_hostile_ring_entries(const char *uri)
{
	const char *env = getenv("WIMM_OFI_RING");

	if (!ring_applies(uri))
		return;
	if (env && strcmp(env, "0") == 0) {
		conf_skip("WIMM_OFI_RING=0: the server offers no ring to forge entries in");
		return;
	}
	for (size_t i = 0; i < sizeof(ring_cases) / sizeof(ring_cases[0]); i++)
		ring_case_run(uri, &ring_cases[i]);
}

/* Offers a wimm server must refuse: the connection is not made, and an
 * honest client of the server goes on. */
struct bad_offer {
	const char *name;
	uint32_t magic, entries;
	uint16_t len;
};

static const struct bad_offer bad_offers[] = {
    {"wrong magic", 0x57524730u, 64, OFI_RING_OFFER_LEN},
    {"fewer slots than its receive window", OFI_RING_MAGIC, 63, OFI_RING_OFFER_LEN},
    {"more slots than any window", OFI_RING_MAGIC, OFI_RING_MAX_ENTRIES + 1, OFI_RING_OFFER_LEN},
    {"cut short", OFI_RING_MAGIC, 64, OFI_RING_OFFER_LEN - 1},
};

static void bad_offer_run(const char *uri, const struct bad_offer *b)
{
	struct wimm_handshake hs = {.rx_depth = 64, .addr_len = b->len};
	struct hostile_peer r;
	struct wimm_conn *hc = NULL;
	struct arena a;

	conf_diag("offer: %s", b->name);
	memset(&r, 0, sizeof(r));
	ofi_ring_offer_encode(hs.addr, &(struct ofi_ring_offer){.entries = b->entries});
	ofi_ring_put_be(hs.addr, b->magic, 4);
	CHECK(arena_open(&a, uri, 64, 0) == 0 && raw_alloc(&r, RAW_PEER_OFI_MSG) == 0);
	int rc = raw_connect_hs(&r, uri, a.addr, a.p.sctx, a.p.l, &hc, &hs);
	pump(a.p.sctx, a.p.l, &hc, NULL, 0, 300);
	conf_diag("raw peer's connect: %d (%s); server: %s", rc, r.raw.text,
		  hc ? "accepted it" : "took no connection");
	CHECKF(hc == NULL, "the server accepted a malformed ring offer");
	CHECK(honest_ok(&a));
out:
	hostile_close(&hc, &r, &a);
}

void t_hostile_ring_offer(const char *uri)
{
	if (!ring_applies(uri))
		return;
	for (size_t i = 0; i < sizeof(bad_offers) / sizeof(bad_offers[0]); i++)
		bad_offer_run(uri, &bad_offers[i]);
}
