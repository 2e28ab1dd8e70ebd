/* The event backlog's slow paths; the poll's checks are inline in
 * event_backlog.h. */
#include <stdlib.h>

#include "core/event_backlog.h"

int wimm_event_backlog_grow(struct wimm_event_backlog *b, size_t more)
{
	size_t cap = b->cap ? b->cap : 64;

	while (cap - b->count < more)
		cap *= 2;
	struct wimm_event *n = malloc(cap * sizeof(*n));
	if (!n)
		return WIMM_E_NOMEM;
	for (size_t i = 0; i < b->count; i++)
		n[i] = b->ev[(b->head + i) % b->cap];
	free(b->ev);
	b->ev = n;
	b->cap = cap;
	b->head = 0;
	return 0;
}

int wimm_event_backlog_push(struct wimm_event_backlog *b, const struct wimm_event *ev)
{
	int ret = wimm_event_backlog_reserve(b, 1);

	if (ret)
		return ret;
	b->ev[(b->head + b->count) % b->cap] = *ev;
	b->count++;
	return 0;
}

void wimm_event_backlog_purge_conn(struct wimm_event_backlog *b, const struct wimm_conn *c)
{
	size_t kept = 0;

	for (size_t i = 0; i < b->count; i++) {
		struct wimm_event ev = b->ev[(b->head + i) % b->cap];
		if (ev.conn == c)
			continue;
		b->ev[(b->head + kept) % b->cap] = ev;
		kept++;
	}
	b->count = kept;
}

void wimm_event_backlog_fini(struct wimm_event_backlog *b)
{
	free(b->ev);
	*b = (struct wimm_event_backlog){0};
}
