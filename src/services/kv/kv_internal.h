/* wimm_kv internals shared by server and client: the wire format of the
 * messages, the slot header, the imm of a value write, the buddy allocator.
 *
 * Control messages are send_imm with imm = op << 24 | seq (24 bits); a
 * reply carries the request's imm back. Bodies are little-endian:
 *   PUT  (c->s) u32 len, u32 flags, u16 klen, key
 *   GET  (c->s) u16 klen, key               DEL (c->s) u16 klen, key
 *   STAT (c->s) (empty)
 *   SPUT (c->s) u32 len, u32 flags, u16 klen, key, value   (put by send)
 *   HELLO (s->c, seq 0) u32 version, u32 lease_ms, u32 max_slot,
 *                       u32 read_port, u64 arena, u32 send_put_max, u32 id,
 *                       u32 index_port (0: no shared index), u32 index_buckets,
 *                       u32 index flags (KV_IX_*), u32 grant_ms
 *   PUT reply  i32 status, u32 grant, u64 offset (in the window), u64 version
 *              and with a shared index: u32 word, u32 0, u64 the word now,
 *              u64 offset (in the pool)
 *   DONE (s->c, imm = DONE << 24 | grant) i32 status, u64 version
 *   GET reply  i32 status, u32 len, u64 offset (in the pool), u64 version
 *   DEL / SPUT reply i32 status;  STAT reply i32 status, u64 x N counters
 *   With a shared index:
 *   DEL reply  i32 status, u32 word, u64 the word now
 *   CAS  (c->s, fabrics without atomics) u32 word, u32 0, u64 compare, u64 swap
 *   CAS reply  i32 status, u32 0, u64 the word before
 *   NOTE (c->s, no reply) u32 word, u32 grant (KV_NOTE_DEL: a delete)
 * The value write: imm = grant:12 | key_hash:15 | class:5.
 */
#ifndef WIMM_KV_INTERNAL_H
#define WIMM_KV_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <wimm/kv.h>

#define KV_PROTO_VERSION 2u
#define KV_MAGIC 0x3156574bu /* "KWV1" */

enum kv_op {
	KV_OP_HELLO = 1,
	KV_OP_PUT = 2,
	KV_OP_DONE = 3,
	KV_OP_GET = 4,
	KV_OP_DEL = 5,
	KV_OP_STAT = 6,
	KV_OP_SPUT = 7,
	KV_OP_CAS = 8,
	KV_OP_NOTE = 9,
};

#define KV_IMM(op, seq) (((uint32_t)(op) << 24) | ((uint32_t)(seq)&0xffffffu))
#define KV_IMM_OP(imm) ((imm) >> 24)

/* The value write's imm. */
#define KV_GRANT_BITS 12u
#define KV_HASH_BITS 15u
#define KV_CLASS_BITS 5u
#define KV_MAX_GRANTS 64u /* outstanding grants per client (< 2^KV_GRANT_BITS) */
#define KV_WIMM(grant, hash, cls)                                                                  \
	(((uint32_t)(grant) << 20) | (((uint32_t)(hash)&0x7fffu) << 5) | ((uint32_t)(cls)&0x1fu))
#define KV_WIMM_GRANT(imm) ((imm) >> 20)
#define KV_WIMM_HASH(imm) (((imm) >> 5) & 0x7fffu)
#define KV_WIMM_CLASS(imm) ((imm)&0x1fu)

#define KV_MSG_MAX (16u + WIMM_KV_MAX_KEY) /* largest request but SPUT */
#define KV_REPLY_MAX (8u + 8u * 24u)	   /* largest reply (STAT) */
#define KV_HELLO_LEN 48u
#define KV_CLIENT_RECV 256u /* client's receive buffers */
#define KV_STAT_FIELDS (sizeof(struct wimm_kv_stats) / sizeof(uint64_t))

/* The slot header, little-endian: u32 magic, u32 len, u64 version,
 * u32 key hash, u32 crc32c(value), u32 crc32c(header bytes 0..24), u32 0. */
struct kv_hdr {
	uint32_t magic, len;
	uint64_t version;
	uint32_t khash, vcrc;
};

static inline void kv_put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}
static inline void kv_put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}
static inline void kv_put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint16_t kv_get16(const unsigned char *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t kv_get32(const unsigned char *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}
static inline uint64_t kv_get64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* ------------------------------------------------------- shared index */

/* The shared index (RACE hashing's layout, with the placement left to the
 * server): buckets of KV_IX_WAYS 64-bit words, 64 bytes each, in the
 * server's memory. A key lives in one word of one of its two buckets; the
 * server picks the word when the key is first put and tells the putter,
 * readers search both buckets for the key's fingerprint. A word is
 *   fingerprint:16 | class:5 | pool offset / 256 : 28 | version:15,
 * 0 when empty (a fingerprint is never 0). Clients change words only by
 * compare-and-swap; the server only reads them. */
#define KV_IX_WAYS 8u
#define KV_IX_BUCKET (KV_IX_WAYS * 8u)
#define KV_IX_UNIT_BITS 28u
#define KV_IX_MAX_POOL ((uint64_t)WIMM_KV_MIN_SLOT << KV_IX_UNIT_BITS) /* 64 GiB */
#define KV_IX_BY_REQUEST 1u /* no atomics: CAS goes to the server as a request */
#define KV_IX_BIG_ENDIAN 2u /* the words are in big-endian order */
#define KV_NOTE_DEL 0xffffffffu

/* A slot in a shared-index server holds [header | key | value]: the
 * header's len and CRC cover key and value, its last word is klen, so a
 * reader that found the key's fingerprint can tell the key itself. */
#define KV_HDR_KLEN 28u

struct kv_ix_place {
	uint32_t b1, b2; /* the key's two buckets */
	uint16_t fp;
};
static inline struct kv_ix_place kv_ix_place_of(uint32_t khash, uint32_t nbuckets)
{
	/* splitmix64 of the hash: the second bucket and the fingerprint must
	 * not follow from the first bucket's bits. */
	uint64_t z = (uint64_t)khash + 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	struct kv_ix_place p = {.b1 = khash & (nbuckets - 1),
				.b2 = (uint32_t)(z >> 16) & (nbuckets - 1),
				.fp = (uint16_t)(z >> 48)};
	if (p.b2 == p.b1)
		p.b2 ^= 1;
	if (p.fp == 0)
		p.fp = 1;
	return p;
}
static inline uint64_t kv_ix_word(uint16_t fp, unsigned order, uint64_t pool_off, uint64_t version)
{
	return (uint64_t)fp << 48 | (uint64_t)(order & 31u) << 43 |
	       ((pool_off / WIMM_KV_MIN_SLOT) & ((1ull << KV_IX_UNIT_BITS) - 1)) << 15 |
	       (version & 0x7fffu);
}
static inline uint16_t kv_ix_fp(uint64_t w)
{
	return (uint16_t)(w >> 48);
}
static inline unsigned kv_ix_order(uint64_t w)
{
	return (unsigned)(w >> 43) & 31u;
}
static inline uint64_t kv_ix_pool_off(uint64_t w)
{
	return ((w >> 15) & ((1ull << KV_IX_UNIT_BITS) - 1)) * WIMM_KV_MIN_SLOT;
}
static inline uint32_t kv_ix_version(uint64_t w)
{
	return (uint32_t)(w & 0x7fffu);
}

/* FNV-1a of the key: the index hash and the key check of a put. */
uint32_t kv_key_hash(const void *key, size_t klen);
/* Encode the header of a value (computes both CRCs). */
void kv_hdr_encode(unsigned char *slot, const struct kv_hdr *h, const void *value);
/* Decode and check magic and header CRC; 0 or WIMM_KV_E_CORRUPT. */
int kv_hdr_decode(const unsigned char *slot, struct kv_hdr *h);
/* Order (0 = 256 B) of the smallest slot for a value of len; -1 if none. */
int kv_class_of(size_t len);
/* How a kv object waits: spin with WIMM_CTX_POLLING, else sleep at once
 * (spinning first takes the core from the peer on a loaded host), but on
 * ofi:shm, whose blocking waits wake only at a 1 ms tick, spin briefly. */
enum wimm_wait_mode kv_wait_mode(struct wimm_ctx *ctx, unsigned ctx_flags);
/* Milliseconds and nanoseconds of CLOCK_MONOTONIC. */
uint64_t kv_now_ms(void);
uint64_t kv_now_ns(void);

/* ------------------------------------------------------ buddy allocator */

/* A power-of-two arena in units of WIMM_KV_MIN_SLOT; blocks of order
 * 0..max_order. */
struct kv_buddy {
	uint32_t units;	    /* arena / WIMM_KV_MIN_SLOT */
	unsigned top_order; /* log2(units): the whole arena */
	int32_t *next, *prev;
	uint8_t *state; /* per unit: order + 1 if a free block starts here, else 0 */
	int32_t head[32];
	uint64_t free_units;
};
int kv_buddy_init(struct kv_buddy *b, uint32_t units);
void kv_buddy_fini(struct kv_buddy *b);
/* Unit index of a free block of `order`, or -1. */
int32_t kv_buddy_alloc(struct kv_buddy *b, unsigned order);
void kv_buddy_free(struct kv_buddy *b, int32_t unit, unsigned order);

#endif
