/* The connection object, private to the connection module: conn.c (set-up,
 * teardown, info, graceful close), conn_ops.c (the four operations and the
 * sender's credits) and conn_rx.c (what the receiver owes the peer: slot
 * hand-back, credit returns, overdraft checks, heartbeats and the silence
 * check). Nothing outside those three files includes this. */
#ifndef WIMM_CONN_INTERNAL_H
#define WIMM_CONN_INTERNAL_H

#include "core/core.h"
#include "core/credit.h"

#define DEFAULT_RX_DEPTH 64
#define DEFAULT_SQ_DEPTH 128
/* Send slots kept for the core's own writes (credit returns, heartbeats,
 * the close fence), which must never wait behind the user's operations:
 * the peer could be waiting for exactly those credits. */
#define SQ_RESERVE 4
#define DEFAULT_CONNECT_TIMEOUT_MS 10000
/* op_seq of the core's close fence (see wimm_conn_close). */
#define FENCE_OP_SEQ UINT64_MAX

/* The control words. The peer writes ctl_in (its credit returns and its
 * heartbeat count, each on its own cache line); ctl_out stages what we
 * write to the peer and is registered for local use only, so a peer cannot
 * touch it. Word indexes: */
enum { CTL_CREDIT = 0, CTL_HEARTBEAT = 8, CTL_WORDS = 16 };

enum conn_state {
	CONN_ESTABLISHING, /* accepted, the transport not up yet */
	CONN_UP,
	CONN_DOWN, /* reported to the application, or about to be */
};

/* A signaled operation not yet completed: on an abort it completes with an
 * error (WIMM_EV_ERROR) before the connection's DISCONNECT. */
struct pending_op {
	uint64_t op_seq;
	enum wimm_op op;
};

struct wimm_conn {
	struct wimm_ctx *ctx;
	void *bconn;
	struct wimm_conn *next;
	void *user;
	struct wimm_mr *window; /* the application's region, if one is exposed */
	struct wimm_mr *win_mr; /* this connection's own registration of the window */
	size_t window_off, window_len;
	uint32_t recv_size; /* our receive buffers, for the peer's send_imm */
	uint64_t *ctl_in, *ctl_out;
	struct wimm_mr *ctl_in_mr, *ctl_out_mr;
	struct wimm_credit_tx tx;
	struct wimm_credit_rx rx;
	uint64_t rx_arrived; /* doorbells the transport delivered */
	struct wimm_handshake peer;
	struct wimm_fabric_limits limits;
	uint32_t cq_reserved;
	uint64_t op_seq;
	enum conn_state state;
	int announce_up; /* returned while establishing: raise ESTABLISHED */
	int credit_return_due;
	int release_queued; /* in the ctx's release queue */
	int fence_posted, fence_done;
	int starved; /* the last doorbell found no credit (wimm_ctx_starved) */

	/* Liveness: what was last seen of the peer, and when. */
	int64_t since_ns; /* set-up began / last sign of life */
	int64_t born_ns;  /* set-up began: the first heartbeat is due half a period later */
	int64_t hb_sent_ns;
	uint64_t seen_credit, seen_hb;

	struct wimm_counter *counter; /* counts our doorbells, if set */
	uint32_t counter_source;

	struct pending_op *pend; /* ring of sq_depth entries */
	uint32_t pend_cap, pend_head, pend_n;

	struct wimm_prep *preps; /* prepared operations of this connection (prepared.c) */

	struct wimm_conn_stats st;
};

/* conn_rx.c */
void conn_rx_init(struct wimm_conn *c);
/* Drop the connection from our side: cut the transport, invalidate what
 * the peer may write, queue its DISCONNECT with status (and a log line). */
void conn_drop(struct wimm_conn *c, int status, const char *why);
/* Invalidate the peer's keys: window and control words. */
void conn_invalidate(struct wimm_conn *c);

/* conn_ops.c */
void conn_pending_push(struct wimm_conn *c, uint64_t op_seq, enum wimm_op op);

#endif
