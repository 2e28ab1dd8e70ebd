/* wimm_kv server internals: shared by kv_server.c and kv_server_ops.c. */
#ifndef WIMM_KV_SERVER_H
#define WIMM_KV_SERVER_H

#include "kv_internal.h"

#define KV_REPLY_RING 4096u

/* A published key: the index (hash chain), the LRU list, the slot. */
struct kv_entry {
	struct kv_entry *hnext, *lprev, *lnext;
	uint32_t hash, klen;
	uint32_t arena;
	int32_t unit;
	unsigned order;
	uint32_t len;
	uint64_t version;
	uint64_t lease_until; /* ms: the end of the newest reader lease */
	unsigned pinned;
	/* With a shared index: the key's word, what the server last saw in
	 * it (0: nothing published) and whether that names a slot granted for
	 * this key (else a client swapped in something foreign: never freed
	 * from here); grants and written values of the key not yet resolved. */
	uint32_t word;
	uint64_t cur;
	int cur_ours;
	uint32_t refs;
	unsigned char key[];
};

/* An old slot waiting for its leases to end. */
struct kv_retired {
	uint32_t arena;
	int32_t unit;
	unsigned order;
	uint64_t free_at;
};

/* A slot granted to a client and not yet written. */
enum kv_grant_state {
	KV_GRANT_FREE = 0,
	KV_GRANT_LIVE,	  /* handed out, the slot held for the value */
	KV_GRANT_EXPIRED, /* revoked after grant_ms: slot freed, a late write refused */
};
struct kv_grant {
	enum kv_grant_state state;
	uint64_t expires_at; /* ms (LIVE) */
	uint32_t hash, len, klen;
	unsigned flags, order;
	int32_t unit;
	uint64_t version;
	uint32_t seq;	    /* the request's imm seq, for the answer */
	struct kv_entry *e; /* with a shared index: the key's entry (holds its word) */
	unsigned char key[WIMM_KV_MAX_KEY];
};

/* A connection: a client's control connection (with an arena and grants)
 * or a read connection. */
struct kv_client {
	struct kv_client *next;
	struct wimm_conn *conn;
	uint32_t id, arena;
	int is_read, dead;
	struct kv_grant grant[KV_MAX_GRANTS];
};

struct kv_arena {
	struct kv_buddy buddy;
	struct kv_client *owner;
	uint64_t retired; /* slots of this arena on the retired list */
};

struct wimm_kv_server {
	struct wimm_ctx *ctx;
	struct wimm_listener *ctl, *rd;
	unsigned char *pool;
	size_t pool_len, arena_len;
	struct wimm_mr *mr_rw, *mr_ro, *reply_mr;
	unsigned char *reply_buf;
	unsigned char *scratch; /* a copy of the request being handled */
	size_t scratch_len;
	uint32_t reply_next;
	struct kv_arena *arena;
	enum wimm_wait_mode wait_mode;
	uint32_t narenas, max_slot, lease_ms, grant_ms, send_put_max, next_id;
	uint64_t next_expiry_scan; /* ms */
	struct kv_entry **bucket;
	size_t nbuckets;
	struct kv_entry *lru_head, *lru_tail;
	struct kv_retired *retired;
	size_t nretired, retired_cap;
	struct kv_client *clients;
	uint64_t version;
	struct wimm_kv_stats stats;
	struct kv_index *ix; /* the shared index, NULL without one */
	wimm_log_fn log;
	void *log_arg;
};

void kv_log(struct wimm_kv_server *s, enum wimm_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
struct kv_entry *kv_find(struct wimm_kv_server *s, const void *key, size_t klen, uint32_t hash);
void kv_lru_unlink(struct wimm_kv_server *s, struct kv_entry *e);
void kv_lru_front(struct wimm_kv_server *s, struct kv_entry *e);
void kv_reap(struct wimm_kv_server *s);
/* Free a slot that was published once: now, or when lease_until passed. */
void kv_retire(struct wimm_kv_server *s, uint32_t arena, int32_t unit, unsigned order,
	       uint64_t lease_until);
void kv_unpublish(struct wimm_kv_server *s, struct kv_entry *e);
int kv_publish(struct wimm_kv_server *s, const struct kv_grant *g, uint32_t arena);
int kv_alloc(struct wimm_kv_server *s, uint32_t arena, unsigned order, int32_t *unit);
/* Post an answer; a failure marks the client dead (dropped after the batch). */
void kv_send(struct wimm_kv_server *s, struct kv_client *cl, uint32_t imm, const unsigned char *msg,
	     size_t len);
/* kv_server_ops.c: a request (send_imm) and a value write (write_imm). */
void kv_request(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev);
void kv_commit(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev);
/* Revoke the grants whose grant_ms ran out (at most every few ms). */
void kv_expire_grants(struct wimm_kv_server *s);
/* A grant that ends without its value published by the server: its slot
 * back to the arena, and (shared index) its hold on the key's entry. */
void kv_grant_drop(struct wimm_kv_server *s, struct kv_client *cl, struct kv_grant *g);

/* kv_server_index.c: the shared index (NULL s->ix: every call is a no-op
 * or refuses). */
struct kv_index;
/* Allocate, register and listen next to the control port (port + 2). */
int kv_index_new(struct wimm_kv_server *s, size_t bytes, const char *host, int port);
void kv_index_delete(struct wimm_kv_server *s);
struct wimm_listener *kv_index_listener(const struct wimm_kv_server *s);
void kv_index_window(const struct wimm_kv_server *s, struct wimm_conn_attr *a);
/* HELLO's index fields at m[32..48). */
void kv_index_hello(const struct wimm_kv_server *s, unsigned char *m);
/* The key's entry with a word (placed now if new), held for a grant;
 * WIMM_KV_E_FULL when both buckets are taken. */
int kv_index_hold(struct wimm_kv_server *s, const void *key, uint32_t klen, uint32_t hash,
		  struct kv_entry **out);
/* Let go of a hold; the entry goes when nothing holds it or is published. */
void kv_index_release(struct wimm_kv_server *s, struct kv_entry *e);
/* The PUT reply's index part (m[24..48)) for a grant. */
void kv_index_grant_reply(struct wimm_kv_server *s, const struct kv_grant *g, uint32_t arena,
			  unsigned char *m);
/* A value written and checked: it waits for its client's swap. */
int kv_index_written(struct wimm_kv_server *s, struct kv_client *cl, struct kv_grant *g);
/* The requests of index mode: DEL, CAS (no atomics), NOTE. */
void kv_index_del(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev);
void kv_index_cas(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev);
void kv_index_note(struct wimm_kv_server *s, struct kv_client *cl, const struct wimm_event *ev);
/* A client went away: its written values resolve soon, not at their deadline. */
void kv_index_client_gone(struct wimm_kv_server *s, struct kv_client *cl);
/* Resolve written values whose deadline passed (at most every few ms). */
void kv_index_scan(struct wimm_kv_server *s);
/* Written values waiting for their swap. */
uint64_t kv_index_pending(const struct wimm_kv_server *s);

#endif
