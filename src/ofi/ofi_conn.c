/* libfabric backend: connections (MSG: an endpoint and CQ each; RDM: a
 * place on a lane, ofi_lane.c), receive slots, posts. */
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
	ret = ofi_reg(x, c->rx_buf, bytes, FI_RECV, &c->rx_mr);
	if (ret) {
		ret = ofi_err(x, ret, "fi_mr_reg (receive slots)");
		free(c->rx_buf);
		c->rx_buf = NULL;
		return ret;
	}
	return 0;
}

/* The next receive slot, in ring order. */
static int ofi_post_slot(struct ofi_conn *c)
{
	uint32_t i = wimm_recv_slots_post_slot(&c->rx, 0);
	struct iovec iov = {.iov_base = c->rx_buf + (size_t)i * c->recv_size,
			    .iov_len = c->recv_size};
	void *desc = fi_mr_desc(c->rx_mr);
	/* FI_SELECTIVE_COMPLETION on the bind covers receives too: ask. On a
	 * lane the slot takes only its own peer's sends. */
	struct fi_msg m = {.msg_iov = &iov,
			   .desc = &desc,
			   .iov_count = 1,
			   .addr = c->lane ? c->peer : FI_ADDR_UNSPEC,
			   .context = ofi_cookie(c, 1, i)};
	ssize_t ret;

	ret = fi_recvmsg(c->ep, &m, FI_COMPLETION);
	if (ret == -FI_EAGAIN) {
		ofi_conn_stash_cq(c);
		ret = fi_recvmsg(c->ep, &m, FI_COMPLETION);
	}
	if (ret)
		return ofi_err(c->ctx, (int)ret, "fi_recvmsg");
	wimm_recv_slots_posted(&c->rx, 1);
	return 0;
}

/* Slots are posted before the peer can send: MSG at enable, before the
 * connection exists; RDM once the peer is in the AV, before it learns our
 * name (conn_ready). */
int ofi_conn_post_slots(struct ofi_conn *c)
{
	int ret;

	if (!c->recv_size)
		return 0;
	for (uint64_t i = 0; i < c->rx_depth; i++) {
		ret = ofi_post_slot(c);
		if (ret)
			return ret;
	}
	c->slots_posted = 1;
	return 0;
}

/* MSG endpoint set-up once its fi_info is known: its CQ carries both
 * directions, sends only when asked (FI_SELECTIVE_COMPLETION); CM events go
 * to the context's one EQ. */
int ofi_conn_open_ep(struct ofi_conn *c, struct fi_info *info)
{
	struct ofi_ctx *x = c->ctx;
	int ret;

	/* Our own accounting bounds what is outstanding; the provider queue
	 * only has to be as deep as it can be. */
	info->tx_attr->size =
	    c->tx_max < x->info->tx_attr->size ? c->tx_max : x->info->tx_attr->size;
	info->rx_attr->size =
	    c->rx_depth < x->info->rx_attr->size ? c->rx_depth : x->info->rx_attr->size;
	ret = fi_endpoint(x->domain, info, &c->ep, c);
	if (ret) {
		c->ep = NULL;
		return ofi_err(x, ret, "fi_endpoint");
	}
	if ((ret =
		 fi_ep_bind(c->ep, &c->cq->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)) ||
	    (ret = fi_ep_bind(c->ep, &x->eq->fid, 0)) || (ret = fi_enable(c->ep))) {
		ret = ofi_err(x, ret, "fi_ep_bind / fi_enable");
		goto err_close_ep;
	}
	c->enabled = 1;
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

static int ofi_conn_open_cq(struct ofi_conn *c)
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
	if (!x->cq_wait_fd)
		return 0;
	ret = fi_control(&c->cq->fid, FI_GETWAIT, &c->cq_fd);
	if (ret) {
		ret = ofi_err(x, ret, "fi_control FI_GETWAIT cq");
		goto err_close_cq;
	}
	if (ofi_epoll_add(x, c->cq_fd, c, OFI_TAG_CQ)) {
		ret = ofi_errno_err(x, errno, "epoll_ctl (cq)", WIMM_E_PROVIDER);
		goto err_close_cq;
	}
	return 0;

err_close_cq:
	fi_close(&c->cq->fid);
	c->cq = NULL;
	c->cq_fd = -1;
	return ret;
}

/* A slot in x->tab: the index and a fresh generation for the cookies. */
static int ofi_conn_register(struct ofi_conn *c)
{
	struct ofi_ctx *x = c->ctx;

	if (!x->nfree) {
		uint32_t cap = x->tab_cap ? 2 * x->tab_cap : 64;
		struct ofi_conn **tab = realloc(x->tab, cap * sizeof(*tab));
		uint32_t *fr;

		if (!tab || cap > (1u << 20))
			return WIMM_E_NOMEM;
		x->tab = tab;
		fr = realloc(x->free_idx, cap * sizeof(*fr));
		if (!fr)
			return WIMM_E_NOMEM;
		x->free_idx = fr;
		for (uint32_t i = cap; i > x->tab_cap; i--) {
			tab[i - 1] = NULL;
			fr[x->nfree++] = i - 1;
		}
		x->tab_cap = cap;
	}
	if (ofi_fids_reserve(x, (size_t)x->nconns + 2))
		return WIMM_E_NOMEM;
	x->gen = (x->gen + 1) & 0xffffffu;
	if (!x->gen)
		x->gen = 1;
	c->gen = x->gen;
	c->idx = x->free_idx[--x->nfree];
	x->tab[c->idx] = c;
	c->next = x->conns;
	if (x->conns)
		x->conns->prev = c;
	x->conns = c;
	x->nconns++;
	return 0;
}

static void ofi_conn_unregister(struct ofi_conn *c)
{
	struct ofi_ctx *x = c->ctx;

	ofi_hot_del(c);
	if (c->kicking) {
		c->kicking = 0;
		x->nkick--;
	}
	x->tab[c->idx] = NULL;
	x->free_idx[x->nfree++] = c->idx;
	if (c->prev)
		c->prev->next = c->next;
	else
		x->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	x->nconns--;
}

/* Close what the connection holds, in the reverse order of ofi_conn_new. */
static void ofi_conn_free(struct ofi_conn *c)
{
	struct ofi_ctx *x = c->ctx;

	if (c->sock >= 0) {
		if (c->in_epoll_sock)
			ofi_epoll_del(x, c->sock);
		close(c->sock); /* the peer learns of the close from this */
	}
	if (c->lane) {
		ofi_lane_leave(c);
	} else if (c->ep) {
		if (c->connected)
			fi_shutdown(c->ep, 0);
		fi_close(&c->ep->fid);
	}
	if (c->cq) {
		if (c->cq_fd >= 0)
			ofi_epoll_del(x, c->cq_fd);
		fi_close(&c->cq->fid);
	}
	if (c->rx_mr)
		fi_close(&c->rx_mr->fid);
	ofi_atomic_free(c);
	ofi_ring_free(c);
	if (c->info)
		fi_freeinfo(c->info);
	free(c->frame);
	free(c->rx_buf);
	wimm_send_ring_fini(&c->sq);
	free(c);
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
	c->peer = FI_ADDR_UNSPEC;
	c->active = !req;
	c->tx_max = (cfg->sq_depth ? cfg->sq_depth : 1) + cfg->sq_reserve;
	c->rx_depth = cfg->rx_depth ? cfg->rx_depth : 1;
	c->recv_size = cfg->recv_size;
	wimm_recv_slots_init(&c->rx, c->rx_depth);
	ret = wimm_send_ring_init(&c->sq, cfg->sq_depth ? cfg->sq_depth : 1, cfg->sq_reserve, 0);
	if (ret)
		goto err_free;
	/* Cookies name (index, generation): registered before anything is posted. */
	ret = ofi_conn_register(c);
	if (ret)
		goto err_free;
	ret = ofi_conn_alloc_rx(c);
	if (ret)
		goto err_unregister;
	if (!x->msg) {
		ret = ofi_lane_join(c, req);
		if (ret)
			goto err_unregister;
		c->enabled = 1;
	} else {
		ret = ofi_ring_open(c, cfg->window);
		if (ret)
			goto err_unregister;
		ret = ofi_conn_open_cq(c);
		if (ret)
			goto err_unregister;
		if (c->cq_fd < 0)
			ofi_hot_add(c); /* no fd says when: always read */
		/* Active side: the endpoint needs the peer's address (connect()). */
		if (req) {
			ret = ofi_conn_open_ep(c, req->info);
			if (ret)
				goto err_unregister;
		}
	}
	if (req) {
		/* The request now belongs to the connection. */
		c->info = req->info;
		c->sock = req->sock;
		free(req);
		if (c->sock >= 0 && ofi_epoll_add(x, c->sock, c, OFI_TAG_SOCK) == 0)
			c->in_epoll_sock = 1;
	}
	*bconn = c;
	return 0;

err_unregister:
	ofi_conn_unregister(c);
	ofi_conn_free(c);
	return ret;
err_free:
	wimm_send_ring_fini(&c->sq);
	free(c);
	return ret;
}

int ofi_conn_addr(void *bconn, uint8_t *buf, size_t *len)
{
	struct ofi_conn *c = bconn;

	/* The provider's CM addresses MSG endpoints: the address carries our
	 * doorbell ring's offer, if any. */
	if (c->ctx->msg)
		return ofi_ring_offer(c, buf, len);
	if (*len < c->lane->name_len)
		return WIMM_E_NOMEM;
	memcpy(buf, c->lane->name, c->lane->name_len);
	*len = c->lane->name_len;
	return 0;
}

void ofi_conn_delete(void *bconn)
{
	struct ofi_conn *c = bconn;

	if (!c)
		return;
	/* Off the table first: whatever of it is still in a CQ is dropped. */
	ofi_conn_unregister(c);
	ofi_conn_free(c);
}

/* Inlined into ofi_post, which calls it from one place. */
static inline __attribute__((always_inline)) ssize_t
ofi_post_once(struct ofi_conn *c, const struct wimm_wr *wr, uint32_t pos, uint64_t flags)
{
	/* Length rides in the upper half where the provider carries 8 bytes of
	 * CQ data, so the receiver never depends on the reported length (E3). */
	uint64_t data = c->ctx->data_wide ? ((uint64_t)wr->len << 32) | wr->imm : wr->imm;

	if (wr->op == WIMM_OP_FETCH_ADD || wr->op == WIMM_OP_CMP_SWAP)
		return ofi_atomic_post_once(c, wr, pos, flags);
	if (wr->op == WIMM_OP_WRITE_IMM && c->ring_out)
		return ofi_ring_post_once(c, wr, pos, flags);
	/* Injected, with no completion and no other flag: the provider's
	 * inject calls, which skip what its *msg calls look at (shm 1.17:
	 * the endpoint's tx lock, the buffer's memory type, the protocol, the
	 * completion), the path fi_pingpong's fi_inject takes. Same commands,
	 * same order. Not for 0 bytes: those keep their null window and their
	 * empty iov (below). */
	if (flags == FI_INJECT && wr->len) {
		switch (wr->op) {
		case WIMM_OP_WRITE_IMM:
			return fi_inject_writedata(c->ep, wr->local, wr->len, data, c->peer,
						   wr->raddr, wr->rkey);
		case WIMM_OP_WRITE:
			return fi_inject_write(c->ep, wr->local, wr->len, c->peer, wr->raddr,
					       wr->rkey);
		case WIMM_OP_SEND_IMM:
			return fi_injectdata(c->ep, wr->local, wr->len, data, c->peer);
		default:
			break;
		}
	}
	struct iovec iov = {.iov_base = wr->local, .iov_len = wr->len};
	void *desc = wr->lmr ? wr->lmr->desc : NULL;
	struct fi_rma_iov rma = {.addr = wr->raddr, .len = wr->len, .key = wr->rkey};

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
		    .context = ofi_cookie(c, 0, pos),
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
	    .context = ofi_cookie(c, 0, pos),
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
	case WIMM_OP_FETCH_ADD:
	case WIMM_OP_CMP_SWAP:
		break;
	}
	return -FI_EINVAL;
}

int ofi_post(void *bconn, const struct wimm_wr *wr)
{
	struct ofi_conn *c = bconn;
	uint64_t flags = 0;
	uint32_t pos;
	int complete;
	/* Through the peer's ring: the entry rides with the payload. */
	int ringed = wr->op == WIMM_OP_WRITE_IMM && c->ring_out;
	size_t wire_len = wr->len + (ringed ? OFI_RING_ENTRY_LEN : 0);
	size_t inject = c->ctx->inject_size;
	ssize_t ret;

	if (!c->enabled || c->down.state != WIMM_DOWN_ALIVE)
		return WIMM_E_DISCONNECTED;
	if (!wimm_send_ring_has_room(&c->sq, wr->internal)) {
		ofi_conn_stash_cq(c);
		if (!wimm_send_ring_has_room(&c->sq, wr->internal))
			return WIMM_E_AGAIN;
	}
	/* Reads and atomics always complete (their bytes, the old value, are
	 * only there then, and an atomic's operands stay in its slot until
	 * it), and so does what cannot be injected: an unsignaled operation
	 * counts as complete when posted (send_ring.h, out of order). Nothing
	 * else asks for a completion: injected operations retire as they are
	 * posted (below), so no forced signal is needed to free their slots
	 * (one in 16 was: shm's general call, and a completion to sort). */
	complete = wr->signal || wr->op == WIMM_OP_READ || wr->op == WIMM_OP_FETCH_ADD ||
		   wr->op == WIMM_OP_CMP_SWAP || wire_len > inject;
	if (complete)
		flags |= FI_COMPLETION;
	else if (wire_len <= inject)
		flags |= FI_INJECT;
	/* tcp completes a write when it leaves; shm's copy is the delivery
	 * (and its RMA path never completes with this flag). */
	if (wr->delivered && c->ctx->msg)
		flags |= FI_DELIVERY_COMPLETE;

	pos = wimm_send_ring_index(&c->sq, wimm_send_ring_head(&c->sq));
	/* A full provider queue may only need its completions read: once. */
	for (int tries = 0;; tries++) {
		ret = ofi_post_once(c, wr, pos, flags);
		if (ret != -FI_EAGAIN)
			break;
		if (tries)
			return WIMM_E_AGAIN;
		ofi_conn_stash_cq(c);
	}
	if (ret)
		return ofi_err(c->ctx, (int)ret, "post");
	/* An injected operation is complete as posted (send_ring.h). With
	 * nothing outstanding it has nothing to wait for and nothing to
	 * report: it leaves no slot (the common case: 64 of the library's
	 * instructions per ping-pong round trip, callgrind). Behind others
	 * it takes a slot and retires as soon as nothing before it still
	 * waits, here or in the poll that takes what it waited for. */
	if (complete || wimm_send_ring_outstanding(&c->sq)) {
		wimm_send_ring_push(&c->sq, wr, (uint32_t)wr->len, complete);
		if (!complete)
			wimm_send_ring_retire_quiet(&c->sq);
	}
	ofi_ring_posted(c, wr, ringed);
	/* Its completion is due: no need to wait for the fd to say so. */
	if (complete)
		ofi_hot_add(c);
	return 0;
}

int ofi_rx_release(void *bconn, uint32_t n)
{
	struct ofi_conn *c = bconn;
	uint64_t held = wimm_recv_slots_held(&c->rx);
	int ret;

	if (!c->recv_size || !c->slots_posted)
		return 0;
	/* Write-with-imm consumes no slot here: only slots whose send-with-imm
	 * was handed out go back, oldest first. */
	if (n > held)
		n = (uint32_t)held;
	for (uint32_t i = 0; i < n; i++) {
		ret = ofi_post_slot(c);
		if (ret)
			return ret;
		wimm_recv_slots_release(&c->rx, 1);
	}
	/* A message tcp already read may be waiting for this slot: read the
	 * CQ at the next poll even if its fd stays quiet. */
	if (n)
		ofi_hot_add(c);
	return 0;
}
