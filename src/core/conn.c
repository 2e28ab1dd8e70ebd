/* Connections: set-up with the handshake, the four operations with their
 * bounds and credit checks, and the receive-side credit return. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "core/credit.h"

#define DEFAULT_RX_DEPTH 64
#define DEFAULT_SQ_DEPTH 128
/* Send slots kept for credit writes, which must never wait behind the
 * user's operations (the peer could be waiting for exactly those credits). */
#define SQ_RESERVE 4
#define DEFAULT_CONNECT_TIMEOUT_MS 10000

/* Where credits land: the peer writes word[CREDIT_IN]; word[CREDIT_OUT]
 * stages the value we write to the peer. Own cache line each. */
enum { CREDIT_IN = 0, CREDIT_OUT = 8, CREDIT_WORDS = 16 };

struct wimm_conn {
	struct wimm_ctx *ctx;
	void *bconn;
	struct wimm_conn *next;
	void *user;
	struct wimm_mr *window; /* what we expose, if anything */
	size_t window_off, window_len;
	uint32_t recv_size; /* our receive buffers, for the peer's send_imm */
	uint64_t *credit_words;
	struct wimm_mr *credit_mr;
	struct wimm_credit_tx tx;
	struct wimm_credit_rx rx;
	struct wimm_handshake peer;
	struct wimm_fabric_limits limits;
	uint32_t cq_reserved;
	uint64_t op_seq;
	int connected;
	int down_reported;
	int credit_return_due;
	int release_queued; /* in the ctx's release queue */
};

static const struct wimm_backend_ops *ops_of(const struct wimm_conn *c)
{
	return wimm_ctx_ops(c->ctx);
}

/* ---------------------------------------------------- set-up and teardown */

static int check_attr(struct wimm_ctx *ctx, const struct wimm_conn_attr *a, size_t *woff,
		      size_t *wlen)
{
	*woff = *wlen = 0;
	if (!a->window)
		return 0;
	if (wimm_mr_ctx(a->window) != ctx)
		return WIMM_E_INVAL;
	const struct wimm_bmr *b = wimm_mr_bmr(a->window);
	if (!(b->access & (WIMM_REMOTE_WRITE | WIMM_REMOTE_READ)))
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
	ret = ops->ctx_limits(wimm_ctx_bctx(ctx), &c->limits);
	if (ret)
		goto err_free_conn;
	if (rx_depth > c->limits.max_depth || sq_depth > c->limits.max_depth) {
		ret = WIMM_E_INVAL;
		goto err_free_conn;
	}
	/* Every completion that can be outstanding on this connection: one per
	 * receive slot, one per send slot. The backend sizes its CQ(s) for the
	 * context's budget, so a CQ cannot overrun (docs/errata.md E5). */
	c->cq_reserved = rx_depth + sq_depth + SQ_RESERVE;
	ret = wimm_ctx_cq_reserve(ctx, c->cq_reserved);
	if (ret)
		goto err_free_conn;

	c->credit_words = aligned_alloc(64, CREDIT_WORDS * sizeof(uint64_t));
	if (!c->credit_words) {
		ret = WIMM_E_NOMEM;
		goto err_unreserve_cq;
	}
	memset(c->credit_words, 0, CREDIT_WORDS * sizeof(uint64_t));
	/* Only the credit word is exposed for writing, not its neighbours'
	 * memory: the region is exactly this allocation. */
	ret = wimm_mr_reg(ctx, c->credit_words, CREDIT_WORDS * sizeof(uint64_t), WIMM_REMOTE_WRITE,
			  &c->credit_mr);
	if (ret)
		goto err_free_words;

	wimm_credit_rx_init(&c->rx, rx_depth, 0);
	struct wimm_conn_cfg cfg = {
	    .core = c,
	    .rx_depth = rx_depth,
	    .recv_size = attr->recv_size,
	    .sq_depth = sq_depth,
	    .sq_reserve = SQ_RESERVE,
	};
	ret = ops->conn_new(wimm_ctx_bctx(ctx), breq, &cfg, &c->bconn);
	if (ret)
		goto err_dereg_credit;

	c->window = attr->window;
	if (c->window)
		wimm_mr_expose(c->window, 1);
	c->window_off = woff;
	c->window_len = wlen;
	c->recv_size = attr->recv_size;
	*out = c;
	return 0;

err_dereg_credit:
	wimm_mr_dereg(&c->credit_mr);
err_free_words:
	free(c->credit_words);
err_unreserve_cq:
	wimm_ctx_cq_unreserve(ctx, c->cq_reserved);
err_free_conn:
	free(c);
	return ret;
}

static void conn_free(struct wimm_conn *c)
{
	ops_of(c)->conn_delete(c->bconn);
	if (c->window)
		wimm_mr_expose(c->window, -1);
	wimm_mr_dereg(&c->credit_mr);
	free(c->credit_words);
	wimm_ctx_cq_unreserve(c->ctx, c->cq_reserved);
	free(c);
}

static int local_handshake(struct wimm_conn *c, uint8_t *buf, size_t cap)
{
	struct wimm_handshake hs;

	memset(&hs, 0, sizeof(hs));
	hs.version = WIMM_HS_VERSION;
	hs.rx_depth = c->rx.depth;
	if (c->window) {
		const struct wimm_bmr *b = wimm_mr_bmr(c->window);
		hs.flags =
		    (uint8_t)(((b->access & WIMM_REMOTE_WRITE) ? WIMM_HS_F_WINDOW_WRITE : 0) |
			      ((b->access & WIMM_REMOTE_READ) ? WIMM_HS_F_WINDOW_READ : 0));
		hs.window_addr = (uint64_t)(uintptr_t)b->addr + c->window_off;
		hs.window_len = c->window_len;
		hs.window_key = b->key;
	}
	hs.recv_size = c->recv_size;
	const struct wimm_bmr *cb = wimm_mr_bmr(c->credit_mr);
	hs.credit_addr = (uint64_t)(uintptr_t)&c->credit_words[CREDIT_IN];
	hs.credit_key = cb->key;
	size_t alen = sizeof(hs.addr);
	int ret = ops_of(c)->conn_addr(c->bconn, hs.addr, &alen);
	if (ret)
		return ret;
	hs.addr_len = (uint16_t)alen;
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
	c->connected = 1;
	wimm_ctx_count_object(c->ctx, 1);
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
	int ret;

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
	int hs_len = local_handshake(c, hs, sizeof(hs));
	if (hs_len < 0) {
		ret = hs_len;
		goto err_free_conn;
	}
	ret = ops_of(c)->connect(c->bconn, host, port, hs, (size_t)hs_len, reply, &reply_len,
				 timeout_ms);
	if (ret)
		goto err_free_conn;
	ret = wimm_hs_decode(reply, reply_len, &peer);
	if (ret)
		goto err_free_conn;
	ret = apply_peer(c, &peer);
	if (ret)
		goto err_free_conn;
	*out = c;
	return 0;

err_free_conn:
	conn_free(c);
	return ret;
}

int wimm_conn_accept_request(struct wimm_listener *l, void *breq, const uint8_t *hs, size_t hs_len,
			     int timeout_ms, struct wimm_conn **out)
{
	struct wimm_ctx *ctx = wimm_listener_ctx(l);
	const struct wimm_backend_ops *ops = wimm_ctx_ops(ctx);
	const struct wimm_conn_attr *attr = wimm_listener_attr(l);
	uint8_t mine[WIMM_HS_MAX_LEN];
	struct wimm_handshake peer;
	struct wimm_conn *c;

	/* A bad request is refused and costs the listener nothing. */
	int ret = wimm_hs_decode(hs, hs_len, &peer);
	if (ret) {
		ops->reject(breq, ret);
		return ret;
	}
	ret = conn_alloc(ctx, attr, breq, &c);
	if (ret) {
		ops->reject(breq, ret);
		return ret;
	}
	int len = local_handshake(c, mine, sizeof(mine));
	if (len < 0) {
		ret = len;
		goto err_free_conn;
	}
	ret = ops->accept(c->bconn, mine, (size_t)len,
			  timeout_ms < 0 ? DEFAULT_CONNECT_TIMEOUT_MS : timeout_ms);
	if (ret)
		goto err_free_conn;
	ret = apply_peer(c, &peer);
	if (ret)
		goto err_free_conn;
	*out = c;
	return 0;

err_free_conn:
	conn_free(c);
	return ret;
}

int wimm_conn_delete(struct wimm_conn **pc)
{
	if (!pc || !*pc)
		return 0;
	struct wimm_conn *c = *pc;
	wimm_ctx_purge_conn(c->ctx, c);
	wimm_ctx_link_conn(c->ctx, c, 0);
	wimm_ctx_count_object(c->ctx, -1);
	conn_free(c);
	*pc = NULL;
	return 0;
}

static uint64_t peer_released(const struct wimm_conn *c)
{
	/* Written by the peer's NIC / provider; acquire pairs with the data
	 * it announces. */
	return __atomic_load_n(&c->credit_words[CREDIT_IN], __ATOMIC_ACQUIRE);
}

int wimm_conn_info(const struct wimm_conn *c, struct wimm_conn_info *out)
{
	if (!c || !out)
		return WIMM_E_INVAL;
	memset(out, 0, sizeof(*out));
	out->peer_window_len = (size_t)c->peer.window_len;
	out->peer_window_access =
	    ((c->peer.flags & WIMM_HS_F_WINDOW_WRITE) ? WIMM_REMOTE_WRITE : 0) |
	    ((c->peer.flags & WIMM_HS_F_WINDOW_READ) ? WIMM_REMOTE_READ : 0);
	out->peer_rx_depth = c->peer.rx_depth;
	out->peer_recv_size = c->peer.recv_size;
	out->credits = wimm_credit_tx_available(&c->tx, peer_released(c));
	out->connected = c->connected;
	return 0;
}

void *wimm_conn_user(const struct wimm_conn *c)
{
	return c ? c->user : NULL;
}

/* ------------------------------------------------------------- operations */

/* Checks shared by every operation; nothing is posted when one fails. */
static int check_local(const struct wimm_conn *c, const struct wimm_mr *mr, size_t off, size_t len)
{
	if (len > c->limits.max_msg || len > UINT32_MAX)
		return WIMM_E_TOOBIG;
	if (len == 0)
		return 0;
	if (!mr || wimm_mr_ctx(mr) != c->ctx)
		return WIMM_E_INVAL;
	size_t mlen = wimm_mr_bmr(mr)->len;
	if (off > mlen || len > mlen - off)
		return WIMM_E_LOCAL_BOUNDS;
	return 0;
}

static int check_remote(const struct wimm_conn *c, size_t off, size_t len, unsigned need)
{
	if (c->peer.window_len == 0)
		return WIMM_E_NOWINDOW;
	if (!(c->peer.flags & need))
		return WIMM_E_PERM;
	if (off > c->peer.window_len || len > c->peer.window_len - off)
		return WIMM_E_BOUNDS;
	return 0;
}

/* WIMM_F_WAIT: the pause between two tries of a credit or a send slot.
 * Credits come back as a plain RDMA write, which raises no completion and so
 * no wake-up on any fabric, and send slots come back with completions the
 * application may never ask for: so the wait drives progress itself,
 * spinning first, then napping so a stalled receiver does not cost a whole
 * core. A nap is an eighth of the time waited so far (10 us to 1 ms): a
 * nap can overshoot the credit's return by little more than that eighth,
 * where doubling naps would overshoot by up to the whole wait. */
#define WAIT_NAP_MIN_NS 10000
#define WAIT_NAP_MAX_NS 1000000
/* While spinning the clock is read once per this many steps. */
#define WAIT_STEPS_PER_CLOCK 8

struct backoff {
	int64_t start_ns;
	unsigned steps;
};

static int wait_step(struct wimm_conn *c, struct backoff *b)
{
	int ret = wimm_ctx_progress_into_backlog(c->ctx);
	if (ret)
		return ret;
	if (!c->connected)
		return WIMM_E_DISCONNECTED;
	/* Slots of events the application already saw go back too, or two
	 * peers waiting on each other would never move. */
	ret = wimm_conn_release(c);
	if (ret)
		return ret;
	if (b->steps++ % WAIT_STEPS_PER_CLOCK != 0)
		return 0;
	int64_t t = wimm_now_ns();
	if (b->start_ns == 0)
		b->start_ns = t;
	int64_t waited = t - b->start_ns;
	uint32_t limit_ms = wimm_ctx_post_wait_ms(c->ctx);
	if (limit_ms && waited >= (int64_t)limit_ms * 1000000)
		return WIMM_E_TIMEDOUT;
	int64_t spin_ns = (int64_t)wimm_ctx_spin_us(c->ctx) * 1000;
	if (waited < spin_ns)
		return 0;
	int64_t nap_ns = waited / 8;
	if (nap_ns < WAIT_NAP_MIN_NS)
		nap_ns = WAIT_NAP_MIN_NS;
	if (nap_ns > WAIT_NAP_MAX_NS)
		nap_ns = WAIT_NAP_MAX_NS;
	struct timespec nap = {0, (long)nap_ns};
	nanosleep(&nap, NULL);
	/* Look at the clock again after the next step. */
	b->steps = 0;
	return 0;
}

static int take_credit(struct wimm_conn *c, unsigned flags)
{
	struct backoff b = {0, 0};

	if (wimm_credit_tx_take(&c->tx, peer_released(c)) == 0)
		return 0;
	/* The credit word may be waiting for progress (manual-progress
	 * providers land remote writes only when called). */
	int ret = wimm_ctx_progress_into_backlog(c->ctx);
	if (ret)
		return ret;
	while (wimm_credit_tx_take(&c->tx, peer_released(c)) != 0) {
		if (!(flags & WIMM_F_WAIT))
			return WIMM_E_AGAIN;
		ret = wait_step(c, &b);
		if (ret)
			return ret;
	}
	return 0;
}

static int post(struct wimm_conn *c, struct wimm_wr *wr, int doorbell, unsigned flags)
{
	struct backoff b = {0, 0};
	int ret;

	if (doorbell) {
		ret = take_credit(c, flags);
		if (ret)
			return ret;
	}
	wr->op_seq = c->op_seq;
	/* A full send queue is AGAIN too; with WIMM_F_WAIT, wait it out. */
	while ((ret = ops_of(c)->post(c->bconn, wr)) == WIMM_E_AGAIN && (flags & WIMM_F_WAIT)) {
		ret = wait_step(c, &b);
		if (ret)
			break;
	}
	if (ret) {
		if (doorbell)
			c->tx.sent--; /* nothing went out: the credit is still ours */
		return ret;
	}
	c->op_seq++;
	return 0;
}

static int check_conn(const struct wimm_conn *c, unsigned flags)
{
	if (!c || (flags & ~(WIMM_F_SIGNAL | WIMM_F_WAIT)))
		return WIMM_E_INVAL;
	if (!c->connected)
		return WIMM_E_DISCONNECTED;
	return 0;
}

static void fill_local(struct wimm_wr *wr, struct wimm_mr *mr, size_t off, size_t len)
{
	wr->len = len;
	if (len > 0) {
		wr->lmr = wimm_mr_bmr(mr);
		wr->local = (char *)wr->lmr->addr + off;
	}
}

static int write_common(struct wimm_conn *c, enum wimm_op op, struct wimm_mr *src, size_t src_off,
			size_t dst_off, size_t len, uint32_t imm, unsigned flags)
{
	int ret = check_conn(c, flags);
	if (ret)
		return ret;
	ret = check_local(c, src, src_off, len);
	if (ret)
		return ret;
	/* A zero-length doorbell touches no memory and needs no window. */
	if (len > 0 || op == WIMM_OP_WRITE || dst_off != 0) {
		ret = check_remote(c, dst_off, len, WIMM_HS_F_WINDOW_WRITE);
		if (ret)
			return ret;
	}
	struct wimm_wr wr = {
	    .op = op,
	    .raddr = c->peer.window_addr + dst_off,
	    .rkey = c->peer.window_key,
	    .imm = imm,
	    .signal = !!(flags & WIMM_F_SIGNAL),
	};
	fill_local(&wr, src, src_off, len);
	return post(c, &wr, op == WIMM_OP_WRITE_IMM, flags);
}

int wimm_write_imm(struct wimm_conn *c, struct wimm_mr *src, size_t src_off, size_t dst_off,
		   size_t len, uint32_t imm, unsigned flags)
{
	return write_common(c, WIMM_OP_WRITE_IMM, src, src_off, dst_off, len, imm, flags);
}

int wimm_write(struct wimm_conn *c, struct wimm_mr *src, size_t src_off, size_t dst_off, size_t len,
	       unsigned flags)
{
	return write_common(c, WIMM_OP_WRITE, src, src_off, dst_off, len, 0, flags);
}

int wimm_send_imm(struct wimm_conn *c, struct wimm_mr *src, size_t src_off, size_t len,
		  uint32_t imm, unsigned flags)
{
	int ret = check_conn(c, flags);
	if (ret)
		return ret;
	ret = check_local(c, src, src_off, len);
	if (ret)
		return ret;
	if (c->peer.recv_size == 0)
		return WIMM_E_NORECV;
	if (len > c->peer.recv_size)
		return WIMM_E_TRUNC;
	struct wimm_wr wr = {
	    .op = WIMM_OP_SEND_IMM, .imm = imm, .signal = !!(flags & WIMM_F_SIGNAL)};
	fill_local(&wr, src, src_off, len);
	return post(c, &wr, 1, flags);
}

int wimm_read(struct wimm_conn *c, struct wimm_mr *dst, size_t dst_off, size_t src_off, size_t len,
	      unsigned flags)
{
	int ret = check_conn(c, flags);
	if (ret)
		return ret;
	ret = check_local(c, dst, dst_off, len);
	if (ret)
		return ret;
	ret = check_remote(c, src_off, len, WIMM_HS_F_WINDOW_READ);
	if (ret)
		return ret;
	/* A read is only useful with its completion: always signaled. */
	struct wimm_wr wr = {
	    .op = WIMM_OP_READ,
	    .raddr = c->peer.window_addr + src_off,
	    .rkey = c->peer.window_key,
	    .signal = 1,
	};
	fill_local(&wr, dst, dst_off, len);
	return post(c, &wr, 0, flags);
}

/* ---------------------------------------------------- receive-side credits */

struct wimm_conn *wimm_conn_next(struct wimm_conn *c)
{
	return c->next;
}

void wimm_conn_set_next(struct wimm_conn *c, struct wimm_conn *next)
{
	c->next = next;
}

void wimm_conn_on_down(struct wimm_conn *c)
{
	c->connected = 0;
	c->down_reported = 1;
}

int wimm_conn_is_down_reported(struct wimm_conn *c)
{
	return c->down_reported;
}

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
	if (c->connected && (wimm_credit_rx_pending_release(&c->rx) > 0 || c->credit_return_due))
		return 1;
	c->release_queued = 0;
	return 0;
}

int wimm_conn_release(struct wimm_conn *c)
{
	uint32_t n = wimm_credit_rx_pending_release(&c->rx);

	if (!c->connected)
		return 0;
	/* Failures here mean the endpoint is broken; its CONN_DOWN reaches
	 * the application as an event, so the poll itself does not fail. */
	if (n > 0) {
		if (ops_of(c)->rx_release(c->bconn, n))
			return 0;
		wimm_credit_rx_release(&c->rx, n);
	}
	if (!c->credit_return_due && !wimm_credit_rx_should_return(&c->rx))
		return 0;
	/* Tell the peer the running total of released slots. The staging word
	 * only grows, so even a provider that reads it late sends a true
	 * (newer) total. */
	__atomic_store_n(&c->credit_words[CREDIT_OUT], c->rx.released, __ATOMIC_RELEASE);
	struct wimm_wr wr = {
	    .op = WIMM_OP_WRITE,
	    .local = &c->credit_words[CREDIT_OUT],
	    .len = sizeof(uint64_t),
	    .lmr = wimm_mr_bmr(c->credit_mr),
	    .raddr = c->peer.credit_addr,
	    .rkey = c->peer.credit_key,
	    .internal = 1,
	};
	int ret = ops_of(c)->post(c->bconn, &wr);
	if (ret) {
		/* Send queue full: try again at the next poll. */
		c->credit_return_due = ret == WIMM_E_AGAIN;
		if (c->credit_return_due)
			queue_release(c);
		return 0;
	}
	c->credit_return_due = 0;
	wimm_credit_rx_returned(&c->rx);
	return 0;
}
