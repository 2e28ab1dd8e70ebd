/* The send-slot ring's set-up; the hot path is inline in send_ring.h. */
#include <stdlib.h>
#include <string.h>

#include "core/send_ring.h"

#define SEND_RING_MAX_SLOTS (1u << 24)

int wimm_send_ring_init(struct wimm_send_ring *r, uint32_t user_depth, uint32_t reserve,
			uint32_t min_slots)
{
	uint64_t capacity = (uint64_t)user_depth + reserve;
	uint64_t slots = 1;

	memset(r, 0, sizeof(*r));
	if (!user_depth || capacity > SEND_RING_MAX_SLOTS || min_slots > SEND_RING_MAX_SLOTS)
		return WIMM_E_INVAL;
	/* A power of two: the slot of a position is a mask, not a division. */
	while (slots < capacity || slots < min_slots)
		slots <<= 1;
	r->slot = calloc(slots, sizeof(*r->slot));
	if (!r->slot)
		return WIMM_E_NOMEM;
	r->mask = (uint32_t)(slots - 1);
	r->capacity = (uint32_t)capacity;
	r->user_depth = user_depth;
	/* Forced signals are counted against the user's share: the reserve's
	 * writes are signaled or few. */
	wimm_signal_init(&r->sig, user_depth);
	return 0;
}

void wimm_send_ring_fini(struct wimm_send_ring *r)
{
	free(r->slot);
	r->slot = NULL;
}
