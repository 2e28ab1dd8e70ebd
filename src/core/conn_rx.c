/* Connections, the receiver's side and the connection's health: turning
 * completions into events, handing receive slots back and returning
 * credits, catching a peer that posts beyond its credits, heartbeats and
 * the silence check, and dropping a connection from our side. */
#include <string.h>

#include "core/conn_internal.h"
#include "core/counter_table.h"

/* An ESTABLISHING connection that is still not up after this is dropped. */
#define SETUP_TIMEOUT_NS (DEFAULT_CONNECT_TIMEOUT_MS * 1000000LL)
/* The control word where the peer asks for our heartbeat period (ms). */
#define CTL_HB_PERIOD (CTL_HEARTBEAT + 1)

static const struct wimm_backend_ops *ops_of(const struct wimm_conn *c)
{
	return wimm_ctx_ops(c->ctx);
}

static int64_t liveness_ns(const struct wimm_conn *c)
{
	uint32_t ms = wimm_ctx_liveness_ms(c->ctx);

	return ms == WIMM_LIVENESS_OFF ? 0 : (int64_t)ms * 1000000;
}

void conn_rx_init(struct wimm_conn *c)
{
	c->since_ns = c->born_ns = wimm_coarse_ns();
	c->hb_sent_ns = 0; /* the first one also says our period */
}

/* ------------------------------------------------------------ dropping */

void conn_invalidate(struct wimm_conn *c)
{
	/* Deregistering kills the keys the peer holds: whatever it still
	 * sends to them fails at our transport and changes nothing here. */
	wimm_mr_dereg(&c->win_mr);
	wimm_mr_dereg(&c->ctl_in_mr);
}

/* Operations the application asked to hear about and never will, now
 * that the connection is gone: each completes with an error. */
static void fail_pending(struct wimm_conn *c, int status)
{
	while (c->pend_n > 0) {
		struct pending_op *p = &c->pend[c->pend_head];
		struct wimm_event ev = {
		    .type = WIMM_EV_ERROR,
		    .conn = c,
		    .user = c->user,
		    .op = p->op,
		    .op_seq = p->op_seq,
		    .status = status,
		};
		if (wimm_ctx_push_event(c->ctx, &ev))
			break; /* out of memory: the DISCONNECT still comes */
		c->st.errors++;
		c->pend_head = (c->pend_head + 1) % c->pend_cap;
		c->pend_n--;
	}
	c->pend_n = 0;
}

static void mark_down(struct wimm_conn *c, int status)
{
	c->state = CONN_DOWN;
	conn_invalidate(c);
	fail_pending(c, WIMM_E_DISCONNECTED);
	struct wimm_ctx_stats *cs = wimm_ctx_counters(c->ctx);
	cs->disconnects++;
	if (status == WIMM_E_TIMEDOUT)
		cs->dropped_silent++;
	if (status == WIMM_E_OVERDRAFT)
		cs->dropped_overdraft++;
}

void conn_drop(struct wimm_conn *c, int status, const char *why)
{
	if (c->state == CONN_DOWN)
		return;
	wimm_ctx_log(c->ctx, WIMM_LOG_ERROR, "connection %p dropped (%s): %s", (void *)c,
		     wimm_err_name(status), why);
	wimm_ctx_set_provider_error(c->ctx, 0, why);
	ops_of(c)->conn_shutdown(c->bconn);
	mark_down(c, status);
	struct wimm_event ev = {
	    .type = WIMM_EV_DISCONNECT, .conn = c, .user = c->user, .status = status};
	wimm_ctx_push_event(c->ctx, &ev);
}

/* ------------------------------------------------------------ completions */

/* Completions come in post order: this one settles every signaled
 * operation up to op_seq. */
static void settle_pending(struct wimm_conn *c, uint64_t op_seq)
{
	while (c->pend_n > 0 && c->pend[c->pend_head].op_seq <= op_seq) {
		c->pend_head = (c->pend_head + 1) % c->pend_cap;
		c->pend_n--;
	}
}

/* The transport is up (said so, or data arrived on it). */
static void became_up(struct wimm_conn *c)
{
	c->state = CONN_UP;
	wimm_ctx_conn_up(c->ctx);
	if (!c->announce_up)
		return;
	c->announce_up = 0;
	struct wimm_event ev = {.type = WIMM_EV_ESTABLISHED, .conn = c, .user = c->user};
	wimm_ctx_push_event(c->ctx, &ev);
}

static void fill_event(struct wimm_event *ev, const struct wimm_conn *c, const struct wimm_cqe *q,
		       enum wimm_event_type type)
{
	memset(ev, 0, sizeof(*ev));
	ev->type = type;
	ev->conn = q->conn;
	ev->user = c->user;
	ev->imm = q->imm;
	ev->len = q->len;
	ev->data = type == WIMM_EV_SEND_IMM ? q->data : NULL;
	ev->op = q->op;
	ev->op_seq = q->op_seq;
	ev->status = q->status;
	ev->prov_err = q->prov_err;
}

static int on_doorbell(struct wimm_conn *c, const struct wimm_cqe *q, struct wimm_event *ev)
{
	/* The peer may have at most rx_depth doorbells beyond the last total
	 * we returned (it cannot have seen a newer one). More is a peer
	 * that ignores its credits: it could overrun the CQ or, on a shared
	 * receive queue, take other connections' slots. */
	if (++c->rx_arrived > (uint64_t)c->rx.depth + c->rx.returned) {
		conn_drop(c, WIMM_E_OVERDRAFT, "the peer posted doorbells beyond its credits");
		return 0;
	}
	c->st.doorbells_in++;
	c->st.bytes_in += q->len;
	fill_event(ev, c, q,
		   q->kind == WIMM_CQE_RECV_WRITE_IMM ? WIMM_EV_WRITE_IMM : WIMM_EV_SEND_IMM);
	if (!c->counter)
		return 1;
	struct wimm_event count_ev;
	int verdict = wimm_counter_doorbell(c->counter, q->imm, c->counter_source, &count_ev);
	if (verdict == WIMM_COUNT_NEW || verdict < 0)
		return 1;
	if (verdict == WIMM_COUNT_REACHED) {
		/* The doorbell, then the count it completed. */
		wimm_ctx_push_event(c->ctx, ev);
		wimm_ctx_push_event(c->ctx, &count_ev);
		return 0;
	}
	/* Stale, duplicate, no source: not delivered, but its receive slot
	 * and credit go back as if it had been. */
	wimm_conn_on_delivered(c);
	return 0;
}

int wimm_conn_on_cqe(struct wimm_conn *c, const struct wimm_cqe *q, struct wimm_event *ev,
		     int64_t now_ns)
{
	/* After the DISCONNECT nothing more of the connection is reported. */
	if (c->state == CONN_DOWN)
		return 0;
	switch (q->kind) {
	case WIMM_CQE_CONN_UP:
		c->since_ns = now_ns;
		if (c->state == CONN_ESTABLISHING)
			became_up(c);
		return 0;
	case WIMM_CQE_RECV_WRITE_IMM:
	case WIMM_CQE_RECV_SEND_IMM:
		/* Only what comes from the peer is a sign of its life: our own
		 * completions say nothing on a transport that completes a send
		 * once it is in a socket buffer. */
		c->since_ns = now_ns;
		if (c->state == CONN_ESTABLISHING)
			became_up(c);
		return on_doorbell(c, q, ev);
	case WIMM_CQE_SEND_DONE:
		if (q->internal) {
			if (q->op_seq == FENCE_OP_SEQ)
				c->fence_done = 1;
			return 0;
		}
		settle_pending(c, q->op_seq);
		fill_event(ev, c, q, WIMM_EV_SEND_DONE);
		return 1;
	case WIMM_CQE_SEND_ERROR:
		/* A failed write of ours (a credit return, a heartbeat) is the
		 * connection's failure, whether or not the transport says so
		 * with a CONN_DOWN of its own: drop it now. */
		if (q->internal) {
			conn_drop(c, q->status ? q->status : WIMM_E_DISCONNECTED,
				  "a write of the library's own failed at the transport");
			return 0;
		}
		settle_pending(c, q->op_seq);
		c->st.errors++;
		fill_event(ev, c, q, WIMM_EV_ERROR);
		if (q->status != WIMM_E_DISCONNECTED)
			return 1;
		/* The operation failed because the connection is gone: its
		 * ERROR, then the DISCONNECT. */
		wimm_ctx_push_event(c->ctx, ev);
		conn_drop(c, WIMM_E_DISCONNECTED, "an operation failed: the connection is gone");
		return 0;
	case WIMM_CQE_CONN_DOWN: {
		int status = q->status ? q->status : WIMM_E_DISCONNECTED;
		mark_down(c, status);
		fill_event(ev, c, q, WIMM_EV_DISCONNECT);
		ev->status = status;
		return 1;
	}
	}
	return 0;
}

/* ------------------------------------------------- slots and credit returns */

static void queue_release(struct wimm_conn *c)
{
	if (c->release_queued)
		return;
	c->release_queued = 1;
	wimm_ctx_queue_release(c->ctx, c);
}

void wimm_conn_on_delivered(struct wimm_conn *c)
{
	wimm_credit_rx_deliver(&c->rx);
	queue_release(c);
}

int wimm_conn_keep_queued(struct wimm_conn *c)
{
	if (c->state != CONN_DOWN &&
	    (wimm_credit_rx_pending_release(&c->rx) > 0 || c->credit_return_due))
		return 1;
	c->release_queued = 0;
	return 0;
}

int wimm_conn_return_due(const struct wimm_conn *c)
{
	return c->state != CONN_DOWN && c->credit_return_due;
}

/* One of the core's own small writes into the peer's control words. */
static int post_ctl(struct wimm_conn *c, unsigned word, uint64_t value, size_t peer_off)
{
	__atomic_store_n(&c->ctl_out[word], value, __ATOMIC_RELEASE);
	struct wimm_wr wr = {
	    .op = WIMM_OP_WRITE,
	    .local = &c->ctl_out[word],
	    .len = sizeof(uint64_t),
	    .lmr = wimm_mr_bmr(c->ctl_out_mr),
	    .raddr = c->peer.credit_addr + peer_off,
	    .rkey = c->peer.credit_key,
	    .internal = 1,
	};
	return ops_of(c)->post(c->bconn, &wr);
}

int wimm_conn_release(struct wimm_conn *c)
{
	uint32_t n = wimm_credit_rx_pending_release(&c->rx);

	if (c->state == CONN_DOWN)
		return 0;
	/* Failures here mean the endpoint is broken; its CONN_DOWN reaches
	 * the application as an event, so the poll itself does not fail. */
	if (n > 0) {
		if (ops_of(c)->rx_release(c->bconn, n))
			return 0;
		wimm_credit_rx_release(&c->rx, n);
	}
	if (c->state != CONN_UP || (!c->credit_return_due && !wimm_credit_rx_should_return(&c->rx)))
		return 0;
	/* Tell the peer the running total of released slots. The staging word
	 * only grows, so even a provider that reads it late sends a true
	 * (newer) total. */
	int ret = post_ctl(c, CTL_CREDIT, c->rx.released, WIMM_HS_CREDIT_OFF);
	if (ret) {
		/* Send queue full: try again at the next poll (or arm). */
		c->credit_return_due = ret == WIMM_E_AGAIN;
		if (c->credit_return_due)
			queue_release(c);
		return 0;
	}
	c->credit_return_due = 0;
	c->st.credit_returns++;
	wimm_credit_rx_returned(&c->rx);
	return 0;
}

/* ---------------------------------------------------------------- liveness */

/* Our heartbeat period: a quarter of our own bound, or faster when the
 * peer asked for faster (its bound may be shorter than ours). */
int64_t wimm_conn_hb_period_ns(const struct wimm_conn *c)
{
	int64_t mine = liveness_ns(c) / 4;
	uint64_t asked_ms = __atomic_load_n(&c->ctl_in[CTL_HB_PERIOD], __ATOMIC_RELAXED);
	int64_t asked = asked_ms > 0 && asked_ms < 3600000 ? (int64_t)asked_ms * 1000000 : 0;

	if (!mine)
		return asked;
	return asked && asked < mine ? asked : mine;
}

static void send_heartbeat(struct wimm_conn *c, int64_t now_ns)
{
	/* The first one also tells the peer how often we want its own. */
	if (c->hb_sent_ns == 0 && liveness_ns(c) &&
	    post_ctl(c, CTL_HB_PERIOD, (uint64_t)(liveness_ns(c) / 4000000),
		     WIMM_HS_HEARTBEAT_OFF + sizeof(uint64_t)))
		return; /* no send slot now: the next tick tries again */
	if (post_ctl(c, CTL_HEARTBEAT, c->st.heartbeats_out + 1, WIMM_HS_HEARTBEAT_OFF) == 0) {
		c->st.heartbeats_out++;
		c->hb_sent_ns = now_ns;
	}
}

void wimm_conn_heartbeat(struct wimm_conn *c, int64_t now_ns)
{
	if (c->state != CONN_UP)
		return;
	int64_t period = wimm_conn_hb_period_ns(c);
	if (!period)
		return;
	/* The first one half a period after set-up began, not at the first
	 * tick: ticks come early after a connection comes up (they read the
	 * peer's request soon), and a connection that lives a few ms sends
	 * none (a write still in flight when it closes retires a shm lane). */
	int64_t last = c->hb_sent_ns ? c->hb_sent_ns : c->born_ns - period / 2;
	if (now_ns - last >= period)
		send_heartbeat(c, now_ns);
}

void wimm_conn_forgive(struct wimm_conn *c, int64_t now_ns)
{
	if (c->since_ns < now_ns)
		c->since_ns = now_ns;
}

/* Signs of life seen since the last tick: 1 when the peer wrote into our
 * control words (the caller's `since` moves), 0 when nothing changed. */
static int saw_life(struct wimm_conn *c, int64_t now_ns)
{
	uint64_t credit = __atomic_load_n(&c->ctl_in[CTL_CREDIT], __ATOMIC_ACQUIRE);
	uint64_t hb = __atomic_load_n(&c->ctl_in[CTL_HEARTBEAT], __ATOMIC_ACQUIRE);
	if (credit == c->seen_credit && hb == c->seen_hb)
		return 0;
	c->st.heartbeats_in += hb - c->seen_hb;
	c->seen_credit = credit;
	c->seen_hb = hb;
	c->since_ns = now_ns;
	return 1;
}

int wimm_conn_looks_silent(struct wimm_conn *c, int64_t now_ns)
{
	if (c->state != CONN_UP)
		return 0;
	/* Anything the peer wrote into our control words is a sign of life,
	 * as is every doorbell (wimm_conn_on_cqe). */
	int64_t bound = liveness_ns(c);
	if (saw_life(c, now_ns) || !bound)
		return 0;
	return now_ns - c->since_ns > bound;
}

void wimm_conn_tick(struct wimm_conn *c, int64_t now_ns)
{
	if (c->state == CONN_DOWN)
		return;
	if (c->state == CONN_ESTABLISHING) {
		if (now_ns - c->since_ns > SETUP_TIMEOUT_NS)
			conn_drop(c, WIMM_E_TIMEDOUT, "the connection's set-up did not complete");
		return;
	}
	if (wimm_conn_looks_silent(c, now_ns)) {
		conn_drop(c, WIMM_E_TIMEDOUT, "nothing heard from the peer within liveness_ms");
		return;
	}
	wimm_conn_heartbeat(c, now_ns);
}
