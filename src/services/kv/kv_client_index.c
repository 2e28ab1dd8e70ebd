/* wimm_kv client beside a shared index: a put publishes its checked value
 * by compare-and-swap on the key's word, a get reads the key's two buckets
 * and the slot they name, a delete swaps the word to 0. The server hears of
 * each swap by a note (no answer) and reads the word itself. */
#include <stdio.h>
#include <stdlib.h>

#include "kv_client.h"

#define IBUF_RESULT (2u * KV_IX_BUCKET) /* a swap's result */
#define IBUF_NOTE (IBUF_RESULT + 8u)	/* a note's body */
#define IBUF_ALLOC 256u

int kv_cl_ix_connect(struct wimm_kv_client *c, const char *addr)
{
	struct wimm_conn_attr a = {.rx_depth = 4};
	int rc = wimm_connect(c->ctx, addr, &a, c->timeout_ms, &c->ix);
	if (rc < 0)
		return rc;
	c->ibuf = aligned_alloc(64, IBUF_ALLOC);
	if (!c->ibuf)
		return WIMM_E_NOMEM;
	return wimm_mr_reg(c->ctx, c->ibuf, IBUF_ALLOC, WIMM_LOCAL, &c->ibuf_mr);
}

void kv_cl_ix_close(struct wimm_kv_client *c)
{
	wimm_conn_delete(&c->ix);
	wimm_mr_dereg(&c->ibuf_mr);
	free(c->ibuf);
	c->ibuf = NULL;
}

/* A word as the server's memory holds it (its byte order). */
static uint64_t word_at(const struct wimm_kv_client *c, const unsigned char *p)
{
	uint64_t v = 0;
	if (!(c->ix_flags & KV_IX_BIG_ENDIAN))
		return kv_get64(p);
	for (int i = 0; i < 8; i++)
		v = (v << 8) | p[i];
	return v;
}

static int valid_word(const struct wimm_kv_client *c, uint32_t word)
{
	return word < c->ix_buckets * KV_IX_WAYS;
}

/* One compare-and-swap of `word`; *old is the word before it. */
static int swap(struct wimm_kv_client *c, uint32_t word, uint64_t cmp, uint64_t val, uint64_t *old)
{
	if (c->ix_flags & KV_IX_BY_REQUEST) {
		kv_put32(c->msg, word);
		kv_put32(c->msg + 4, 0);
		kv_put64(c->msg + 8, cmp);
		kv_put64(c->msg + 16, val);
		int rc = kv_cl_call(c, KV_OP_CAS, 24);
		if (rc < 0)
			return rc;
		if (c->reply_len < 16)
			return WIMM_E_PROTO;
		*old = kv_get64(c->reply + 8);
		return 0;
	}
	int rc =
	    wimm_cmp_swap(c->ix, c->ibuf_mr, IBUF_RESULT, (size_t)word * 8, cmp, val, WIMM_F_WAIT);
	c->ops_pending += rc == 0;
	if (rc < 0 || (rc = kv_cl_await(c)) < 0)
		return rc;
	*old = word_at(c, c->ibuf + IBUF_RESULT);
	return 0;
}

/* Tell the server a swap of `word` is over (no answer). Its own buffer:
 * the next request reuses c->msg, and between two notes there is always a
 * request whose answer says the note has arrived. A note that cannot be
 * sent loses nothing: the server reads the word when the value's time is up. */
static void note(struct wimm_kv_client *c, uint32_t word, uint32_t gid)
{
	kv_put32(c->ibuf + IBUF_NOTE, word);
	kv_put32(c->ibuf + IBUF_NOTE + 4, gid);
	c->seq = (c->seq + 1) & 0xffffffu;
	if (wimm_send_imm(c->ctl, c->ibuf_mr, IBUF_NOTE, 8, KV_IMM(KV_OP_NOTE, c->seq),
			  WIMM_F_WAIT) == WIMM_E_DISCONNECTED)
		c->dead = 1;
}

int kv_cl_ix_granted(struct wimm_kv_client *c)
{
	if (c->reply_len < 48)
		return WIMM_E_PROTO;
	c->word = kv_get32(c->reply + 24);
	c->hint = kv_get64(c->reply + 32);
	c->pool_off = kv_get64(c->reply + 40);
	return valid_word(c, c->word) ? 0 : WIMM_E_PROTO;
}

int kv_cl_ix_publish(struct wimm_kv_client *c)
{
	struct kv_ix_place p = kv_ix_place_of(c->hash, c->ix_buckets);
	uint64_t val = kv_ix_word(p.fp, c->order, c->pool_off, c->version);
	/* The server lets a written value go grant_ms after it checked it;
	 * swap only well inside that, counted from before the write. */
	uint64_t cutoff = c->t_write + (uint64_t)c->grant_ms * 750000u;
	uint64_t cmp = c->hint, old;
	int rc = WIMM_KV_E_EXPIRED;
	while (kv_now_ns() < cutoff) {
		rc = swap(c, c->word, cmp, val, &old);
		if (rc < 0)
			break;
		if (old == cmp) {
			rc = 0;
			break;
		}
		/* Another put of the key came first: ours replaces it. */
		cmp = old;
		rc = WIMM_KV_E_EXPIRED;
	}
	note(c, c->word, c->gid);
	return rc;
}

/* Read one slot that word w names and check it is key's; 1 if it is (the
 * value at c->buf + header + klen, *vlen bytes), 0 if it is another key's,
 * -1 if it is torn, stale or not a slot. */
static int read_slot(struct wimm_kv_client *c, uint64_t w, const void *key, size_t klen,
		     uint32_t hash, uint32_t *vlen)
{
	size_t slot = (size_t)WIMM_KV_MIN_SLOT << kv_ix_order(w);
	if (slot > c->max_slot)
		return -1;
	int rc = kv_cl_read(c, c->rd, c->buf_mr, 0, kv_ix_pool_off(w), slot);
	if (rc == WIMM_E_BOUNDS)
		return -1; /* a word naming no place in the pool */
	if (rc < 0 || (rc = kv_cl_await(c)) < 0)
		return rc;
	struct kv_hdr h;
	if (kv_hdr_decode(c->buf, &h) < 0 || (h.version & 0x7fffu) != kv_ix_version(w) ||
	    h.len > slot - WIMM_KV_HEADER ||
	    wimm_kv_crc32c(c->buf + WIMM_KV_HEADER, h.len) != h.vcrc)
		return -1;
	if (h.khash != hash || kv_get32(c->buf + KV_HDR_KLEN) != klen || h.len < klen ||
	    memcmp(c->buf + WIMM_KV_HEADER, key, klen) != 0)
		return 0;
	*vlen = h.len - (uint32_t)klen;
	return 1;
}

int kv_cl_ix_get(struct wimm_kv_client *c, const void *key, size_t klen, void *buf, size_t cap,
		 size_t *len)
{
	uint32_t hash = kv_key_hash(key, klen), vlen;
	struct kv_ix_place p = kv_ix_place_of(hash, c->ix_buckets);
	for (int attempt = 0; attempt < KV_GET_TRIES; attempt++) {
		/* Both buckets at once: one round trip. */
		int rc =
		    kv_cl_read(c, c->ix, c->ibuf_mr, 0, (size_t)p.b1 * KV_IX_BUCKET, KV_IX_BUCKET);
		if (rc == 0)
			rc = kv_cl_read(c, c->ix, c->ibuf_mr, KV_IX_BUCKET,
					(size_t)p.b2 * KV_IX_BUCKET, KV_IX_BUCKET);
		/* Whatever was posted completes before the buffer is reused. */
		int arc = c->ops_pending ? kv_cl_await(c) : 0;
		if (rc < 0 || (rc = arc) < 0)
			return rc;
		int torn = 0;
		for (unsigned i = 0; i < 2 * KV_IX_WAYS; i++) {
			uint64_t w = word_at(c, c->ibuf + 8 * i);
			if (w == 0 || kv_ix_fp(w) != p.fp)
				continue;
			int got = read_slot(c, w, key, klen, hash, &vlen);
			if (got < -1)
				return got;
			if (got < 0) {
				torn = 1;
				continue;
			}
			if (got == 0)
				continue; /* another key with the same fingerprint */
			*len = vlen;
			if (cap < vlen)
				return WIMM_E_TRUNC;
			memcpy(buf, c->buf + WIMM_KV_HEADER + klen, vlen);
			return 0;
		}
		if (!torn)
			return WIMM_KV_E_NOTFOUND;
		/* The slot was being reused under us, or the word changed
		 * while we read: read the buckets again. */
		c->retries++;
	}
	return WIMM_KV_E_CORRUPT;
}

int kv_cl_ix_del(struct wimm_kv_client *c, const void *key, size_t klen)
{
	int rc = kv_cl_call(c, KV_OP_DEL, kv_cl_put_key(c, 0, key, klen));
	if (rc < 0)
		return rc;
	if (c->reply_len < 16 || !valid_word(c, kv_get32(c->reply + 4)))
		return WIMM_E_PROTO;
	uint32_t word = kv_get32(c->reply + 4);
	uint64_t cur = kv_get64(c->reply + 8), old;
	uint64_t give_up = kv_now_ns() + (uint64_t)c->timeout_ms * 1000000u;
	for (;;) {
		if (cur == 0) {
			rc = WIMM_KV_E_NOTFOUND; /* deleted by someone else first */
			break;
		}
		if (kv_now_ns() > give_up) {
			rc = WIMM_E_TIMEDOUT;
			break;
		}
		rc = swap(c, word, cur, 0, &old);
		if (rc < 0 || old == cur)
			break;
		cur = old; /* a put came first: delete what it put */
	}
	note(c, word, KV_NOTE_DEL);
	return rc;
}
