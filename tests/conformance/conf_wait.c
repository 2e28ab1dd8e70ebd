/* Waiting loses no wake-up (contract item 5, docs/errata.md E6): a sender posts at
 * random moments with pauses; the receiver sleeps in WIMM_WAIT_BLOCK /
 * ADAPTIVE, or in poll(2)/epoll on wimm_ctx_fd. A lost wake-up shows as an
 * event that sat undelivered across a sender pause, i.e. a large latency. */
#include <errno.h>
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

/* One wait of the receiver's own kind (k counts them), its events into ev:
 * how many, or -1 with a failure recorded. */
typedef int (*wait_step)(struct pair *p, unsigned k, struct wimm_event *ev, void *arg);

/* The pacer's doorbells against the receiver's waits until all are in (60 s
 * at most), every batch checked: 0, or -1 with a failure recorded. */
static int receive_paced(struct pair *p, uint32_t total, wait_step step, void *arg,
			 const char *what)
{
	struct rx_stats st = {0};
	struct wimm_event ev[16];
	struct pacer pc;
	pthread_t th;
	int ret = 0;

	if (start_pacer(p, &pc, &th, total))
		return -1;
	int64_t deadline = conf_now_ms() + 60000;

	for (unsigned k = 0; st.got < total && conf_now_ms() < deadline; k++) {
		int n = step(p, k, ev, arg);

		if (n < 0 || take_events(&pc, &st, ev, n)) {
			ret = -1;
			break;
		}
		if (n == 0)
			st.zero_waits++;
	}
	return finish(&pc, th, &st, what) ? -1 : ret;
}

static int wait_alternating(struct pair *p, unsigned k, struct wimm_event *ev, void *arg)
{
	enum wimm_wait_mode mode = (k & 1) ? WIMM_WAIT_BLOCK : WIMM_WAIT_ADAPTIVE;
	int n = wimm_wait(p->sctx, ev, 16, mode, 1000);

	(void)arg;
	if (n < 0)
		conf_fail(__FILE__, __LINE__, "wimm_wait: %s", wimm_err_name(n));
	return n < 0 ? -1 : n;
}

/* wimm_wait, alternating BLOCK and ADAPTIVE, each with a timeout far
 * longer than the latency limit, so a wait that slept through an event
 * shows up as that event's latency. */
static void t_wait_modes(const char *uri)
{
	const uint32_t total = conf_quick() ? 500 : 2000;
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct wimm_event ev[16];
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	if (receive_paced(&p, total, wait_alternating, NULL, "wait modes"))
		goto out;
	/* A short wait on an idle context times out and returns 0. */
	int64_t t0 = conf_now_ms();

	CHECK_EQ(wimm_wait(p.sctx, ev, 16, WIMM_WAIT_BLOCK, 50), 0);
	CHECK(conf_now_ms() - t0 >= 40);
	CHECK_EQ(wimm_wait(p.sctx, ev, 16, WIMM_WAIT_SPIN, 10), 0);
	CHECK_EQ(wimm_wait(p.sctx, ev, 16, WIMM_WAIT_ADAPTIVE, 0), 0);
out:
	pair_close(&p);
}

/* The context's fd, and an epoll set holding it. */
struct fd_waiter {
	int fd, epfd;
};

/* Arm, sleep in poll(2) (odd k) or epoll (even k) on the fd, then poll. */
static int wait_on_fd(struct pair *p, unsigned k, struct wimm_event *ev, void *arg)
{
	const struct fd_waiter *w = arg;
	int rc = wimm_ctx_arm(p->sctx);

	if (rc != 0 && rc != WIMM_E_AGAIN) {
		conf_fail(__FILE__, __LINE__, "wimm_ctx_arm: %s", wimm_err_name(rc));
		return -1;
	}
	if (rc == 0) {
		struct pollfd pfd = {.fd = w->fd, .events = POLLIN};
		struct epoll_event out_ev;
		int slept = (k & 1) ? poll(&pfd, 1, 1000) : epoll_wait(w->epfd, &out_ev, 1, 1000);

		if (slept < 0) {
			conf_fail(__FILE__, __LINE__, "%s: %s", (k & 1) ? "poll" : "epoll_wait",
				  strerror(errno));
			return -1;
		}
	}
	int n = wimm_poll(p->sctx, ev, 16);

	if (n < 0)
		conf_fail(__FILE__, __LINE__, "wimm_poll: %s", wimm_err_name(n));
	return n < 0 ? -1 : n;
}

/* The application's own loop: arm, sleep in poll(2) or epoll on the fd,
 * then wimm_poll. */
static void t_wait_fd(const char *uri)
{
	const uint32_t total = conf_quick() ? 300 : 1000;
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	struct fd_waiter w = {-1, -1};
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	CHECK_OK(wimm_ctx_fd(p.sctx, &w.fd));
	CHECK(w.fd >= 0);
	int fd;
	CHECK_RC(wimm_ctx_fd(NULL, &fd), WIMM_E_INVAL);
	w.epfd = epoll_create1(0);
	CHECK(w.epfd >= 0);
	struct epoll_event eev = {.events = EPOLLIN};

	CHECK(epoll_ctl(w.epfd, EPOLL_CTL_ADD, w.fd, &eev) == 0);
	receive_paced(&p, total, wait_on_fd, &w, "fd wait");
out:
	if (w.epfd >= 0)
		close(w.epfd);
	pair_close(&p);
}

const struct conf_test conf_tests_wait[] = {
    {"wait_modes", t_wait_modes, 120},
    {"wait_fd", t_wait_fd, 120},
    {NULL, NULL, 0},
};
