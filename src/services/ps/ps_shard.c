/* The server's work on shards: a push checked and summed, the update
 * applied, new parameters written to the workers, stalls reported. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_server.h"

static float *shard_of(float *base, const struct wimm_ps_server *s, uint32_t i)
{
	return base + (size_t)i * s->nfloats;
}

static void owe(struct wimm_ps_server *s, uint32_t rank, uint32_t i)
{
	uint8_t *o = &s->owed[(size_t)rank * s->a.shards + i];
	if (!*o) {
		*o = 1;
		s->shard[i].owed++;
	}
}

void ps_worker_joined(struct wimm_ps_server *s, struct ps_peer *p)
{
	for (uint32_t i = 0; i < s->a.shards; i++) {
		if (p->counter)
			wimm_counter_expect(p->counter, s->a.first_shard + i, s->shard[i].iter, 1);
		owe(s, p->rank, i);
	}
}

static void call_apply(struct wimm_ps_server *s, uint32_t i, uint32_t iter, const float *sum,
		       const uint64_t *got)
{
	if (s->a.on_apply)
		s->a.on_apply(s->a.apply_arg, s->a.first_shard + i, iter, sum, s->nfloats, got);
}

/* Sync: the iteration's sum becomes the update; the shard moves on. */
static void apply_sync(struct wimm_ps_server *s, uint32_t i)
{
	struct ps_shard *sh = &s->shard[i];
	float *m = shard_of(s->master, s, i), *sum = shard_of(s->sum, s, i);
	call_apply(s, i, sh->iter, sum, sh->got);
	float scale = 1.0f / (float)sh->count;
	if (s->a.update == WIMM_PS_SUM)
		memcpy(m, sum, s->nfloats * sizeof(float));
	else if (s->a.update == WIMM_PS_AVERAGE)
		for (size_t j = 0; j < s->nfloats; j++)
			m[j] = sum[j] * scale;
	else
		for (size_t j = 0; j < s->nfloats; j++)
			m[j] -= s->a.learning_rate * sum[j] * scale;
	sh->iter = (sh->iter + 1) & PS_ITER_MASK;
	sh->done++;
	sh->version++;
	sh->count = 0;
	sh->since_ms = 0;
	memset(sh->got, 0, sizeof(sh->got));
	s->st.applied++;
	s->applied_now++;
	/* Pushes for the iteration just closed are stale from now on: the
	 * library drops them before they are delivered. */
	for (uint32_t w = 0; w < s->a.workers; w++) {
		if (!s->worker[w])
			continue;
		if (s->worker[w]->counter)
			wimm_counter_expect(s->worker[w]->counter, s->a.first_shard + i, sh->iter,
					    1);
		owe(s, w, i);
	}
}

/* Async: the push is the update, answered to its worker alone. */
static void apply_async(struct wimm_ps_server *s, struct ps_peer *p, uint32_t i, uint32_t iter,
			const float *g)
{
	struct ps_shard *sh = &s->shard[i];
	float *m = shard_of(s->master, s, i);
	uint64_t got[PS_WORDS] = {0};
	got[p->rank / 64] = 1ull << (p->rank % 64);
	call_apply(s, i, iter, g, got);
	float k = s->a.update == WIMM_PS_SGD ? -s->a.learning_rate : 1.0f;
	for (size_t j = 0; j < s->nfloats; j++)
		m[j] += k * g[j];
	sh->iter = (sh->iter + 1) & PS_ITER_MASK;
	sh->done++;
	sh->version++;
	s->st.applied++;
	s->applied_now++;
	owe(s, p->rank, i);
}

void ps_push(struct wimm_ps_server *s, struct ps_peer *p, const struct wimm_event *ev)
{
	uint32_t v[3];
	wimm_imm_unpack(ps_layout_in(), ev->imm, v);
	uint32_t worker = v[PS_IN_WORKER], gshard = v[PS_IN_SHARD], iter = v[PS_IN_ITER];
	if (gshard < s->a.first_shard || gshard - s->a.first_shard >= s->a.shards) {
		s->st.bad_shard++;
		ps_say(s->a.log, s->a.log_arg, WIMM_LOG_WARN,
		       "ps: worker %u: a push for shard %u, not held here: refused", p->rank,
		       gshard);
		return;
	}
	uint32_t i = gshard - s->a.first_shard;
	struct ps_shard *sh = &s->shard[i];
	if (worker != p->rank) {
		s->st.bad_worker++;
		ps_say(s->a.log, s->a.log_arg, WIMM_LOG_WARN,
		       "ps: worker %u: a push naming worker %u: refused", p->rank, worker);
		return;
	}
	if (ev->len != s->a.shard_size) {
		s->st.bad_length++;
		ps_say(s->a.log, s->a.log_arg, WIMM_LOG_WARN,
		       "ps: worker %u: a push of %u bytes for shard %u of %u: refused", p->rank,
		       ev->len, gshard, s->a.shard_size);
		return;
	}
	const float *g = s->recv + (p->slot * s->region) / sizeof(float) + (size_t)i * s->nfloats;
	if (s->a.mode == WIMM_PS_ASYNC) {
		uint32_t age = (sh->iter - iter) & PS_ITER_MASK;
		if (ps_iter_newer(iter, sh->iter)) {
			s->st.future++;
			return;
		}
		if (s->a.staleness && age > s->a.staleness) {
			/* Dropped; its worker catches up with what is current. */
			s->st.stale++;
			owe(s, p->rank, i);
			return;
		}
		s->st.pushes++;
		apply_async(s, p, i, iter, g);
		return;
	}
	if (ps_iter_newer(iter, sh->iter)) {
		s->st.future++;
		ps_say(
		    s->a.log, s->a.log_arg, WIMM_LOG_WARN,
		    "ps: worker %u: a push for iteration %u of shard %u, which is at %u: refused",
		    p->rank, iter, gshard, sh->iter);
		return;
	}
	/* The counters drop these before delivery; this guards the rest. */
	if (iter != sh->iter) {
		s->st.stale++;
		return;
	}
	if (sh->got[p->rank / 64] & (1ull << (p->rank % 64))) {
		s->st.duplicates++;
		return;
	}
	float *sum = shard_of(s->sum, s, i);
	if (sh->count == 0)
		memcpy(sum, g, s->nfloats * sizeof(float));
	else
		for (size_t j = 0; j < s->nfloats; j++)
			sum[j] += g[j];
	sh->got[p->rank / 64] |= 1ull << (p->rank % 64);
	if (sh->count++ == 0)
		sh->since_ms = ps_now_ms();
	s->st.pushes++;
	if (sh->count >= s->required)
		apply_sync(s, i);
}

/* --------------------------------------------------------- sending */

static int fifo_add(struct ps_peer *p, uint32_t i, uint32_t copy)
{
	if (p->len == p->cap) {
		size_t ncap = p->cap ? 2 * p->cap : 16;
		struct ps_send *nf = malloc(ncap * sizeof(*nf));
		if (!nf)
			return WIMM_E_NOMEM;
		for (size_t k = 0; k < p->len; k++)
			nf[k] = p->fifo[(p->head + k) % p->cap];
		free(p->fifo);
		p->fifo = nf;
		p->head = 0;
		p->cap = ncap;
	}
	p->fifo[(p->head + p->len++) % p->cap] = (struct ps_send){p->ops, i, copy};
	return 0;
}

void ps_sends_done(struct wimm_ps_server *s, struct ps_peer *p, uint64_t op_seq, int all)
{
	while (p->len && (all || p->fifo[p->head].op_seq <= op_seq)) {
		struct ps_send *e = &p->fifo[p->head];
		s->shard[e->shard].pending[e->copy]--;
		p->head = (p->head + 1) % p->cap;
		p->len--;
	}
}

/* The shard's newest version in a send buffer no write is reading; 0, or
 * 1 when both are still being written from (try again later). */
static int snapshot(struct wimm_ps_server *s, uint32_t i)
{
	struct ps_shard *sh = &s->shard[i];
	if (sh->snap_valid && sh->snap_version == sh->version)
		return 0;
	uint32_t c = sh->snap_valid ? 1 - sh->snap_copy : 0;
	if (sh->pending[c])
		return 1;
	memcpy(s->copies + ((size_t)c * s->a.shards + i) * s->nfloats, shard_of(s->master, s, i),
	       s->nfloats * sizeof(float));
	sh->snap_copy = c;
	sh->snap_version = sh->version;
	sh->snap_valid = 1;
	return 0;
}

static void send_params(struct wimm_ps_server *s, struct ps_peer *p, uint32_t i)
{
	struct ps_shard *sh = &s->shard[i];
	size_t src = ((size_t)sh->snap_copy * s->a.shards + i) * s->a.shard_size;
	if (fifo_add(p, i, sh->snap_copy) < 0)
		return; /* still owed: the next turn tries again */
	int rc =
	    wimm_write_imm(p->conn, s->copies_mr, src, (size_t)i * s->a.shard_size, s->a.shard_size,
			   ps_imm_out(PS_K_PARAMS, s->a.first_shard + i, sh->iter), WIMM_F_SIGNAL);
	if (rc < 0) {
		p->len--; /* not posted: the entry just added goes */
		if (rc != WIMM_E_AGAIN)
			p->dead = 1;
		return;
	}
	p->ops++;
	sh->pending[sh->snap_copy]++;
	s->owed[(size_t)p->rank * s->a.shards + i] = 0;
	sh->owed--;
	s->st.params_sent++;
}

void ps_flush(struct wimm_ps_server *s)
{
	for (uint32_t i = 0; i < s->a.shards; i++) {
		if (!s->shard[i].owed || snapshot(s, i))
			continue;
		for (uint32_t w = 0; w < s->a.workers && s->shard[i].owed; w++) {
			struct ps_peer *p = s->worker[w];
			if (p && p->up && !p->dead && s->owed[(size_t)w * s->a.shards + i])
				send_params(s, p, i);
		}
	}
}

/* ---------------------------------------------------------- stalls */

void ps_stall_check(struct wimm_ps_server *s)
{
	int64_t now = ps_now_ms();
	if (s->a.mode != WIMM_PS_SYNC || now < s->next_stall_ms)
		return;
	s->next_stall_ms = now + s->a.stall_ms;
	int64_t oldest = 0;
	uint32_t which = 0;
	uint64_t missing[PS_WORDS] = {0};
	for (uint32_t i = 0; i < s->a.shards; i++) {
		const struct ps_shard *sh = &s->shard[i];
		if (!sh->since_ms || now - sh->since_ms < s->a.stall_ms)
			continue;
		if (!oldest || sh->since_ms < oldest) {
			oldest = sh->since_ms;
			which = i;
		}
		for (uint32_t w = 0; w < s->a.workers; w++)
			if (!(sh->got[w / 64] & (1ull << (w % 64))))
				missing[w / 64] |= 1ull << (w % 64);
	}
	if (!oldest)
		return;
	char list[1024];
	size_t at = 0;
	uint32_t first = UINT32_MAX;
	for (uint32_t w = 0; w < s->a.workers && at + 32 < sizeof(list); w++) {
		if (!(missing[w / 64] & (1ull << (w % 64))))
			continue;
		if (first == UINT32_MAX)
			first = w;
		at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%u%s", at ? ", " : "", w,
				       s->worker[w] ? "" : " (not connected)");
	}
	list[at] = '\0';
	s->st.stalls++;
	s->st.stalled_shard = s->a.first_shard + which;
	s->st.stalled_iteration = s->shard[which].iter;
	s->st.stalled_ms = (uint64_t)(now - oldest);
	memcpy(s->st.waiting, missing, sizeof(missing));
	ps_say(s->a.log, s->a.log_arg, WIMM_LOG_WARN,
	       "ps: stall: shard %u iteration %u has waited %lld ms for worker(s) %s",
	       s->a.first_shard + which, s->shard[which].iter, (long long)(now - oldest), list);
	/* The workers hear it too: whoever waits for a pull learns why. */
	for (uint32_t w = 0; w < s->a.workers; w++) {
		struct ps_peer *p = s->worker[w];
		if (!p || !p->up || p->dead)
			continue;
		if (wimm_write_imm(p->conn, NULL, 0, 0, 0, ps_imm_out(PS_K_STALL, first, 0), 0) ==
		    0)
			p->ops++;
	}
}
