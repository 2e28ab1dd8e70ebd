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
 *                       u32 read_port, u64 arena, u32 send_put_max, u32 id
 *   PUT reply  i32 status, u32 grant, u64 offset (in the window), u64 version
 *   DONE (s->c, imm = DONE << 24 | grant) i32 status, u64 version
 *   GET reply  i32 status, u32 len, u64 offset (in the pool), u64 version
 *   DEL / SPUT reply i32 status;  STAT reply i32 status, u64 x N counters
 * The value write: imm = grant:12 | key_hash:15 | class:5.
 */
#ifndef WIMM_KV_INTERNAL_H
#define WIMM_KV_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <wimm/kv.h>

#define KV_PROTO_VERSION 1u
#define KV_MAGIC 0x3156574bu /* "KWV1" */

enum kv_op {
	KV_OP_HELLO = 1,
	KV_OP_PUT = 2,
	KV_OP_DONE = 3,
	KV_OP_GET = 4,
	KV_OP_DEL = 5,
	KV_OP_STAT = 6,
	KV_OP_SPUT = 7,
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
#define KV_CLIENT_RECV 256u		   /* client's receive buffers */
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
/* Milliseconds of CLOCK_MONOTONIC. */
uint64_t kv_now_ms(void);

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
