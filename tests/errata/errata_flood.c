/* docs/errata.md E1 + E5 through the wimm API on a real verbs device: a flood of
 * doorbells into a small, slow receive window causes no RNR and no CQ
 * error, and loses, duplicates or reorders nothing.
 *
 *   errata_flood [URI]      (default verbs:rxe0)
 *
 * Two contexts, one per thread: the receiver listens on WIMM_TEST_HOST
 * (default 192.0.2.1) with rx_depth 16 and pauses every few thousand
 * events; the sender posts WIMM_ERRATA_FLOOD (default 100000) zero-length
 * write_imm doorbells, imm = sequence number, retrying on WIMM_E_AGAIN. The
 * rxe port counters are read before and after: with the library's credits
 * no RNR NAK may be sent or received (E1). A CQ overrun would show up as
 * IBV_EVENT_CQ_ERR and QPs in error, i.e. ERROR/DISCONNECT events (E5). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <wimm.h>

#include "errata.h"

#define RX_DEPTH 16
#define PAUSE_EVERY 2000 /* events */
#define PAUSE_US 500	 /* long enough for the sender to use up RX_DEPTH credits */
#define STALL_MS 20000	 /* no progress for this long (scaled) is a hang */

struct rx {
	struct wimm_ctx *ctx;
	struct wimm_listener *l;
	struct wimm_conn *conn;
	uint32_t total;
	int64_t deadline;
	atomic_int stop; /* the sender gave up */
	atomic_int done; /* the receiver is finished, one way or another */
	uint8_t *seen;	 /* one bit per sequence number */
	/* results, read after the join */
	int accept_rc, wait_rc, stalled;
	uint32_t got, distinct, dups, out_of_order, bad_len, extra;
	uint32_t errors, disconnects, other, pauses;
	int first_status;
	int64_t t_first, t_last;
};

static void rx_event(struct rx *r, const struct wimm_event *ev, uint32_t *next)
{
	switch (ev->type) {
	case WIMM_EV_WRITE_IMM:
		if (!r->got)
			r->t_first = errata_now_ms();
		r->got++;
		if (ev->len != 0 || ev->conn != r->conn)
			r->bad_len++;
		if (ev->imm != *next)
			r->out_of_order++;
		*next = ev->imm + 1;
		if (ev->imm >= r->total) {
			r->extra++;
		} else if (r->seen[ev->imm / 8] & (1u << (ev->imm % 8))) {
			r->dups++;
		} else {
			r->seen[ev->imm / 8] |= (uint8_t)(1u << (ev->imm % 8));
			r->distinct++;
		}
		if (r->got % PAUSE_EVERY == 0) {
			usleep(PAUSE_US);
			r->pauses++;
		}
		break;
	case WIMM_EV_ERROR:
		if (!r->errors++ && !r->disconnects)
			r->first_status = ev->status;
		break;
	case WIMM_EV_DISCONNECT:
		if (!r->disconnects++ && !r->errors)
			r->first_status = ev->status;
		break;
	default:
		r->other++;
		break;
	}
}

static void *rx_thread(void *arg)
{
	struct rx *r = arg;
	struct wimm_event ev[32];
	int64_t progress;
	uint32_t next = 0;

	r->accept_rc = wimm_accept(r->l, (int)errata_timeout_ms(20000), &r->conn);
	if (r->accept_rc)
		goto out;
	progress = errata_now_ms();
	while (r->distinct < r->total && !atomic_load(&r->stop) && !r->errors && !r->disconnects) {
		int64_t now = errata_now_ms();
		int n;

		if (now > r->deadline || now - progress > errata_timeout_ms(STALL_MS)) {
			r->stalled = 1;
			break;
		}
		n = wimm_wait(r->ctx, ev, 32, WIMM_WAIT_ADAPTIVE, 100);
		if (n < 0) {
			r->wait_rc = n;
			break;
		}
		if (n > 0)
			progress = errata_now_ms();
		for (int i = 0; i < n; i++)
			rx_event(r, &ev[i], &next);
	}
	r->t_last = errata_now_ms();
	/* Anything after the last doorbell is a duplicate or worse; the
	 * sender keeps the connection open until this thread is joined. */
	for (int64_t end = errata_now_ms() + 300; !r->wait_rc && errata_now_ms() < end;) {
		int n = wimm_wait(r->ctx, ev, 32, WIMM_WAIT_BLOCK, 50);

		if (n < 0)
			r->wait_rc = n;
		for (int i = 0; i < n; i++) {
			uint32_t got = r->got;

			rx_event(r, &ev[i], &next);
			if (r->got != got)
				r->extra++;
		}
	}
out:
	atomic_store(&r->done, 1);
	return NULL;
}

static int provider_text(struct wimm_ctx *ctx, char *buf, size_t len)
{
	const char *text = "";
	int code = wimm_provider_error(ctx, &text);

	snprintf(buf, len, "provider %d %s", code, text ? text : "");
	return code;
}

int main(int argc, char **argv)
{
	const char *uri = argc > 1 ? argv[1] : "verbs:rxe0";
	const char *dev = strncmp(uri, "verbs:", 6) ? errata_device() : uri + 6;
	const char *env = getenv("WIMM_ERRATA_FLOOD");
	struct wimm_conn_attr rattr = {.rx_depth = RX_DEPTH}, sattr = {0};
	struct hw_counters c0, c1;
	struct wimm_ctx *sctx = NULL;
	struct wimm_conn *c = NULL;
	struct wimm_event ev[16];
	struct rx r;
	char addr[300], text[300];
	uint32_t posted = 0, stalls = 0, s_errors = 0, s_disconnects = 0;
	int s_status = 0, post_rc = 0, started = 0, rc;
	int64_t t0, t1, stall_since = 0;
	pthread_t th;

	memset(&r, 0, sizeof(r));
	r.total = 100000;
	if (env && *env)
		r.total = (uint32_t)strtoul(env, NULL, 10);
	if (!errata_check(r.total > 0 && r.total < (1u << 31), "flood of %u doorbells requested",
			  r.total))
		return errata_summary();
	r.seen = calloc(r.total / 8 + 1, 1);
	errata_counters_read(dev, &c0);
	if (!errata_check(errata_counter(&c0, "rcvd_rnr_err") >= 0 &&
			      errata_counter(&c0, "send_rnr_err") >= 0 &&
			      errata_counter(&c0, "retry_rnr_exceeded_err") >= 0 &&
			      errata_counter(&c0, "rcvd_pkts") >= 0 && r.seen,
			  "RNR counters of %s readable (run inside the Soft-RoCE guest)", dev))
		return errata_summary();

	rc = wimm_ctx_open(uri, NULL, &r.ctx);
	if (!rc)
		rc = wimm_ctx_open(uri, NULL, &sctx);
	if (!errata_check(rc == 0, "two contexts on %s opened (%s)", uri, wimm_err_name(rc)))
		goto out;
	snprintf(addr, sizeof(addr), "%s:0", errata_host());
	rc = wimm_listen(r.ctx, addr, &rattr, &r.l);
	if (!errata_check(rc == 0, "listening on %s with rx_depth %d (%s)", addr, RX_DEPTH,
			  wimm_err_name(rc)))
		goto out;
	snprintf(addr, sizeof(addr), "%s:%d", errata_host(), wimm_listener_port(r.l));
	r.deadline = errata_now_ms() + errata_timeout_ms(60000) + (int64_t)r.total * 5;
	if (!errata_check(pthread_create(&th, NULL, rx_thread, &r) == 0, "receiver thread started"))
		goto out;
	started = 1;
	rc = wimm_connect(sctx, addr, &sattr, (int)errata_timeout_ms(20000), &c);
	if (rc)
		provider_text(sctx, text, sizeof(text));
	if (!errata_check(rc == 0, "connected to %s (%s%s%s)", addr, wimm_err_name(rc),
			  rc ? ", " : "", rc ? text : ""))
		goto out;

	errata_counters_read(dev, &c0);
	t0 = errata_now_ms();
	while (posted < r.total && !atomic_load(&r.done)) {
		rc = wimm_write_imm(c, NULL, 0, 0, 0, posted, 0);
		if (rc == 0) {
			posted++;
			stall_since = 0;
			/* Unsignaled: failures arrive as events only. */
			if (posted % 256)
				continue;
		} else if (rc == WIMM_E_AGAIN) {
			int64_t now = errata_now_ms();

			/* Out of credits (or send queue full): the window at work. */
			if (!stall_since) {
				stall_since = now;
				stalls++;
			} else if (now - stall_since > errata_timeout_ms(STALL_MS) ||
				   now > r.deadline) {
				post_rc = rc;
				break;
			}
		} else {
			post_rc = rc;
			provider_text(sctx, text, sizeof(text));
			break;
		}
		rc = wimm_poll(sctx, ev, 16);
		for (int i = 0; i < rc; i++) {
			if (ev[i].type == WIMM_EV_ERROR && !s_errors++ && !s_disconnects)
				s_status = ev[i].status;
			if (ev[i].type == WIMM_EV_DISCONNECT && !s_disconnects++ && !s_errors)
				s_status = ev[i].status;
		}
		if (rc < 0 || s_errors || s_disconnects) {
			post_rc = rc < 0 ? rc : WIMM_E_DISCONNECTED;
			break;
		}
	}
	if (post_rc || posted < r.total)
		atomic_store(&r.stop, 1);
	pthread_join(th, NULL);
	started = 0;
	t1 = r.t_last ? r.t_last : errata_now_ms();
	/* Late failures of the sender's own operations. */
	for (int64_t end = errata_now_ms() + 200; errata_now_ms() < end;) {
		rc = wimm_poll(sctx, ev, 16);
		for (int i = 0; i < rc; i++) {
			if (ev[i].type == WIMM_EV_ERROR && !s_errors++ && !s_disconnects)
				s_status = ev[i].status;
			if (ev[i].type == WIMM_EV_DISCONNECT && !s_disconnects++ && !s_errors)
				s_status = ev[i].status;
		}
		if (rc <= 0)
			usleep(1000);
	}
	errata_counters_read(dev, &c1);

	errata_diag("%u doorbells in %.2f s: %.1f k doorbells/s; receiver paused %u times (%d us "
		    "every %d events), sender out of credits %u times",
		    r.got, (double)(t1 - t0) / 1000.0,
		    t1 > t0 ? (double)r.got / (double)(t1 - t0) : 0.0, r.pauses, PAUSE_US,
		    PAUSE_EVERY, stalls);
	errata_counters_diff(&c0, &c1);
	errata_check(r.accept_rc == 0, "receiver accepted the connection (%s)",
		     wimm_err_name(r.accept_rc));
	errata_check(posted == r.total && !post_rc,
		     "sender posted all %u doorbells (posted %u; last result %s%s%s)", r.total,
		     posted, wimm_err_name(post_rc), post_rc && post_rc != WIMM_E_AGAIN ? ", " : "",
		     post_rc && post_rc != WIMM_E_AGAIN ? text : "");
	errata_check(!r.stalled && !r.wait_rc,
		     "receiver made progress to the end (stalled %d, wimm_wait %s)", r.stalled,
		     wimm_err_name(r.wait_rc));
	errata_check(r.distinct == r.total, "E1 none lost: %u of %u sequence numbers arrived",
		     r.distinct, r.total);
	errata_check(r.dups == 0 && r.extra == 0,
		     "E1 none duplicated: %u duplicates, %u events after the last", r.dups,
		     r.extra);
	errata_check(r.out_of_order == 0, "E1 none reordered: %u events out of sequence",
		     r.out_of_order);
	errata_check(r.bad_len == 0 && r.other == 0,
		     "every event is a zero-length WRITE_IMM of the connection (%u bad, %u other)",
		     r.bad_len, r.other);
	errata_check(r.errors == 0 && r.disconnects == 0,
		     "E5 receiver saw no ERROR/DISCONNECT event during the flood (%u errors, %u "
		     "disconnects, first status %s)",
		     r.errors, r.disconnects, wimm_err_name(r.first_status));
	errata_check(s_errors == 0 && s_disconnects == 0,
		     "E5 sender saw no ERROR/DISCONNECT event during the flood (%u errors, %u "
		     "disconnects, first status %s)",
		     s_errors, s_disconnects, wimm_err_name(s_status));
	errata_check(stalls > 0,
		     "the receiver's pauses made the sender wait for credits (%u times): the "
		     "window was tested",
		     stalls);
	errata_check(errata_counter(&c1, "rcvd_pkts") - errata_counter(&c0, "rcvd_pkts") >=
			 (long long)r.total,
		     "the counters are live: rcvd_pkts grew by at least %u (%lld -> %lld)", r.total,
		     errata_counter(&c0, "rcvd_pkts"), errata_counter(&c1, "rcvd_pkts"));
	errata_check(errata_counter(&c1, "rcvd_rnr_err") == errata_counter(&c0, "rcvd_rnr_err"),
		     "E1 rcvd_rnr_err unchanged (%lld -> %lld)",
		     errata_counter(&c0, "rcvd_rnr_err"), errata_counter(&c1, "rcvd_rnr_err"));
	errata_check(errata_counter(&c1, "send_rnr_err") == errata_counter(&c0, "send_rnr_err"),
		     "E1 send_rnr_err unchanged (%lld -> %lld)",
		     errata_counter(&c0, "send_rnr_err"), errata_counter(&c1, "send_rnr_err"));
	errata_check(errata_counter(&c1, "retry_rnr_exceeded_err") ==
			 errata_counter(&c0, "retry_rnr_exceeded_err"),
		     "E1 retry_rnr_exceeded_err unchanged (%lld -> %lld)",
		     errata_counter(&c0, "retry_rnr_exceeded_err"),
		     errata_counter(&c1, "retry_rnr_exceeded_err"));
out:
	if (started) {
		atomic_store(&r.stop, 1);
		pthread_join(th, NULL);
	}
	wimm_conn_delete(&c);
	wimm_conn_delete(&r.conn);
	wimm_listener_delete(&r.l);
	if (sctx || r.ctx) {
		int a = sctx ? wimm_ctx_close(&sctx) : 0, b = r.ctx ? wimm_ctx_close(&r.ctx) : 0;

		errata_check(a == 0 && b == 0, "both contexts closed (%s, %s)", wimm_err_name(a),
			     wimm_err_name(b));
	}
	free(r.seen);
	return errata_summary();
}
