/* Bounds are checked before posting (contract item 5): every refused call
 * returns its own error, and nothing reaches the peer, which we prove by
 * sending a marker doorbell afterwards and finding it first in line. */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "conf.h"

#define WIN_OFF 1024
#define WIN_LEN 4096
#define SRC_LEN 8192
#define MARKER 0x5A5A1234u

/* The marker must be the very next event at the server and the client must
 * have nothing (no ERROR event for a refused call). */
static int marker_first(struct pair *p, struct wimm_mr *src)
{
	struct wimm_event ev;
	int rc;

	rc = wimm_write_imm(p->c, src, 0, 0, 0, MARKER, 0);
	if (rc) {
		conf_fail(__FILE__, __LINE__, "marker doorbell: %s", wimm_err_name(rc));
		return -1;
	}
	rc = next_event(p->sctx, p->cctx, &ev, 5000);
	if (rc != 1 || ev.type != WIMM_EV_WRITE_IMM || ev.imm != MARKER) {
		conf_fail(__FILE__, __LINE__,
			  "refused calls reached the peer: first event %s imm 0x%x (rc %d)",
			  rc == 1 ? conf_ev_name(ev.type) : "none", rc == 1 ? ev.imm : 0, rc);
		return -1;
	}
	rc = drain_events(p->cctx, p->sctx, 100);
	if (rc != 0) {
		conf_fail(__FILE__, __LINE__, "%d unexpected event(s) at the sender", rc);
		return -1;
	}
	return 0;
}

static void t_bounds(const char *uri)
{
	struct wimm_conn_attr sattr = {.window_off = WIN_OFF, .window_len = WIN_LEN}, cattr = {0};
	struct wimm_conn_info before, after;
	struct region *win, *src;
	struct wimm_mr *s;
	struct pair p;
	int rc;

	if (pair_open(&p, uri))
		goto out;
	win =
	    pair_region(&p, p.sctx, WIN_OFF + WIN_LEN + 1024, WIMM_REMOTE_WRITE | WIMM_REMOTE_READ);
	src = pair_region(&p, p.cctx, SRC_LEN, WIMM_LOCAL);
	CHECK(win && src);
	s = src->mr;
	sattr.window = win->mr;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_OK(wimm_conn_info(p.c, &before));
	CHECK(before.peer_window_len == WIN_LEN);

	/* Remote range, write_imm / write / read alike. */
	CHECK_RC(wimm_write_imm(p.c, s, 0, WIN_LEN + 1, 1, 1, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_write_imm(p.c, s, 0, WIN_LEN, 1, 1, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_write_imm(p.c, s, 0, WIN_LEN - 100, 200, 2, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_write_imm(p.c, s, 0, 0, WIN_LEN + 1, 3, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_write_imm(p.c, s, 0, SIZE_MAX, 1, 4, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_write_imm(p.c, s, 0, SIZE_MAX - 10, 20, 5, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_write(p.c, s, 0, WIN_LEN - 1, 2, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_write(p.c, s, 0, SIZE_MAX - 1, 2, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_read(p.c, s, 0, WIN_LEN - 1, 2, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_read(p.c, s, 0, SIZE_MAX, 1, 0), WIMM_E_BOUNDS);

	/* A length no window or region can hold: one of the size errors. */
	rc = wimm_write_imm(p.c, s, 0, 0, SIZE_MAX, 6, 0);
	CHECKF(rc == WIMM_E_BOUNDS || rc == WIMM_E_LOCAL_BOUNDS || rc == WIMM_E_TOOBIG,
	       "len SIZE_MAX: %s", wimm_err_name(rc));
	rc = wimm_write_imm(p.c, s, 1, 1, SIZE_MAX, 6, 0);
	CHECKF(rc == WIMM_E_BOUNDS || rc == WIMM_E_LOCAL_BOUNDS || rc == WIMM_E_TOOBIG,
	       "len SIZE_MAX at offset 1: %s", wimm_err_name(rc));

	/* Local range. */
	CHECK_RC(wimm_write_imm(p.c, s, SRC_LEN, 0, 1, 7, 0), WIMM_E_LOCAL_BOUNDS);
	CHECK_RC(wimm_write_imm(p.c, s, SRC_LEN - 100, 0, 200, 8, 0), WIMM_E_LOCAL_BOUNDS);
	CHECK_RC(wimm_write_imm(p.c, s, SIZE_MAX, 0, 2, 9, 0), WIMM_E_LOCAL_BOUNDS);
	CHECK_RC(wimm_write_imm(p.c, s, SIZE_MAX - 1, 0, 4, 9, 0), WIMM_E_LOCAL_BOUNDS);
	CHECK_RC(wimm_write(p.c, s, SRC_LEN - 1, 0, 2, 0), WIMM_E_LOCAL_BOUNDS);
	CHECK_RC(wimm_read(p.c, s, SRC_LEN - 1, 0, 2, 0), WIMM_E_LOCAL_BOUNDS);
	CHECK_RC(wimm_send_imm(p.c, s, SRC_LEN, 1, 10, 0), WIMM_E_LOCAL_BOUNDS);

	/* Bad arguments. */
	CHECK_RC(wimm_write_imm(NULL, s, 0, 0, 1, 11, 0), WIMM_E_INVAL);
	CHECK_RC(wimm_write_imm(p.c, NULL, 0, 0, 1, 11, 0), WIMM_E_INVAL);
	CHECK_RC(wimm_write_imm(p.c, s, 0, 0, 1, 11, 0x80000000u), WIMM_E_INVAL);
	/* A region of another context is not ours to send from. */
	CHECK_RC(wimm_write_imm(p.c, win->mr, 0, 0, 1, 12, 0), WIMM_E_INVAL);

	CHECK_OK(wimm_conn_info(p.c, &after));
	CHECKF(after.credits == before.credits, "credits %u -> %u after refused calls",
	       before.credits, after.credits);
	if (marker_first(&p, s))
		goto out;

	/* The edges themselves are fine: the whole window, its last byte;
	 * and window_off shifts where the bytes land. */
	memset(win->buf, 0, win->len);
	conf_fill(src->buf, WIN_LEN, 5);
	CHECK_OK(wimm_write_imm(p.c, s, 0, 0, WIN_LEN, 100, 0));
	struct wimm_event ev;

	CHECK_EQ(next_event(p.sctx, p.cctx, &ev, 5000), 1);
	CHECK(ev.type == WIMM_EV_WRITE_IMM && ev.imm == 100 && ev.len == WIN_LEN);
	CHECK_EQ((int)conf_verify((uint8_t *)win->buf + WIN_OFF, WIN_LEN, 5), 0);
	for (size_t k = 0; k < WIN_OFF; k++)
		CHECKF(((uint8_t *)win->buf)[k] == 0, "byte %zu before the window changed", k);
	for (size_t k = WIN_OFF + WIN_LEN; k < win->len; k++)
		CHECKF(((uint8_t *)win->buf)[k] == 0, "byte %zu after the window changed", k);
	CHECK_OK(wimm_write_imm(p.c, s, SRC_LEN - 1, WIN_LEN - 1, 1, 101, 0));
	CHECK_EQ(next_event(p.sctx, p.cctx, &ev, 5000), 1);
	CHECK(ev.type == WIMM_EV_WRITE_IMM && ev.imm == 101 && ev.len == 1);
out:
	pair_close(&p);
}

/* A peer exposing no window: anything with bytes is NOWINDOW. */
static void t_no_window(const char *uri)
{
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct region *src;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	src = pair_region(&p, p.cctx, 4096, WIMM_LOCAL);
	CHECK(src);
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_RC(wimm_write_imm(p.c, src->mr, 0, 0, 1, 1, 0), WIMM_E_NOWINDOW);
	CHECK_RC(wimm_write_imm(p.c, src->mr, 0, 0, 4096, 1, 0), WIMM_E_NOWINDOW);
	CHECK_RC(wimm_write(p.c, src->mr, 0, 0, 1, 0), WIMM_E_NOWINDOW);
	CHECK_RC(wimm_read(p.c, src->mr, 0, 0, 1, 0), WIMM_E_NOWINDOW);
	if (marker_first(&p, src->mr))
		goto out;
out:
	pair_close(&p);
}

/* Longer than the fabric's largest message: TOOBIG, with regions big
 * enough that no bounds rule could be the reason. The regions are address
 * space only (MAP_NORESERVE); fabrics that pin memory cannot register them
 * and the test is skipped. */
static void t_toobig(const char *uri)
{
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct wimm_fabric_limits lim;
	struct wimm_mr *smr = NULL, *wmr = NULL;
	void *sbuf = MAP_FAILED, *wbuf = MAP_FAILED;
	size_t len = 0, maplen = 0;
	struct pair p;
	int rc;

	if (pair_open(&p, uri))
		goto out;
	CHECK_OK(wimm_ctx_limits(p.cctx, &lim));
	CHECK(lim.max_msg > 0);
	CHECK(lim.imm_bytes >= 4);
	CHECK(lim.max_depth >= 1);
	/* Event lengths are 32-bit: nothing longer can be announced. */
	CHECK(lim.max_msg <= UINT32_MAX);
	len = lim.max_msg + 1;
	if (len > ((size_t)1 << 34)) {
		conf_skip("max_msg %zu too large to map", lim.max_msg);
		goto out;
	}
	maplen = len + 4096;
	sbuf = mmap(NULL, maplen, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	wbuf = mmap(NULL, maplen, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	CHECK(sbuf != MAP_FAILED && wbuf != MAP_FAILED);
	if (wimm_mr_reg(p.cctx, sbuf, maplen, WIMM_LOCAL, &smr) ||
	    wimm_mr_reg(p.sctx, wbuf, maplen, WIMM_REMOTE_WRITE, &wmr)) {
		conf_skip("cannot register %zu bytes to exceed max_msg %zu", maplen, lim.max_msg);
		goto out;
	}
	sattr.window = wmr;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_RC(wimm_write_imm(p.c, smr, 0, 0, len, 1, 0), WIMM_E_TOOBIG);
	CHECK_RC(wimm_write(p.c, smr, 0, 0, len, 0), WIMM_E_TOOBIG);
	rc = wimm_send_imm(p.c, smr, 0, len, 1, 0);
	CHECKF(rc == WIMM_E_TOOBIG || rc == WIMM_E_NORECV, "send_imm: %s", wimm_err_name(rc));
	if (marker_first(&p, smr))
		goto out;
out:
	wimm_conn_delete(&p.c);
	wimm_conn_delete(&p.s);
	wimm_listener_delete(&p.l);
	wimm_mr_dereg(&smr);
	wimm_mr_dereg(&wmr);
	if (sbuf != MAP_FAILED)
		munmap(sbuf, maplen);
	if (wbuf != MAP_FAILED)
		munmap(wbuf, maplen);
	pair_close(&p);
}

const struct conf_test conf_tests_bounds[] = {
    {"bounds", t_bounds, 0},
    {"no_window", t_no_window, 0},
    {"toobig", t_toobig, 0},
    {NULL, NULL, 0},
};
