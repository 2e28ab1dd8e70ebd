/* wimm_kv server: arenas, grants, the index, leases, eviction, the loop.
 * The request handlers (put, get, delete, stat, commit) are in
 * kv_server_ops.c; this file owns the objects and the event loop. */
#include <stdarg.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>

#include "kv_server.h"
#include "svc_loop.h"

void kv_log(struct wimm_kv_server *s, enum wimm_log_level lvl, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	if (!s->log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	s->log(s->log_arg, lvl, msg);
}

/* ----------------------------------------------------------- the index */

struct kv_entry *kv_find(struct wimm_kv_server *s, const void *key, size_t klen, uint32_t hash)
{
	for (struct kv_entry *e = s->bucket[hash & (s->nbuckets - 1)]; e; e = e->hnext)
		if (e->hash == hash && e->klen == klen && memcmp(e->key, key, klen) == 0)
			return e;
	return NULL;
}

void kv_lru_unlink(struct wimm_kv_server *s, struct kv_entry *e)
{
	if (e->lprev)
		e->lprev->lnext = e->lnext;
	else
		s->lru_head = e->lnext;
	if (e->lnext)
		e->lnext->lprev = e->lprev;
	else
		s->lru_tail = e->lprev;
	e->lprev = e->lnext = NULL;
}

void kv_lru_front(struct wimm_kv_server *s, struct kv_entry *e)
{
	e->lprev = NULL;
	e->lnext = s->lru_head;
	if (s->lru_head)
		s->lru_head->lprev = e;
	s->lru_head = e;
	if (!s->lru_tail)
		s->lru_tail = e;
}

/* Retire a published slot: free now when no lease can be reading it, else
 * once the newest lease handed out for it has run out. */
void kv_retire(struct wimm_kv_server *s, uint32_t arena, int32_t unit, unsigned order,
	       uint64_t lease_until)
{
	/* The list holds at most one entry per unit of memory: never full. */
	if (lease_until <= kv_now_ms() || s->nretired == s->retired_cap) {
		kv_buddy_free(&s->arena[arena].buddy, unit, order);
		return;
	}
	s->retired[s->nretired++] = (struct kv_retired){
	    .arena = arena, .unit = unit, .order = order, .free_at = lease_until};
	s->arena[arena].retired++;
}

void kv_reap(struct wimm_kv_server *s)
{
	uint64_t now = kv_now_ms();
	for (size_t i = 0; i < s->nretired;) {
		struct kv_retired *r = &s->retired[i];
		if (r->free_at > now) {
			i++;
			continue;
		}
		kv_buddy_free(&s->arena[r->arena].buddy, r->unit, r->order);
		s->arena[r->arena].retired--;
		*r = s->retired[--s->nretired];
	}
}

/* Take e out of the index and retire its slot. */
void kv_unpublish(struct wimm_kv_server *s, struct kv_entry *e)
{
	struct kv_entry **pp = &s->bucket[e->hash & (s->nbuckets - 1)];
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	kv_lru_unlink(s, e);
	s->stats.keys--;
	s->stats.pinned -= e->pinned;
	s->stats.used -= (uint64_t)WIMM_KV_MIN_SLOT << e->order;
	kv_retire(s, e->arena, e->unit, e->order, e->lease_until);
	free(e);
}

/* Point key at a checked slot: a new entry, or the old one moved to the new
 * slot with its old slot retired (one index update, atomic for readers:
 * every lookup after it sees the new slot, every lease before it keeps the
 * old slot alive). */
int kv_publish(struct wimm_kv_server *s, const struct kv_grant *g, uint32_t arena)
{
	struct kv_entry *e = kv_find(s, g->key, g->klen, g->hash);
	if (e) {
		kv_retire(s, e->arena, e->unit, e->order, e->lease_until);
		s->stats.pinned -= e->pinned;
		s->stats.used -= (uint64_t)WIMM_KV_MIN_SLOT << e->order;
		kv_lru_unlink(s, e);
	} else {
		e = calloc(1, sizeof(*e) + g->klen);
		if (!e)
			return WIMM_E_NOMEM;
		e->hash = g->hash;
		e->klen = g->klen;
		memcpy(e->key, g->key, g->klen);
		struct kv_entry **b = &s->bucket[g->hash & (s->nbuckets - 1)];
		e->hnext = *b;
		*b = e;
		s->stats.keys++;
	}
	e->arena = arena;
	e->unit = g->unit;
	e->order = g->order;
	e->len = g->len;
	e->version = g->version;
	e->lease_until = 0;
	e->pinned = (g->flags & WIMM_KV_PIN) != 0;
	s->stats.pinned += e->pinned;
	s->stats.used += (uint64_t)WIMM_KV_MIN_SLOT << e->order;
	kv_lru_front(s, e);
	return 0;
}

/* A free block of `order` in `arena`: reap due retirements, then evict the
 * least recently used unpinned keys of that arena until one fits. */
int kv_alloc(struct wimm_kv_server *s, uint32_t arena, unsigned order, int32_t *unit)
{
	struct kv_arena *a = &s->arena[arena];
	if (order > a->buddy.top_order)
		return WIMM_E_TOOBIG;
	kv_reap(s);
	for (;;) {
		int32_t u = kv_buddy_alloc(&a->buddy, order);
		if (u >= 0) {
			*unit = u;
			return 0;
		}
		struct kv_entry *v = s->lru_tail;
		while (v && (v->arena != arena || v->pinned))
			v = v->lprev;
		if (!v)
			break;
		kv_unpublish(s, v);
		s->stats.evictions++;
	}
	if (a->retired > 0)
		return WIMM_KV_E_BUSY;
	s->stats.full++;
	return WIMM_KV_E_FULL;
}

/* --------------------------------------------------------------- clients */

/* Everything a client held goes back: pending grants (no key points at
 * them, no reader was told of them) to its arena, the arena to the pool. */
static void drop_client(struct wimm_kv_server *s, struct kv_client *cl)
{
	struct kv_client **pp = &s->clients;
	while (*pp && *pp != cl)
		pp = &(*pp)->next;
	if (*pp)
		*pp = cl->next;
	if (!cl->is_read) {
		struct kv_arena *a = &s->arena[cl->arena];
		for (unsigned i = 0; i < KV_MAX_GRANTS; i++) {
			if (cl->grant[i].state != KV_GRANT_LIVE)
				continue;
			kv_grant_drop(s, cl, &cl->grant[i]);
			s->stats.grants_pending--;
			s->stats.grants_reclaimed++;
		}
		kv_index_client_gone(s, cl);
		a->owner = NULL;
		s->stats.clients--;
	}
	wimm_conn_delete(&cl->conn);
	free(cl);
}

void kv_send(struct wimm_kv_server *s, struct kv_client *cl, uint32_t imm, const unsigned char *msg,
	     size_t len)
{
	if (cl->dead)
		return;
	size_t off = (size_t)s->reply_next * KV_REPLY_MAX;
	s->reply_next = (s->reply_next + 1) % KV_REPLY_RING;
	memcpy(s->reply_buf + off, msg, len);
	int rc = wimm_send_imm(cl->conn, s->reply_mr, off, len, imm, WIMM_F_WAIT);
	if (rc < 0) {
		kv_log(s, WIMM_LOG_WARN, "kv: client %u: reply failed (%s): dropped", cl->id,
		       wimm_strerror(rc));
		cl->dead = 1;
	}
}

static void send_hello(struct wimm_kv_server *s, struct kv_client *cl)
{
	unsigned char m[KV_HELLO_LEN];
	kv_put32(m, KV_PROTO_VERSION);
	kv_put32(m + 28, cl->id);
	kv_put32(m + 4, s->lease_ms);
	kv_put32(m + 8, s->max_slot);
	kv_put32(m + 12, (uint32_t)wimm_listener_port(s->rd));
	kv_put64(m + 16, s->arena_len);
	kv_put32(m + 24, s->send_put_max);
	kv_index_hello(s, m);
	kv_send(s, cl, KV_IMM(KV_OP_HELLO, 0), m, KV_HELLO_LEN);
}

/* Which listener a request came to: the control one, the reads' or the
 * shared index's. */
enum kv_conn_kind { KV_CONN_CONTROL, KV_CONN_READ, KV_CONN_INDEX };
struct kv_taker {
	struct wimm_kv_server *s;
	enum kv_conn_kind kind;
};

static void request_failed(void *arg, int rc)
{
	struct kv_taker *t = arg;
	kv_log(t->s, WIMM_LOG_WARN, "kv: a connection request failed: %s", wimm_strerror(rc));
}

static void take_request(void *arg, struct wimm_request *r)
{
	struct kv_taker *t = arg;
	struct wimm_kv_server *s = t->s;
	/* Read and index connections take no doorbells: alike but for the
	 * window. */
	int is_read = t->kind != KV_CONN_CONTROL, rc;
	uint32_t a = 0;
	if (!is_read) {
		while (a < s->narenas && s->arena[a].owner)
			a++;
		if (a == s->narenas) {
			kv_log(s, WIMM_LOG_WARN, "kv: refused a client: all %u arenas taken",
			       s->narenas);
			wimm_request_reject(&r, WIMM_E_AGAIN);
			return;
		}
	}
	struct kv_client *cl = calloc(1, sizeof(*cl));
	if (!cl) {
		wimm_request_reject(&r, WIMM_E_NOMEM);
		return;
	}
	cl->is_read = is_read;
	cl->arena = a;
	cl->id = ++s->next_id & 0xffffffu;
	struct wimm_conn_attr attr = {.user = cl, .sq_depth = 128};
	if (t->kind == KV_CONN_INDEX) {
		kv_index_window(s, &attr); /* the whole index, read and atomics */
	} else if (is_read) {
		attr.window = s->mr_ro; /* the whole pool, read-only */
		attr.rx_depth = 4;
	} else {
		attr.window = s->mr_rw; /* exactly this client's arena */
		attr.window_off = (size_t)a * s->arena_len;
		attr.window_len = s->arena_len;
		attr.rx_depth = 16;
		attr.recv_size = 16 + WIMM_KV_MAX_KEY + s->send_put_max;
	}
	rc = wimm_request_accept(&r, &attr, &cl->conn);
	if (rc < 0) {
		kv_log(s, WIMM_LOG_WARN, "kv: accept failed: %s", wimm_strerror(rc));
		free(cl);
		return;
	}
	if (!is_read) {
		s->arena[a].owner = cl;
		s->stats.clients++;
	}
	cl->next = s->clients;
	s->clients = cl;
}

static void handle(void *arg, const struct wimm_event *ev)
{
	struct wimm_kv_server *s = arg;
	struct kv_client *cl = ev->user;
	if (ev->type == WIMM_EV_CONNECT) {
		struct kv_taker t = {s, ev->listener == s->rd		       ? KV_CONN_READ
					: ev->listener == kv_index_listener(s) ? KV_CONN_INDEX
									       : KV_CONN_CONTROL};
		svc_take_requests(ev->listener, take_request, request_failed, &t);
		return;
	}
	if (!cl || cl->dead)
		return;
	switch (ev->type) {
	case WIMM_EV_ESTABLISHED:
		if (!cl->is_read)
			send_hello(s, cl);
		break;
	case WIMM_EV_SEND_IMM:
		if (cl->is_read)
			cl->dead = 1;
		else if (ev->len <= s->scratch_len) {
			/* A copy: an answer that waits for credit hands receive
			 * buffers back, and the data of later events of this
			 * batch with them. */
			struct wimm_event copy = *ev;
			memcpy(s->scratch, ev->data, ev->len);
			copy.data = s->scratch;
			kv_request(s, cl, &copy);
		}
		break;
	case WIMM_EV_WRITE_IMM:
		if (cl->is_read)
			cl->dead = 1;
		else
			kv_commit(s, cl, ev);
		break;
	case WIMM_EV_DISCONNECT:
		kv_log(s, WIMM_LOG_INFO, "kv: client %u%s gone (%s)", cl->id,
		       cl->is_read ? " (its read connection)" : "", wimm_strerror(ev->status));
		cl->dead = 1;
		break;
	case WIMM_EV_ERROR:
		kv_log(s, WIMM_LOG_WARN, "kv: client %u: operation failed (%s): dropped", cl->id,
		       wimm_strerror(ev->status));
		cl->dead = 1;
		break;
	default:
		break;
	}
}

int wimm_kv_server_run(struct wimm_kv_server *s, int timeout_ms)
{
	if (!s)
		return WIMM_E_INVAL;
	int n = svc_dispatch(s->ctx, s->wait_mode, timeout_ms, handle, s);
	if (n < 0)
		return n;
	for (struct kv_client *cl = s->clients, *next; cl; cl = next) {
		next = cl->next;
		if (cl->dead)
			drop_client(s, cl);
	}
	kv_expire_grants(s);
	kv_index_scan(s);
	kv_reap(s);
	return 0;
}

/* ------------------------------------------------------ life of a server */

static int split_addr(const char *addr, char *host, size_t hlen, int *port)
{
	const char *colon = strrchr(addr, ':');
	char *end;
	if (!colon || (size_t)(colon - addr) >= hlen)
		return WIMM_E_ADDR;
	long p = strtol(colon + 1, &end, 10);
	if (*end || p < 0 || p > 65534)
		return WIMM_E_ADDR;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	*port = (int)p;
	return 0;
}

int wimm_kv_server_new(const struct wimm_kv_server_attr *attr, struct wimm_kv_server **out)
{
	struct wimm_kv_server *s = NULL;
	char host[128], addr[160];
	int port, rc;

	if (!attr || !out)
		return WIMM_E_INVAL;
	*out = NULL;
	uint32_t nclients = attr->max_clients ? attr->max_clients : 16;
	uint32_t lease = attr->lease_ms ? attr->lease_ms : 1000;
	uint32_t sput = attr->send_put_max ? attr->send_put_max : 16384;
	uint32_t grant = attr->grant_ms ? attr->grant_ms : 10000;
	if (nclients > 4096 || lease > 600000 || grant > 600000 || sput > WIMM_KV_MAX_SLOT ||
	    attr->memory / nclients < 4096)
		return WIMM_E_INVAL;
	/* A shared index's words name slots of at most 64 GiB. */
	if (attr->index_bytes && (attr->index_bytes < 4096 || attr->index_bytes > (1u << 30) ||
				  attr->memory > KV_IX_MAX_POOL))
		return WIMM_E_INVAL;
	rc = split_addr(attr->addr ? attr->addr : "0.0.0.0:7480", host, sizeof(host), &port);
	if (rc < 0)
		return rc;
	s = calloc(1, sizeof(*s));
	if (!s)
		return WIMM_E_NOMEM;
	s->log = attr->log;
	s->log_arg = attr->log_arg;
	s->lease_ms = lease;
	s->grant_ms = grant;
	s->send_put_max = sput;
	s->narenas = nclients;
	s->arena_len = 4096;
	while (s->arena_len * 2 <= attr->memory / nclients)
		s->arena_len *= 2;
	s->max_slot = s->arena_len < WIMM_KV_MAX_SLOT ? (uint32_t)s->arena_len : WIMM_KV_MAX_SLOT;
	s->pool_len = s->arena_len * nclients;
	s->stats.memory = s->pool_len;
	s->stats.arena = s->arena_len;

	rc = WIMM_E_NOMEM;
	/* Anonymous pages: zero (no slot ever shows an earlier process's
	 * bytes) and touched only as slots are used. */
	s->pool =
	    mmap(NULL, s->pool_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->pool == MAP_FAILED)
		s->pool = NULL;
	s->arena = calloc(nclients, sizeof(*s->arena));
	s->retired_cap = s->pool_len / WIMM_KV_MIN_SLOT;
	s->retired = calloc(s->retired_cap, sizeof(*s->retired));
	s->nbuckets = 1024;
	while (s->nbuckets < s->retired_cap / 2 && s->nbuckets < (1u << 22))
		s->nbuckets *= 2;
	s->bucket = calloc(s->nbuckets, sizeof(*s->bucket));
	s->reply_buf = calloc(KV_REPLY_RING, KV_REPLY_MAX);
	s->scratch_len = 16 + WIMM_KV_MAX_KEY + sput;
	s->scratch = malloc(s->scratch_len);
	if (!s->pool || !s->arena || !s->retired || !s->bucket || !s->reply_buf || !s->scratch)
		goto fail;
	for (uint32_t a = 0; a < nclients; a++) {
		rc = kv_buddy_init(&s->arena[a].buddy, (uint32_t)(s->arena_len / WIMM_KV_MIN_SLOT));
		if (rc < 0)
			goto fail;
	}

	struct wimm_ctx_attr cattr = {.flags = attr->ctx_flags,
				      .post_wait_ms = 2000,
				      .liveness_ms = attr->liveness_ms,
				      .log = attr->log,
				      .log_arg = attr->log_arg};
	rc = wimm_ctx_open(attr->fabric ? attr->fabric : "auto", &cattr, &s->ctx);
	if (rc < 0)
		goto fail;
	s->wait_mode = kv_wait_mode(s->ctx, attr->ctx_flags);
	rc = wimm_mr_reg(s->ctx, s->pool, s->pool_len, WIMM_REMOTE_WRITE, &s->mr_rw);
	if (rc < 0)
		goto fail;
	rc = wimm_mr_reg(s->ctx, s->pool, s->pool_len, WIMM_REMOTE_READ, &s->mr_ro);
	if (rc < 0)
		goto fail;
	rc = wimm_mr_reg(s->ctx, s->reply_buf, (size_t)KV_REPLY_RING * KV_REPLY_MAX, WIMM_LOCAL,
			 &s->reply_mr);
	if (rc < 0)
		goto fail;
	snprintf(addr, sizeof(addr), "%s:%d", host, port);
	rc = wimm_listen(s->ctx, addr, NULL, &s->ctl);
	if (rc < 0)
		goto fail;
	snprintf(addr, sizeof(addr), "%s:%d", host, port ? port + 1 : 0);
	rc = wimm_listen(s->ctx, addr, NULL, &s->rd);
	if (rc < 0)
		goto fail;
	if (attr->index_bytes) {
		rc = kv_index_new(s, attr->index_bytes, host, port);
		if (rc < 0)
			goto fail;
		/* libfabric shm runs a peer's reads and atomics in the target's
		 * progress, and its blocking waits wake at a 1 ms tick. */
		if (s->wait_mode != WIMM_WAIT_SPIN &&
		    strcmp(wimm_ctx_fabric(s->ctx), "ofi:shm") == 0)
			kv_log(s, WIMM_LOG_WARN,
			       "kv: ofi:shm: a sleeping server serves the index's one-sided reads "
			       "and swaps at its 1 ms tick; serve spinning (WIMM_CTX_POLLING) for "
			       "microseconds");
	}
	*out = s;
	return 0;
fail:
	wimm_kv_server_delete(&s);
	return rc;
}

int wimm_kv_server_port(const struct wimm_kv_server *s)
{
	return s ? wimm_listener_port(s->ctl) : WIMM_E_INVAL;
}

int wimm_kv_server_index_port(const struct wimm_kv_server *s)
{
	return s && s->ix ? wimm_listener_port(kv_index_listener(s)) : WIMM_E_INVAL;
}

int wimm_kv_server_stats(const struct wimm_kv_server *s, struct wimm_kv_stats *out)
{
	if (!s || !out)
		return WIMM_E_INVAL;
	*out = s->stats;
	out->retired = s->nretired;
	out->index_pending = kv_index_pending(s);
	return 0;
}

void wimm_kv_server_delete(struct wimm_kv_server **sp)
{
	struct wimm_kv_server *s = sp ? *sp : NULL;
	if (!s)
		return;
	while (s->clients)
		drop_client(s, s->clients);
	kv_index_delete(s);
	wimm_listener_delete(&s->ctl);
	wimm_listener_delete(&s->rd);
	wimm_mr_dereg(&s->reply_mr);
	wimm_mr_dereg(&s->mr_ro);
	wimm_mr_dereg(&s->mr_rw);
	wimm_ctx_close(&s->ctx);
	for (size_t b = 0; s->bucket && b < s->nbuckets; b++)
		for (struct kv_entry *e = s->bucket[b], *next; e; e = next) {
			next = e->hnext;
			free(e);
		}
	for (uint32_t a = 0; s->arena && a < s->narenas; a++)
		kv_buddy_fini(&s->arena[a].buddy);
	free(s->bucket);
	free(s->retired);
	free(s->arena);
	free(s->reply_buf);
	free(s->scratch);
	if (s->pool)
		munmap(s->pool, s->pool_len);
	free(s);
	*sp = NULL;
}
