/* wimm_kv server: the shared index (RACE hashing's one-sided design).
 *
 * Clients publish by compare-and-swap on a key's word and read the index
 * without the server; the server places keys (one word each, in one of
 * their two buckets), checks every value before its client may swap it in,
 * and frees what a word no longer names. It never stores into a word: on a
 * fabric with atomics the words are the atomics' alone (the CPU's stores
 * and the HCA's atomics on one word are not atomic with each other), and
 * without atomics the server runs each swap on request, with the CPU's
 * compare-and-swap. What the server learns of a word it learns by reading
 * it, when a client says it swapped (a note) or when a written value's
 * time is up: so a note that never comes (the client died after its swap)
 * loses nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "kv_server.h"

/* How soon the written values of a departed client are resolved: time for
 * a swap it posted before it died to land. */
#define KV_IX_GONE_MS 200u

/* A value written and checked, waiting for its client's swap. */
struct kv_written {
	struct kv_entry *e;
	uint64_t wval; /* the word that names it */
	uint32_t arena, client, gid;
	int32_t unit;
	unsigned order;
	uint64_t deadline; /* ms: by then its client has swapped it in or never will */
	int noticed;	   /* its client said its swap is over */
};

struct kv_index {
	uint64_t *words;
	size_t bytes;
	uint32_t nbuckets;
	struct kv_entry **owner; /* per word: the key placed there */
	struct wimm_mr *mr;
	struct wimm_listener *l;
	int by_request;
	struct kv_written *w;
	size_t nw, wcap;
	uint64_t next_scan;
};

int kv_index_new(struct wimm_kv_server *s, size_t bytes, const char *host, int port)
{
	struct wimm_fabric_limits lim;
	char addr[160];
	if (bytes < 4096 || bytes > (1u << 30) || s->pool_len > KV_IX_MAX_POOL)
		return WIMM_E_INVAL;
	struct kv_index *ix = calloc(1, sizeof(*ix));
	if (!ix)
		return WIMM_E_NOMEM;
	s->ix = ix;
	ix->nbuckets = 64;
	while ((size_t)ix->nbuckets * 2 * KV_IX_BUCKET <= bytes)
		ix->nbuckets *= 2;
	ix->bytes = (size_t)ix->nbuckets * KV_IX_BUCKET;
	/* Anonymous pages: all words 0, no key anywhere. */
	ix->words =
	    mmap(NULL, ix->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (ix->words == MAP_FAILED) {
		ix->words = NULL;
		return WIMM_E_NOMEM;
	}
	ix->owner = calloc((size_t)ix->nbuckets * KV_IX_WAYS, sizeof(*ix->owner));
	if (!ix->owner)
		return WIMM_E_NOMEM;
	int rc = wimm_ctx_limits(s->ctx, &lim);
	if (rc < 0)
		return rc;
	ix->by_request = lim.atomic_bytes < 8;
	rc = wimm_mr_reg(s->ctx, ix->words, ix->bytes,
			 WIMM_REMOTE_READ | (ix->by_request ? 0u : (unsigned)WIMM_REMOTE_ATOMIC),
			 &ix->mr);
	if (rc < 0)
		return rc;
	snprintf(addr, sizeof(addr), "%s:%d", host, port ? port + 2 : 0);
	rc = wimm_listen(s->ctx, addr, NULL, &ix->l);
	if (rc < 0)
		return rc;
	s->stats.index_words = (uint64_t)ix->nbuckets * KV_IX_WAYS;
	return 0;
}

void kv_index_delete(struct wimm_kv_server *s)
{
	struct kv_index *ix = s->ix;
	if (!ix)
		return;
	wimm_listener_delete(&ix->l);
	wimm_mr_dereg(&ix->mr);
	if (ix->words)
		munmap(ix->words, ix->bytes);
	free(ix->owner);
	free(ix->w);
	free(ix);
	s->ix = NULL;
}

struct wimm_listener *kv_index_listener(const struct wimm_kv_server *s)
{
	return s->ix ? s->ix->l : NULL;
}

void kv_index_window(const struct wimm_kv_server *s, struct wimm_conn_attr *a)
{
	a->window = s->ix->mr;
	a->window_off = 0;
	a->window_len = s->ix->bytes;
	a->rx_depth = 4;
}

void kv_index_hello(const struct wimm_kv_server *s, unsigned char *m)
{
	const struct kv_index *ix = s->ix;
	uint32_t flags = 0;
	if (ix && ix->by_request)
		flags |= KV_IX_BY_REQUEST;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	flags |= KV_IX_BIG_ENDIAN;
#endif
	kv_put32(m + 32, ix ? (uint32_t)wimm_listener_port(ix->l) : 0);
	kv_put32(m + 36, ix ? ix->nbuckets : 0);
	kv_put32(m + 40, flags);
	kv_put32(m + 44, s->grant_ms);
}

static uint64_t word_now(const struct kv_index *ix, uint32_t word)
{
	return __atomic_load_n(&ix->words[word], __ATOMIC_ACQUIRE);
}

static uint64_t slot_bytes(uint64_t wval)
{
	return (uint64_t)WIMM_KV_MIN_SLOT << kv_ix_order(wval);
}

/* Free the slot a word of ours named, at once: readers hold no lease
 * beside an index, and one that reads the slot after it was reused fails
 * its checks (version, key, CRC) and reads the buckets again. A grace
 * would only hold slots back: a put stream that overwrites faster than
 * the grace runs out fills its arena (seen: 95 ms stalls at 16 KiB). */
static void retire_word(struct wimm_kv_server *s, uint64_t wval)
{
	uint64_t off = kv_ix_pool_off(wval);
	kv_retire(s, (uint32_t)(off / s->arena_len),
		  (int32_t)((off % s->arena_len) / WIMM_KV_MIN_SLOT), kv_ix_order(wval), 0);
}

static void written_remove(struct kv_index *ix, size_t i)
{
	ix->w[i].e->refs--;
	ix->w[i] = ix->w[--ix->nw];
}

/* Bring the server's view of e's word up to date: free the slot it named
 * before, adopt the written value it names now, and free the written values
 * whose client is done with them (swapped in and out again, or never). */
static void reconcile(struct wimm_kv_server *s, struct kv_entry *e)
{
	struct kv_index *ix = s->ix;
	uint64_t w = word_now(ix, e->word);
	if (w != e->cur) {
		if (e->cur && e->cur_ours) {
			retire_word(s, e->cur);
			s->stats.used -= slot_bytes(e->cur);
		}
		s->stats.keys += (w != 0) - (e->cur != 0);
		s->stats.deletes += w == 0;
		e->cur = w;
		e->cur_ours = 0;
		for (size_t i = 0; w && i < ix->nw; i++) {
			if (ix->w[i].e != e || ix->w[i].wval != w)
				continue;
			e->cur_ours = 1;
			s->stats.used += slot_bytes(w);
			s->stats.puts++;
			written_remove(ix, i);
			break;
		}
		if (w && !e->cur_ours) {
			s->stats.foreign_words++;
			kv_log(s, WIMM_LOG_WARN,
			       "kv: index word %u of key '%.*s' names a slot not granted for it "
			       "(%#llx): a client swapped in something of its own",
			       e->word, (int)e->klen, e->key, (unsigned long long)w);
		}
	}
	for (size_t i = 0; i < ix->nw;) {
		struct kv_written *k = &ix->w[i];
		if (k->e != e || !k->noticed) {
			i++;
			continue;
		}
		/* Its client's swap is over and the word names something else:
		 * it was swapped in and out again (a put, counted), or never
		 * (the swap lost its grant time, or the client died). */
		kv_retire(s, k->arena, k->unit, k->order, 0);
		written_remove(ix, i);
	}
}

/* e goes when nothing holds it and its word is empty: the word may then be
 * placed for another key. */
static void maybe_free(struct wimm_kv_server *s, struct kv_entry *e)
{
	reconcile(s, e);
	if (e->refs || e->cur)
		return;
	struct kv_entry **pp = &s->bucket[e->hash & (s->nbuckets - 1)];
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	s->ix->owner[e->word] = NULL;
	free(e);
}

int kv_index_hold(struct wimm_kv_server *s, const void *key, uint32_t klen, uint32_t hash,
		  struct kv_entry **out)
{
	struct kv_index *ix = s->ix;
	struct kv_entry *e = kv_find(s, key, klen, hash);
	if (!e) {
		/* The emptier of the key's two buckets (two choices keep the
		 * buckets even). A word nobody was placed at may still hold
		 * what a client swapped in by itself: not free either. */
		struct kv_ix_place p = kv_ix_place_of(hash, ix->nbuckets);
		uint32_t word = UINT32_MAX, best = 0;
		for (int b = 0; b < 2; b++) {
			uint32_t nfree = 0, first = UINT32_MAX;
			for (uint32_t way = 0; way < KV_IX_WAYS; way++) {
				uint32_t i = (b ? p.b2 : p.b1) * KV_IX_WAYS + way;
				if (!ix->owner[i] && word_now(ix, i) == 0) {
					nfree++;
					first = first == UINT32_MAX ? i : first;
				}
			}
			if (nfree > best) {
				best = nfree;
				word = first;
			}
		}
		if (word == UINT32_MAX) {
			s->stats.full++;
			return WIMM_KV_E_FULL;
		}
		e = calloc(1, sizeof(*e) + klen);
		if (!e)
			return WIMM_E_NOMEM;
		e->hash = hash;
		e->klen = klen;
		memcpy(e->key, key, klen);
		e->word = word;
		struct kv_entry **b = &s->bucket[hash & (s->nbuckets - 1)];
		e->hnext = *b;
		*b = e;
		ix->owner[word] = e;
	}
	e->refs++;
	*out = e;
	return 0;
}

void kv_index_release(struct wimm_kv_server *s, struct kv_entry *e)
{
	e->refs--;
	maybe_free(s, e);
}

void kv_index_grant_reply(struct wimm_kv_server *s, const struct kv_grant *g, uint32_t arena,
			  unsigned char *m)
{
	reconcile(s, g->e);
	kv_put32(m + 24, g->e->word);
	kv_put32(m + 28, 0);
	kv_put64(m + 32, g->e->cur);
	kv_put64(m + 40, (uint64_t)arena * s->arena_len + (uint64_t)g->unit * WIMM_KV_MIN_SLOT);
}

int kv_index_written(struct wimm_kv_server *s, struct kv_client *cl, struct kv_grant *g)
{
	struct kv_index *ix = s->ix;
	if (ix->nw == ix->wcap) {
		size_t cap = ix->wcap ? ix->wcap * 2 : 64;
		struct kv_written *w = realloc(ix->w, cap * sizeof(*w));
		if (!w)
			return WIMM_E_NOMEM;
		ix->w = w;
		ix->wcap = cap;
	}
	struct kv_ix_place p = kv_ix_place_of(g->hash, ix->nbuckets);
	uint64_t off = (uint64_t)cl->arena * s->arena_len + (uint64_t)g->unit * WIMM_KV_MIN_SLOT;
	/* The grant's hold on the entry passes to the written value. */
	ix->w[ix->nw++] = (struct kv_written){.e = g->e,
					      .wval = kv_ix_word(p.fp, g->order, off, g->version),
					      .arena = cl->arena,
					      .client = cl->id,
					      .gid = (uint32_t)(g - cl->grant),
					      .unit = g->unit,
					      .order = g->order,
					      .deadline = kv_now_ms() + s->grant_ms};
	return 0;
}

static void answer(struct wimm_kv_server *s, struct kv_client *cl, uint32_t imm, int status,
		   uint32_t a, uint64_t b)
{
	unsigned char m[16];
	kv_put32(m, (uint32_t)status);
	kv_put32(m + 4, a);
	kv_put64(m + 8, b);
	kv_send(s, cl, imm, m, status < 0 ? 4 : 16);
}

void kv_index_del(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev)
{
	const unsigned char *p = ev->data;
	uint32_t klen = ev->len >= 2 ? kv_get16(p) : 0;
	if (klen == 0 || klen > WIMM_KV_MAX_KEY || ev->len != 2 + klen) {
		answer(s, cl, ev->imm, WIMM_E_INVAL, 0, 0);
		return;
	}
	struct kv_entry *e = kv_find(s, p + 2, klen, kv_key_hash(p + 2, klen));
	if (e)
		reconcile(s, e);
	if (!e || !e->cur) {
		answer(s, cl, ev->imm, WIMM_KV_E_NOTFOUND, 0, 0);
		return;
	}
	answer(s, cl, ev->imm, 0, e->word, e->cur);
}

void kv_index_cas(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev)
{
	struct kv_index *ix = s->ix;
	const unsigned char *p = ev->data;
	/* With atomics the words are the fabric's alone: a CPU swap beside
	 * them would not be atomic against theirs. */
	if (!ix->by_request) {
		answer(s, cl, ev->imm, WIMM_E_NOTSUP, 0, 0);
		return;
	}
	uint32_t word = ev->len == 24 ? kv_get32(p) : UINT32_MAX;
	if (word >= ix->nbuckets * KV_IX_WAYS) {
		kv_log(s, WIMM_LOG_WARN, "kv: client %u: malformed compare-and-swap request",
		       cl->id);
		answer(s, cl, ev->imm, WIMM_E_INVAL, 0, 0);
		return;
	}
	uint64_t expect = kv_get64(p + 8);
	__atomic_compare_exchange_n(&ix->words[word], &expect, kv_get64(p + 16), 0,
				    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
	answer(s, cl, ev->imm, 0, 0, expect);
}

void kv_index_note(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev)
{
	struct kv_index *ix = s->ix;
	uint32_t word = ev->len == 8 ? kv_get32(ev->data) : UINT32_MAX;
	uint32_t gid = ev->len == 8 ? kv_get32((const unsigned char *)ev->data + 4) : 0;
	struct kv_entry *e = word < ix->nbuckets * KV_IX_WAYS ? ix->owner[word] : NULL;
	if (!e) {
		kv_log(s, WIMM_LOG_WARN, "kv: client %u: a note for no key's word (%u): ignored",
		       cl->id, word);
		return;
	}
	for (size_t i = 0; gid != KV_NOTE_DEL && i < ix->nw; i++)
		if (ix->w[i].client == cl->id && ix->w[i].gid == gid && ix->w[i].e == e)
			ix->w[i].noticed = 1;
	maybe_free(s, e);
}

void kv_index_client_gone(struct wimm_kv_server *s, struct kv_client *cl)
{
	struct kv_index *ix = s->ix;
	uint64_t soon = kv_now_ms() + KV_IX_GONE_MS;
	for (size_t i = 0; ix && i < ix->nw; i++)
		if (ix->w[i].client == cl->id && ix->w[i].deadline > soon)
			ix->w[i].deadline = soon;
}

void kv_index_scan(struct wimm_kv_server *s)
{
	struct kv_index *ix = s->ix;
	uint64_t now = kv_now_ms();
	if (!ix || ix->nw == 0 || now < ix->next_scan)
		return;
	ix->next_scan = now + 5;
	/* One due value at a time: resolving it may take others out. */
	for (size_t i = 0; i < ix->nw;) {
		struct kv_written *k = &ix->w[i];
		if (k->noticed || k->deadline > now) {
			i++;
			continue;
		}
		k->noticed = 1;
		maybe_free(s, k->e);
		i = 0;
	}
}

uint64_t kv_index_pending(const struct wimm_kv_server *s)
{
	return s->ix ? s->ix->nw : 0;
}
