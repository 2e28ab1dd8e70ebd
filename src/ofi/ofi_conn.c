/* libfabric backend: one endpoint + CQ per connection, receive slots, posts. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ofi/ofi_internal.h"

static int ofi_conn_alloc_rx(struct ofi_conn *c)
{
	struct ofi_ctx *x = c->ctx;
	size_t bytes = (size_t)c->rx_depth * c->recv_size;
	int ret;

	if (!c->recv_size)
		return 0;
	if (posix_memalign((void **)&c->rx_buf, 64, bytes))
		return WIMM_E_NOMEM;
	c->slots = calloc(c->rx_depth, sizeof(*c->slots));
	if (!c->slots) {
		ret = WIMM_E_NOMEM;
		goto err_free_buf;
	}
	for (uint32_t i = 0; i < c->rx_depth; i++)
		c->slots[i].buf = c->rx_buf + (size_t)i * c->recv_size;
	ret = ofi_reg(x, c->rx_buf, bytes, FI_RECV, &c->rx_mr);
	if (ret) {
		ret = ofi_err(x, ret, "fi_mr_reg (receive slots)");
		goto err_free_slots;
	}
	return 0;

err_free_slots:
	free(c->slots);
	c->slots = NULL;
err_free_buf:
	free(c->rx_buf);
	c->rx_buf = NULL;
	return ret;
}

static int ofi_post_slot(struct ofi_conn *c, uint64_t pos)
{
	struct ofi_slot *s = &c->slots[pos % c->rx_depth];
	struct iovec iov = {.iov_base = s->buf, .iov_len = c->recv_size};
	void *desc = fi_mr_desc(c->rx_mr);
	/* FI_SELECTIVE_COMPLETION on the bind covers receives too: ask. */
	struct fi_msg m = {
	    .msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = FI_ADDR_UNSPEC, .context = s};
	ssize_t ret;

	ret = fi_recvmsg(c->ep, &m, FI_COMPLETION);
	if (ret == -FI_EAGAIN) {
		ofi_conn_stash_cq(c);
		ret = fi_recvmsg(c->ep, &m, FI_COMPLETION);
	}
	return ret ? ofi_err(c->ctx, (int)ret, "fi_recvmsg") : 0;
}

static int ofi_conn_post_slots(struct ofi_conn *c)
{
	int ret;

	if (!c->recv_size)
		return 0;
	for (uint64_t i = 0; i < c->rx_depth; i++) {
		ret = ofi_post_slot(c, i);
		if (ret)
			return ret;
	}
	return 0;
}

/* Endpoint set-up once its fi_info is known: the CQ carries both directions,
 * sends only when asked (FI_SELECTIVE_COMPLETION). */
int ofi_conn_open_ep(struct ofi_conn *c, struct fi_info *info)
{
	struct ofi_ctx *x = c->ctx;
	int ret;

	/* Our own accounting bounds what is outstanding; the provider queue
	 * only has to be as deep as it can be. */
	info->tx_attr->size =
	    c->tx_max < x->info->tx_attr->size ? c->tx_max : x->info->tx_attr->size;
	/* shm sizes the command queue peers write into by rx size, and every
	 * RMA (two commands with CQ data) takes room there: keep its full
	 * size. MSG endpoints need only the receive slots. */
	if (x->msg)
		info->rx_attr->size =
		    c->rx_depth < x->info->rx_attr->size ? c->rx_depth : x->info->rx_attr->size;
	else
		info->rx_attr->size = x->info->rx_attr->size;
	ret = fi_endpoint(x->domain, info, &c->ep, c);
	if (ret)
		return ofi_err(x, ret, "fi_endpoint");
	ret = fi_ep_bind(c->ep, &c->cq->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION);
	if (ret) {
		ret = ofi_err(x, ret, "fi_ep_bind cq");
		goto err_close_ep;
	}
	if (c->eq) {
		ret = fi_ep_bind(c->ep, &c->eq->fid, 0);
		if (ret) {
			ret = ofi_err(x, ret, "fi_ep_bind eq");
			goto err_close_ep;
		}
	}
	if (c->av) {
		ret = fi_ep_bind(c->ep, &c->av->fid, 0);
		if (ret) {
			ret = ofi_err(x, ret, "fi_ep_bind av");
			goto err_close_ep;
		}
	}
	ret = fi_enable(c->ep);
	if (ret) {
		ret = ofi_err(x, ret, "fi_enable");
		goto err_close_ep;
	}
	c->enabled = 1;
	/* Slots are posted before the connection exists, so the peer's
	 * first send always finds one. */
	ret = ofi_conn_post_slots(c);
	if (ret)
		goto err_close_ep;
	return 0;

err_close_ep:
	fi_close(&c->ep->fid);
	c->ep = NULL;
	c->enabled = 0;
	return ret;
}

static int ofi_conn_open_queues(struct ofi_conn *c)
{
	struct ofi_ctx *x = c->ctx;
	struct fi_cq_attr cqa = {
	    /* Every completion that can be outstanding: signaled/forced sends
	     * within tx_max, and one per doorbell within our receive window. */
	    .size = (size_t)c->tx_max + c->rx_depth + 16,
	    .format = FI_CQ_FORMAT_DATA,
	    .wait_obj = x->cq_wait_fd ? FI_WAIT_FD : FI_WAIT_NONE,
	};
	int ret;

	ret = fi_cq_open(x->domain, &cqa, &c->cq, c);
	if (ret)
		return ofi_err(x, ret, "fi_cq_open");
	if (x->cq_wait_fd) {
		ret = fi_control(&c->cq->fid, FI_GETWAIT, &c->cq_fd);
		if (ret) {
			ret = ofi_err(x, ret, "fi_control FI_GETWAIT cq");
			goto err_close_cq;
		}
	}
	if (x->msg) {
		struct fi_eq_attr eqa = {.size = 8, .wait_obj = FI_WAIT_FD};

		ret = fi_eq_open(x->fabric, &eqa, &c->eq, c);
		if (ret) {
			ret = ofi_err(x, ret, "fi_eq_open");
			goto err_close_cq;
		}
		ret = fi_control(&c->eq->fid, FI_GETWAIT, &c->eq_fd);
		if (ret) {
			ret = ofi_err(x, ret, "fi_control FI_GETWAIT eq");
			goto err_close_eq;
		}
	} else {
		struct fi_av_attr ava = {.type = FI_AV_TABLE, .count = 1};

		ret = fi_av_open(x->domain, &ava, &c->av, c);
		if (ret) {
			ret = ofi_err(x, ret, "fi_av_open");
			goto err_close_cq;
		}
	}
	return 0;

err_close_eq:
	fi_close(&c->eq->fid);
	c->eq = NULL;
err_close_cq:
	fi_close(&c->cq->fid);
	c->cq = NULL;
	return ret;
}

static void ofi_conn_link(struct ofi_conn *c)
{
	struct ofi_ctx *x = c->ctx;

	c->next = x->conns;
	if (x->conns)
		x->conns->prev = c;
	x->conns = c;
	x->nconns++;
}

static void ofi_conn_unlink(struct ofi_conn *c)
{
	struct ofi_ctx *x = c->ctx;

	if (x->rr == c)
		x->rr = c->next;
	if (c->prev)
		c->prev->next = c->next;
	else
		x->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	x->nconns--;
}

int ofi_conn_new(void *bctx, void *breq, const struct wimm_conn_cfg *cfg, void **bconn)
{
	struct ofi_ctx *x = bctx;
	struct ofi_req *req = breq;
	struct ofi_conn *c;
	int ret;

	c = calloc(1, sizeof(*c));
	if (!c)
		return WIMM_E_NOMEM;
	c->ctx = x;
	c->core = cfg->core;
	c->sock = -1;
	c->cq_fd = -1;
	c->eq_fd = -1;
	c->peer = FI_ADDR_UNSPEC;
	c->sq_depth = cfg->sq_depth ? cfg->sq_depth : 1;
	c->tx_max = c->sq_depth + cfg->sq_reserve;
	c->force_every = c->sq_depth / 2 ? c->sq_depth / 2 : 1;
	c->rx_depth = cfg->rx_depth ? cfg->rx_depth : 1;
	c->recv_size = cfg->recv_size;
	c->tx = calloc(c->tx_max, sizeof(*c->tx));
	if (!c->tx) {
		ret = WIMM_E_NOMEM;
		goto err_free;
	}
	ret = ofi_conn_alloc_rx(c);
	if (ret)
		goto err_free_tx;
	ret = ofi_conn_open_queues(c);
	if (ret)
		goto err_free_rx;

	if (!x->msg) {
		struct fi_info *info = fi_dupinfo(x->info);

		if (!info) {
			ret = WIMM_E_NOMEM;
			goto err_close_queues;
		}
		ret = ofi_conn_open_ep(c, info);
		fi_freeinfo(info);
		if (ret)
			goto err_close_queues;
	} else if (req) {
		ret = ofi_conn_open_ep(c, req->info);
		if (ret)
			goto err_close_queues;
	}
	/* Active MSG side: the endpoint needs the peer's address, made in connect(). */

	if ((c->cq_fd >= 0 && ofi_epoll_add(x, c->cq_fd)) ||
	    (c->eq_fd >= 0 && ofi_epoll_add(x, c->eq_fd))) {
		ret = ofi_errno_err(x, errno, "epoll_ctl", WIMM_E_PROVIDER);
		goto err_epoll_del;
	}
	ofi_conn_link(c);
	ret = ofi_ctx_track(x);
	if (ret)
		goto err_unlink;
	if (req) {
		/* The request now belongs to the connection. */
		c->info = req->info;
		c->sock = req->sock;
		free(req);
		if (c->sock >= 0) {
			if (ofi_epoll_add(x, c->sock) == 0)
				c->in_epoll_sock = 1;
		}
	}
	*bconn = c;
	return 0;

err_unlink:
	ofi_conn_unlink(c);
err_epoll_del:
	if (c->cq_fd >= 0)
		ofi_epoll_del(x, c->cq_fd);
	if (c->eq_fd >= 0)
		ofi_epoll_del(x, c->eq_fd);
	if (c->ep)
		fi_close(&c->ep->fid);
err_close_queues:
	if (c->av)
		fi_close(&c->av->fid);
	if (c->eq)
		fi_close(&c->eq->fid);
	fi_close(&c->cq->fid);
err_free_rx:
	if (c->rx_mr)
		fi_close(&c->rx_mr->fid);
	free(c->slots);
	free(c->rx_buf);
err_free_tx:
	free(c->tx);
err_free:
	free(c);
	return ret;
}

int ofi_conn_addr(void *bconn, uint8_t *buf, size_t *len)
{
	struct ofi_conn *c = bconn;
	size_t cap = *len;
	int ret;

	if (c->ctx->msg) {
		*len = 0; /* the provider's CM addresses MSG endpoints */
		return 0;
	}
	ret = fi_getname(&c->ep->fid, buf, &cap);
	if (ret)
		return ret == -FI_ETOOSMALL ? WIMM_E_NOMEM : ofi_err(c->ctx, ret, "fi_getname");
	*len = cap;
	return 0;
}

/* Close the provider objects of a connection already unlinked. */
void ofi_conn_free(struct ofi_conn *c)
{
	struct ofi_ctx *x = c->ctx;

	if (c->ep) {
		if (x->msg && c->connected)
			fi_shutdown(c->ep, 0);
		fi_close(&c->ep->fid);
	}
	if (c->av)
		fi_close(&c->av->fid);
	if (c->eq)
		fi_close(&c->eq->fid);
	if (c->cq)
		fi_close(&c->cq->fid);
	if (c->rx_mr)
		fi_close(&c->rx_mr->fid);
	if (c->info)
		fi_freeinfo(c->info);
	free(c->slots);
	free(c->rx_buf);
	free(c->tx);
	free(c);
}

void ofi_conn_delete(void *bconn)
{
	struct ofi_conn *c = bconn;
	struct ofi_ctx *x;

	if (!c)
		return;
	x = c->ctx;
	ofi_conn_unlink(c);
	if (c->cq_fd >= 0)
		ofi_epoll_del(x, c->cq_fd);
	if (c->eq_fd >= 0)
		ofi_epoll_del(x, c->eq_fd);
	if (c->sock >= 0) {
		if (c->in_epoll_sock)
			ofi_epoll_del(x, c->sock);
		close(c->sock); /* the peer learns of the close from this */
		c->sock = -1;
	}
	if (c->same_proc) {
		/* shm hands a peer in the same process our region itself, not a
		 * mapping of its own: closing the endpoint now would unmap memory
		 * that peer's progress still reads. Keep it, unpolled, until the
		 * context closes. */
		c->next = x->graveyard;
		x->graveyard = c;
	} else {
		ofi_conn_free(c);
	}
	ofi_ctx_track(x);
}

static ssize_t ofi_post_once(struct ofi_conn *c, const struct wimm_wr *wr, struct ofi_tx *t,
			     uint64_t flags)
{
	struct iovec iov = {.iov_base = wr->local, .iov_len = wr->len};
	void *desc = wr->lmr ? wr->lmr->desc : NULL;
	struct fi_rma_iov rma = {.addr = wr->raddr, .len = wr->len, .key = wr->rkey};
	/* Length rides in the upper half where the provider carries 8 bytes of
	 * CQ data, so the receiver never depends on the reported length (E3). */
	uint64_t data = c->ctx->info->domain_attr->cq_data_size >= 8
			    ? ((uint64_t)wr->len << 32) | wr->imm
			    : wr->imm;

	/* A pure doorbell touches no window: aim it at the peer's null window,
	 * which every key check accepts (a read-only or absent window would
	 * make tcp drop the connection). */
	if (!wr->len && c->ctx->null_mr) {
		rma.addr = 0;
		rma.key = 0;
	}
	if (wr->op == WIMM_OP_SEND_IMM) {
		struct fi_msg m = {
		    .msg_iov = &iov,
		    .desc = &desc,
		    .iov_count = wr->len ? 1 : 0,
		    .addr = c->peer,
		    .context = t,
		    .data = data,
		};

		return fi_sendmsg(c->ep, &m, flags | FI_REMOTE_CQ_DATA);
	}
	struct fi_msg_rma m = {
	    .msg_iov = &iov,
	    .desc = &desc,
	    .iov_count = wr->len ? 1 : 0,
	    .addr = c->peer,
	    .rma_iov = &rma,
	    .rma_iov_count = 1,
	    .context = t,
	    .data = data,
	};
	switch (wr->op) {
	case WIMM_OP_WRITE_IMM:
		return fi_writemsg(c->ep, &m, flags | FI_REMOTE_CQ_DATA);
	case WIMM_OP_WRITE:
		return fi_writemsg(c->ep, &m, flags);
	case WIMM_OP_READ:
		return fi_readmsg(c->ep, &m, flags);
	case WIMM_OP_SEND_IMM:
		break;
	}
	return -FI_EINVAL;
}

int ofi_post(void *bconn, const struct wimm_wr *wr)
{
	struct ofi_conn *c = bconn;
	uint32_t budget = wr->internal ? c->tx_max : c->sq_depth;
	struct ofi_tx *t;
	uint64_t flags = 0;
	int complete;
	ssize_t ret;

	if (!c->enabled || c->down_pending || c->down_reported)
		return WIMM_E_DISCONNECTED;
	if (c->tx_head - c->tx_tail >= budget) {
		ofi_conn_stash_cq(c);
		if (c->tx_head - c->tx_tail >= budget)
			return WIMM_E_AGAIN;
	}
	/* Unsignaled sends retire only through a later completion: force one
	 * every sq_depth/2 so the queue space in use stays known. Reads always
	 * complete (their bytes are only there then). */
	complete = wr->signal || wr->op == WIMM_OP_READ || c->unsig + 1 >= c->force_every;
	if (complete)
		flags |= FI_COMPLETION;
	else if (wr->len <= c->ctx->info->tx_attr->inject_size)
		flags |= FI_INJECT;

	t = &c->tx[c->tx_head % c->tx_max];
	t->seq = c->tx_head;
	t->op_seq = wr->op_seq;
	t->len = (uint32_t)wr->len;
	t->op = wr->op;
	t->signal = wr->signal;
	t->internal = wr->internal;
	ret = ofi_post_once(c, wr, t, flags);
	if (ret == -FI_EAGAIN) {
		ofi_conn_stash_cq(c);
		ret = ofi_post_once(c, wr, t, flags);
	}
	if (ret == -FI_EAGAIN)
		return WIMM_E_AGAIN;
	if (ret)
		return ofi_err(c->ctx, (int)ret, "post");
	c->tx_head++;
	c->unsig = complete ? 0 : c->unsig + 1;
	return 0;
}

int ofi_rx_release(void *bconn, uint32_t n)
{
	struct ofi_conn *c = bconn;
	uint64_t avail;
	int ret;

	if (!c->recv_size || !c->enabled)
		return 0;
	/* Write-with-imm consumes no slot here: only slots whose send-with-imm
	 * was handed out go back, oldest first. */
	avail = c->rx_delivered - c->rx_reposted;
	if (n > avail)
		n = (uint32_t)avail;
	for (uint32_t i = 0; i < n; i++) {
		ret = ofi_post_slot(c, c->rx_reposted);
		if (ret)
			return ret;
		c->rx_reposted++;
	}
	return 0;
}
