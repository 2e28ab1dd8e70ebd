/* wimm_kv client internals: shared by kv_client.c and kv_client_index.c. */
#ifndef WIMM_KV_CLIENT_H
#define WIMM_KV_CLIENT_H

#include "kv_internal.h"

#define KV_GET_TRIES 16

struct wimm_kv_client {
	struct wimm_ctx *ctx;
	struct wimm_conn *ctl, *rd;
	unsigned char *buf, *msg; /* a slot image (puts and reads); requests */
	struct wimm_mr *buf_mr, *msg_mr;
	size_t msg_len;
	uint32_t seq, lease_ms, max_slot, send_put_max, grant_ms;
	int timeout_ms;
	enum wimm_wait_mode wait_mode;
	uint64_t retries;
	int dead; /* the server went away: every call fails now */
	/* a put between begin and commit */
	int begun;
	uint32_t gid, hash, len, klen;
	unsigned order;
	uint64_t off, version;
	/* The shared index (ix NULL: none): its connection, a buffer for two
	 * buckets and a swap's result, the put's word, the word as the grant
	 * saw it, the slot's offset in the pool, when its write was posted. */
	struct wimm_conn *ix;
	unsigned char *ibuf;
	struct wimm_mr *ibuf_mr;
	uint32_t ix_buckets, ix_flags, word;
	uint64_t hint, pool_off, t_write;
	/* what the last wait found */
	unsigned char reply[KV_CLIENT_RECV];
	uint32_t reply_len;
	uint32_t ops_pending; /* reads and swaps posted, not yet completed */
	int ops_status;	      /* the first of them that failed */
};
#define KV_IBUF_LEN (2u * KV_IX_BUCKET + 8u)

/* Wait for the reply with imm `want` (or, want 0, until no read or swap is
 * pending). */
int kv_cl_wait(struct wimm_kv_client *c, uint32_t want);
/* Post a signaled one-sided read of the peer's [src_off, +len) into
 * mr[dst_off..], counted as pending; kv_cl_await waits until none is
 * pending and returns the first failure among them (or 0). */
int kv_cl_read(struct wimm_kv_client *c, struct wimm_conn *conn, struct wimm_mr *mr, size_t dst_off,
	       size_t src_off, size_t len);
int kv_cl_await(struct wimm_kv_client *c);
/* Send the request in c->msg[0..len) and wait for its answer; returns the
 * answer's status (its first field). */
int kv_cl_call(struct wimm_kv_client *c, enum kv_op op, size_t len);
/* u16 klen, key at c->msg[off..]; the offset after it. */
size_t kv_cl_put_key(struct wimm_kv_client *c, size_t off, const void *key, size_t klen);

/* kv_client_index.c: the paths beside a shared index. */
int kv_cl_ix_connect(struct wimm_kv_client *c, const char *addr);
void kv_cl_ix_close(struct wimm_kv_client *c);
/* After the grant: the index part of the PUT reply. */
int kv_cl_ix_granted(struct wimm_kv_client *c);
/* The commit after the DONE: the swap and the note. */
int kv_cl_ix_publish(struct wimm_kv_client *c);
int kv_cl_ix_get(struct wimm_kv_client *c, const void *key, size_t klen, void *buf, size_t cap,
		 size_t *len);
int kv_cl_ix_del(struct wimm_kv_client *c, const void *key, size_t klen);

#endif
