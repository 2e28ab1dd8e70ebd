/* Waiting loses no wake-up (contract item 5, docs/errata.md E6): a sender posts at
 * random moments with pauses; the receiver sleeps in WIMM_WAIT_BLOCK /
 * ADAPTIVE, or in poll(2)/epoll on wimm_ctx_fd. A lost wake-up shows as an
 * event that sat undelivered across a sender pause, i.e. a large latency. */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "conf.h"

/* Longer than any sane delivery, shorter than a pause: an event delivered
 * later than this after its post slept through a wake-up. */
#define LATENCY_LIMIT_MS ((int)(250 * conf_scale()))
#define PAUSE_MS ((int)(500 * conf_scale()))

struct pacer {
	struct wimm_conn *c;
	struct wimm_ctx *ctx;
	uint32_t total;
	uint32_t pause_every;
	_Atomic uint64_t *posted_us; /* post time of each doorbell */
	atomic_int failed;
	atomic_int stop;
	uint32_t pauses;
	int64_t start_ms;
};

/* Random gaps of 0..500 us, bursts without gaps, and long pauses. */
static void *pacer_thread(void *arg)
{
	struct pacer *pc = arg;
	uint64_t rng = 99;
	uint32_t burst = 0;

	for (uint32_t i = 0; i < pc->total && !atomic_load(&pc->stop); i++) {
		int rc;

		atomic_store(&pc->posted_us[i], conf_now_us());
		while ((rc = wimm_write_imm(pc->c, NULL, 0, 0, 0, i, 0)) == WIMM_E_AGAIN) {
			if (atomic_load(&pc->stop))
				return NULL;
			wimm_progress(pc->ctx);
		}
		if (rc) {
			atomic_store(&pc->failed, rc);
			return NULL;
		}
		/* Drive our side, so manual-progress providers send now. */
		wimm_progress(pc->ctx);
		if (burst) {
			burst--;
			continue;
		}
		uint64_t r = conf_rand(&rng);

		if (r % pc->pause_every == 0) {
			/* Long enough that the receiver goes to sleep. */
			pc->pauses++;
			for (int k = 0; k < PAUSE_MS / 10 && !atomic_load(&pc->stop); k++) {
				conf_sleep_us(10000);
				wimm_progress(pc->ctx);
			}
		} else if (r % 10 == 1) {
			burst = 1 + (uint32_t)(r >> 32) % 20;
		} else {
			conf_sleep_us((unsigned)((r >> 16) % 500));
		}
	}
	/* Keep our side alive until the receiver has everything. */
	while (!atomic_load(&pc->stop)) {
		wimm_progress(pc->ctx);
		conf_sleep_us(1000);
	}
	return NULL;
}

struct rx_stats {
	uint32_t got;
	uint32_t zero_waits;
	uint64_t max_lat_us;
	uint32_t max_lat_seq;
};

/* Check one batch of events against the pacer's record. */
static int take_events(struct pacer *pc, struct rx_stats *st, const struct wimm_event *ev, int n)
{
	uint64_t now = conf_now_us();

	for (int i = 0; i < n; i++) {
		if (ev[i].type != WIMM_EV_WRITE_IMM) {
			conf_fail(__FILE__, __LINE__, "unexpected %s event",
				  conf_ev_name(ev[i].type));
			return -1;
		}
		if (ev[i].imm != st->got) {
			conf_fail(__FILE__, __LINE__, "doorbell %u arrived where %u was due",
				  ev[i].imm, st->got);
			return -1;
		}
		uint64_t lat = now - atomic_load(&pc->posted_us[st->got]);

		if (lat > st->max_lat_us) {
			st->max_lat_us = lat;
			st->max_lat_seq = st->got;
		}
		st->got++;
	}
	return 0;
}

static int start_pacer(struct pair *p, struct pacer *pc, pthread_t *th, uint32_t total)
{
	memset(pc, 0, sizeof(*pc));
	pc->c = p->c;
	pc->ctx = p->cctx;
	pc->total = total;
	pc->pause_every = 150;
	pc->start_ms = conf_now_ms();
	pc->posted_us = calloc(total, sizeof(*pc->posted_us));
	atomic_init(&pc->failed, 0);
	atomic_init(&pc->stop, 0);
	if (!pc->posted_us || pthread_create(th, NULL, pacer_thread, pc)) {
		conf_fail(__FILE__, __LINE__, "cannot start the sender thread");
		free(pc->posted_us);
		pc->posted_us = NULL;
		return -1;
	}
	return 0;
}

static int finish(struct pacer *pc, pthread_t th, struct rx_stats *st, const char *what)
{
	atomic_store(&pc->stop, 1);
	pthread_join(th, NULL);
	free(pc->posted_us);
	pc->posted_us = NULL;
	conf_diag("%s: %u events, %u sender pauses, %u empty waits, max latency %.1f ms (#%u)",
		  what, st->got, pc->pauses, st->zero_waits, (double)st->max_lat_us / 1000.0,
		  st->max_lat_seq);
	if (atomic_load(&pc->failed)) {
		conf_fail(__FILE__, __LINE__, "sender: %s",
			  wimm_err_name(atomic_load(&pc->failed)));
		return -1;
	}
	if (st->got != pc->total) {
		conf_fail(__FILE__, __LINE__, "%u of %u events arrived", st->got, pc->total);
		return -1;
	}
	/* A sleeper may wake for nothing now and then (a fabric without a wait
	 * fd wakes at a 1 ms tick), but never keep spinning on a fd that
	 * stays readable. */
	int64_t ms = conf_now_ms() - pc->start_ms;
	if (st->zero_waits > 4 * (uint64_t)ms + 200) {
		conf_fail(__FILE__, __LINE__, "%u empty waits in %lld ms: the fd stays readable",
			  st->zero_waits, (long long)ms);
		return -1;
	}
	if (st->max_lat_us > (uint64_t)LATENCY_LIMIT_MS * 1000u) {
		conf_fail(__FILE__, __LINE__,
			  "event #%u delivered %.1f ms after its post (limit %d ms): lost wake-up",
			  st->max_lat_seq, (double)st->max_lat_us / 1000.0, LATENCY_LIMIT_MS);
		return -1;
	}
	return 0;
}

/* wimm_wait, alternating BLOCK and ADAPTIVE, each with a timeout far
 * longer than the latency limit, so a wait that slept through an event
 * shows up as that event's latency. */
static void t_wait_modes(const char *uri)
{
	const uint32_t total = conf_quick() ? 500 : 2000;
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct rx_stats st = {0};
	struct wimm_event ev[16];
	struct pacer pc;
	int started = 0;
	pthread_t th;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	if (start_pacer(&p, &pc, &th, total))
		goto out;
	started = 1;
	int64_t deadline = conf_now_ms() + 60000;

	for (unsigned k = 0; st.got < total && conf_now_ms() < deadline; k++) {
		enum wimm_wait_mode mode = (k & 1) ? WIMM_WAIT_BLOCK : WIMM_WAIT_ADAPTIVE;
		int n = wimm_wait(p.sctx, ev, 16, mode, 1000);

		CHECKF(n >= 0, "wimm_wait: %s", wimm_err_name(n));
		if (n == 0)
			st.zero_waits++;
		if (take_events(&pc, &st, ev, n))
			goto out;
	}
	started = 0;
	if (finish(&pc, th, &st, "wait modes"))
		goto out;
	/* A short wait on an idle context times out and returns 0. */
	int64_t t0 = conf_now_ms();

	CHECK_EQ(wimm_wait(p.sctx, ev, 16, WIMM_WAIT_BLOCK, 50), 0);
	CHECK(conf_now_ms() - t0 >= 40);
	CHECK_EQ(wimm_wait(p.sctx, ev, 16, WIMM_WAIT_SPIN, 10), 0);
	CHECK_EQ(wimm_wait(p.sctx, ev, 16, WIMM_WAIT_ADAPTIVE, 0), 0);
out:
	if (started)
		finish(&pc, th, &st, "wait modes");
	pair_close(&p);
}

/* The application's own loop: arm, sleep in poll(2) or epoll on the fd,
 * then wimm_poll. */
static void t_wait_fd(const char *uri)
{
	const uint32_t total = conf_quick() ? 300 : 1000;
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct rx_stats st = {0};
	struct wimm_event ev[16];
	int fd = -1, epfd = -1, started = 0;
	struct pacer pc;
	pthread_t th;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_OK(wimm_ctx_fd(p.sctx, &fd));
	CHECK(fd >= 0);
	CHECK_RC(wimm_ctx_fd(NULL, &fd), WIMM_E_INVAL);
	epfd = epoll_create1(0);
	CHECK(epfd >= 0);
	struct epoll_event eev = {.events = EPOLLIN};

	CHECK(epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &eev) == 0);
	if (start_pacer(&p, &pc, &th, total))
		goto out;
	started = 1;
	int64_t deadline = conf_now_ms() + 60000;

	for (unsigned k = 0; st.got < total && conf_now_ms() < deadline; k++) {
		int rc = wimm_ctx_arm(p.sctx);

		CHECKF(rc == 0 || rc == WIMM_E_AGAIN, "wimm_ctx_arm: %s", wimm_err_name(rc));
		if (rc == 0) {
			if (k & 1) {
				struct pollfd pfd = {.fd = fd, .events = POLLIN};

				CHECK(poll(&pfd, 1, 1000) >= 0);
			} else {
				struct epoll_event out_ev;

				CHECK(epoll_wait(epfd, &out_ev, 1, 1000) >= 0);
			}
		}
		int n = wimm_poll(p.sctx, ev, 16);

		CHECKF(n >= 0, "wimm_poll: %s", wimm_err_name(n));
		if (n == 0)
			st.zero_waits++;
		if (take_events(&pc, &st, ev, n))
			goto out;
	}
	started = 0;
	if (finish(&pc, th, &st, "fd wait"))
		goto out;
out:
	if (started)
		finish(&pc, th, &st, "fd wait");
	if (epfd >= 0)
		close(epfd);
	pair_close(&p);
}

const struct conf_test conf_tests_wait[] = {
    {"wait_modes", t_wait_modes, 120},
    {"wait_fd", t_wait_fd, 120},
    {NULL, NULL, 0},
};
