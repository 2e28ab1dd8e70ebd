/* The receive-slot counters: a connection's `depth` receive slots, used as a
 * ring in order. Running totals, so each question is a subtraction:
 *
 *   posted     slots handed to the transport (verbs: receives posted)
 *   delivered  slots whose message went up to the core, oldest first
 *   released   slots the core handed back (the application saw them)
 *
 * delivered - released is what the application holds; a release of more
 * than that is the core's bug, refused. What a slot is depends on the
 * transport: on verbs every doorbell consumes a posted receive, on ofi only
 * a send-with-imm does (a write-with-imm needs none), on ipc the slots are
 * plain memory and every doorbell counts (the overdraft check). All inline:
 * the counters are touched once per message.
 */
#ifndef WIMM_RECV_SLOTS_H
#define WIMM_RECV_SLOTS_H

#include <stdint.h>

#include "wimm.h"

struct wimm_recv_slots {
	uint32_t depth;
	uint64_t posted, delivered, released;
};

static inline void wimm_recv_slots_init(struct wimm_recv_slots *r, uint32_t depth)
{
	*r = (struct wimm_recv_slots){.depth = depth ? depth : 1};
}

/* The slot of the i-th receive to post next. */
static inline uint32_t wimm_recv_slots_post_slot(const struct wimm_recv_slots *r, uint32_t i)
{
	return (uint32_t)((r->posted + i) % r->depth);
}

static inline void wimm_recv_slots_posted(struct wimm_recv_slots *r, uint32_t n)
{
	r->posted += n;
}

/* The slot the next delivered message is in (slots fill in order). */
static inline uint32_t wimm_recv_slots_next(const struct wimm_recv_slots *r)
{
	return (uint32_t)(r->delivered % r->depth);
}

static inline void wimm_recv_slots_deliver(struct wimm_recv_slots *r)
{
	r->delivered++;
}

/* Slots delivered and not handed back yet. */
static inline uint64_t wimm_recv_slots_held(const struct wimm_recv_slots *r)
{
	return r->delivered - r->released;
}

/* 1 when every slot is held: one more message would overwrite one. */
static inline int wimm_recv_slots_full(const struct wimm_recv_slots *r)
{
	return wimm_recv_slots_held(r) >= r->depth;
}

/* May n slots be handed back? 0, or INVAL for more than are held. */
static inline int wimm_recv_slots_check_release(const struct wimm_recv_slots *r, uint32_t n)
{
	return n > wimm_recv_slots_held(r) ? WIMM_E_INVAL : 0;
}

/* n slots (checked) are the transport's again. */
static inline void wimm_recv_slots_release(struct wimm_recv_slots *r, uint32_t n)
{
	r->released += n;
}

#endif /* WIMM_RECV_SLOTS_H */
