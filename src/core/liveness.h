/* The context's liveness clock: the period of its tick (heartbeats,
 * silence, set-up timeouts) and the timerfd that wakes a sleeper for it.
 * The period is an eighth of the context's own bound, or the fastest
 * heartbeat period a peer asked of one of its connections, whichever is
 * shorter: a side with a far longer bound than its peer's must still
 * heartbeat as often as the peer needs. Private to the core. */
#ifndef WIMM_CORE_LIVENESS_H
#define WIMM_CORE_LIVENESS_H

#include <stdint.h>

struct wimm_liveness {
	int timerfd;
	int armed;
	int64_t base_ns;	   /* from the context's own bound */
	int64_t tick_ns;	   /* the period now (base_ns or faster) */
	int64_t next_tick_ns;	   /* when the next tick is due */
	int64_t next_keepalive_ns; /* the same for heartbeats alone (side channels) */
	/* After a connection comes up the ticks come early and then slower
	 * (10, 20, 40 ... ms up to the period): the first heartbeat goes out at
	 * once and the peer's request for a faster period is read soon, not a
	 * whole long period later. 0: not warming up. */
	int64_t warm_ns;
};

/* The clock for a context of liveness_ms (WIMM_LIVENESS_OFF: a slow tick
 * that still times out set-up). 0, or -errno when no timerfd. */
int wimm_liveness_init(struct wimm_liveness *lv, uint32_t liveness_ms);
void wimm_liveness_fini(struct wimm_liveness *lv);
/* Run the timer (the context has connections) or stop it. */
void wimm_liveness_run(struct wimm_liveness *lv, int on);
/* 1 when a tick is due at now; the next one is then scheduled. */
int wimm_liveness_due(struct wimm_liveness *lv, int64_t now);
/* The same for the heartbeat-only path. */
int wimm_liveness_keepalive_due(struct wimm_liveness *lv, int64_t now);
/* Tick at least every fastest_ns (0: no request): the shortest heartbeat
 * period any connection needs now. Re-arms a running timer on a change. */
void wimm_liveness_follow(struct wimm_liveness *lv, int64_t fastest_ns);
/* A connection came up: warm up (see warm_ns). */
void wimm_liveness_warm(struct wimm_liveness *lv);
/* Wake a sleeper in wake_ns, then at the tick's period again. */
void wimm_liveness_wake_in(struct wimm_liveness *lv, int64_t wake_ns);
/* Consume the timer's expirations (before a sleep). */
void wimm_liveness_drain(struct wimm_liveness *lv);

#endif
