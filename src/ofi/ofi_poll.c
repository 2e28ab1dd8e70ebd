/* libfabric backend: completions, liveness of connections, the wait fd. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ofi/ofi_internal.h"

int ofi_epoll_add(struct ofi_ctx *x, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN};

	return epoll_ctl(x->epfd, EPOLL_CTL_ADD, fd, &ev);
}

void ofi_epoll_del(struct ofi_ctx *x, int fd)
{
	epoll_ctl(x->epfd, EPOLL_CTL_DEL, fd, NULL);
}

static int ofi_is_tx(const struct ofi_conn *c, const void *ctx)
{
	const struct ofi_tx *t = ctx;

	return t >= c->tx && t < c->tx + c->tx_max;
}

static int ofi_is_slot(const struct ofi_conn *c, const void *ctx)
{
	const struct ofi_slot *s = ctx;

	return c->slots && s >= c->slots && s < c->slots + c->rx_depth;
}

static void ofi_retire(struct ofi_conn *c, const struct ofi_tx *t)
{
	/* Sends complete in order: this one retires every unsignaled one before it. */
	if (t->seq + 1 > c->tx_tail)
		c->tx_tail = t->seq + 1;
}

/* One CQ entry into at most one cqe; returns 1 if *e was filled. */
static int ofi_convert(struct ofi_conn *c, const struct fi_cq_data_entry *d, struct wimm_cqe *e)
{
	int wide = c->ctx->info->domain_attr->cq_data_size >= 8;

	memset(e, 0, sizeof(*e));
	e->conn = c->core;
	if (d->flags & FI_REMOTE_CQ_DATA) {
		e->imm = (uint32_t)d->data;
		e->len = wide ? (uint32_t)(d->data >> 32) : (uint32_t)d->len;
		if (d->flags & FI_RECV) {
			e->kind = WIMM_CQE_RECV_SEND_IMM;
			e->data = ((const struct ofi_slot *)d->op_context)->buf;
		} else {
			e->kind = WIMM_CQE_RECV_WRITE_IMM;
		}
		return 1;
	}
	if (ofi_is_tx(c, d->op_context)) {
		const struct ofi_tx *t = d->op_context;

		ofi_retire(c, t);
		if (!t->signal)
			return 0; /* a forced completion: internal bookkeeping only */
		e->kind = WIMM_CQE_SEND_DONE;
		e->op = t->op;
		e->len = t->len;
		e->op_seq = t->op_seq;
		e->internal = t->internal;
		return 1;
	}
	return 0;
}

static int ofi_convert_err(struct ofi_conn *c, struct wimm_cqe *e)
{
	struct fi_cq_err_entry err = {0};
	char text[200];
	ssize_t ret;

	ret = fi_cq_readerr(c->cq, &err, 0);
	if (ret < 0)
		return 0;
	memset(e, 0, sizeof(*e));
	e->conn = c->core;
	e->prov_err = -err.err;
	e->status = (err.err == FI_ECANCELED || err.err == FI_ECONNRESET ||
		     err.err == FI_ENOTCONN || err.err == EPIPE || err.err == FI_ESHUTDOWN)
			? WIMM_E_DISCONNECTED
			: WIMM_E_PROVIDER;
	snprintf(text, sizeof(text), "completion error: %s (%s)", fi_strerror(err.err),
		 fi_cq_strerror(c->cq, err.prov_errno, err.err_data, NULL, 0));
	wimm_ctx_set_provider_error(c->ctx->core, -err.err, text);
	if (ofi_is_slot(c, err.op_context)) {
		/* Receives flushed by a closing endpoint are not failures of ours. */
		if (err.err != FI_ECANCELED)
			ofi_conn_down(c, e->status, e->prov_err);
		return 0;
	}
	e->kind = WIMM_CQE_SEND_ERROR;
	if (ofi_is_tx(c, err.op_context)) {
		const struct ofi_tx *t = err.op_context;

		ofi_retire(c, t);
		e->op = t->op;
		e->op_seq = t->op_seq;
		e->internal = t->internal;
	} else {
		/* An injected op has no context: blame the oldest outstanding one. */
		const struct ofi_tx *t = &c->tx[c->tx_tail % c->tx_max];

		e->op = t->op ? t->op : WIMM_OP_WRITE_IMM;
		e->op_seq = t->op_seq;
		e->internal = t->internal;
		if (c->tx_tail < c->tx_head)
			c->tx_tail++;
	}
	return 1;
}

int ofi_conn_read_cq(struct ofi_conn *c, struct wimm_cqe *out, int n)
{
	struct fi_cq_data_entry d[16];
	int got = 0;

	while (got < n) {
		size_t want = (size_t)(n - got) < 16 ? (size_t)(n - got) : 16;
		ssize_t r = fi_cq_read(c->cq, d, want);

		if (r == -FI_EAGAIN)
			break;
		if (r == -FI_EAVAIL) {
			got += ofi_convert_err(c, &out[got]);
			continue;
		}
		if (r < 0) {
			ofi_err(c->ctx, (int)r, "fi_cq_read");
			break;
		}
		for (ssize_t i = 0; i < r; i++)
			got += ofi_convert(c, &d[i], &out[got]);
		if ((size_t)r < want)
			break;
	}
	return got;
}

/* Drive progress outside poll() (post, arm) without losing what it finds. */
void ofi_conn_stash_cq(struct ofi_conn *c)
{
	while (c->stash_len < OFI_STASH) {
		unsigned tail = (c->stash_head + c->stash_len) % OFI_STASH;
		int room = (int)(OFI_STASH - tail);
		int got;

		/* Contiguous room from tail, bounded by the free entries. */
		if (room > (int)(OFI_STASH - c->stash_len))
			room = (int)(OFI_STASH - c->stash_len);
		got = ofi_conn_read_cq(c, &c->stash[tail], room);
		c->stash_len += (unsigned)got;
		if (got < room)
			break;
	}
}

void ofi_conn_down(struct ofi_conn *c, int status, int prov_err)
{
	if (c->down_pending || c->down_reported)
		return;
	c->down_pending = 1;
	c->down_status = status;
	c->down_prov = prov_err;
	if (c->sock >= 0 && c->in_epoll_sock) {
		/* An EOF socket stays readable: keep it from waking sleepers forever. */
		ofi_epoll_del(c->ctx, c->sock);
		c->in_epoll_sock = 0;
	}
}

static void ofi_check_eq(struct ofi_conn *c)
{
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
	uint32_t event;
	ssize_t r;

	for (;;) {
		r = fi_eq_read(c->eq, &event, buf, sizeof(buf), 0);
		if (r == -FI_EAVAIL) {
			struct fi_eq_err_entry err = {0};

			if (fi_eq_readerr(c->eq, &err, 0) >= 0) {
				c->accepting = 0;
				ofi_conn_down(c, WIMM_E_DISCONNECTED, -err.err);
			}
			continue;
		}
		if (r < 0)
			return;
		if (event == FI_CONNECTED && c->accepting) {
			/* The passive side's set-up is complete. */
			c->accepting = 0;
			c->connected = 1;
			c->up_pending = 1;
		}
		if (event == FI_SHUTDOWN) {
			c->accepting = 0;
			ofi_conn_down(c, WIMM_E_DISCONNECTED, 0);
		}
	}
}

static void ofi_check_sock(struct ofi_conn *c)
{
	char b;
	ssize_t r;

	r = recv(c->sock, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (r == 0)
		ofi_conn_down(c, WIMM_E_DISCONNECTED, 0);
	else if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		ofi_conn_down(c, WIMM_E_DISCONNECTED, errno);
}

/* Control plane: CM events (MSG) and the liveness sockets (RDM). */
static void ofi_check_ctrl(struct ofi_ctx *x)
{
	for (struct ofi_conn *c = x->conns; c; c = c->next) {
		if (c->down_pending || c->down_reported || (!c->connected && !c->accepting))
			continue;
		if (c->eq)
			ofi_check_eq(c);
		if (c->sock >= 0)
			ofi_check_sock(c);
	}
}

static int ofi_conn_emit(struct ofi_conn *c, struct wimm_cqe *out, int n)
{
	int got = 0;

	/* Up before anything that arrived on it. */
	if (c->up_pending && n > 0) {
		out[got++] = (struct wimm_cqe){.kind = WIMM_CQE_CONN_UP, .conn = c->core};
		c->up_pending = 0;
	}
	while (got < n && c->stash_len) {
		out[got++] = c->stash[c->stash_head];
		c->stash_head = (c->stash_head + 1) % OFI_STASH;
		c->stash_len--;
	}
	if (got < n && c->cq)
		got += ofi_conn_read_cq(c, out + got, n - got);
	/* The connection's last word: after whatever completed before it died. */
	if (got < n && c->down_pending) {
		wimm_cqe_conn_down(&out[got++], c->core, c->down_status, c->down_prov);
		c->down_pending = 0;
		c->down_reported = 1;
	}
	for (int i = 0; i < got; i++)
		if (out[i].kind == WIMM_CQE_RECV_SEND_IMM)
			c->rx_delivered++;
	return got;
}

static int ofi_poll_round(struct ofi_ctx *x, struct wimm_cqe *out, int n)
{
	struct ofi_conn *start = x->rr ? x->rr : x->conns;
	struct ofi_conn *c = start;
	int got = 0;

	if (!c)
		return 0;
	do {
		got += ofi_conn_emit(c, out + got, n - got);
		c = c->next ? c->next : x->conns;
		if (got == n)
			break;
	} while (c != start);
	/* The next call starts after the last connection served. */
	x->rr = c;
	return got;
}

int ofi_poll(void *bctx, struct wimm_cqe *out, int n)
{
	struct ofi_ctx *x = bctx;
	uint64_t now;
	int got;

	got = ofi_poll_round(x, out, n);
	/* The control plane, busy or idle. A spinning caller polls millions
	 * of times a second: look at the clock on every 64th poll only (even
	 * the coarse clock costs a few percent of a 0.3 us shm round trip). */
	if (++x->empty_polls % 64 != 0)
		return got;
	now = (uint64_t)wimm_coarse_ns();
	if (now < x->ctrl_next_ns)
		return got;
	x->ctrl_next_ns = now + OFI_CTRL_PERIOD_NS;
	ofi_check_ctrl(x);
	if (got < n)
		got += ofi_poll_round(x, out + got, n - got);
	return got;
}

int ofi_fd(void *bctx)
{
	return ((struct ofi_ctx *)bctx)->epfd;
}

int ofi_arm(void *bctx)
{
	struct ofi_ctx *x = bctx;
	int ret;

	ofi_check_ctrl(x);
	for (struct ofi_conn *c = x->conns; c; c = c->next) {
		if (c->cq)
			ofi_conn_stash_cq(c);
		if (c->stash_len || c->down_pending || c->up_pending)
			return WIMM_E_AGAIN;
	}
	if (!x->cq_wait_fd) {
		uint64_t ticks;

		/* Reset the tick; the next one wakes the sleeper within 1 ms.
		 * EQ fds (tcp's CM) still need fi_trywait below to go quiet. */
		while (read(x->timerfd, &ticks, sizeof(ticks)) > 0)
			;
	}
	if (!x->nfids)
		return 0;
	ret = fi_trywait(x->fabric, x->fids, (int)x->nfids);
	if (ret == -FI_EAGAIN)
		return WIMM_E_AGAIN;
	if (ret)
		return ofi_err(x, ret, "fi_trywait");
	return 0;
}
