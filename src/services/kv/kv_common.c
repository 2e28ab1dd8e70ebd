/* wimm_kv: the CRC32C entry point, key hash, slot header, size classes, buddy allocator. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "kv_internal.h"
#include "svc_crc32c.h"

uint32_t wimm_kv_crc32c(const void *p, size_t len)
{
	return svc_crc32c(0, p, len);
}

const char *wimm_kv_strerror(int err)
{
	switch (err) {
	case WIMM_KV_E_NOTFOUND:
		return "not found";
	case WIMM_KV_E_FULL:
		return "pool full (the client's arena holds only pinned or pending slots)";
	case WIMM_KV_E_CORRUPT:
		return "value failed its checks (torn, stale or rewritten)";
	case WIMM_KV_E_BUSY:
		return "no free slot until reader leases end";
	case WIMM_KV_E_EXPIRED:
		return "grant expired before its value was written";
	default:
		return wimm_strerror(err);
	}
}

uint32_t kv_key_hash(const void *key, size_t klen)
{
	const unsigned char *p = key;
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < klen; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

void kv_hdr_encode(unsigned char *slot, const struct kv_hdr *h, const void *value)
{
	kv_put32(slot, KV_MAGIC);
	kv_put32(slot + 4, h->len);
	kv_put64(slot + 8, h->version);
	kv_put32(slot + 16, h->khash);
	kv_put32(slot + 20, wimm_kv_crc32c(value, h->len));
	kv_put32(slot + 24, wimm_kv_crc32c(slot, 24));
	kv_put32(slot + 28, 0);
}

int kv_hdr_decode(const unsigned char *slot, struct kv_hdr *h)
{
	if (kv_get32(slot) != KV_MAGIC || kv_get32(slot + 24) != wimm_kv_crc32c(slot, 24))
		return WIMM_KV_E_CORRUPT;
	h->magic = KV_MAGIC;
	h->len = kv_get32(slot + 4);
	h->version = kv_get64(slot + 8);
	h->khash = kv_get32(slot + 16);
	h->vcrc = kv_get32(slot + 20);
	return 0;
}

int kv_class_of(size_t len)
{
	size_t need = len + WIMM_KV_HEADER;
	if (len > WIMM_KV_MAX_SLOT - WIMM_KV_HEADER)
		return -1;
	int order = 0;
	while (((size_t)WIMM_KV_MIN_SLOT << order) < need)
		order++;
	return order;
}

enum wimm_wait_mode kv_wait_mode(struct wimm_ctx *ctx, unsigned ctx_flags)
{
	if (ctx_flags & WIMM_CTX_POLLING)
		return WIMM_WAIT_SPIN;
	return strcmp(wimm_ctx_fabric(ctx), "ofi:shm") == 0 ? WIMM_WAIT_ADAPTIVE : WIMM_WAIT_BLOCK;
}

uint64_t kv_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t kv_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------ buddy allocator */

static void list_push(struct kv_buddy *b, int32_t u, unsigned order)
{
	b->state[u] = (uint8_t)(order + 1);
	b->prev[u] = -1;
	b->next[u] = b->head[order];
	if (b->head[order] >= 0)
		b->prev[b->head[order]] = u;
	b->head[order] = u;
}

static void list_remove(struct kv_buddy *b, int32_t u, unsigned order)
{
	if (b->prev[u] >= 0)
		b->next[b->prev[u]] = b->next[u];
	else
		b->head[order] = b->next[u];
	if (b->next[u] >= 0)
		b->prev[b->next[u]] = b->prev[u];
	b->state[u] = 0;
}

int kv_buddy_init(struct kv_buddy *b, uint32_t units)
{
	memset(b, 0, sizeof(*b));
	if (units == 0 || (units & (units - 1)) != 0)
		return WIMM_E_INVAL;
	b->units = units;
	while ((1u << b->top_order) < units)
		b->top_order++;
	b->next = calloc(units, sizeof(*b->next));
	b->prev = calloc(units, sizeof(*b->prev));
	b->state = calloc(units, 1);
	if (!b->next || !b->prev || !b->state) {
		kv_buddy_fini(b);
		return WIMM_E_NOMEM;
	}
	for (unsigned o = 0; o < 32; o++)
		b->head[o] = -1;
	list_push(b, 0, b->top_order);
	b->free_units = units;
	return 0;
}

void kv_buddy_fini(struct kv_buddy *b)
{
	free(b->next);
	free(b->prev);
	free(b->state);
	b->next = b->prev = NULL;
	b->state = NULL;
}

int32_t kv_buddy_alloc(struct kv_buddy *b, unsigned order)
{
	unsigned o = order;
	while (o <= b->top_order && b->head[o] < 0)
		o++;
	if (o > b->top_order)
		return -1;
	int32_t u = b->head[o];
	list_remove(b, u, o);
	while (o > order) {
		o--;
		list_push(b, u + (int32_t)(1u << o), o);
	}
	b->free_units -= 1u << order;
	return u;
}

void kv_buddy_free(struct kv_buddy *b, int32_t u, unsigned order)
{
	b->free_units += 1u << order;
	while (order < b->top_order) {
		int32_t buddy = u ^ (int32_t)(1u << order);
		if (b->state[buddy] != order + 1)
			break;
		list_remove(b, buddy, order);
		if (buddy < u)
			u = buddy;
		order++;
	}
	list_push(b, u, order);
}
