/* The send-slot ring: what a backend keeps of the operations it posted on
 * one connection, in post order, from the post until a completion retires
 * them. Every backend embeds one per connection (verbs: the QP's send queue,
 * ofi: the endpoint's transmit context, ipc: its shared-memory tx ring).
 *
 * - A slot holds what the completion must report: op, op_seq, length, the
 *   caller's wish for a SEND_DONE, and whether it is the core's own write
 *   (credit return, heartbeat, close fence), which has the reserve's slots
 *   and never counts against the user's sq_depth.
 * - An unsignaled send has no completion of its own. Two ways to retire:
 *   - in order (verbs, ipc): completions come in post order, so the
 *     completion of pos retires every operation up to it
 *     (wimm_send_ring_complete); forced signals keep runs of unsignaled
 *     sends shorter than half the ring, so a full ring always holds a
 *     signaled operation whose completion frees it;
 *   - out of order (libfabric: shm completes a write it injects as it is
 *     posted, but a read or an atomic posted before it when the peer's
 *     answer comes): each completion marks its own operation
 *     (wimm_send_ring_mark), unsignaled ones are complete when posted (the
 *     backend injects them, and retires them there and then when nothing
 *     before them still waits: wimm_send_ring_retire_quiet), and events
 *     are taken in post order (wimm_send_ring_take), as wimm_poll(3)
 *     promises. A full ring then holds at its tail an operation with a
 *     completion still to come, or one whose event a poll takes.
 * - When the connection goes down, what is outstanding needs no flush here:
 *   verbs flushes its QP (each WR completes with an error, through
 *   wimm_send_ring_complete), and for every backend the core fails the
 *   operations the application still waits for (conn_rx.c, fail_pending),
 *   after the backend's CONN_DOWN and with its reason kept.
 *
 * The struct is in the header so that a backend embeds it (no allocation per
 * operation, no call on the hot path: push and retire are inline); only these
 * functions touch its fields.
 */
#ifndef WIMM_SEND_RING_H
#define WIMM_SEND_RING_H

#include <stdint.h>

#include "backend.h"

struct wimm_send_slot {
	uint64_t op_seq;
	uint32_t len;	  /* reported in SEND_DONE (an atomic's: 8) */
	uint8_t op;	  /* enum wimm_op */
	uint8_t internal; /* the core's own write */
	uint8_t report;	  /* the caller asked for SEND_DONE */
	uint8_t done;	  /* out of order: complete, waiting for its turn */
	int32_t status;	  /* out of order: its completion's status ... */
	int32_t prov_err; /* ... and the provider's error */
};

struct wimm_send_ring {
	struct wimm_send_slot *slot;
	uint32_t mask;	     /* slots - 1: a power of two */
	uint32_t capacity;   /* outstanding at most: user_depth + reserve */
	uint32_t user_depth; /* of which the user's operations */
	uint32_t user_out;   /* the user's operations outstanding */
	uint64_t head, tail; /* positions posted / retired */
	struct wimm_signal_policy sig;
};

/* A ring for user_depth operations of the user and `reserve` more of the
 * core's, with at least min_slots slots (ipc: its shared ring's size).
 * INVAL for user_depth 0 or more than 2^24 slots, NOMEM. */
int wimm_send_ring_init(struct wimm_send_ring *r, uint32_t user_depth, uint32_t reserve,
			uint32_t min_slots);
/* Frees the slots; accepts a ring never initialised (zeroed) and twice. */
void wimm_send_ring_fini(struct wimm_send_ring *r);

/* Operations outstanding (posted, not retired). */
static inline uint32_t wimm_send_ring_outstanding(const struct wimm_send_ring *r)
{
	return (uint32_t)(r->head - r->tail);
}

/* 1 if an operation (the core's own: internal) may be posted now. */
static inline int wimm_send_ring_has_room(const struct wimm_send_ring *r, int internal)
{
	return r->head - r->tail < r->capacity && (internal || r->user_out < r->user_depth);
}

/* 1 when half the ring, or half the user's share of it, is outstanding:
 * time to want some back (ipc asks its consumer for its index then). */
static inline int wimm_send_ring_half_full(const struct wimm_send_ring *r)
{
	return r->head - r->tail >= r->capacity / 2 || r->user_out >= r->user_depth / 2;
}

/* Where the next push goes: its absolute position and its slot index. */
static inline uint64_t wimm_send_ring_head(const struct wimm_send_ring *r)
{
	return r->head;
}

/* The oldest outstanding position (== head when none is). */
static inline uint64_t wimm_send_ring_tail(const struct wimm_send_ring *r)
{
	return r->tail;
}

/* Slots (indexes 0 .. slots - 1), for what a backend keeps beside them. */
static inline uint32_t wimm_send_ring_slots(const struct wimm_send_ring *r)
{
	return r->mask + 1;
}

static inline uint32_t wimm_send_ring_index(const struct wimm_send_ring *r, uint64_t pos)
{
	return (uint32_t)pos & r->mask;
}

/* Must the next operation ask the transport for a completion (the caller
 * wants one, or the forced-signal policy does)? In order only: out of
 * order, an unsignaled operation is retired as it is posted
 * (wimm_send_ring_retire_quiet). */
static inline int wimm_send_ring_must_signal(const struct wimm_send_ring *r, int asked)
{
	return wimm_signal_needed(&r->sig, asked);
}

/* The slot of an outstanding position (tail <= pos < head). */
static inline const struct wimm_send_slot *wimm_send_ring_slot(const struct wimm_send_ring *r,
							       uint64_t pos)
{
	return &r->slot[(uint32_t)pos & r->mask];
}

/* Record an operation the transport accepted, at the head. `signaled`: it
 * will have a completion of its own. Call only after has_room(). */
static inline void wimm_send_ring_push(struct wimm_send_ring *r, const struct wimm_wr *wr,
				       uint32_t len, int signaled)
{
	struct wimm_send_slot *s = &r->slot[(uint32_t)r->head & r->mask];

	s->op_seq = wr->op_seq;
	s->len = len;
	s->op = (uint8_t)wr->op;
	s->internal = wr->internal ? 1 : 0;
	s->report = wr->signal ? 1 : 0;
	s->done = !signaled; /* out of order: an unsignaled one is injected */
	s->status = 0;
	s->prov_err = 0;
	r->head++;
	if (!wr->internal)
		r->user_out++;
	wimm_signal_posted(&r->sig, signaled);
}

/* The absolute position whose low 32 bits are `low` (verbs carries them in
 * the wr_id), or UINT64_MAX when no outstanding operation has them. */
static inline uint64_t wimm_send_ring_pos32(const struct wimm_send_ring *r, uint32_t low)
{
	uint64_t pos = r->tail + (uint32_t)(low - (uint32_t)r->tail);

	return pos < r->head ? pos : UINT64_MAX;
}

/* The same for a slot index (ofi carries it in the op_context): the
 * outstanding position with that index, UINT64_MAX when none. */
static inline uint64_t wimm_send_ring_pos_of_index(const struct wimm_send_ring *r, uint32_t idx)
{
	uint64_t pos = r->tail + ((idx - (uint32_t)r->tail) & r->mask);

	return idx <= r->mask && pos < r->head ? pos : UINT64_MAX;
}

/* Retire every operation up to and including `pos` (outstanding: tail <= pos
 * < head) and return the slot at pos, valid until the next push. */
static inline const struct wimm_send_slot *wimm_send_ring_retire(struct wimm_send_ring *r,
								 uint64_t pos)
{
	const struct wimm_send_slot *s;

	do {
		s = &r->slot[(uint32_t)r->tail & r->mask];
		if (!s->internal)
			r->user_out--;
	} while (r->tail++ != pos);
	return s;
}

/* The completion of the operation at `pos` (every earlier one retires with
 * it): fill *e, 1 when there is something to report. status 0: a SEND_DONE
 * if the caller asked for one; else a SEND_ERROR with that status (and
 * prov_err) whoever asked, the core's own writes included. A position not
 * outstanding (a stale completion): nothing, 0. */
static inline int wimm_send_ring_complete(struct wimm_send_ring *r, uint64_t pos, int status,
					  int prov_err, struct wimm_conn *conn, struct wimm_cqe *e)
{
	const struct wimm_send_slot *s;

	if (pos < r->tail || pos >= r->head)
		return 0;
	s = wimm_send_ring_retire(r, pos);
	if (!status && !s->report)
		return 0; /* a forced signal or an unsignaled run: bookkeeping only */
	*e = (struct wimm_cqe){
	    .kind = status ? WIMM_CQE_SEND_ERROR : WIMM_CQE_SEND_DONE,
	    .conn = conn,
	    .len = s->len,
	    .op = (enum wimm_op)s->op,
	    .op_seq = s->op_seq,
	    .internal = s->internal,
	    .status = status,
	    .prov_err = prov_err,
	};
	return 1;
}

/* Out of order: the completion of the operation at `pos` (status 0, or its
 * error), to be taken in its turn. A position not outstanding: nothing. */
static inline void wimm_send_ring_mark(struct wimm_send_ring *r, uint64_t pos, int status,
				       int prov_err)
{
	struct wimm_send_slot *s;

	if (pos < r->tail || pos >= r->head)
		return;
	s = &r->slot[(uint32_t)pos & r->mask];
	s->done = 1;
	s->status = status;
	s->prov_err = prov_err;
}

/* Out of order: is the oldest outstanding operation complete? */
static inline int wimm_send_ring_ready(const struct wimm_send_ring *r)
{
	return r->tail < r->head && r->slot[(uint32_t)r->tail & r->mask].done;
}

/* Out of order: retire the complete operations at the tail, in post order,
 * up to the first one to report: 1 with *e filled (as
 * wimm_send_ring_complete fills it), 0 when none is to be reported yet. */
static inline int wimm_send_ring_take(struct wimm_send_ring *r, struct wimm_conn *conn,
				      struct wimm_cqe *e)
{
	while (wimm_send_ring_ready(r)) {
		const struct wimm_send_slot *s = wimm_send_ring_retire(r, r->tail);

		if (!s->status && !s->report)
			continue;
		*e = (struct wimm_cqe){
		    .kind = s->status ? WIMM_CQE_SEND_ERROR : WIMM_CQE_SEND_DONE,
		    .conn = conn,
		    .len = s->len,
		    .op = (enum wimm_op)s->op,
		    .op_seq = s->op_seq,
		    .internal = s->internal,
		    .status = s->status,
		    .prov_err = s->prov_err,
		};
		return 1;
	}
	return 0;
}

/* Out of order: retire the complete operations at the tail that have
 * nothing to report (injected, unsignaled ones), up to the first that has
 * (its event is taken by a poll). What a backend does after posting an
 * injected operation: a run of them then never waits for a completion to
 * free their slots, and needs no forced signal. */
static inline void wimm_send_ring_retire_quiet(struct wimm_send_ring *r)
{
	while (wimm_send_ring_ready(r)) {
		const struct wimm_send_slot *s = &r->slot[(uint32_t)r->tail & r->mask];

		if (s->status || s->report)
			return;
		wimm_send_ring_retire(r, r->tail);
	}
}

#endif /* WIMM_SEND_RING_H */
