/* The context's liveness clock (liveness.h). */
#include <errno.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "core/core.h"
#include "core/liveness.h"

/* With liveness off, ticks still time out connections stuck in set-up. */
#define TICK_OFF_NS 1000000000LL
#define TICK_MIN_NS 10000000LL

static void period_spec(struct itimerspec *its, int64_t first_ns, int64_t period_ns)
{
	its->it_interval.tv_sec = period_ns / 1000000000;
	its->it_interval.tv_nsec = period_ns % 1000000000;
	its->it_value.tv_sec = first_ns / 1000000000;
	its->it_value.tv_nsec = first_ns % 1000000000;
}

int wimm_liveness_init(struct wimm_liveness *lv, uint32_t liveness_ms)
{
	*lv = (struct wimm_liveness){.timerfd = -1};
	lv->base_ns =
	    liveness_ms == WIMM_LIVENESS_OFF ? TICK_OFF_NS : (int64_t)liveness_ms * 1000000 / 8;
	if (lv->base_ns < TICK_MIN_NS)
		lv->base_ns = TICK_MIN_NS;
	lv->tick_ns = lv->base_ns;
	lv->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	return lv->timerfd < 0 ? -errno : 0;
}

void wimm_liveness_fini(struct wimm_liveness *lv)
{
	if (lv->timerfd >= 0)
		close(lv->timerfd);
	lv->timerfd = -1;
}

static void arm(struct wimm_liveness *lv, int64_t first_ns)
{
	struct itimerspec its;
	period_spec(&its, first_ns, lv->tick_ns);
	if (timerfd_settime(lv->timerfd, 0, &its, NULL) == 0)
		lv->armed = 1;
}

void wimm_liveness_run(struct wimm_liveness *lv, int on)
{
	if (on == lv->armed)
		return;
	if (on) {
		lv->next_tick_ns = wimm_coarse_ns() + lv->tick_ns;
		arm(lv, lv->tick_ns);
		return;
	}
	struct itimerspec off = {{0, 0}, {0, 0}};
	if (timerfd_settime(lv->timerfd, 0, &off, NULL) == 0)
		lv->armed = 0;
}

int wimm_liveness_due(struct wimm_liveness *lv, int64_t now)
{
	if (now < lv->next_tick_ns)
		return 0;
	if (!lv->warm_ns) {
		lv->next_tick_ns = now + lv->tick_ns;
		return 1;
	}
	int64_t step = lv->warm_ns < lv->tick_ns ? lv->warm_ns : lv->tick_ns;
	lv->warm_ns = step < lv->tick_ns ? 2 * step : 0;
	lv->next_tick_ns = now + step;
	if (lv->armed)
		arm(lv, step);
	return 1;
}

void wimm_liveness_warm(struct wimm_liveness *lv)
{
	lv->warm_ns = TICK_MIN_NS;
	int64_t now = wimm_coarse_ns();
	if (lv->next_tick_ns > now + TICK_MIN_NS) {
		lv->next_tick_ns = now + TICK_MIN_NS;
		if (lv->armed)
			arm(lv, TICK_MIN_NS);
	}
}

int wimm_liveness_keepalive_due(struct wimm_liveness *lv, int64_t now)
{
	if (now < lv->next_keepalive_ns)
		return 0;
	lv->next_keepalive_ns = now + lv->tick_ns;
	return 1;
}

void wimm_liveness_follow(struct wimm_liveness *lv, int64_t fastest_ns)
{
	int64_t want = fastest_ns > 0 && fastest_ns < lv->base_ns ? fastest_ns : lv->base_ns;
	if (want < TICK_MIN_NS)
		want = TICK_MIN_NS;
	if (want == lv->tick_ns)
		return;
	lv->tick_ns = want;
	int64_t now = wimm_coarse_ns();
	if (lv->next_tick_ns > now + want)
		lv->next_tick_ns = now + want;
	if (lv->armed)
		arm(lv, want);
}

void wimm_liveness_wake_in(struct wimm_liveness *lv, int64_t wake_ns)
{
	arm(lv, wake_ns);
}

void wimm_liveness_drain(struct wimm_liveness *lv)
{
	uint64_t ticks;
	while (read(lv->timerfd, &ticks, sizeof(ticks)) > 0)
		;
}
