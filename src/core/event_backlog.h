/* The context's event backlog: events taken from the backend but not yet
 * handed to the application, first in, first out. A poll looks at it
 * twice and nearly always finds it empty, so the empty checks and the
 * room check are inline here; growing, pushing and purging are in
 * event_backlog.c. */
#ifndef WIMM_CORE_EVENT_BACKLOG_H
#define WIMM_CORE_EVENT_BACKLOG_H

#include <stddef.h>

#include "wimm.h"

struct wimm_event_backlog {
	struct wimm_event *ev; /* a ring of cap events */
	size_t cap, head, count;
};

/* The slow half of wimm_event_backlog_reserve (below), which alone calls
 * it: grows the ring to room for `more` (unwrapped into the new array);
 * NOMEM, and then nothing changed. */
int wimm_event_backlog_grow(struct wimm_event_backlog *b, size_t more);
/* Appends ev: NOMEM when there is no room and none can be made. */
int wimm_event_backlog_push(struct wimm_event_backlog *b, const struct wimm_event *ev);
/* Drops the events of connection c, keeping the order of the others. */
void wimm_event_backlog_purge_conn(struct wimm_event_backlog *b, const struct wimm_conn *c);
/* Frees the ring; the backlog is empty after it. */
void wimm_event_backlog_fini(struct wimm_event_backlog *b);

/* Room for `more` events, made before the backend is polled: completions
 * taken from a CQ cannot be put back, so running out of memory must
 * happen before any is taken, never halfway through a batch. */
static inline int wimm_event_backlog_reserve(struct wimm_event_backlog *b, size_t more)
{
	return b->cap - b->count >= more ? 0 : wimm_event_backlog_grow(b, more);
}

static inline size_t wimm_event_backlog_count(const struct wimm_event_backlog *b)
{
	return b->count;
}

/* Moves queued events into out[got..n), oldest first; the new count. */
static inline int wimm_event_backlog_take(struct wimm_event_backlog *b, struct wimm_event *out,
					  int got, int n)
{
	while (got < n && b->count > 0) {
		out[got++] = b->ev[b->head];
		b->head = (b->head + 1) % b->cap;
		b->count--;
	}
	return got;
}

#endif
