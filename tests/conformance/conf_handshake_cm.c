/* Hostile handshakes through the provider's own connection manager: a raw
 * peer that is not wimm speaks the CM a wimm listener uses (libfabric MSG
 * fi_connect with CM data, or librdmacm rdma_connect with private data) and
 * sends bytes no wimm peer would. Each request must be refused by
 * wimm_accept with its documented error, the raw peer must see the refusal
 * in bounded time, and the listener must then still accept a real wimm
 * connection. RDM fabrics (ofi:shm) have no CM: bad_handshake covers them
 * with raw TCP frames. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "raw_peer.h"

#define HS_LEN 56	/* the fixed part of a version-2 handshake */
#define HS_MAX_ADDR 192 /* its largest transport address */

/* Where a case can be expressed: the IB CM pads private data with zeros to
 * 56 bytes, so on rdma_cm a short message is indistinguishable from its
 * zero-padded form, and nothing longer than 56 bytes can be sent. */
#define ON_OFI 1u
#define ON_CM 2u
#define ON_ALL (ON_OFI | ON_CM)

struct cm_case {
	const char *what;
	int want; /* wimm_accept's result */
	unsigned on;
};

static const struct cm_case cases[] = {
    {"control: a valid handshake", 0, ON_ALL},
    {"empty", WIMM_E_PROTO, ON_ALL},
    {"1 byte", WIMM_E_PROTO, ON_ALL},
    {"2 bytes, the magic alone", WIMM_E_PROTO, ON_OFI},
    {"55 bytes of garbage", WIMM_E_PROTO, ON_ALL},
    {"valid header cut to 55 bytes", WIMM_E_PROTO, ON_OFI},
    {"56 bytes of garbage", WIMM_E_PROTO, ON_ALL},
    {"57 bytes of garbage", WIMM_E_PROTO, ON_OFI},
    {"valid header and a trailing byte", WIMM_E_PROTO, ON_OFI},
    {"bad magic", WIMM_E_PROTO, ON_ALL},
    {"version 3", WIMM_E_VERSION, ON_ALL},
    {"version 3, 100 bytes", WIMM_E_VERSION, ON_OFI},
    {"rx_depth 0", WIMM_E_PROTO, ON_ALL},
    {"rx_depth 2^20 + 1", WIMM_E_PROTO, ON_ALL},
    {"recv_size 2^30 + 1", WIMM_E_PROTO, ON_ALL},
    {"unknown flag bit", WIMM_E_PROTO, ON_ALL},
    {"window flag without a window", WIMM_E_PROTO, ON_ALL},
    {"window range wraps", WIMM_E_PROTO, ON_ALL},
    {"priv_len without its bytes", WIMM_E_PROTO, ON_ALL},
    {"addr_len 200 in 56 bytes", WIMM_E_PROTO, ON_ALL},
    {"addr_len 8 in 56 bytes", WIMM_E_PROTO, ON_ALL},
    {"oversized garbage (the CM's maximum)", WIMM_E_PROTO, ON_OFI},
    {"oversized: a full handshake with bytes after it", WIMM_E_PROTO, ON_OFI},
    {"version 3 at the CM's maximum", WIMM_E_VERSION, ON_OFI},
};

static void put_be(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * (n - 1 - i)));
}

/* A well-formed version-2 handshake, no window, no address. */
static size_t good_hs(uint8_t *b)
{
	memset(b, 0, HS_LEN);
	put_be(b, 0x5749, 2);
	b[2] = 2;
	put_be(b + 4, 16, 4);	    /* rx_depth */
	put_be(b + 36, 0x10000, 8); /* credit_addr */
	put_be(b + 44, 0x1234, 8);  /* credit_key */
	return HS_LEN;
}

static void garbage(uint8_t *b, size_t n)
{
	for (size_t k = 0; k < n; k++)
		b[k] = (uint8_t)(k * 37 + 11); /* never starts with the magic */
}

/* The bytes of case i into b; cm_max is the most the CM carries. Returns the
 * length, or 0 with *skip set when the CM cannot carry the case. */
static size_t make_case(size_t i, uint8_t *b, size_t cm_max, int *skip)
{
	size_t n = good_hs(b);

	*skip = 0;
	switch (i) {
	case 0:
		break;
	case 1:
		n = 0;
		break;
	case 2:
		n = 1;
		break;
	case 3:
		n = 2;
		break;
	case 4:
		garbage(b, 55);
		n = 55;
		break;
	case 5:
		n = 55;
		break;
	case 6:
		garbage(b, 56);
		break;
	case 7:
		garbage(b, 57);
		n = 57;
		break;
	case 8:
		b[56] = 0;
		n = 57;
		break;
	case 9:
		put_be(b, 0x5748, 2);
		break;
	case 10:
		b[2] = 3;
		break;
	case 11:
		/* a newer peer's longer message: version first, not length */
		b[2] = 3;
		garbage(b + HS_LEN, 100 - HS_LEN);
		n = 100;
		break;
	case 12:
		put_be(b + 4, 0, 4);
		break;
	case 13:
		put_be(b + 4, (1u << 20) + 1, 4);
		break;
	case 14:
		put_be(b + 8, (1u << 30) + 1, 4);
		break;
	case 15:
		/* a valid window, so the unknown bit is the only fault */
		b[3] = 0x1 | 0x8; /* bit 2 is WIMM_HS_F_WINDOW_ATOMIC */
		put_be(b + 12, 0x100000, 8);
		put_be(b + 20, 4096, 8);
		break;
	case 16:
		b[3] = 0x1;
		break;
	case 17:
		b[3] = 0x1;
		put_be(b + 12, UINT64_MAX - 100, 8);
		put_be(b + 20, 4096, 8);
		break;
	case 18:
		b[55] = 1;
		break;
	case 19:
		put_be(b + 52, 200, 2);
		break;
	case 20:
		put_be(b + 52, 8, 2);
		break;
	case 21:
		garbage(b, cm_max);
		n = cm_max;
		break;
	case 22:
		/* Decoded as a whole it is too long; cut to 248 bytes it is a
		 * valid handshake, so a listener that truncates accepts it. */
		if (cm_max <= HS_LEN + HS_MAX_ADDR) {
			*skip = 1;
			return 0;
		}
		put_be(b + 52, HS_MAX_ADDR, 2);
		garbage(b + HS_LEN, cm_max - HS_LEN);
		n = cm_max;
		break;
	case 23:
		b[2] = 3;
		garbage(b + HS_LEN, cm_max - HS_LEN);
		n = cm_max;
		break;
	}
	return n;
}

/* --------------------------------------------------------- the raw peer */

/* Which CM the fabric's listener uses (tests/common/raw_peer.h's MSG or
 * verbs peer); *why says why there is none. */
static enum raw_peer_kind fabric_kind(const char *uri, const char **why)
{
	enum raw_peer_kind kind = raw_peer_kind_of(uri, why);

	if (kind != RAW_PEER_OFI_RDM)
		return kind;
	*why = "no MSG endpoint, so no CM (bad_handshake sends raw TCP frames there)";
	return RAW_PEER_NONE;
}

/* ------------------------------------------------------------- the test */

struct acc {
	struct wimm_listener *l;
	struct wimm_conn *conn;
	int timeout_ms;
	int rc;
};

static void *acc_thread(void *arg)
{
	struct acc *a = arg;

	a->rc = wimm_accept(a->l, a->timeout_ms, &a->conn);
	return NULL;
}

static const char *outcome_name(enum raw_outcome o)
{
	static const char *const names[] = {"refused", "connected", "no answer in time", "error"};

	return names[o];
}

/* One request with case i's bytes. Returns -1 when the listener may be left
 * with a request still in flight, so later cases would not be meaningful. */
static int run_case(struct raw_peer *r, const char *host, const char *port, size_t cm_max,
		    struct wimm_listener *l, size_t i, int64_t *worst_ms, int *named)
{
	const struct cm_case *k = &cases[i];
	int accept_ms = (int)(5000 * conf_scale());
	struct acc a = {.l = l, .timeout_ms = accept_ms};
	uint8_t buf[RAW_CM_MAX];
	enum raw_outcome want = k->want ? RAW_REFUSED : RAW_CONNECTED, got;
	pthread_t th;
	int skip, ret = 0;
	size_t n = make_case(i, buf, cm_max, &skip);

	if (skip || n > cm_max) {
		conf_diag("%s: not expressible in %zu bytes of CM data", k->what, cm_max);
		return 0;
	}
	/* wimm_accept and the raw connect each wait for the other. */
	if (pthread_create(&th, NULL, acc_thread, &a)) {
		conf_fail(__FILE__, __LINE__, "pthread_create failed");
		return -1;
	}
	int64_t t0 = conf_now_ms();

	got = raw_peer_connect_bytes(r, host, port, buf, n, NULL, NULL, accept_ms + 1000);
	int64_t ms = conf_now_ms() - t0;

	pthread_join(th, NULL);
	if (ms > *worst_ms)
		*worst_ms = ms;
	if (a.rc != k->want) {
		conf_fail(__FILE__, __LINE__, "%s (%zu bytes): wimm_accept gave %s, expected %s",
			  k->what, n, wimm_err_name(a.rc), wimm_err_name(k->want));
		ret = a.rc == WIMM_E_TIMEDOUT ? -1 : 0;
	} else if ((a.conn != NULL) != (k->want == 0)) {
		conf_fail(__FILE__, __LINE__, "%s: wimm_accept returned %s with conn %p", k->what,
			  wimm_err_name(a.rc), (void *)a.conn);
	}
	if (got != want) {
		conf_fail(__FILE__, __LINE__,
			  "%s (%zu bytes): the raw peer saw %s (%s), expected %s", k->what, n,
			  outcome_name(got), r->text, outcome_name(want));
		if (got == RAW_TIMEOUT || got == RAW_ERROR)
			ret = -1;
	}
	/* The control's reply must be a wimm handshake: the raw peer really
	 * talked to the wimm listener. */
	if (got == RAW_CONNECTED && want == RAW_CONNECTED &&
	    (r->reply_len < HS_LEN || r->reply[0] != 0x57 || r->reply[1] != 0x49 ||
	     r->reply[2] != 2))
		conf_fail(__FILE__, __LINE__,
			  "%s: the listener's reply (%zu bytes) is no handshake", k->what,
			  r->reply_len);
	/* The verbs backend names its error in the REJ ("WRJ1", BE code), for
	 * its own wimm_connect: where it does, it must be the right one. */
	if (got == RAW_REFUSED && r->kind == RAW_PEER_VERBS_CM && r->reply_len >= 8 &&
	    !memcmp(r->reply, "WRJ1", 4)) {
		int32_t code = (int32_t)((uint32_t)r->reply[4] << 24 | (uint32_t)r->reply[5] << 16 |
					 (uint32_t)r->reply[6] << 8 | r->reply[7]);

		if (code != k->want)
			conf_fail(__FILE__, __LINE__, "%s: the REJ names %s, expected %s", k->what,
				  wimm_err_name(code), wimm_err_name(k->want));
		else
			(*named)++;
	}
	wimm_conn_delete(&a.conn);
	raw_peer_disconnect(r); /* a connection the raw peer got is dropped */
	return ret;
}

static void t_bad_handshake_cm(const char *uri)
{
	struct wimm_conn_attr sattr = {0};
	const char *why = "";
	enum raw_peer_kind kind;
	struct raw_peer r;
	char addr[300], host[256], port[16];
	int64_t worst = 0;
	struct pair p;
	int tried = 0, named = 0;

	memset(&r, 0, sizeof(r));
	if (pair_open(&p, uri))
		goto out;
	/* What the URI resolved to ("auto", "verbs" name no provider). */
	kind = fabric_kind(wimm_ctx_fabric(p.sctx), &why);
	if (kind == RAW_PEER_NONE) {
		conf_skip("%s: %s", wimm_ctx_fabric(p.sctx), why);
		goto out;
	}
	if (conf_listen(p.sctx, &sattr, &p.l, addr, sizeof(addr)))
		goto out;
	snprintf(host, sizeof(host), "%s", conf_host());
	snprintf(port, sizeof(port), "%d", wimm_listener_port(p.l));
	/* No memory of its own: it only asks. */
	struct raw_peer_attr ra = {.kind = kind,
				   .prov = wimm_ctx_fabric(p.sctx) + 4,
				   .node = host,
				   .service = port,
				   .src = r.ctl,
				   .src_len = sizeof(r.ctl)};
	if (raw_peer_open(&r, &ra)) {
		conf_fail(__FILE__, __LINE__, "%s", r.text);
		goto out;
	}
	/* The oversized cases send as much as the provider's CM carries. */
	size_t cm_max = raw_peer_cm_max(&r);
	conf_diag("raw %s peer, at most %zu bytes of CM data",
		  kind == RAW_PEER_OFI_MSG ? "fi_connect" : "rdma_connect", cm_max);
	/* More than the raw peer keeps is refused before anything is sent (the
	 * control case below would see a stray request). */
	static const uint8_t too_long[RAW_CM_MAX + 1];
	CHECK(raw_peer_connect_bytes(&r, host, port, too_long, sizeof(too_long), NULL, NULL,
				     1000) == RAW_ERROR);
	CHECKF(strstr(r.text, "more than kept") != NULL, "raw peer: %s", r.text);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (!(cases[i].on & (kind == RAW_PEER_OFI_MSG ? ON_OFI : ON_CM)))
			continue;
		tried++;
		if (run_case(&r, host, port, cm_max, p.l, i, &worst, &named))
			goto out;
	}
	conf_diag("%d requests, slowest answer to the raw peer %lld ms", tried, (long long)worst);
	if (kind == RAW_PEER_VERBS_CM)
		conf_diag("%d REJs named the right wimm error", named);
	CHECKF(worst < (int64_t)(3000 * conf_scale()), "the raw peer waited %lld ms for an answer",
	       (long long)worst);

	/* The listener still accepts a real wimm connection. */
	pair_still_accepts(&p, addr, 78);
out:
	raw_peer_close(&r);
	pair_close(&p);
}

const struct conf_test conf_tests_handshake_cm[] = {
    {"bad_handshake_cm", t_bad_handshake_cm, 120},
    {NULL, NULL, 0},
};
