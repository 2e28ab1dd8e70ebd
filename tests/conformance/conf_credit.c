/* Credits (contract item 4): a sender stops at the peer's receive window
 * with AGAIN, gets its credits back when the peer polls, can wait for them,
 * and a flood into a slow receiver loses, duplicates and reorders nothing
 * (docs/errata.md E1: no RNR; E5: no CQ overrun). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "conf.h"

static int credits_of(struct wimm_conn *c)
{
	struct wimm_conn_info ci;

	if (wimm_conn_info(c, &ci))
		return -1;
	return (int)ci.credits;
}

/* Peer rx_depth 4, peer not polling: the 5th doorbell is AGAIN; after the
 * peer polls, credits come back and doorbells flow again. */
static void t_credits(const char *uri)
{
	struct wimm_conn_attr sattr = {.rx_depth = 4}, cattr = {0};
	struct wimm_event ev[8];
	int got = 0, c;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_EQ(credits_of(p.c), 4);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 4; i++) {
			int rc = wimm_write_imm(p.c, NULL, 0, 0, 0, (uint32_t)(round * 4 + i), 0);

			CHECKF(rc == 0, "round %d, doorbell %d: %s with %d credits", round, i,
			       wimm_err_name(rc), credits_of(p.c));
			CHECK_EQ(credits_of(p.c), 3 - i);
		}
		/* Driving the sender alone brings nothing back. */
		for (int i = 0; i < 50; i++)
			wimm_progress(p.cctx);
		CHECK_RC(wimm_write_imm(p.c, NULL, 0, 0, 0, 99, 0), WIMM_E_AGAIN);
		CHECK_EQ(credits_of(p.c), 0);

		/* The peer polls: its events are the four, in order. */
		got = 0;
		int64_t deadline = conf_now_ms() + 5000;

		while (got < 4 && conf_now_ms() < deadline) {
			int n = wimm_poll(p.sctx, ev, 8);

			CHECK(n >= 0);
			for (int i = 0; i < n; i++) {
				CHECK(ev[i].type == WIMM_EV_WRITE_IMM);
				CHECKF(ev[i].imm == (uint32_t)(round * 4 + got), "imm %u",
				       ev[i].imm);
				got++;
			}
			wimm_progress(p.cctx);
		}
		CHECKF(got == 4, "round %d: %d of 4 doorbells arrived", round, got);
		/* Credits return once the peer's next poll hands the slots
		 * back; the sender sees them after driving progress. */
		deadline = conf_now_ms() + 5000;
		while ((c = credits_of(p.c)) < 4 && conf_now_ms() < deadline) {
			CHECK_EQ(wimm_poll(p.sctx, ev, 8), 0);
			wimm_progress(p.cctx);
			conf_sleep_us(100);
		}
		CHECKF(c == 4, "round %d: credits %d after the peer polled, expected 4", round, c);
	}
	CHECK_OK(wimm_write_imm(p.c, NULL, 0, 0, 0, 1000, 0));
	CHECK_EQ(next_event(p.sctx, p.cctx, ev, 5000), 1);
	CHECK(ev[0].imm == 1000);
out:
	pair_close(&p);
}

struct late_poller {
	struct wimm_ctx *ctx;
	unsigned delay_ms;
	int want;
	atomic_int got;
	int bad_order;
};

/* The peer's thread: sleep first (so the sender must wait), then poll until
 * it has everything. */
static void *late_poll_thread(void *arg)
{
	struct late_poller *lp = arg;
	struct wimm_event ev[8];
	int64_t deadline;

	conf_sleep_us(lp->delay_ms * 1000);
	deadline = conf_now_ms() + 10000;
	while (atomic_load(&lp->got) < lp->want && conf_now_ms() < deadline) {
		int n = wimm_wait(lp->ctx, ev, 8, WIMM_WAIT_BLOCK, 100);

		for (int i = 0; i < n; i++) {
			if (ev[i].type != WIMM_EV_WRITE_IMM ||
			    ev[i].imm != (uint32_t)atomic_load(&lp->got))
				lp->bad_order = 1;
			atomic_fetch_add(&lp->got, 1);
		}
	}
	/* Keep polling a little so the last credits go back too. */
	deadline = conf_now_ms() + 200;
	while (conf_now_ms() < deadline)
		wimm_wait(lp->ctx, ev, 8, WIMM_WAIT_BLOCK, 20);
	return NULL;
}

/* WIMM_F_WAIT blocks while the peer is not polling and returns once it
 * does. */
static void t_credits_wait(const char *uri)
{
	struct wimm_conn_attr sattr = {.rx_depth = 4}, cattr = {0};
	struct late_poller lp = {.delay_ms = 300, .want = 8};
	int started = 0;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	lp.ctx = p.sctx;
	atomic_init(&lp.got, 0);
	for (uint32_t i = 0; i < 4; i++) {
		int rc = wimm_write_imm(p.c, NULL, 0, 0, 0, i, 0);

		CHECKF(rc == 0, "doorbell %u: %s with %d credits", i, wimm_err_name(rc),
		       credits_of(p.c));
	}
	CHECK_RC(wimm_write_imm(p.c, NULL, 0, 0, 0, 4, 0), WIMM_E_AGAIN);

	pthread_t th;
	int64_t t0 = conf_now_ms();

	CHECK(pthread_create(&th, NULL, late_poll_thread, &lp) == 0);
	started = 1;
	for (uint32_t i = 4; i < 8; i++)
		CHECK_OK(wimm_write_imm(p.c, NULL, 0, 0, 0, i, WIMM_F_WAIT));
	int64_t waited = conf_now_ms() - t0;

	conf_diag("WIMM_F_WAIT returned after %lld ms (peer started polling at %u ms)",
		  (long long)waited, lp.delay_ms);
	CHECKF(waited >= (int64_t)lp.delay_ms - 50,
	       "WIMM_F_WAIT returned after %lld ms, before the peer polled at all",
	       (long long)waited);
	pthread_join(th, NULL);
	started = 0;
	CHECKF(atomic_load(&lp.got) == 8, "peer got %d of 8 doorbells", atomic_load(&lp.got));
	CHECK(!lp.bad_order);
out:
	if (started)
		pthread_join(th, NULL);
	pair_close(&p);
}

struct flood {
	struct wimm_ctx *ctx;
	uint32_t total;
	uint32_t got;
	uint32_t bad_imm, bad_at, wrong_type;
	uint32_t sleeps;
	int timed_out;
	int64_t deadline;
	atomic_int stop; /* the sender gave up: leave at once */
};

/* The slow receiver: batches of events, a pause now and then. */
static void *flood_rx_thread(void *arg)
{
	struct flood *f = arg;
	struct wimm_event ev[32];
	uint64_t rng = 12345;
	uint32_t next_pause = 1000 + (uint32_t)(conf_rand(&rng) % 4000);

	while (f->got < f->total) {
		if (conf_now_ms() > f->deadline || atomic_load(&f->stop)) {
			f->timed_out = 1;
			break;
		}
		int n = wimm_wait(f->ctx, ev, 32, WIMM_WAIT_ADAPTIVE, 100);

		if (n < 0) {
			f->wrong_type++;
			break;
		}
		for (int i = 0; i < n; i++) {
			if (ev[i].type != WIMM_EV_WRITE_IMM) {
				f->wrong_type++;
				continue;
			}
			if (ev[i].imm != f->got && !f->bad_imm) {
				f->bad_imm = ev[i].imm ? ev[i].imm : 0xFFFFFFFFu;
				f->bad_at = f->got;
			}
			f->got++;
		}
		if (f->got >= next_pause) {
			conf_sleep_us(200 + (unsigned)(conf_rand(&rng) % 1800));
			f->sleeps++;
			next_pause = f->got + 1000 + (uint32_t)(conf_rand(&rng) % 4000);
		}
	}
	return NULL;
}

static void t_flood(const char *uri)
{
	struct wimm_conn_attr sattr = {.rx_depth = 16}, cattr = {0};
	struct flood f = {0};
	uint32_t again = 0;
	int started = 0;
	pthread_t th;
	struct pair p;

	f.total = conf_quick() ? 10000 : 100000;
	if (pair_open(&p, uri))
		goto out;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	f.ctx = p.sctx;
	atomic_init(&f.stop, 0);
	/* Emulated CPUs (the Soft-RoCE guest) get WIMM_TEST_TIMEOUT_SCALE times longer. */
	f.deadline = conf_now_ms() + (int64_t)(60000 * conf_scale());
	int64_t t0 = conf_now_ms();

	CHECK(pthread_create(&th, NULL, flood_rx_thread, &f) == 0);
	started = 1;
	/* Alternate blocks that wait for credits and blocks that retry on
	 * AGAIN, so both paths carry part of the flood. */
	for (uint32_t i = 0; i < f.total; i++) {
		int rc;

		if ((i / 1000) & 1) {
			rc = wimm_write_imm(p.c, NULL, 0, 0, 0, i, WIMM_F_WAIT);
		} else {
			while ((rc = wimm_write_imm(p.c, NULL, 0, 0, 0, i, 0)) == WIMM_E_AGAIN) {
				again++;
				wimm_progress(p.cctx);
				if (conf_now_ms() > f.deadline)
					break;
			}
		}
		CHECKF(rc == 0, "doorbell %u (%s): %s with %d credits", i,
		       ((i / 1000) & 1) ? "WIMM_F_WAIT" : "retrying AGAIN", wimm_err_name(rc),
		       credits_of(p.c));
	}
	pthread_join(th, NULL);
	started = 0;
	int64_t ms = conf_now_ms() - t0;

	conf_diag("flood: %u doorbells in %lld ms (%.0f/s), %u AGAIN retries, %u receiver pauses",
		  f.total, (long long)ms, ms ? f.total * 1000.0 / (double)ms : 0.0, again,
		  f.sleeps);
	CHECKF(!f.timed_out, "receiver got %u of %u in 60 s", f.got, f.total);
	CHECKF(f.wrong_type == 0, "%u events of the wrong type", f.wrong_type);
	CHECKF(f.bad_imm == 0, "doorbell %u arrived where %u was due (lost or reordered)",
	       f.bad_imm, f.bad_at);
	CHECK(f.got == f.total);
	/* No duplicates trailing behind. */
	CHECK_EQ(drain_events(p.sctx, p.cctx, 200), 0);
out:
	if (started) {
		atomic_store(&f.stop, 1);
		pthread_join(th, NULL);
	}
	pair_close(&p);
}

/* wimm_ctx_attr.post_wait_ms bounds WIMM_F_WAIT: a peer that never polls
 * costs the sender that long, then WIMM_E_TIMEDOUT with nothing posted. */
static void t_credits_wait_limit(const char *uri)
{
	struct wimm_conn_attr sattr = {.rx_depth = 4}, cattr = {0};
	struct wimm_ctx_attr limited = {.post_wait_ms = 200};
	struct pair p;

	memset(&p, 0, sizeof(p));
	if (srv_ctx_open(uri, NULL, &p.sctx))
		goto out;
	CHECK_OK(wimm_ctx_open(uri, &limited, &p.cctx));
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	for (uint32_t i = 0; i < 4; i++)
		CHECK_OK(wimm_write_imm(p.c, NULL, 0, 0, 0, i, 0));
	int64_t t0 = conf_now_ms();
	CHECK_RC(wimm_write_imm(p.c, NULL, 0, 0, 0, 4, WIMM_F_WAIT), WIMM_E_TIMEDOUT);
	int64_t waited = conf_now_ms() - t0;
	conf_diag("WIMM_F_WAIT gave up after %lld ms (limit 200 ms)", (long long)waited);
	CHECKF(waited >= 190 && waited <= 200 + 1000 * conf_scale(),
	       "WIMM_F_WAIT gave up after %lld ms, limit 200 ms", (long long)waited);
	/* Nothing of the refused doorbell went out: exactly 4 arrive. */
	int n = drain_events(p.sctx, p.cctx, 300);
	CHECKF(n == 4, "the peer got %d doorbells, want 4", n);
	/* Credits came back with that poll: the next wait succeeds. */
	CHECK_OK(wimm_write_imm(p.c, NULL, 0, 0, 0, 4, WIMM_F_WAIT));
out:
	pair_close(&p);
}

const struct conf_test conf_tests_credit[] = {
    {"credits", t_credits, 0},
    {"credits_wait", t_credits_wait, 0},
    {"credits_wait_limit", t_credits_wait_limit, 0},
    {"flood", t_flood, 120},
    {NULL, NULL, 0},
};
