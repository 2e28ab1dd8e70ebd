/* Connections: set-up with the handshake (connecting and accepting),
 * teardown, graceful close, info and counters. The operations are in
 * conn_ops.c, the receiver's side in conn_rx.c. */
#include <stdlib.h>
#include <string.h>

#include "core/conn_internal.h"

static const struct wimm_backend_ops *ops_of(const struct wimm_conn *c)
{
	return wimm_ctx_ops(c->ctx);
}

/* ---------------------------------------------------- set-up and teardown */

static int check_attr(struct wimm_ctx *ctx, const struct wimm_conn_attr *a, size_t *woff,
		      size_t *wlen)
{
	*woff = *wlen = 0;
	if (a->private_len && !a->private_data)
		return WIMM_E_INVAL;
	if (a->counter && wimm_counter_ctx(a->counter) != ctx)
		return WIMM_E_INVAL;
	if (!a->window)
		return 0;
	if (wimm_mr_ctx(a->window) != ctx)
		return WIMM_E_INVAL;
	const struct wimm_bmr *b = wimm_mr_bmr(a->window);
	if (!(b->access & WIMM_REMOTE_ALL))
		return WIMM_E_PERM;
	if (a->window_off >= b->len)
		return WIMM_E_LOCAL_BOUNDS;
	size_t len = a->window_len ? a->window_len : b->len - a->window_off;
	if (len > b->len - a->window_off)
		return WIMM_E_LOCAL_BOUNDS;
	*woff = a->window_off;
	*wlen = len;
	return 0;
}

/* The control words: ctl_in is the only thing of ours besides the window
 * the peer may write; ctl_out is registered for local use only. */
static int ctl_alloc(struct wimm_conn *c)
{
	size_t bytes = CTL_WORDS * sizeof(uint64_t);
	int ret;

	c->ctl_in = aligned_alloc(64, bytes);
	c->ctl_out = aligned_alloc(64, bytes);
	if (!c->ctl_in || !c->ctl_out) {
		ret = WIMM_E_NOMEM;
		goto err_free_words;
	}
	memset(c->ctl_in, 0, bytes);
	memset(c->ctl_out, 0, bytes);
	ret = wimm_mr_reg(c->ctx, c->ctl_in, bytes, WIMM_REMOTE_WRITE, &c->ctl_in_mr);
	if (ret)
		goto err_free_words;
	ret = wimm_mr_reg(c->ctx, c->ctl_out, bytes, WIMM_LOCAL, &c->ctl_out_mr);
	if (ret)
		goto err_dereg_in;
	return 0;

err_dereg_in:
	wimm_mr_dereg(&c->ctl_in_mr);
err_free_words:
	free(c->ctl_in);
	free(c->ctl_out);
	c->ctl_in = c->ctl_out = NULL;
	return ret;
}

static void ctl_free(struct wimm_conn *c)
{
	wimm_mr_dereg(&c->ctl_in_mr);
	wimm_mr_dereg(&c->ctl_out_mr);
	free(c->ctl_in);
	free(c->ctl_out);
}

/* The window as this connection's own registration over exactly the
 * exposed range: its key opens nothing else, and dies with the connection
 * (a peer reconnecting with an old key is refused by the transport). */
static int window_reg(struct wimm_conn *c, struct wimm_mr *window, size_t off, size_t len)
{
	const struct wimm_bmr *b = wimm_mr_bmr(window);
	unsigned access = b->access & WIMM_REMOTE_ALL;
	int ret = wimm_mr_reg(c->ctx, (char *)b->addr + off, len, access, &c->win_mr);

	if (!ret)
		wimm_mr_share_memfd(c->win_mr, window, off);
	return ret;
}

/* Everything of a connection that exists before the peer is known. */
static int conn_alloc(struct wimm_ctx *ctx, const struct wimm_conn_attr *attr, void *breq,
		      struct wimm_conn **out)
{
	static const struct wimm_conn_attr defaults;
	const struct wimm_backend_ops *ops = wimm_ctx_ops(ctx);
	size_t woff, wlen;
	struct wimm_conn *c;
	int ret;

	if (!attr)
		attr = &defaults;
	ret = check_attr(ctx, attr, &woff, &wlen);
	if (ret)
		return ret;
	uint32_t rx_depth = attr->rx_depth ? attr->rx_depth : DEFAULT_RX_DEPTH;
	uint32_t sq_depth = attr->sq_depth ? attr->sq_depth : DEFAULT_SQ_DEPTH;
	if (rx_depth > WIMM_HS_MAX_RX_DEPTH || attr->recv_size > WIMM_HS_MAX_RECV_SIZE)
		return WIMM_E_INVAL;

	c = calloc(1, sizeof(*c));
	if (!c)
		return WIMM_E_NOMEM;
	c->ctx = ctx;
	c->user = attr->user;
	ret = wimm_ctx_limits(ctx, &c->limits);
	if (ret)
		goto err_free_conn;
	if (rx_depth > c->limits.max_depth || sq_depth > c->limits.max_depth) {
		ret = WIMM_E_INVAL;
		goto err_free_conn;
	}
	if (attr->private_len > c->limits.private_max) {
		wimm_ctx_set_provider_error(ctx, 0, "private_len exceeds the fabric's private_max");
		ret = WIMM_E_TOOBIG;
		goto err_free_conn;
	}
	c->pend_cap = sq_depth;
	c->pend = calloc(c->pend_cap, sizeof(*c->pend));
	if (!c->pend) {
		ret = WIMM_E_NOMEM;
		goto err_free_conn;
	}
	/* Every completion that can be outstanding on this connection: one per
	 * receive slot, one per send slot. The backend sizes its CQ(s) for the
	 * reservations, so a CQ cannot overrun (docs/design.md, CQ sizing). */
	c->cq_reserved = rx_depth + sq_depth + SQ_RESERVE;
	ret = wimm_ctx_cq_reserve(ctx, c->cq_reserved);
	if (ret)
		goto err_free_pend;
	ret = ctl_alloc(c);
	if (ret)
		goto err_unreserve_cq;
	if (attr->window) {
		ret = window_reg(c, attr->window, woff, wlen);
		if (ret)
			goto err_free_ctl;
	}

	wimm_credit_rx_init(&c->rx, rx_depth, 0);
	struct wimm_conn_cfg cfg = {
	    .core = c,
	    .rx_depth = rx_depth,
	    .recv_size = attr->recv_size,
	    .sq_depth = sq_depth,
	    .sq_reserve = SQ_RESERVE,
	    .window = c->win_mr ? wimm_mr_bmr(c->win_mr) : NULL,
	};
	if (attr->counter) {
		ret = wimm_counter_attach(attr->counter, 1, &c->counter_source);
		if (ret)
			goto err_dereg_window;
		c->counter = attr->counter;
	}
	ret = ops->conn_new(wimm_ctx_bctx(ctx), breq, &cfg, &c->bconn);
	if (ret)
		goto err_detach_counter;

	c->window = attr->window;
	if (c->window)
		wimm_mr_expose(c->window, 1);
	c->window_off = woff;
	c->window_len = wlen;
	c->recv_size = attr->recv_size;
	c->state = CONN_ESTABLISHING;
	*out = c;
	return 0;

err_detach_counter:
	if (c->counter)
		wimm_counter_attach(c->counter, 0, &c->counter_source);
err_dereg_window:
	wimm_mr_dereg(&c->win_mr);
err_free_ctl:
	ctl_free(c);
err_unreserve_cq:
	wimm_ctx_cq_unreserve(ctx, c->cq_reserved);
err_free_pend:
	free(c->pend);
err_free_conn:
	free(c);
	return ret;
}

static void conn_free(struct wimm_conn *c)
{
	wimm_prep_orphan_all(c->preps);
	/* The endpoint first: its completions (flushes included) are gone
	 * before the reservation they were counted in is given back. */
	ops_of(c)->conn_delete(c->bconn);
	if (c->window)
		wimm_mr_expose(c->window, -1);
	if (c->counter)
		wimm_counter_attach(c->counter, 0, &c->counter_source);
	wimm_mr_dereg(&c->win_mr);
	ctl_free(c);
	wimm_ctx_cq_unreserve(c->ctx, c->cq_reserved);
	free(c->pend);
	free(c);
}

static int local_handshake(struct wimm_conn *c, const struct wimm_conn_attr *attr, uint8_t *buf,
			   size_t cap)
{
	struct wimm_handshake hs;

	memset(&hs, 0, sizeof(hs));
	hs.version = WIMM_HS_VERSION;
	hs.rx_depth = c->rx.depth;
	if (c->win_mr) {
		const struct wimm_bmr *b = wimm_mr_bmr(c->win_mr);
		hs.flags =
		    (uint8_t)(((b->access & WIMM_REMOTE_WRITE) ? WIMM_HS_F_WINDOW_WRITE : 0) |
			      ((b->access & WIMM_REMOTE_READ) ? WIMM_HS_F_WINDOW_READ : 0) |
			      ((b->access & WIMM_REMOTE_ATOMIC) ? WIMM_HS_F_WINDOW_ATOMIC : 0));
		hs.window_addr = (uint64_t)(uintptr_t)b->addr;
		hs.window_len = c->window_len;
		hs.window_key = b->key;
	}
	hs.recv_size = c->recv_size;
	hs.credit_addr = (uint64_t)(uintptr_t)c->ctl_in;
	hs.credit_key = wimm_mr_bmr(c->ctl_in_mr)->key;
	size_t alen = sizeof(hs.addr);
	int ret = ops_of(c)->conn_addr(c->bconn, hs.addr, &alen);
	if (ret)
		return ret;
	hs.addr_len = (uint16_t)alen;
	if (attr && attr->private_len) {
		hs.priv_len = (uint16_t)attr->private_len;
		memcpy(hs.priv, attr->private_data, attr->private_len);
	}
	return wimm_hs_encode(&hs, buf, cap);
}

/* The peer's handshake is decoded and valid: adopt it. */
static int apply_peer(struct wimm_conn *c, const struct wimm_handshake *peer)
{
	c->peer = *peer;
	wimm_credit_tx_init(&c->tx, peer->rx_depth);
	int ret = ops_of(c)->conn_ready(c->bconn, peer);
	if (ret)
		return ret;
	ret = wimm_ctx_link_conn(c->ctx, c, 1);
	if (ret)
		return ret;
	conn_rx_init(c);
	wimm_ctx_count_object(c->ctx, 1);
	wimm_ctx_counters(c->ctx)->conns_open++;
	return 0;
}

int wimm_connect(struct wimm_ctx *ctx, const char *addr, const struct wimm_conn_attr *attr,
		 int timeout_ms, struct wimm_conn **out)
{
	char host[256], port[8];
	uint8_t hs[WIMM_HS_MAX_LEN], reply[WIMM_HS_MAX_LEN + 1]; /* +1: see wimm_accept */
	size_t reply_len = sizeof(reply);
	struct wimm_handshake peer;
	struct wimm_conn *c;
	int ret, reason;

	if (!out)
		return WIMM_E_INVAL;
	*out = NULL;
	if (!ctx || !addr)
		return WIMM_E_INVAL;
	ret = wimm_split_hostport(addr, host, sizeof(host), port, sizeof(port));
	if (ret)
		return ret;
	if (host[0] == '\0')
		return WIMM_E_ADDR;
	if (timeout_ms < 0)
		timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
	ret = conn_alloc(ctx, attr, NULL, &c);
	if (ret)
		return ret;
	int hs_len = local_handshake(c, attr, hs, sizeof(hs));
	if (hs_len < 0) {
		ret = hs_len;
		goto err_free_conn;
	}
	ret = ops_of(c)->connect(c->bconn, host, port, hs, (size_t)hs_len, reply, &reply_len,
				 timeout_ms);
	/* No connection was polled meanwhile: their silence starts now. */
	wimm_ctx_forgive(ctx);
	/* A wimm listener that refuses says why, the same way on every fabric. */
	if ((ret == 0 || ret == WIMM_E_REFUSED) &&
	    wimm_hs_decode_reject(reply, reply_len, &reason)) {
		wimm_ctx_set_provider_error(ctx, 0, wimm_strerror(reason));
		wimm_ctx_log(ctx, WIMM_LOG_INFO, "connect %s: refused by the listener: %s", addr,
			     wimm_err_name(reason));
		ret = reason;
		goto err_free_conn;
	}
	if (ret)
		goto err_free_conn;
	ret = wimm_hs_decode(reply, reply_len, &peer);
	if (ret)
		goto err_free_conn;
	ret = apply_peer(c, &peer);
	if (ret)
		goto err_free_conn;
	c->state = CONN_UP;
	wimm_ctx_conn_up(ctx);
	wimm_ctx_counters(ctx)->connected++;
	*out = c;
	return 0;

err_free_conn:
	conn_free(c);
	return ret;
}

int wimm_conn_accept_request(struct wimm_listener *l, void *breq, const struct wimm_handshake *peer,
			     const struct wimm_conn_attr *attr, int announce,
			     struct wimm_conn **out)
{
	struct wimm_ctx *ctx = wimm_listener_ctx(l);
	uint8_t mine[WIMM_HS_MAX_LEN];
	struct wimm_conn *c;

	int ret = conn_alloc(ctx, attr, breq, &c);
	if (ret) {
		wimm_request_refuse(ctx, breq, ret);
		return ret;
	}
	int len = local_handshake(c, NULL, mine, sizeof(mine));
	if (len < 0) {
		ret = len;
		goto err_free_conn;
	}
	ret = ops_of(c)->accept(c->bconn, mine, (size_t)len);
	if (ret)
		goto err_free_conn;
	ret = apply_peer(c, peer);
	if (ret)
		goto err_free_conn;
	c->announce_up = announce;
	wimm_ctx_counters(ctx)->accepted++;
	*out = c;
	return 0;

err_free_conn:
	/* The request now belongs to the endpoint: deleting it refuses. */
	conn_free(c);
	return ret;
}

int wimm_conn_settled(const struct wimm_conn *c, int *failed)
{
	*failed = c->state == CONN_DOWN;
	return c->state != CONN_ESTABLISHING;
}

void wimm_conn_set_announce(struct wimm_conn *c, int announce)
{
	c->announce_up = announce;
}

int wimm_conn_delete(struct wimm_conn **pc)
{
	if (!pc || !*pc)
		return 0;
	struct wimm_conn *c = *pc;
	struct wimm_ctx_stats *cs = wimm_ctx_counters(c->ctx);
	wimm_ctx_purge_conn(c->ctx, c);
	if (c->starved)
		wimm_ctx_starved(c->ctx, -1);
	wimm_ctx_link_conn(c->ctx, c, 0);
	wimm_ctx_count_object(c->ctx, -1);
	wimm_conn_add_stats(c, &cs->total);
	cs->conns_open--;
	conn_free(c);
	*pc = NULL;
	return 0;
}

/* ---------------------------------------------------------- graceful close */

static int fence_settled(void *arg)
{
	const struct wimm_conn *c = arg;

	return c->fence_done || c->state == CONN_DOWN;
}

int wimm_conn_close(struct wimm_conn **pc, int timeout_ms)
{
	if (!pc || !*pc)
		return 0;
	struct wimm_conn *c = *pc;
	int64_t deadline = wimm_deadline_ms(timeout_ms, -1);
	int ret = c->state == CONN_DOWN ? WIMM_E_DISCONNECTED : 0;

	if (c->state == CONN_UP) {
		/* Credits we owe go out first, then a signaled zero-length write
		 * that completes once delivered: sends complete in order, so its
		 * completion says everything posted before it has reached the
		 * peer's memory. */
		wimm_conn_release(c);
		struct wimm_wr wr = {
		    .op = WIMM_OP_WRITE,
		    .raddr = c->peer.credit_addr,
		    .rkey = c->peer.credit_key,
		    .signal = 1,
		    .internal = 1,
		    .delivered = 1,
		    .op_seq = FENCE_OP_SEQ,
		};
		int64_t post_deadline = deadline;
		while ((ret = ops_of(c)->post(c->bconn, &wr)) == WIMM_E_AGAIN) {
			ret = wimm_ctx_progress_until(c->ctx, NULL, NULL, wimm_now_ms() + 1);
			if ((ret && ret != WIMM_E_TIMEDOUT) || wimm_now_ms() >= post_deadline) {
				ret = ret ? ret : WIMM_E_TIMEDOUT;
				break;
			}
			ret = WIMM_E_AGAIN;
		}
		if (ret == 0) {
			c->fence_posted = 1;
			ret = wimm_ctx_progress_until(c->ctx, fence_settled, c, deadline);
			if (ret == 0 && !c->fence_done)
				ret = WIMM_E_DISCONNECTED;
		}
	}
	wimm_conn_delete(pc);
	return ret;
}

/* ------------------------------------------------------------ information */

static uint64_t peer_released(const struct wimm_conn *c)
{
	/* Written by the peer's NIC / provider; acquire pairs with the data
	 * it announces. */
	return __atomic_load_n(&c->ctl_in[CTL_CREDIT], __ATOMIC_ACQUIRE);
}

int wimm_conn_info(const struct wimm_conn *c, struct wimm_conn_info *out)
{
	if (!c || !out)
		return WIMM_E_INVAL;
	memset(out, 0, sizeof(*out));
	out->peer_window_len = (size_t)c->peer.window_len;
	out->peer_window_access =
	    ((c->peer.flags & WIMM_HS_F_WINDOW_WRITE) ? WIMM_REMOTE_WRITE : 0) |
	    ((c->peer.flags & WIMM_HS_F_WINDOW_READ) ? WIMM_REMOTE_READ : 0) |
	    ((c->peer.flags & WIMM_HS_F_WINDOW_ATOMIC) ? WIMM_REMOTE_ATOMIC : 0);
	out->peer_rx_depth = c->peer.rx_depth;
	out->peer_recv_size = c->peer.recv_size;
	out->credits = wimm_credit_tx_available(&c->tx, peer_released(c));
	out->connected = c->state == CONN_UP;
	out->establishing = c->state == CONN_ESTABLISHING;
	return 0;
}

void *wimm_conn_user(const struct wimm_conn *c)
{
	return c ? c->user : NULL;
}

int wimm_conn_stats(const struct wimm_conn *c, struct wimm_conn_stats *out)
{
	if (!c || !out)
		return WIMM_E_INVAL;
	*out = c->st;
	return 0;
}

void wimm_conn_add_stats(const struct wimm_conn *c, struct wimm_conn_stats *sum)
{
	sum->doorbells_in += c->st.doorbells_in;
	sum->bytes_in += c->st.bytes_in;
	sum->doorbells_out += c->st.doorbells_out;
	sum->bytes_out += c->st.bytes_out;
	sum->ops_out += c->st.ops_out;
	sum->credit_stalls += c->st.credit_stalls;
	sum->credit_stall_ns += c->st.credit_stall_ns;
	sum->credit_returns += c->st.credit_returns;
	sum->heartbeats_out += c->st.heartbeats_out;
	sum->heartbeats_in += c->st.heartbeats_in;
	sum->errors += c->st.errors;
}

struct wimm_conn *wimm_conn_next(struct wimm_conn *c)
{
	return c->next;
}

void wimm_conn_set_next(struct wimm_conn *c, struct wimm_conn *next)
{
	c->next = next;
}

void *wimm_conn_bconn(const struct wimm_conn *c)
{
	return c->bconn;
}

struct wimm_ctx *wimm_conn_ctx(const struct wimm_conn *c)
{
	return c->ctx;
}

struct wimm_prep **wimm_conn_preps(struct wimm_conn *c)
{
	return &c->preps;
}
