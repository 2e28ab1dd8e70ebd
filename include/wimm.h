/* wimm: data + doorbell messaging over RDMA Write-with-Immediate.
 *
 * One operation writes bytes into a window of the peer's memory and rings a
 * 32-bit doorbell (the "imm") that the peer reads from its event queue once
 * every byte has landed. Backends: rdma-core verbs ("verbs:<device>") and
 * libfabric ("ofi:<provider>", e.g. ofi:tcp, ofi:shm).
 *
 * Conventions
 * - Every call returns 0 (or a count) on success and a negative WIMM_E_* code
 *   on failure; wimm_strerror() names it. The provider's own error (errno,
 *   fi_errno, ibv_wc_status) of the last failure stays readable with
 *   wimm_provider_error().
 * - Objects are opaque. wimm_x_delete(&x) accepts NULL (and *x == NULL) and
 *   clears the pointer.
 * - imm values are host-order uint32_t everywhere in this API; byte order on
 *   the wire is the backend's business.
 * - Thread safety: a context and every object made from it (regions,
 *   listeners, connections, counters, prepared operations) must be used by
 *   one thread at a time. Different
 *   contexts are fully independent: give each thread its own context, the way
 *   each thread owns a completion queue. wimm_strerror() and the imm layout
 *   functions are thread-safe.
 */
#ifndef WIMM_H
#define WIMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* libwimm is built with hidden visibility: only what this header declares
 * is exported (and versioned by the linker script). */
#if defined(WIMM_BUILDING) && defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define WIMM_VERSION_MAJOR 0
#define WIMM_VERSION_MINOR 1
#define WIMM_VERSION_PATCH 0

/* ---------------------------------------------------------------- errors */

/* Error codes. Values are stable; never compare against literals. */
#define WIMM_ERRNO_MAP(X)                                                                          \
	X(INVAL, 1, "invalid argument")                                                            \
	X(NOMEM, 2, "out of memory")                                                               \
	X(AGAIN, 3, "resource temporarily unavailable (no credit or queue full)")                  \
	X(RANGE, 4, "value does not fit its imm field")                                            \
	X(BOUNDS, 5, "offset or length outside the peer's window")                                 \
	X(LOCAL_BOUNDS, 6, "offset or length outside the local region")                            \
	X(NOFABRIC, 7, "unknown fabric or backend not built")                                      \
	X(NODEV, 8, "no such device or provider")                                                  \
	X(ADDR, 9, "bad or unresolvable address")                                                  \
	X(UNREACHABLE, 10, "peer unreachable or connection refused")                               \
	X(TIMEDOUT, 11, "timed out")                                                               \
	X(PROTO, 12, "malformed handshake")                                                        \
	X(VERSION, 13, "handshake version not supported")                                          \
	X(DISCONNECTED, 14, "connection closed or peer dead")                                      \
	X(NOWINDOW, 15, "peer exposes no window")                                                  \
	X(NOTSUP, 16, "operation not supported by this fabric")                                    \
	X(PROVIDER, 17, "provider error (see wimm_provider_error)")                                \
	X(TOOBIG, 18, "length exceeds the fabric's maximum message")                               \
	X(BUSY, 19, "object still in use")                                                         \
	X(NORECV, 20, "peer posts no receive buffers for send-with-imm")                           \
	X(TRUNC, 21, "message longer than the peer's receive buffer")                              \
	X(PERM, 22, "region lacks the access this use needs")                                      \
	X(REFUSED, 23, "the peer refused the connection")                                          \
	X(OVERDRAFT, 24, "peer posted doorbells beyond its credits")

enum wimm_error {
	WIMM_OK = 0,
#define WIMM_X_ENUM(name, num, text) WIMM_E_##name = -(num),
	WIMM_ERRNO_MAP(WIMM_X_ENUM)
#undef WIMM_X_ENUM
};

/* Name of an error code ("WIMM_E_AGAIN") and its description. Unknown codes
 * give "unknown error". Thread-safe, never NULL. */
const char *wimm_err_name(int err);
const char *wimm_strerror(int err);

/* ----------------------------------------------------------------- types */

struct wimm_ctx;      /* a fabric context: device/provider, event queue */
struct wimm_mr;	      /* a registered memory region */
struct wimm_listener; /* a passive endpoint accepting connections */
struct wimm_conn;     /* a reliable connection to one peer */
struct wimm_request;  /* a connection request waiting for a decision */
struct wimm_counter;  /* doorbells counted across connections */

/* ---------------------------------------------------------------- context */

enum wimm_ctx_flags {
	/* The application polls (spins) and rarely sleeps: skip per-completion
	 * wake-up signalling where a provider charges for it (libfabric tcp
	 * writes an eventfd per completion, about 1 us of a 7 us one-way
	 * latency here). Blocking waits and the fd still work, but wake at a
	 * 1 ms tick rather than at the completion. verbs pays nothing until a
	 * CQ is armed, so there it changes nothing. */
	WIMM_CTX_POLLING = 1u << 0,
};

/* Log levels of the wimm_ctx_attr.log hook. */
enum wimm_log_level {
	WIMM_LOG_ERROR = 0, /* a connection was dropped, a resource failed */
	WIMM_LOG_WARN = 1,  /* something was refused or retried */
	WIMM_LOG_INFO = 2,  /* connections coming and going */
	WIMM_LOG_DEBUG = 3,
};

/* Called from inside wimm calls of the context's thread, with a line of
 * text (no newline) that says what happened and why. It must not call back
 * into the context. */
typedef void (*wimm_log_fn)(void *arg, enum wimm_log_level level, const char *msg);

/* liveness_ms value that turns heartbeats and the silence check off. */
#define WIMM_LIVENESS_OFF UINT32_MAX

struct wimm_ctx_attr {
	/* Upper bound on the sum of send depths and receive windows of all
	 * connections of the context (each connection needs rx_depth +
	 * sq_depth + 4 completions). 0 = no fixed bound: the completion queue
	 * grows as connections come, up to what the device allows. A
	 * connection that does not fit is refused with WIMM_E_AGAIN. */
	uint32_t cq_budget;
	/* Microseconds WIMM_WAIT_ADAPTIVE spins before it sleeps. 0 = 50. */
	uint32_t spin_us;
	/* WIMM_CTX_* */
	unsigned flags;
	/* How long a post with WIMM_F_WAIT may wait for a credit or a send
	 * slot before it fails with WIMM_E_TIMEDOUT (nothing posted); 0 = no
	 * limit (a peer that never polls then stalls the sender, as a TCP
	 * peer that never reads does). */
	uint32_t post_wait_ms;
	/* A peer from which nothing at all (no doorbell, no completion, no
	 * credit return, no heartbeat) arrived for this long is reported as
	 * WIMM_EV_DISCONNECT with status WIMM_E_TIMEDOUT, on every fabric,
	 * also when it died without a word (power loss, cut link). Idle
	 * connections send a heartbeat every liveness_ms / 4, so both sides
	 * must call poll or wait at least that often. 0 = 5000;
	 * WIMM_LIVENESS_OFF: never (only what the transport itself reports). */
	uint32_t liveness_ms;
	/* Optional: where the library says why it refused, dropped or timed
	 * out a connection. NULL: silent. */
	wimm_log_fn log;
	void *log_arg;
};

/* Open a fabric context by URI:
 *   "ofi:tcp", "ofi:shm", "ofi:<libfabric provider>" (RMA + remote CQ data),
 *   "verbs:<device>" (e.g. verbs:rxe0, verbs:mlx5_0), "verbs" (first device),
 *   "auto" (an RDMA device if one is usable, else ofi:tcp).
 * attr may be NULL for defaults.
 * Errors: INVAL (NULL args), NOFABRIC (unknown scheme, backend not built),
 * NODEV (no such device/provider or it lacks RMA with remote CQ data),
 * NOMEM, PROVIDER. */
int wimm_ctx_open(const char *uri, const struct wimm_ctx_attr *attr, struct wimm_ctx **out);

/* Close a context. All its connections, listeners, regions and prepared
 * operations must have been deleted first (else WIMM_E_BUSY and nothing is
 * closed). */
int wimm_ctx_close(struct wimm_ctx **ctx);

/* The fabric URI the context resolved to (e.g. "ofi:tcp" for "auto"). */
const char *wimm_ctx_fabric(const struct wimm_ctx *ctx);

/* Limits of the opened fabric. */
struct wimm_fabric_limits {
	size_t max_msg;	    /* largest single operation, bytes */
	size_t inject_size; /* payloads up to this go inline (no source DMA) */
	uint32_t imm_bytes; /* doorbell size the fabric carries natively */
	uint32_t max_depth; /* largest send depth / receive window */
	/* Largest wimm_conn_attr.private_len a connector can send here
	 * (verbs: what is left of the 56-byte rdma_cm REQ). */
	uint32_t private_max;
	/* 8 when wimm_fetch_add / wimm_cmp_swap work on this fabric (64-bit
	 * words), 0 when they fail with WIMM_E_NOTSUP (libfabric tcp). */
	uint32_t atomic_bytes;
};
int wimm_ctx_limits(const struct wimm_ctx *ctx, struct wimm_fabric_limits *out);

/* The provider error (errno, -fi_errno, ibv_wc_status ...) recorded with the
 * last failing call on this context, and a text for it. 0 / "" if none. */
int wimm_provider_error(const struct wimm_ctx *ctx, const char **text);

/* ------------------------------------------------------- memory regions */

enum wimm_access {
	WIMM_LOCAL = 0,		     /* source or read target only */
	WIMM_REMOTE_WRITE = 1u << 0, /* peers may write (a window) */
	WIMM_REMOTE_READ = 1u << 1,  /* peers may read */
	/* Peers may run atomics (wimm_fetch_add, wimm_cmp_swap) on it. On
	 * libfabric, which has no access bit of its own for atomics, the
	 * provider is told remote read and write. */
	WIMM_REMOTE_ATOMIC = 1u << 2,
};

/* Register [addr, addr+len) with the context. Only regions meant as a
 * window get remote access. Errors: INVAL, NOMEM, PROVIDER. */
int wimm_mr_reg(struct wimm_ctx *ctx, void *addr, size_t len, unsigned access,
		struct wimm_mr **out);
/* Allocate len bytes, zeroed and page-aligned, and register them as
 * wimm_mr_reg would; wimm_mr_dereg frees them. The memory is shared memory
 * (a memfd sealed against resizing). That is what lets the ipc fabric map a
 * window in it into a peer process of the same user: the peer's writes
 * into the window are then its own stores (one copy, no system call; the
 * receiver checks each doorbell's range as always but copies nothing),
 * where a window of wimm_mr_reg memory is copied in by the receiver. On
 * the other fabrics it is registered memory like any other. Errors: INVAL
 * (NULL ctx or out, len 0, unknown access bits), NOMEM, PROVIDER
 * (memfd_create or mmap refused: wimm_provider_error says which). */
int wimm_mr_alloc(struct wimm_ctx *ctx, size_t len, unsigned access, struct wimm_mr **out);
/* Deregister. WIMM_E_BUSY if a live connection still exposes it or a
 * prepared operation (wimm_prep_new) still sends from it. */
int wimm_mr_dereg(struct wimm_mr **mr);
void *wimm_mr_addr(const struct wimm_mr *mr);
size_t wimm_mr_len(const struct wimm_mr *mr);

/* ------------------------------------------------------------ connections */

struct wimm_conn_attr {
	/* The region this side exposes to the peer (NULL: none), with the
	 * sub-range [window_off, window_off + window_len); window_len 0 means
	 * to the end of the region. Needs WIMM_REMOTE_WRITE and/or _READ. */
	struct wimm_mr *window;
	size_t window_off;
	size_t window_len;
	/* Receive window: how many doorbells (write-with-imm or
	 * send-with-imm) the peer may have in flight towards us; the peer's
	 * initial credits. 0 = 64. */
	uint32_t rx_depth;
	/* Bytes of each receive buffer for send-with-imm; 0 = no buffers
	 * (the peer's send_imm then fails with WIMM_E_NORECV). */
	uint32_t recv_size;
	/* Operations this side may have outstanding. 0 = 128. */
	uint32_t sq_depth;
	/* Handed back in every event of the connection. */
	void *user;
	/* Doorbells of this connection are counted by this counter (see
	 * wimm_counter_new); NULL: none. */
	struct wimm_counter *counter;
	/* Connecting side only: a small blob (a client id, a token) the
	 * accepting side sees in wimm_request_info() before it decides; at
	 * most wimm_fabric_limits.private_max bytes (else WIMM_E_TOOBIG). */
	const void *private_data;
	uint32_t private_len;
};

/* Listen on "host:port" ("0.0.0.0:7471", "[::1]:7471", ":7471"). attr
 * applies to every accepted connection. Port 0 picks a free port; see
 * wimm_listener_port(). Errors: INVAL, ADDR, PROVIDER (e.g. port in use,
 * with errno). */
int wimm_listen(struct wimm_ctx *ctx, const char *addr, const struct wimm_conn_attr *attr,
		struct wimm_listener **out);
int wimm_listener_delete(struct wimm_listener **l);
int wimm_listener_port(const struct wimm_listener *l);
/* Readable when a connection request is pending, for an epoll loop. */
int wimm_listener_fd(const struct wimm_listener *l);

/* Accept one connection with the listener's attributes, waiting up to
 * timeout_ms (-1 forever, 0 poll) for a request and for the connection to
 * come up. With timeout 0 the connection may still be completing its
 * set-up when it is returned: posts on it fail with WIMM_E_AGAIN (or wait
 * with WIMM_F_WAIT) until a WIMM_EV_ESTABLISHED event says it is usable
 * (wimm_conn_info().connected). It never blocks the context longer than
 * timeout_ms; events of other connections that arrive meanwhile are kept.
 * Errors: TIMEDOUT (nothing pending in time; AGAIN for timeout 0), PROTO /
 * VERSION (the request's handshake was bad: it is rejected, the listener
 * stays usable), AGAIN (cq_budget exhausted: the request is rejected with
 * AGAIN), DISCONNECTED (the connector gave up during set-up), PROVIDER. */
int wimm_accept(struct wimm_listener *l, int timeout_ms, struct wimm_conn **out);

/* The two-step accept, for a server that decides per connection:
 * take the next request (its handshake already read and checked: a bad one
 * is rejected and reported as PROTO / VERSION, as by wimm_accept), look at
 * who asks, then accept it with attributes of its own (its own window) or
 * reject it with a reason. wimm_listener_request waits up to timeout_ms
 * (0: AGAIN when none is complete yet; a slow or silent connector never
 * blocks it). Requests not decided are rejected by wimm_listener_delete. */
int wimm_listener_request(struct wimm_listener *l, int timeout_ms, struct wimm_request **out);

struct wimm_request_info {
	char peer_addr[64];	  /* "host:port" / "[v6]:port" of the connector */
	const void *private_data; /* its attr.private_data; valid while r lives */
	uint32_t private_len;
	uint32_t peer_rx_depth; /* the connector's receive window */
	size_t peer_window_len; /* what the connector exposes (0: nothing) */
};
int wimm_request_info(const struct wimm_request *r, struct wimm_request_info *out);

/* Accept r with attr (NULL: the listener's attributes) and free it; *r is
 * cleared whatever the result. The connection comes up asynchronously: a
 * WIMM_EV_ESTABLISHED event follows (or WIMM_EV_DISCONNECT if the set-up
 * fails). Errors: INVAL, AGAIN (cq_budget), the errors of attr as in
 * wimm_listen, PROVIDER; on error the request is rejected with that code. */
int wimm_request_accept(struct wimm_request **r, const struct wimm_conn_attr *attr,
			struct wimm_conn **out);

/* Reject r and free it; the connector's wimm_connect returns `reason`
 * (a WIMM_E_* code; anything else becomes WIMM_E_REFUSED), on every
 * fabric. */
int wimm_request_reject(struct wimm_request **r, int reason);

/* Connect to "host:port", waiting up to timeout_ms (-1: 10 s). Errors: ADDR,
 * UNREACHABLE (nothing listens there / no route), TIMEDOUT, PROTO, VERSION,
 * AGAIN (our cq_budget, or the listener's: it rejected us for that),
 * REFUSED or the reason the listener's wimm_request_reject gave, TOOBIG
 * (private_len above private_max), PROVIDER. */
int wimm_connect(struct wimm_ctx *ctx, const char *addr, const struct wimm_conn_attr *attr,
		 int timeout_ms, struct wimm_conn **out);

/* Close and free a connection at once. Operations still in flight are
 * abandoned (their completions are never reported); events of it still
 * queued in the context are dropped, so no event ever names a deleted
 * connection. */
int wimm_conn_delete(struct wimm_conn **c);

/* Graceful close: wait up to timeout_ms (-1: forever) until every
 * operation posted on c has completed at the transport (so written bytes
 * and doorbells have reached the peer), then delete it. Events of other
 * connections that arrive meanwhile are kept. *c is deleted and cleared in
 * every case. Returns 0, TIMEDOUT (deleted anyway, with operations still in
 * flight) or DISCONNECTED (the peer went away first). */
int wimm_conn_close(struct wimm_conn **c, int timeout_ms);

/* What the peer exposed and what this side may still post. */
struct wimm_conn_info {
	size_t peer_window_len;	     /* 0: the peer exposes no window */
	unsigned peer_window_access; /* WIMM_REMOTE_WRITE / _READ / _ATOMIC */
	uint32_t peer_rx_depth;	     /* initial credits */
	uint32_t peer_recv_size;     /* per-buffer bytes for send_imm */
	uint32_t credits;	     /* doorbells we may post right now */
	int connected;		     /* 1 while usable: set up and the peer alive */
	int establishing;	     /* accepted, waiting for WIMM_EV_ESTABLISHED */
};
int wimm_conn_info(const struct wimm_conn *c, struct wimm_conn_info *out);
void *wimm_conn_user(const struct wimm_conn *c);

/* Counters of one connection since it was made. */
struct wimm_conn_stats {
	uint64_t doorbells_in;	  /* write-with-imm / send-with-imm received */
	uint64_t bytes_in;	  /* their lengths */
	uint64_t doorbells_out;	  /* write-with-imm / send-with-imm posted */
	uint64_t bytes_out;	  /* bytes of every posted write, send and read */
	uint64_t ops_out;	  /* every operation posted */
	uint64_t credit_stalls;	  /* posts that found no credit (AGAIN or a wait) */
	uint64_t credit_stall_ns; /* time WIMM_F_WAIT posts waited for credit */
	uint64_t credit_returns;  /* credit writes sent to the peer */
	uint64_t heartbeats_out;  /* heartbeats sent */
	uint64_t heartbeats_in;	  /* heartbeats seen from the peer */
	uint64_t errors;	  /* WIMM_EV_ERROR events */
};
int wimm_conn_stats(const struct wimm_conn *c, struct wimm_conn_stats *out);

/* Counters of a context since it was opened: its connections summed (also
 * those already deleted), and the connection life cycle. */
struct wimm_ctx_stats {
	struct wimm_conn_stats total;
	uint64_t conns_open;	    /* connections alive now */
	uint64_t accepted;	    /* connections accepted */
	uint64_t connected;	    /* connections made by wimm_connect */
	uint64_t rejected;	    /* requests refused (bad handshake, budget, reject) */
	uint64_t disconnects;	    /* WIMM_EV_DISCONNECT events */
	uint64_t dropped_silent;    /* ... of them for silence (liveness_ms) */
	uint64_t dropped_overdraft; /* ... for doorbells beyond credits */
	uint64_t events;	    /* events handed to the application */
	uint32_t cq_capacity;	    /* completions the CQ(s) can hold now */
	uint32_t cq_reserved;	    /* ... of them reserved by connections */
};
int wimm_ctx_stats(const struct wimm_ctx *ctx, struct wimm_ctx_stats *out);

/* ------------------------------------------------------------- operations */

enum wimm_op {
	WIMM_OP_WRITE_IMM = 1,
	WIMM_OP_WRITE = 2,
	WIMM_OP_SEND_IMM = 3,
	WIMM_OP_READ = 4,
	WIMM_OP_FETCH_ADD = 5, /* wimm_fetch_add */
	WIMM_OP_CMP_SWAP = 6,  /* wimm_cmp_swap */
};

enum wimm_op_flags {
	/* Report completion with a WIMM_EV_SEND_DONE event. Without it the
	 * operation is unsignaled: errors are still reported (WIMM_EV_ERROR),
	 * success is silent. */
	WIMM_F_SIGNAL = 1u << 0,
	/* Out of credits or send slots: wait (driving progress) instead of
	 * returning WIMM_E_AGAIN. Fails with DISCONNECTED if the peer goes away. While
	 * waiting it hands back the receive slots of doorbells this
	 * connection already returned from poll/wait (their SEND_IMM data
	 * pointers become invalid, as at the next poll), so two peers sending
	 * to each other cannot stall. Events that arrive meanwhile are kept.
	 * Bounded by wimm_ctx_attr.post_wait_ms (WIMM_E_TIMEDOUT). */
	WIMM_F_WAIT = 1u << 1,
};

/* Write len bytes from src[src_off..] to the peer's window at dst_off and
 * ring the doorbell imm. len 0 is a pure doorbell (needs no window). The
 * peer gets one WIMM_EV_WRITE_IMM event {imm, len} after all bytes landed;
 * events of one connection arrive in post order. Consumes one credit.
 * Errors, each with nothing posted: INVAL, LOCAL_BOUNDS (src range outside
 * src), NOWINDOW, BOUNDS (dst range outside the peer's window), PERM (peer
 * window not writable), TOOBIG, AGAIN (no credit or send queue full),
 * DISCONNECTED, PROVIDER. The source must stay unchanged until the
 * operation completes (signaled), unless len <= inject_size. */
int wimm_write_imm(struct wimm_conn *c, struct wimm_mr *src, size_t src_off, size_t dst_off,
		   size_t len, uint32_t imm, unsigned flags);

/* Plain RDMA write: no doorbell, no credit. Same errors as write_imm. */
int wimm_write(struct wimm_conn *c, struct wimm_mr *src, size_t src_off, size_t dst_off, size_t len,
	       unsigned flags);

/* Two-sided send into one of the peer's receive buffers, carrying imm; the
 * peer gets WIMM_EV_SEND_IMM with the bytes. Consumes one credit. Errors as
 * write_imm plus NORECV (peer posts no buffers) and TRUNC (len above the
 * peer's recv_size). */
int wimm_send_imm(struct wimm_conn *c, struct wimm_mr *src, size_t src_off, size_t len,
		  uint32_t imm, unsigned flags);

/* RDMA read of len bytes of the peer's window at src_off into
 * dst[dst_off..]. Completion: WIMM_EV_SEND_DONE (op READ) when signaled;
 * without WIMM_F_SIGNAL the caller cannot know when the bytes are there, so
 * read is always signaled. Errors as write (PERM if not readable). */
int wimm_read(struct wimm_conn *c, struct wimm_mr *dst, size_t dst_off, size_t src_off, size_t len,
	      unsigned flags);

/* Atomics on one 64-bit word of the peer's window, the word at dst_off
 * (8-byte aligned in the peer's memory), in the peer's byte order. The
 * word's value before the operation is stored into result[result_off..+8)
 * (8-byte aligned, a region of this context); the completion is one
 * WIMM_EV_SEND_DONE (op FETCH_ADD / CMP_SWAP, len 8), always signaled as a
 * read is. No doorbell, no credit: the peer sees nothing but the word.
 * Atomicity holds against the other atomics of the fabric on that word,
 * from any connection; not against the peer's CPU stores or against plain
 * writes (verbs devices with atomic_cap IBV_ATOMIC_HCA promise no more).
 *
 * wimm_fetch_add adds `add` (modulo 2^64); wimm_cmp_swap stores `swap`
 * when the word equals `compare` (the result says whether it did: it is
 * `compare` then).
 *
 * Errors, each with nothing posted: INVAL (NULL connection, bad flags,
 * result not of this context, a target or result not 8-byte aligned),
 * LOCAL_BOUNDS (result range outside result), NOWINDOW, BOUNDS (the word
 * outside the peer's window, also enforced by the peer's transport where
 * it checks ranges), PERM (the peer's window lacks WIMM_REMOTE_ATOMIC),
 * NOTSUP (the fabric has no 64-bit atomics, e.g. libfabric tcp's MSG
 * endpoints: wimm_provider_error and the log hook say why), AGAIN (send
 * queue full), DISCONNECTED, PROVIDER. */
int wimm_fetch_add(struct wimm_conn *c, struct wimm_mr *result, size_t result_off, size_t dst_off,
		   uint64_t add, unsigned flags);
int wimm_cmp_swap(struct wimm_conn *c, struct wimm_mr *result, size_t result_off, size_t dst_off,
		  uint64_t compare, uint64_t swap, unsigned flags);

/* ---------------------------------------------------- prepared operations */

/* A prepared operation: a write-with-imm, plain write or send-with-imm
 * whose connection, source range and destination range are checked once,
 * at wimm_prep_new, and which is then posted any number of times with
 * wimm_prep_post, each time with its own imm and flags. The fabric's
 * request is built once too where the backend can (verbs: the work
 * request, so a post is the provider's post alone). For a reply or a push
 * that goes out again and again from the same bytes to the same place: a
 * ping-pong's answer, a worker's gradient shard, a server's
 * acknowledgement. The bytes are read at each post, as the operation's
 * would be. */
struct wimm_prep;

/* Prepare op (WIMM_OP_WRITE_IMM, WIMM_OP_WRITE or WIMM_OP_SEND_IMM) of len
 * bytes from src[src_off..] to the peer's window at dst_off (SEND_IMM:
 * into a receive buffer, dst_off must be 0). Checked as that operation
 * checks at its post, with the same errors: INVAL (NULL connection or out,
 * another op, src not of the connection's context, dst_off with SEND_IMM),
 * LOCAL_BOUNDS, NOWINDOW, BOUNDS, PERM, TOOBIG, NORECV and TRUNC
 * (SEND_IMM), DISCONNECTED (the connection is down), NOMEM. The op and a
 * SEND_IMM's dst_off are checked first, then the rest in the operation's
 * own order. src is held when len > 0 (a zero-length doorbell may pass src
 * NULL and holds nothing): wimm_mr_dereg returns BUSY until the prepared
 * operation is deleted. */
int wimm_prep_new(struct wimm_conn *c, enum wimm_op op, struct wimm_mr *src, size_t src_off,
		  size_t dst_off, size_t len, struct wimm_prep **out);

/* Post the prepared operation with doorbell imm (ignored by a plain
 * write) and flags (WIMM_F_SIGNAL, WIMM_F_WAIT): what the operation's own
 * call would do with the prepared arguments, with the same events and
 * credits. Errors, each with nothing posted: INVAL (NULL p, bad flags),
 * AGAIN (no credit or send queue full), TIMEDOUT (WIMM_F_WAIT),
 * DISCONNECTED (the connection is down or was deleted), PROVIDER. */
int wimm_prep_post(struct wimm_prep *p, uint32_t imm, unsigned flags);

/* Free a prepared operation and release its source region. Accepts NULL
 * and *p == NULL; clears *p. Operations it posted are not affected. May
 * come before or after its connection's wimm_conn_delete: a connection
 * deleted first leaves its prepared operations to be deleted, posting
 * none (DISCONNECTED). Returns 0. */
int wimm_prep_delete(struct wimm_prep **p);

/* ----------------------------------------------------------------- events */

enum wimm_event_type {
	WIMM_EV_WRITE_IMM = 1,	 /* peer's write-with-imm landed: imm, len */
	WIMM_EV_SEND_IMM = 2,	 /* peer's send-with-imm: imm, len, data */
	WIMM_EV_SEND_DONE = 3,	 /* a signaled local operation completed: op, op_seq */
	WIMM_EV_DISCONNECT = 4,	 /* the peer closed or died; status says why */
	WIMM_EV_ERROR = 5,	 /* a local operation failed: op, op_seq, status */
	WIMM_EV_CONNECT = 6,	 /* a listener has a pending request: wimm_accept it */
	WIMM_EV_ESTABLISHED = 7, /* an accepted connection is now usable */
	WIMM_EV_COUNT = 8,	 /* a counter's key reached its count: imm = key,
				  * op_seq = epoch, len = count, counter set */
};

struct wimm_event {
	enum wimm_event_type type;
	struct wimm_conn *conn;		/* NULL for CONNECT */
	struct wimm_listener *listener; /* CONNECT only */
	void *user;			/* the connection's attr.user */
	uint32_t imm;			/* host order */
	uint32_t len;			/* bytes written / sent / read */
	/* SEND_IMM: the received bytes, valid until the next poll or wait call
	 * on this context (the buffer is then handed back to the peer). */
	const void *data;
	enum wimm_op op; /* SEND_DONE / ERROR */
	/* SEND_DONE / ERROR: number of the operation on its connection,
	 * counting every successfully posted operation from 0. */
	uint64_t op_seq;
	/* 0 or WIMM_E_*. DISCONNECT: DISCONNECTED (the peer closed or its
	 * transport failed), TIMEDOUT (silent for liveness_ms), OVERDRAFT
	 * (it posted beyond its credits: dropped by us), PROVIDER. */
	int status;
	int prov_err;		      /* the provider's code for a failure, e.g. ibv_wc_status */
	struct wimm_counter *counter; /* COUNT only */
};

/* Fetch up to n events without blocking; returns how many (0: none) or a
 * negative error. Also drives the fabric's progress and hands consumed
 * receive slots back to the peers as credits. */
int wimm_poll(struct wimm_ctx *ctx, struct wimm_event *ev, int n);

enum wimm_wait_mode {
	WIMM_WAIT_SPIN = 0,	/* busy-poll until an event or the timeout */
	WIMM_WAIT_BLOCK = 1,	/* arm, poll again, then sleep in the kernel */
	WIMM_WAIT_ADAPTIVE = 2, /* spin attr.spin_us, then block */
};

/* Wait up to timeout_ms (-1 forever, 0 once) for at least one event; returns
 * how many were stored (0 on timeout) or a negative error. Race-free: no
 * event that arrives while the caller goes to sleep is missed. */
int wimm_wait(struct wimm_ctx *ctx, struct wimm_event *ev, int n, enum wimm_wait_mode mode,
	      int timeout_ms);

/* Drive the fabric's progress without taking events (for a receiver that
 * polls memory, as in write_poll: libfabric's tcp provider moves data only
 * when called). Events found are kept for the next poll. */
int wimm_progress(struct wimm_ctx *ctx);

/* For an application's own epoll loop: a file descriptor that becomes
 * readable when the context may have events (and at least every
 * liveness_ms / 8 while it has connections, so liveness is checked).
 * Before sleeping on it call wimm_ctx_arm(): 0 means armed, and then
 * sleeping on the fd cannot deadlock whatever was polled before (a partial
 * poll included): arm itself hands consumed receive slots back and sends
 * due credit returns. WIMM_E_AGAIN means events are already pending or
 * work is due: call wimm_poll, then arm again. Credits come back as plain
 * writes that wake no one: while a connection's last doorbell found no
 * credit (WIMM_E_AGAIN), the fd also becomes readable about every
 * millisecond, so a sender sleeping on it tries again soon. */
int wimm_ctx_fd(struct wimm_ctx *ctx, int *fd);
int wimm_ctx_arm(struct wimm_ctx *ctx);

/* ------------------------------------------------------------ imm layouts */

/* A typed layout of the 32-bit imm: named fields, most significant first,
 * whose widths add up to at most 32, e.g. {"len",16},{"seq",12},{"flag",4}. */
struct wimm_imm_field {
	const char *name;
	unsigned bits; /* 1..32 */
};

#define WIMM_IMM_MAX_FIELDS 8

struct wimm_imm_layout {
	unsigned nfields;
	struct wimm_imm_field field[WIMM_IMM_MAX_FIELDS];
	/* Filled by wimm_imm_layout_init. */
	uint8_t shift[WIMM_IMM_MAX_FIELDS];
	uint32_t mask[WIMM_IMM_MAX_FIELDS];
};

/* Validate fields (1..32 bits each, total <= 32, names distinct and
 * non-NULL) and compute shifts. Errors: INVAL, RANGE (total > 32). */
int wimm_imm_layout_init(struct wimm_imm_layout *l, const struct wimm_imm_field *fields,
			 unsigned nfields);
/* Pack values[0..nfields) into *imm. RANGE if a value exceeds its width
 * (nothing is written then). */
int wimm_imm_pack(const struct wimm_imm_layout *l, const uint32_t *values, uint32_t *imm);
/* Unpack imm into values[0..nfields). Bits outside the fields are ignored. */
int wimm_imm_unpack(const struct wimm_imm_layout *l, uint32_t imm, uint32_t *values);
/* Index of a field by name, or WIMM_E_INVAL. */
int wimm_imm_field_index(const struct wimm_imm_layout *l, const char *name);

/* ------------------------------------------------------ doorbell counters */

/* Doorbells counted across connections (the source article's section 5.3:
 * writes on different connections have no order, so "every shard is here"
 * is a count, never an arrival order). A counter reads three fields of each
 * doorbell's imm through a layout: the key (e.g. a shard), the epoch (e.g.
 * an iteration) and the source (e.g. a worker; or, without a source field,
 * the connection). For each key it keeps the newest epoch seen or expected:
 *  - a doorbell of an older epoch is stale: dropped, never delivered, and
 *    counted; its receive slot and credit go back as usual;
 *  - a second doorbell of one source for the same key and epoch is a
 *    duplicate: dropped and counted likewise;
 *  - every other doorbell is delivered as usual (WIMM_EV_WRITE_IMM /
 *    SEND_IMM) and counted; when the count set by wimm_counter_expect is
 *    reached, one WIMM_EV_COUNT follows it (imm = key, op_seq = epoch,
 *    len = count, user = attr.user), whatever the order and whichever
 *    connections the doorbells came by.
 * Epochs compare as serial numbers modulo 2^bits of their field, so an
 * iteration counter may wrap. A connection uses a counter through
 * wimm_conn_attr.counter (a listener's attr for all it accepts). */
struct wimm_counter_attr {
	const struct wimm_imm_layout *layout; /* copied */
	const char *key_field;		      /* required */
	const char *epoch_field;	      /* NULL: no epochs (no stale filter) */
	const char *source_field;	      /* NULL: the connection is the source */
	void *user;			      /* handed back in WIMM_EV_COUNT */
};
/* Errors: INVAL (no layout or key field, a field name the layout lacks). */
int wimm_counter_new(struct wimm_ctx *ctx, const struct wimm_counter_attr *attr,
		     struct wimm_counter **out);
/* BUSY while a connection or listener still uses it. */
int wimm_counter_delete(struct wimm_counter **k);
/* Raise WIMM_EV_COUNT when `count` distinct sources have rung for key at
 * epoch. What already arrived for that epoch counts (an expectation set
 * late still fires, at the next poll); a newer epoch moves the key there;
 * after a completed count the key starts a new round. Errors: INVAL (count
 * 0 or above 4096, an epoch older than the key's), NOMEM. */
int wimm_counter_expect(struct wimm_counter *k, uint32_t key, uint32_t epoch, uint32_t count);
struct wimm_counter_stats {
	uint64_t counted;     /* doorbells counted and delivered */
	uint64_t reached;     /* WIMM_EV_COUNT raised */
	uint64_t stale;	      /* dropped: an older epoch */
	uint64_t duplicates;  /* dropped: the same source twice */
	uint64_t bad_sources; /* dropped: a source field value above 4095 */
};
int wimm_counter_stats(const struct wimm_counter *k, struct wimm_counter_stats *out);
/* Where key stands: its epoch, the sources counted, the count expected (0:
 * none yet). INVAL when the key was never seen nor expected. */
int wimm_counter_state(const struct wimm_counter *k, uint32_t key, uint32_t *epoch,
		       uint32_t *arrived, uint32_t *expected);

/* --------------------------------------------------------------- discovery */

/* Print the fabrics usable on this machine and their limits (the body of
 * `wimm info`), as text or as one JSON object. */
int wimm_describe_fabrics(void *file /* FILE * */, int json);

#if defined(WIMM_BUILDING) && defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* WIMM_H */
