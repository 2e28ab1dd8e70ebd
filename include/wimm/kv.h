/* wimm_kv: a key-value slot pool served over write-with-imm (issue 10).
 *
 * A server pre-allocates slot memory in size classes (powers of two from
 * 256 B to 1 MiB, a buddy allocator) and hands slots to clients as grants.
 * A put is
 *   1. a small send_imm request {key, length} on the client's control
 *      connection; the server answers with a grant {slot offset, version};
 *   2. ONE write_imm of [slot header | value] into the granted slot, with
 *      imm = {grant:12, key_hash:15, class:5} (most significant first);
 *   3. on that completion the server checks the imm against the grant, the
 *      header against the grant and the key, and the value against the
 *      CRC32C in the header, and only then points the key at the slot
 *      (publish); it answers with a put-done message.
 * Readers never see a half-written value: a key only ever points at a slot
 * whose whole write completed and checked out. An overwrite goes into a new
 * slot and is published by one index update; the old slot is retired and
 * freed only once every reader lease on it has run out.
 *
 * A get is a lookup request (the server answers {offset, version, length}
 * and gives the reader a lease of lease_ms on that slot), then a one-sided
 * wimm_read of the slot through a read-only window over the whole pool. The
 * client re-checks what it read (magic, version, length, key hash, CRC32C
 * of the value) and that the read finished within the lease, counted from
 * before its lookup was sent; anything else is a torn or stale read and the
 * get starts over.
 *
 * Grants are enforced by the receiver: the slot memory is cut into one
 * arena per client connection (memory / max_clients, rounded down to a
 * power of two), the control connection's window is exactly that client's
 * arena (WIMM_REMOTE_WRITE only), and the server grants slots only from it.
 * A client therefore cannot write a byte of any other client's slots; the
 * core refuses such a write at the transport. (Why arenas and not only a
 * per-grant check on the completion: a window is fixed when a connection
 * is accepted, and a check on the completion comes after the bytes have
 * landed, in someone else's slot if the client lied. The server still
 * checks each completion against its grant.) The arena is the client's
 * quota: eviction under pressure (LRU, pinned keys never) takes keys whose
 * slots lie in that arena. When a client's connection goes down its pending
 * grants are freed (no key ever pointed at them) and its arena goes to the
 * next client; published values in it stay. What the window cannot stop:
 * a client rewriting a published slot inside its own arena (one it wrote,
 * or one an earlier client of the same arena wrote). Readers then see a
 * CRC mismatch and the get fails with WIMM_KV_E_CORRUPT rather than
 * return the bytes; the rewrite never reaches another arena.
 *
 * Reads go over a second connection of each client, to the read port
 * (control port + 1, or what the server announces), whose window is the
 * whole pool registered with WIMM_REMOTE_READ only.
 *
 * A shared index (wimm_kv_server_attr.index_bytes, RACE hashing's design):
 * the server keeps a table of 64-bit words in memory that clients read and
 * change themselves, over a third connection (index port = control port +
 * 2, or announced). A word names a key's slot {fingerprint, class, offset,
 * version}; each key has one, in one of two buckets of 8 words that follow
 * from its hash, which the server picks when the key is first put.
 *   - A put takes a grant and writes the slot as above (the server checks
 *     it and answers, but publishes nothing itself), then publishes it with
 *     a compare-and-swap of the key's word (on a fabric without atomics,
 *     libfabric tcp, the server runs the compare-and-swap on request), and
 *     tells the server, which frees the slot the word named before.
 *   - A get is one-sided: a read of both buckets, then a read of the slot
 *     whose fingerprint matches; the key, the version in the word and the
 *     CRC are checked against what was read. No server CPU, no lease: a
 *     slot freed and reused under a reader fails the checks, and the get
 *     reads again.
 *   - A delete asks the server for the key's word, swaps it to 0 and tells
 *     the server.
 * The trade, stated here because it is the caller's to make: every client
 * may swap any word of the index, so a client can point any key at any
 * slot or delete it. Readers never return such a value (the key and the
 * CRC are checked), but they can be made to miss: admit trusted clients
 * only. Values still land only in their writer's arena. Without LRU
 * information (gets are one-sided) nothing is evicted: a full arena or a
 * full pair of buckets fails a put with WIMM_KV_E_FULL. Puts by send
 * (wimm_kv_put_send) are refused (NOTSUP): the server never publishes.
 *
 * Messages are encoded little-endian with explicit field widths.
 *
 * Thread safety: a server and a client each own a wimm context; each must
 * be used by one thread at a time. Different objects are independent.
 */
#ifndef WIMM_KV_H
#define WIMM_KV_H

#include <stddef.h>
#include <stdint.h>

#include <wimm.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Errors of the kv layer, next to the WIMM_E_* codes it also returns. */
enum wimm_kv_error {
	WIMM_KV_E_NOTFOUND = -100, /* no such key (never put, deleted or evicted) */
	WIMM_KV_E_FULL = -101,	   /* the client's arena is full of pinned or pending slots */
	WIMM_KV_E_CORRUPT = -102,  /* a value failed its checks (put refused / get gave up) */
	WIMM_KV_E_BUSY = -103,	   /* no free slot until reader leases expire; retried */
	WIMM_KV_E_EXPIRED = -104,  /* the grant ran out before its value was written */
};

/* A text for a WIMM_KV_E_* or WIMM_E_* code; never NULL, thread-safe. */
const char *wimm_kv_strerror(int err);

/* Bytes of the slot header in front of every value. */
#define WIMM_KV_HEADER 32u
/* Smallest and largest slot: a value may hold up to the largest slot the
 * server offers (1 MiB or the arena) minus the header. */
#define WIMM_KV_MIN_SLOT 256u
#define WIMM_KV_MAX_SLOT (1u << 20)
/* Longest key in bytes. */
#define WIMM_KV_MAX_KEY 200u

/* Flags of a put. */
enum wimm_kv_put_flags {
	WIMM_KV_PIN = 1u << 0, /* never evict this key (delete still removes it) */
};

/* Counters of a server (also what `wimm kv stat` shows). */
struct wimm_kv_stats {
	uint64_t memory;	   /* bytes of slot memory in arenas */
	uint64_t arena;		   /* bytes of one arena (a client's quota) */
	uint64_t used;		   /* bytes of slots held by published keys */
	uint64_t keys;		   /* keys published now */
	uint64_t pinned;	   /* ... of them pinned */
	uint64_t clients;	   /* control connections alive now */
	uint64_t puts;		   /* puts published */
	uint64_t gets;		   /* lookups */
	uint64_t hits;		   /* ... that found the key */
	uint64_t deletes;	   /* keys deleted */
	uint64_t evictions;	   /* keys evicted for room */
	uint64_t full;		   /* puts refused: arena full */
	uint64_t bad_puts;	   /* writes refused: imm, header or CRC did not match */
	uint64_t grants_pending;   /* grants handed out, not yet written */
	uint64_t grants_reclaimed; /* grants freed because their client went away */
	uint64_t retired;	   /* old slots waiting for reader leases to end */
	uint64_t send_puts;	   /* puts that came as send_imm (the second design) */
	uint64_t grants_expired;   /* grants revoked: not written within grant_ms */
	/* The shared index (all 0 without one). */
	uint64_t index_words;	/* words in the index */
	uint64_t index_pending; /* values written and checked, not yet swapped in */
	uint64_t foreign_words; /* words found naming a slot not granted for their key */
};

/* ------------------------------------------------------------------ server */

struct wimm_kv_server;

struct wimm_kv_server_attr {
	const char *fabric; /* "ofi:tcp", "ofi:shm", "verbs:rxe0", "auto"; NULL: "auto" */
	/* "host:port" of the control listener (port 0: any free port); the
	 * read listener takes port + 1 (any free port for port 0). NULL:
	 * "0.0.0.0:7480". */
	const char *addr;
	size_t memory;	      /* bytes of slot memory; >= max_clients * 4 KiB */
	uint32_t max_clients; /* arenas, i.e. clients at once; 0 = 16 */
	uint32_t lease_ms;    /* reader lease on a looked-up slot; 0 = 1000 */
	/* How long a granted slot waits for its value while the client stays
	 * connected; then the grant is revoked, the slot goes back to the
	 * arena and a late write is refused with WIMM_KV_E_EXPIRED. 0 =
	 * 10000; at most 600000. */
	uint32_t grant_ms;
	/* Largest value a client may put as send_imm (the second design, see
	 * wimm_kv_put_send); it sizes each control connection's receive
	 * buffers. 0 = 16 KiB; at most 1 MiB. */
	uint32_t send_put_max;
	uint32_t liveness_ms; /* wimm_ctx_attr.liveness_ms; 0: the core's default */
	/* Bytes of a shared index (see above; rounded down to a power of two
	 * of 64-byte buckets, at least 4 KiB, at most 1 GiB); 0: none. With
	 * one, memory may be at most 64 GiB. Two words per slot of 256 B
	 * (memory / 32) leave the buckets room enough. */
	size_t index_bytes;
	/* wimm_ctx_attr.flags; WIMM_CTX_POLLING also makes the server spin
	 * (WIMM_WAIT_SPIN). Otherwise it sleeps at once (WIMM_WAIT_BLOCK: on
	 * a loaded host spinning first takes the core from the peer), except
	 * on ofi:shm, whose blocking waits wake at a 1 ms tick: there it
	 * spins briefly first (WIMM_WAIT_ADAPTIVE). */
	unsigned ctx_flags;
	wimm_log_fn log; /* why a client was refused or dropped; NULL: silent */
	void *log_arg;
};

/* Open the fabric, allocate and register the slot memory and listen.
 * Errors: INVAL (NULL args, memory too small for max_clients arenas of
 * 4 KiB, lease, grant_ms or send_put_max out of range), NOMEM, and those of
 * wimm_ctx_open, wimm_mr_reg and wimm_listen (ADDR, PROVIDER: port in use).
 * Nothing is left allocated on error. */
int wimm_kv_server_new(const struct wimm_kv_server_attr *attr, struct wimm_kv_server **out);

/* The control port (the read port is announced to clients). */
int wimm_kv_server_port(const struct wimm_kv_server *s);
/* The shared index's port (control port + 2, or any free port for port 0);
 * INVAL without an index. */
int wimm_kv_server_index_port(const struct wimm_kv_server *s);

/* Serve: accept clients, answer requests, publish completed puts, reclaim
 * what departed clients held, free retired slots whose leases ended. Waits
 * up to timeout_ms (-1: for ever) for something to do, then returns after
 * handling what came. Call it in a loop at least every liveness_ms / 4.
 * Errors: INVAL, those of wimm_wait (fatal for the server). A misbehaving
 * client is dropped and logged, never an error here. */
int wimm_kv_server_run(struct wimm_kv_server *s, int timeout_ms);

/* Counters now. Errors: INVAL. */
int wimm_kv_server_stats(const struct wimm_kv_server *s, struct wimm_kv_stats *out);

/* Drop every client, free everything; *s is cleared. NULL is fine. */
void wimm_kv_server_delete(struct wimm_kv_server **s);

/* ------------------------------------------------------------------ client */

struct wimm_kv_client;

struct wimm_kv_client_attr {
	const char *fabric; /* as the server's; NULL: "auto" */
	int timeout_ms;	    /* longest wait for any answer; 0: 5000 */
	/* wimm_ctx_attr.flags; waits as the server's (ctx_flags there). */
	unsigned ctx_flags;
	uint32_t liveness_ms;
};

/* Connect to a server at "host:port" (both connections) and wait for its
 * hello. Errors: INVAL, ADDR, UNREACHABLE (no server there), TIMEDOUT,
 * AGAIN (every arena is taken: too many clients), PROTO (not a kv server),
 * NOMEM, those of wimm_ctx_open. */
int wimm_kv_connect(const char *addr, const struct wimm_kv_client_attr *attr,
		    struct wimm_kv_client **out);

/* Close both connections and free; *c is cleared. NULL is fine. A grant
 * taken by wimm_kv_put_begin and not committed is reclaimed by the server. */
void wimm_kv_close(struct wimm_kv_client **c);

/* Put value[0..len) under key[0..klen): grant, one write_imm, publish.
 * Returns 0 once the value is published (a get anywhere then sees it).
 * Errors: INVAL (empty or too long key), TOOBIG (len above the largest
 * slot less the header; beside a shared index less the key too),
 * WIMM_KV_E_FULL (beside an index also: the key's two buckets are full),
 * WIMM_KV_E_CORRUPT (the server refused the write), WIMM_KV_E_EXPIRED
 * (beside an index: the swap did not succeed within 3/4 of the server's
 * grant_ms, other puts of the key swapping first), TIMEDOUT, DISCONNECTED.
 * A put that fails publishes nothing: the key keeps its previous value
 * (beside an index, a swap that timed out or lost its connection may have
 * landed, as any request whose answer was lost). */
int wimm_kv_put(struct wimm_kv_client *c, const void *key, size_t klen, const void *value,
		size_t len, unsigned flags);

/* The two halves of wimm_kv_put, for a caller that builds the value in
 * place: begin takes a grant for len bytes and returns where to put them
 * (*buf, len bytes, valid until commit); commit checksums, writes with one
 * write_imm and waits for the publish. Until commit nothing is visible; a
 * client that dies in between leaves no trace but a grant the server
 * reclaims, and one that waits longer than the server's grant_ms between
 * the two loses the grant. Errors of begin: as wimm_kv_put, and INVAL when
 * a put is already begun. Errors of commit: INVAL (none begun), CORRUPT,
 * WIMM_KV_E_EXPIRED (the grant was revoked first: nothing published),
 * TIMEDOUT, DISCONNECTED. */
int wimm_kv_put_begin(struct wimm_kv_client *c, const void *key, size_t klen, size_t len,
		      unsigned flags, void **buf);
int wimm_kv_put_commit(struct wimm_kv_client *c);

/* The second design, for comparison: the value travels inside a send_imm
 * into the server's receive buffer and the server copies it into a slot
 * (no grant round trip, one copy, the server sees the bytes before they
 * reach the pool). len up to the server's send_put_max. Errors as
 * wimm_kv_put; TOOBIG above send_put_max; NOTSUP beside a shared index. */
int wimm_kv_put_send(struct wimm_kv_client *c, const void *key, size_t klen, const void *value,
		     size_t len, unsigned flags);

/* Get the value of key into buf[0..cap); *len is its length. Errors:
 * WIMM_KV_E_NOTFOUND (a miss), TRUNC (cap < *len: nothing copied, *len
 * set), WIMM_KV_E_CORRUPT (every retry read a torn or bad value), INVAL,
 * TIMEDOUT, DISCONNECTED. */
int wimm_kv_get(struct wimm_kv_client *c, const void *key, size_t klen, void *buf, size_t cap,
		size_t *len);

/* Delete key. Errors: WIMM_KV_E_NOTFOUND, INVAL, TIMEDOUT, DISCONNECTED. */
int wimm_kv_del(struct wimm_kv_client *c, const void *key, size_t klen);

/* The server's counters. Errors: INVAL, TIMEDOUT, DISCONNECTED. */
int wimm_kv_stat(struct wimm_kv_client *c, struct wimm_kv_stats *out);

/* Keep an idle client alive: the core's liveness check drops a peer that
 * was silent for liveness_ms (default 5 s), and a client only talks inside
 * its calls. Call this at least every liveness_ms / 4 while making no other
 * call. Errors: INVAL, DISCONNECTED (the server went away). */
int wimm_kv_client_poll(struct wimm_kv_client *c);

/* Reads that failed their checks and were retried by this client (torn or
 * stale reads caught), and lookups redone because a lease ran out. */
uint64_t wimm_kv_client_retries(const struct wimm_kv_client *c);

/* CRC32C (Castagnoli) of p[0..len), software; the value checksum of the
 * slot header. Thread-safe. */
uint32_t wimm_kv_crc32c(const void *p, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* WIMM_KV_H */
