/* A parameter server's worker: connected to every server of the model,
 * it pushes gradient shards (one write-with-imm each) and takes the new
 * parameters the servers write into its window. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ps_internal.h"

struct ps_link {
	uint32_t index; /* in attr.servers */
	uint32_t first, shards;
	uint64_t iteration_min; /* the server's, when asked: places iterations */
	struct wimm_conn *conn;
	int dead;
	int refused; /* the server's reason for refusing our in-band hello */
};

struct wimm_ps_worker {
	uint32_t rank;
	int inband; /* hellos in-band (WIMM_PS_WORKER_INBAND_HELLO, or the fabric) */
	struct wimm_ctx *ctx;
	uint32_t nlinks;
	struct ps_link *link;	       /* sorted by first shard */
	struct wimm_ps_stats geometry; /* of the first server */
	uint32_t shards, shard_size;
	size_t bytes;
	float *params, *grads;
	struct wimm_mr *params_mr, *grads_mr;
	unsigned char hello[PS_HELLO_LEN]; /* sent in-band: kept till answered */
	struct wimm_mr *hello_mr;
	uint32_t *owner;		 /* shard -> link */
	uint32_t *base;			 /* the iteration the caller computes on (modulo 2^14) */
	uint32_t *latest;		 /* the newest iteration received (modulo 2^14) */
	uint64_t *abs_base, *abs_latest; /* the same counted from the server's start */
	uint8_t *have, *pushed;
	struct wimm_ps_worker_stats st;
};

static int by_first(const void *a, const void *b)
{
	const struct ps_link *x = a, *y = b;
	return x->first < y->first ? -1 : x->first > y->first;
}

/* Ask every server for its shards; they must tile 0..total in one size. */
static int learn_servers(struct wimm_ps_worker *w, const struct wimm_ps_worker_attr *a,
			 int timeout_ms)
{
	for (uint32_t k = 0; k < a->nservers; k++) {
		struct wimm_ps_stats st;
		if (!a->servers[k])
			return WIMM_E_INVAL;
		int rc = ps_query(w->ctx, a->servers[k], w->inband, timeout_ms, &st);
		if (rc < 0)
			return rc;
		if (k == 0)
			w->geometry = st;
		else if (st.shard_size != w->geometry.shard_size ||
			 st.workers != w->geometry.workers || st.mode != w->geometry.mode)
			return WIMM_E_INVAL;
		w->link[k] = (struct ps_link){.index = k,
					      .first = (uint32_t)st.first_shard,
					      .shards = (uint32_t)st.shards,
					      .iteration_min = st.iteration_min};
	}
	qsort(w->link, a->nservers, sizeof(*w->link), by_first);
	uint32_t next = 0;
	for (uint32_t k = 0; k < a->nservers; k++) {
		if (w->link[k].first != next)
			return WIMM_E_INVAL; /* a gap or an overlap */
		next += w->link[k].shards;
	}
	if (w->rank >= w->geometry.workers)
		return WIMM_E_RANGE;
	w->shards = next;
	w->shard_size = (uint32_t)w->geometry.shard_size;
	w->bytes = (size_t)w->shards * w->shard_size;
	return 0;
}

static int alloc_state(struct wimm_ps_worker *w)
{
	void *p =
	    mmap(NULL, 2 * w->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return WIMM_E_NOMEM;
	w->params = p;
	w->grads = w->params + w->bytes / sizeof(float);
	w->owner = calloc(w->shards, sizeof(*w->owner));
	w->base = calloc(w->shards, sizeof(*w->base));
	w->latest = calloc(w->shards, sizeof(*w->latest));
	w->abs_base = calloc(w->shards, sizeof(*w->abs_base));
	w->abs_latest = calloc(w->shards, sizeof(*w->abs_latest));
	w->have = calloc(w->shards, 1);
	w->pushed = calloc(w->shards, 1);
	if (!w->owner || !w->base || !w->latest || !w->abs_base || !w->abs_latest || !w->have ||
	    !w->pushed)
		return WIMM_E_NOMEM;
	for (uint32_t k = 0; k < w->nlinks; k++)
		for (uint32_t i = 0; i < w->link[k].shards; i++)
			w->owner[w->link[k].first + i] = k;
	int rc = wimm_mr_reg(w->ctx, w->params, w->bytes, WIMM_REMOTE_WRITE, &w->params_mr);
	if (rc == 0)
		rc = wimm_mr_reg(w->ctx, w->grads, w->bytes, WIMM_LOCAL, &w->grads_mr);
	return rc;
}

static int connect_links(struct wimm_ps_worker *w, const struct wimm_ps_worker_attr *a,
			 int timeout_ms)
{
	struct ps_hello h = {
	    .role = PS_ROLE_WORKER, .rank = w->rank, .world = (uint32_t)w->geometry.workers};
	if (w->inband) {
		int rc = wimm_mr_reg(w->ctx, w->hello, sizeof(w->hello), WIMM_LOCAL, &w->hello_mr);
		if (rc < 0)
			return rc;
	}
	for (uint32_t k = 0; k < w->nlinks; k++) {
		struct ps_link *l = &w->link[k];
		struct wimm_conn_attr ca = {.window = w->params_mr,
					    .window_off = (size_t)l->first * w->shard_size,
					    .window_len = (size_t)l->shards * w->shard_size,
					    .rx_depth = 2 * l->shards + 8,
					    .sq_depth = 2 * l->shards + 8,
					    .user = l};
		int rc = ps_connect(w->ctx, a->servers[l->index], &ca, &h, w->hello_mr, timeout_ms,
				    &l->conn);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void on_event(struct wimm_ps_worker *w, const struct wimm_event *ev)
{
	struct ps_link *l = ev->user;
	uint32_t v[3];
	if (!l)
		return;
	if (ev->type == WIMM_EV_DISCONNECT) {
		l->dead = 1;
		w->st.server_lost = l->index;
		return;
	}
	if (ev->type != WIMM_EV_WRITE_IMM)
		return;
	if (ps_refusal(ev)) {
		l->refused = ps_refusal(ev);
		return;
	}
	wimm_imm_unpack(ps_layout_out(), ev->imm, v);
	uint32_t s = v[PS_OUT_SHARD];
	if (v[PS_OUT_KIND] == PS_K_STALL) {
		w->st.stall_reports++;
		w->st.waiting_for = s;
		return;
	}
	if (v[PS_OUT_KIND] != PS_K_PARAMS || s >= w->shards || &w->link[w->owner[s]] != l)
		return;
	w->st.params_in++;
	uint32_t it = v[PS_OUT_ITER];
	if (!w->have[s]) {
		/* Placed after the server's least advanced shard when it was
		 * asked (shards are never 2^13 iterations apart). */
		uint64_t at = l->iteration_min;
		w->abs_latest[s] = at + ((it - (uint32_t)at) & PS_ITER_MASK);
		w->latest[s] = it;
	} else if (ps_iter_newer(it, w->latest[s])) {
		w->abs_latest[s] += (it - w->latest[s]) & PS_ITER_MASK;
		w->latest[s] = it;
	}
	w->have[s] = 1;
}

/* Take events until done(w) or the deadline; DISCONNECTED when a server
 * is gone. */
static int wait_until(struct wimm_ps_worker *w, int (*done)(const struct wimm_ps_worker *),
		      int timeout_ms)
{
	struct wimm_event ev[32];
	int64_t until = timeout_ms < 0 ? INT64_MAX : ps_now_ms() + timeout_ms;
	for (;;) {
		for (uint32_t k = 0; k < w->nlinks; k++)
			if (w->link[k].refused)
				return w->link[k].refused;
		for (uint32_t k = 0; k < w->nlinks; k++)
			if (w->link[k].dead)
				return WIMM_E_DISCONNECTED;
		if (done(w))
			return 0;
		int64_t left = until - ps_now_ms();
		if (left <= 0)
			return WIMM_E_TIMEDOUT;
		int n = wimm_wait(w->ctx, ev, 32, WIMM_WAIT_ADAPTIVE, left > 100 ? 100 : (int)left);
		if (n < 0)
			return n;
		for (int i = 0; i < n; i++)
			on_event(w, &ev[i]);
	}
}

static int have_all(const struct wimm_ps_worker *w)
{
	for (uint32_t s = 0; s < w->shards; s++)
		if (!w->have[s])
			return 0;
	return 1;
}

static int pushed_answered(const struct wimm_ps_worker *w)
{
	for (uint32_t s = 0; s < w->shards; s++)
		if (w->pushed[s] && !ps_iter_newer(w->latest[s], w->base[s]))
			return 0;
	return 1;
}

/* The caller computes on what arrived last. */
static void take_latest(struct wimm_ps_worker *w)
{
	memcpy(w->base, w->latest, w->shards * sizeof(*w->base));
	memcpy(w->abs_base, w->abs_latest, w->shards * sizeof(*w->abs_base));
	memset(w->pushed, 0, w->shards);
}

int wimm_ps_worker_new(const struct wimm_ps_worker_attr *attr, struct wimm_ps_worker **out)
{
	struct wimm_ps_worker *w;
	int rc;

	if (!out)
		return WIMM_E_INVAL;
	*out = NULL;
	if (!attr || !attr->servers || !attr->nservers || attr->nservers > WIMM_PS_MAX_SHARDS ||
	    attr->rank >= WIMM_PS_MAX_WORKERS || (attr->flags & ~WIMM_PS_WORKER_INBAND_HELLO))
		return WIMM_E_INVAL;
	int timeout_ms = attr->timeout_ms > 0 ? attr->timeout_ms : 10000;
	w = calloc(1, sizeof(*w));
	if (!w)
		return WIMM_E_NOMEM;
	w->rank = attr->rank;
	w->st.waiting_for = w->st.server_lost = -1;
	w->nlinks = attr->nservers;
	w->link = calloc(attr->nservers, sizeof(*w->link));
	struct wimm_ctx_attr cattr = {.post_wait_ms = (uint32_t)timeout_ms,
				      .liveness_ms = attr->liveness_ms,
				      .log = attr->log,
				      .log_arg = attr->log_arg};
	rc = w->link ? wimm_ctx_open(attr->fabric ? attr->fabric : "auto", &cattr, &w->ctx)
		     : WIMM_E_NOMEM;
	if (rc == 0)
		w->inband = ps_hello_inband(w->ctx, attr->flags & WIMM_PS_WORKER_INBAND_HELLO);
	if (rc == 0)
		rc = learn_servers(w, attr, timeout_ms);
	if (rc == 0)
		rc = alloc_state(w);
	if (rc == 0)
		rc = connect_links(w, attr, timeout_ms);
	if (rc == 0)
		rc = wait_until(w, have_all, timeout_ms);
	/* Every server has read our hello: it answered. */
	if (rc == 0)
		wimm_mr_dereg(&w->hello_mr);
	if (rc < 0) {
		ps_say(attr->log, attr->log_arg, WIMM_LOG_ERROR, "ps worker %u: %s", attr->rank,
		       wimm_strerror(rc));
		wimm_ps_worker_delete(&w);
		return rc;
	}
	take_latest(w);
	*out = w;
	return 0;
}

int wimm_ps_worker_delete(struct wimm_ps_worker **wp)
{
	struct wimm_ps_worker *w = wp ? *wp : NULL;
	if (!w)
		return 0;
	for (uint32_t k = 0; w->link && k < w->nlinks; k++)
		if (w->link[k].conn)
			wimm_conn_close(&w->link[k].conn, w->link[k].dead ? 0 : 1000);
	wimm_mr_dereg(&w->hello_mr);
	wimm_mr_dereg(&w->grads_mr);
	wimm_mr_dereg(&w->params_mr);
	wimm_ctx_close(&w->ctx);
	if (w->params)
		munmap(w->params, 2 * w->bytes);
	free(w->owner);
	free(w->base);
	free(w->latest);
	free(w->abs_base);
	free(w->abs_latest);
	free(w->have);
	free(w->pushed);
	free(w->link);
	free(w);
	*wp = NULL;
	return 0;
}

int wimm_ps_worker_info(const struct wimm_ps_worker *w, struct wimm_ps_worker_info *out)
{
	if (!w || !out)
		return WIMM_E_INVAL;
	*out = (struct wimm_ps_worker_info){.shards = w->shards,
					    .shard_size = w->shard_size,
					    .nfloats = w->bytes / sizeof(float),
					    .workers = (uint32_t)w->geometry.workers,
					    .backups = (uint32_t)w->geometry.backups,
					    .mode = (enum wimm_ps_mode)w->geometry.mode,
					    .params = w->params,
					    .grads = w->grads};
	return 0;
}

int wimm_ps_worker_push(struct wimm_ps_worker *w, uint32_t shard)
{
	if (!w || shard >= w->shards)
		return WIMM_E_INVAL;
	struct ps_link *l = &w->link[w->owner[shard]];
	if (l->dead)
		return WIMM_E_DISCONNECTED;
	size_t off = (size_t)shard * w->shard_size;
	int rc =
	    wimm_write_imm(l->conn, w->grads_mr, off, off - (size_t)l->first * w->shard_size,
			   w->shard_size, ps_imm_in(w->rank, shard, w->base[shard]), WIMM_F_WAIT);
	if (rc < 0)
		return rc;
	w->pushed[shard] = 1;
	w->st.pushes++;
	return 0;
}

int wimm_ps_worker_iteration(const struct wimm_ps_worker *w, uint32_t shard, uint64_t *out)
{
	if (!w || !out || shard >= w->shards)
		return WIMM_E_INVAL;
	*out = w->abs_base[shard];
	return 0;
}

int wimm_ps_worker_pull(struct wimm_ps_worker *w, int timeout_ms)
{
	if (!w)
		return WIMM_E_INVAL;
	int rc = wait_until(w, pushed_answered, timeout_ms);
	if (rc < 0)
		return rc;
	take_latest(w);
	w->st.pulls++;
	return 0;
}

int wimm_ps_worker_step(struct wimm_ps_worker *w, int timeout_ms)
{
	if (!w)
		return WIMM_E_INVAL;
	for (uint32_t s = 0; s < w->shards; s++) {
		int rc = wimm_ps_worker_push(w, s);
		if (rc < 0)
			return rc;
	}
	return wimm_ps_worker_pull(w, timeout_ms);
}

int wimm_ps_worker_stats(const struct wimm_ps_worker *w, struct wimm_ps_worker_stats *out)
{
	if (!w || !out)
		return WIMM_E_INVAL;
	*out = w->st;
	return 0;
}
