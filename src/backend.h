/* The backend ops table: the one seam between wimm's core and a transport.
 *
 * The core owns everything that is the same on every fabric: URI parsing,
 * handshake encoding and strict decoding, bounds checks, credit accounting,
 * the event backlog and the wait modes, and the per-connection bookkeeping
 * every backend embeds (core/send_ring.h, core/recv_slots.h; the down-state
 * machine, forced signals and control-plane throttling below). A backend
 * owns its provider objects and moves bytes. Division of work for each object:
 *
 *   core                                 backend
 *   struct wimm_ctx    -> void *bctx     device/domain, CQ(s), wait fd
 *   struct wimm_mr     -> struct wimm_bmr  registration, keys, desc
 *   struct wimm_listener -> void *blis   passive endpoint / cm listener
 *   struct wimm_conn   -> void *bconn    QP / endpoint, receive slots
 *
 * Contract every backend keeps (docs/design.md, checked by tests/conformance):
 * - post() either posts exactly what it was asked or posts nothing and
 *   returns a negative WIMM_E_*; it never blocks.
 * - poll() returns completions of one connection in post order, a receive
 *   completion only after its bytes are visible to the CPU, and never a
 *   completion naming a connection that conn_delete() has freed.
 * - A dead peer surfaces as one WIMM_CQE_CONN_DOWN from poll() (within
 *   about 1 s where the transport tells), never as a hang; outstanding
 *   operations then complete with errors or are dropped with the
 *   connection. Silent deaths are the core's business (heartbeats).
 * - The control plane (connection requests, CM events, disconnects,
 *   liveness sockets) is looked at within about a millisecond of a busy
 *   loop too, not only when poll() comes back empty.
 * - Nothing blocks beyond the timeout it is given; get_request(0) and
 *   accept() never block at all.
 * - Provider errors are recorded with wimm_ctx_set_provider_error() before
 *   returning WIMM_E_PROVIDER (or a more precise code).
 * - The hot path (post, poll with completions pending) makes no syscalls
 *   beyond what the provider itself needs.
 */
#ifndef WIMM_BACKEND_H
#define WIMM_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "wimm.h"

struct wimm_handshake;

/* Every remote access bit of enum wimm_access. */
#define WIMM_REMOTE_ALL (WIMM_REMOTE_WRITE | WIMM_REMOTE_READ | WIMM_REMOTE_ATOMIC)

/* The backend's view of a registered region. */
struct wimm_bmr {
	void *addr;
	size_t len;
	unsigned access; /* WIMM_LOCAL / WIMM_REMOTE_* */
	uint64_t key;	 /* remote key the peer uses (rkey / fi_mr_key) */
	void *desc;	 /* local descriptor for posts (fi_mr_desc / ibv_mr *) */
	void *priv;	 /* backend's own handle (ibv_mr * / fid_mr *) */
	/* Memory of wimm_mr_alloc: the sealed memfd holding addr, and addr's
	 * offset in it (a window's own registration shares its region's);
	 * -1 otherwise. Set by the core after mr_reg. */
	int memfd;
	uint64_t memfd_off;
};

/* Per-connection sizing the core hands to conn_new(). */
struct wimm_conn_cfg {
	struct wimm_conn *core; /* tag every completion of this conn with it */
	uint32_t rx_depth;	/* receive slots to keep posted */
	uint32_t recv_size;	/* bytes per receive slot (0: zero-length slots) */
	uint32_t sq_depth;	/* user operations that may be outstanding */
	uint32_t sq_reserve;	/* extra send slots for the core's credit writes */
	/* The window this side exposes (its own registration), or NULL. */
	const struct wimm_bmr *window;
};

/* A work request, already bounds-checked and resolved by the core. */
struct wimm_wr {
	enum wimm_op op;
	void *local; /* source (write/send) or target (read) */
	size_t len;
	const struct wimm_bmr *lmr; /* region of `local`; NULL only if len == 0 */
	uint64_t raddr;		    /* remote address (write/read) */
	uint64_t rkey;		    /* remote key (write/read) */
	uint32_t imm;		    /* host order (WRITE_IMM / SEND_IMM) */
	/* FETCH_ADD: the addend; CMP_SWAP: the value stored on a match.
	 * `local` then is the 8-byte result, raddr 8-byte aligned. */
	uint64_t operand;
	uint64_t compare; /* CMP_SWAP: the value the word must hold */
	int signal;	  /* report success as WIMM_CQE_SEND_DONE */
	int internal;	  /* core's credit / heartbeat write: may use sq_reserve */
	/* Complete only once the bytes are placed at the peer, not when they
	 * left (the graceful close's fence: on a stream transport the peer
	 * may otherwise lose what is still in its socket when we go). RC
	 * completions already mean that. */
	int delivered;
	uint64_t op_seq; /* echoed in the completion */
};

enum wimm_cqe_kind {
	WIMM_CQE_RECV_WRITE_IMM = 1, /* peer's write-with-imm: imm, len */
	WIMM_CQE_RECV_SEND_IMM,	     /* peer's send-with-imm: imm, len, data */
	WIMM_CQE_SEND_DONE,	     /* a signaled op completed: op, op_seq */
	WIMM_CQE_SEND_ERROR,	     /* an op failed: op, op_seq, status, prov_err */
	WIMM_CQE_CONN_DOWN,	     /* connection lost: status, prov_err */
	WIMM_CQE_CONN_UP,	     /* an accepted connection finished its set-up */
};

struct wimm_cqe {
	enum wimm_cqe_kind kind;
	struct wimm_conn *conn; /* the cfg.core given at conn_new */
	uint32_t imm;		/* host order */
	uint32_t len;
	const void *data; /* RECV_SEND_IMM: slot bytes, valid until rx_release */
	enum wimm_op op;
	uint64_t op_seq;
	int internal; /* SEND_ERROR of a core credit write */
	int status;   /* WIMM_E_* */
	int prov_err; /* ibv_wc_status, -fi_errno, errno */
};

/* The one way a backend reports a lost connection. */
static inline void wimm_cqe_conn_down(struct wimm_cqe *e, struct wimm_conn *conn, int status,
				      int prov_err)
{
	*e = (struct wimm_cqe){
	    .kind = WIMM_CQE_CONN_DOWN,
	    .conn = conn,
	    .status = status,
	    .prov_err = prov_err,
	};
}

/* What every backend keeps per connection, written once here.
 *
 * The down-state machine: a connection is alive until its loss is found
 * (pending: one CONN_DOWN to report, after what completed before it), then
 * reported; later losses change nothing. */
enum wimm_down_state { WIMM_DOWN_ALIVE = 0, WIMM_DOWN_PENDING, WIMM_DOWN_REPORTED };
struct wimm_down {
	enum wimm_down_state state;
	int status, prov_err;
};

/* Found lost: 1 if it was alive (the first loss is the one reported). */
static inline int wimm_down_mark(struct wimm_down *d, int status, int prov_err)
{
	if (d->state != WIMM_DOWN_ALIVE)
		return 0;
	d->state = WIMM_DOWN_PENDING;
	d->status = status;
	d->prov_err = prov_err;
	return 1;
}

/* The connection's last word: fill *e once, 1 when it did. */
static inline int wimm_down_emit(struct wimm_down *d, struct wimm_cqe *e, struct wimm_conn *conn)
{
	if (d->state != WIMM_DOWN_PENDING)
		return 0;
	d->state = WIMM_DOWN_REPORTED;
	wimm_cqe_conn_down(e, conn, d->status, d->prov_err);
	return 1;
}

/* Forced signals: an unsignaled send retires only through a later
 * completion, so at most `every - 1` run in a row and a full send queue
 * always holds a signaled one whose completion frees the slots. */
struct wimm_signal_policy {
	uint32_t every, run;
};

static inline void wimm_signal_init(struct wimm_signal_policy *p, uint32_t slots)
{
	p->every = slots / 2 ? slots / 2 : 1;
	p->run = 0;
}

/* Must this send be signaled (the caller's wish, or the policy's)? */
static inline int wimm_signal_needed(const struct wimm_signal_policy *p, int asked)
{
	return asked || p->run + 1 >= p->every;
}

static inline void wimm_signal_posted(struct wimm_signal_policy *p, int signaled)
{
	p->run = signaled ? 0 : p->run + 1;
}

struct wimm_backend_ops {
	const char *scheme; /* "ofi", "verbs", "ipc" */

	/* Open the fabric named by `spec` (the URI after "scheme:", may be
	 * ""). cq_budget: completions that may be outstanding over all
	 * connections to begin with (cq_resize grows it); size the CQ(s) for
	 * it. flags: WIMM_CTX_*. Errors: NODEV, NOTSUP, PROVIDER. `ctx` is
	 * for wimm_ctx_set_provider_error(). */
	int (*ctx_open)(struct wimm_ctx *ctx, const char *spec, uint32_t cq_budget, unsigned flags,
			void **bctx);
	void (*ctx_close)(void *bctx);
	/* Canonical name of the opened fabric, e.g. "ofi:tcp", "verbs:rxe0". */
	const char *(*ctx_fabric)(void *bctx);
	/* private_max: bytes of the connector's handshake message the
	 * transport can carry (the core subtracts its own handshake). */
	int (*ctx_limits)(void *bctx, struct wimm_fabric_limits *out);
	/* Make room for `total` completions outstanding over all connections
	 * (the core calls it before a connection that needs more is made).
	 * 0, or AGAIN when the device cannot (with the provider error set). */
	int (*cq_resize)(void *bctx, uint32_t total);
	/* Print what this backend can open on this machine (wimm info);
	 * json: append members to an open JSON array ("first" tracks commas). */
	int (*describe)(FILE *f, int json, int *first);
	/* 1 if `auto` should pick this backend (a usable device exists). */
	int (*auto_probe)(char *spec, size_t spec_len);

	int (*mr_reg)(void *bctx, void *addr, size_t len, unsigned access, struct wimm_bmr *out);
	void (*mr_dereg)(void *bctx, struct wimm_bmr *mr);

	/* Passive side. host may be "" (any). *port receives the bound port. */
	int (*listen)(void *bctx, const char *host, const char *port, void **blis, int *port_out);
	void (*listener_close)(void *blis);
	int (*listener_fd)(void *blis);
	/* Wait up to timeout_ms for a request whose handshake has fully
	 * arrived; return its bytes (the peer's, copied into hs; *hs_len is
	 * the capacity in and the length out, cut to the capacity: the core
	 * passes one byte more than any valid handshake so that a cut message
	 * still reads as too long) and a request handle. TIMEDOUT / AGAIN
	 * (timeout 0) when none. A connector that sends its handshake slowly
	 * (or never) is kept aside, never waited for: timeout 0 never blocks.
	 * The listener fd is readable while anything is pending there. */
	int (*get_request)(void *blis, int timeout_ms, void **breq, uint8_t *hs, size_t *hs_len);
	/* Optional: 1 when a request is pending, after driving the CM's
	 * progress, for providers whose listener fd does not say so reliably
	 * (libfabric tcp reads a connector's CM data from a socket its EQ fd
	 * does not watch). The core asks every few milliseconds. NULL: the
	 * listener fd is exact. */
	int (*listener_pending)(void *blis);
	/* The connector's address as text ("host:port", "[v6]:port"). */
	int (*request_peer)(void *breq, char *buf, size_t len);
	/* Refuse a request, handing the connector the core's reject message
	 * (msg, len bytes: see handshake.h) where the transport can carry it,
	 * and free the request. */
	void (*reject)(void *breq, const uint8_t *msg, size_t len);

	/* Create the endpoint of a new connection: from a request (passive
	 * side) or breq == NULL (active side). Posts rx_depth receive slots. */
	int (*conn_new)(void *bctx, void *breq, const struct wimm_conn_cfg *cfg, void **bconn);
	/* Transport address the peer needs beyond host:port (RDM endpoint
	 * name); *len = 0 when none. Goes into the handshake. */
	int (*conn_addr)(void *bconn, uint8_t *buf, size_t *len);
	/* Active side: reach host:port, send hs, receive the peer's reply
	 * bytes into reply/reply_len (capacity in, length out). When the
	 * listener rejected us with a message, copy that message into reply
	 * and return WIMM_E_REFUSED (the core reads the reason from it);
	 * UNREACHABLE when nothing listens there. */
	int (*connect)(void *bconn, const char *host, const char *port, const uint8_t *hs,
		       size_t hs_len, uint8_t *reply, size_t *reply_len, int timeout_ms);
	/* Passive side: answer the request with our handshake bytes. Never
	 * blocks: poll() later returns one WIMM_CQE_CONN_UP when the
	 * connection is usable (or WIMM_CQE_CONN_DOWN if the set-up failed). */
	int (*accept)(void *bconn, const uint8_t *hs, size_t hs_len);
	/* Both sides, after the peer's handshake is decoded and checked:
	 * anything the endpoint needs from it (RDM: insert its address). */
	int (*conn_ready)(void *bconn, const struct wimm_handshake *peer);
	/* Cut the transport now (the core drops a misbehaving peer): the
	 * peer sees a disconnect, nothing it sends lands any more, later posts
	 * fail with DISCONNECTED; conn_delete still follows. */
	void (*conn_shutdown)(void *bconn);
	/* Tear down; completions of it are never returned afterwards. */
	void (*conn_delete)(void *bconn);

	int (*post)(void *bconn, const struct wimm_wr *wr);
	/* Optional: post a FETCH_ADD or CMP_SWAP (on 64-bit words, already
	 * checked for bounds, alignment and the peer's permission), with the
	 * contract of post(); its success is a SEND_DONE like a read's. Where
	 * the fabric has no such atomics: NOTSUP, with the provider error set
	 * to say why. NULL: the backend has none (the core says NOTSUP). */
	int (*post_atomic)(void *bconn, const struct wimm_wr *wr);
	/* Optional: an unsignaled plain write of len > 0 bytes (bounds and
	 * permission checked by the core against the peer's window, raddr /
	 * rkey as in post()) that the backend completes at once by storing
	 * the bytes into the peer's memory: 0 once stored, in order with the
	 * connection's earlier writes; DISCONNECTED when the connection is
	 * lost; NOTSUP when this write cannot be stored (the core then
	 * post()s it). NULL: never. */
	int (*store)(void *bconn, uint64_t raddr, uint64_t rkey, const void *src, size_t len);
	/* Optional, all three or none: a prepared operation's request, built
	 * once from wr (WRITE_IMM, WRITE or SEND_IMM, checked by the core)
	 * into *bprep, which does not depend on bconn staying alive (the core
	 * frees it with prep_delete, before or after conn_delete). prep_post
	 * posts it with the contract of post(), taking from wr only what
	 * changes from post to post: imm, signal and op_seq (the rest is as
	 * at prep_new). prep_new: NOMEM. NULL: the core post()s the prepared
	 * wr. */
	int (*prep_new)(void *bconn, const struct wimm_wr *wr, void **bprep);
	int (*prep_post)(void *bconn, void *bprep, const struct wimm_wr *wr);
	void (*prep_delete)(void *bprep);
	/* Hand `n` consumed receive slots (oldest first) back to the
	 * receive queue; post them in one batch. */
	int (*rx_release)(void *bconn, uint32_t n);

	/* Up to n completions; 0 when none. Drives progress. */
	int (*poll)(void *bctx, struct wimm_cqe *out, int n);
	/* A file descriptor readable when poll() may return something. */
	int (*fd)(void *bctx);
	/* Arm the fd: 0 = armed, safe to sleep; WIMM_E_AGAIN = something is
	 * pending, poll first. Acknowledge consumed events in batches. */
	int (*arm)(void *bctx);
};

/* Backends built into this library (NULL-terminated), see ctx.c. */
extern const struct wimm_backend_ops *const wimm_backends[];
#ifdef WIMM_HAVE_OFI
extern const struct wimm_backend_ops wimm_ofi_ops;
#endif
#ifdef WIMM_HAVE_VERBS
extern const struct wimm_backend_ops wimm_verbs_ops;
#endif
#ifdef WIMM_HAVE_IPC
extern const struct wimm_backend_ops wimm_ipc_ops;
#endif

/* Core services for backends. */
void wimm_ctx_set_provider_error(struct wimm_ctx *ctx, int prov_err, const char *text);
/* For a backend's blocking wait (a connect): send the heartbeats of the
 * context's other connections that are due, so their peers do not take
 * the wait for silence. Cheap when nothing is due. */
void wimm_ctx_keepalive(struct wimm_ctx *ctx);

/* Split "host:port" / "[v6]:port" / ":port" into host and port strings.
 * WIMM_E_ADDR when malformed. */
int wimm_split_hostport(const char *addr, char *host, size_t host_len, char *port, size_t port_len);

/* "host:port" / "[v6]:port" of a socket address (numeric); WIMM_E_ADDR for
 * a family other than IPv4/IPv6. */
struct sockaddr;
int wimm_sockaddr_text(const struct sockaddr *sa, char *buf, size_t len);

/* Monotonic clocks. wimm_coarse_ns is for "about a millisecond" checks on
 * hot paths: CLOCK_MONOTONIC costs a system call and a device read on
 * clocksources without a vDSO mode (hpet, acpi_pm: e.g. a TCG guest), the
 * coarse clock is a vDSO memory read everywhere. */
int64_t wimm_now_ms(void);
int64_t wimm_now_ns(void);
int64_t wimm_coarse_ns(void);
/* A deadline timeout_ms from now (negative: default_ms; a negative
 * default_ms: none, INT64_MAX), and the
 * milliseconds left until it, clamped to 0..INT32_MAX for poll(2). */
int64_t wimm_deadline_ms(int timeout_ms, int default_ms);
int wimm_remaining_ms(int64_t deadline);

/* Control-plane throttling, the same on every backend: a busy poll looks at
 * the control plane (CM events, liveness sockets, async events) at most once
 * a period, on the coarse clock, so a stream neither starves it nor pays a
 * system call per poll; after arm() (the blocking path) the next poll looks
 * at once. */
#define WIMM_CTL_PERIOD_NS 1000000
struct wimm_ctl_throttle {
	int64_t next_ns;
};

/* 1 when the control plane is due now (and the next look a period away). */
static inline int wimm_ctl_due(struct wimm_ctl_throttle *t)
{
	int64_t now = wimm_coarse_ns();

	if (now < t->next_ns)
		return 0;
	t->next_ns = now + WIMM_CTL_PERIOD_NS;
	return 1;
}

/* The next wimm_ctl_due() says yes. */
static inline void wimm_ctl_soon(struct wimm_ctl_throttle *t)
{
	t->next_ns = 0;
}

#endif /* WIMM_BACKEND_H */
