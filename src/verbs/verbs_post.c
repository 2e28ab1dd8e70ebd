/* verbs backend: the one post builder (where imm goes to network order), the
 * receive window refill, and the one completion decoder (where imm comes
 * back to host order). Hot path: no syscalls beyond the provider's own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verbs/verbs_internal.h"

#define VERBS_POLL_BATCH VERBS_STASH /* what a batch leaves over fits the stash */

int verbs_status_to_wimm(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_SUCCESS:
		return 0;
	case IBV_WC_WR_FLUSH_ERR:  /* QP went to error: the connection is gone */
	case IBV_WC_RETRY_EXC_ERR: /* peer stopped acking: dead or unreachable */
		return WIMM_E_DISCONNECTED;
	case IBV_WC_RNR_RETRY_EXC_ERR: /* peer had no receive posted */
		return WIMM_E_NORECV;
	case IBV_WC_REM_ACCESS_ERR: /* outside the peer's window or its rights */
		return WIMM_E_BOUNDS;
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_LOC_LEN_ERR:
		return WIMM_E_LOCAL_BOUNDS;
	case IBV_WC_REM_INV_REQ_ERR: /* e.g. a send longer than the receive slot */
		return WIMM_E_TRUNC;
	default:
		return WIMM_E_PROVIDER;
	}
}

/* Post n receives in ONE ibv_post_recv call (a linked list), oldest slot
 * first, so slot i of the ring is always the i-th receive to complete.
 * Every write-with-imm consumes one of them (docs/errata.md E1, not "none needed"
 * as the seed article says): without one an RC responder sends RNR NAK. */
int verbs_rx_post(struct verbs_conn *c, uint32_t n)
{
	struct ibv_recv_wr *bad;
	uint32_t i, slot;
	int rc;

	if (!n)
		return 0;
	for (i = 0; i < n; i++) {
		struct ibv_recv_wr *w = &c->rx_wr[i];

		slot = wimm_recv_slots_post_slot(&c->rx, i);
		w->wr_id = VERBS_WRID_RECV | VERBS_WRID(c->use_srq ? 0 : c->gen, slot);
		w->next = i + 1 < n ? &c->rx_wr[i + 1] : NULL;
		if (c->recv_size) {
			c->rx_sge[i].addr = (uintptr_t)(c->rx_buf + (size_t)slot * c->recv_size);
			c->rx_sge[i].length = c->recv_size;
			c->rx_sge[i].lkey = c->rx_mr->lkey;
			w->sg_list = &c->rx_sge[i];
			w->num_sge = 1;
		} else {
			/* zero-length: a write-with-imm never touches a buffer */
			w->sg_list = NULL;
			w->num_sge = 0;
		}
	}
	rc = c->use_srq ? ibv_post_srq_recv(c->vc->srq, c->rx_wr, &bad)
			: ibv_post_recv(c->qp, c->rx_wr, &bad);
	if (rc)
		return verbs_err(c->vc, WIMM_E_PROVIDER, rc, "ibv_post_recv(%u): %s", n,
				 strerror(rc));
	wimm_recv_slots_posted(&c->rx, n);
	return 0;
}

int verbs_rx_release(void *bconn, uint32_t n)
{
	struct verbs_conn *c = bconn;
	int rc;

	/* at most rx_depth in one batch: the size of rx_wr */
	rc = n > c->rx_depth ? WIMM_E_INVAL : wimm_recv_slots_check_release(&c->rx, n);
	if (rc)
		return rc;
	/* a QP in error would only flush them back */
	if (!c->dead)
		rc = verbs_rx_post(c, n);
	if (!rc)
		wimm_recv_slots_release(&c->rx, n);
	return rc;
}

/* The work request of wr, but for what changes from post to post (imm,
 * the signal, wr_id: post_swr sets those). *sge must live as long as *swr.
 * INVAL for an operation verbs does not have. */
static int build_swr(const struct verbs_conn *c, const struct wimm_wr *wr, struct ibv_send_wr *swr,
		     struct ibv_sge *sge)
{
	memset(swr, 0, sizeof(*swr));
	switch (wr->op) {
	case WIMM_OP_WRITE_IMM:
		swr->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		break;
	case WIMM_OP_WRITE:
		swr->opcode = IBV_WR_RDMA_WRITE;
		break;
	case WIMM_OP_SEND_IMM:
		swr->opcode = IBV_WR_SEND_WITH_IMM;
		break;
	case WIMM_OP_READ:
		swr->opcode = IBV_WR_RDMA_READ;
		break;
	case WIMM_OP_FETCH_ADD:
	case WIMM_OP_CMP_SWAP:
		swr->opcode = wr->op == WIMM_OP_FETCH_ADD ? IBV_WR_ATOMIC_FETCH_AND_ADD
							  : IBV_WR_ATOMIC_CMP_AND_SWP;
		swr->wr.atomic.remote_addr = wr->raddr;
		swr->wr.atomic.rkey = (uint32_t)wr->rkey;
		swr->wr.atomic.compare_add =
		    wr->op == WIMM_OP_FETCH_ADD ? wr->operand : wr->compare;
		swr->wr.atomic.swap = wr->op == WIMM_OP_CMP_SWAP ? wr->operand : 0;
		break;
	default:
		return WIMM_E_INVAL;
	}
	if (wr->op == WIMM_OP_WRITE_IMM || wr->op == WIMM_OP_WRITE || wr->op == WIMM_OP_READ) {
		swr->wr.rdma.remote_addr = wr->raddr;
		swr->wr.rdma.rkey = (uint32_t)wr->rkey;
	}
	if (wr->len) {
		sge->addr = (uintptr_t)wr->local;
		sge->length = (uint32_t)wr->len;
		sge->lkey = ((struct ibv_mr *)wr->lmr->desc)->lkey;
		swr->sg_list = sge;
		swr->num_sge = 1;
		/* Reads and atomics write into sge: never inline. */
		if ((wr->op == WIMM_OP_WRITE_IMM || wr->op == WIMM_OP_WRITE ||
		     wr->op == WIMM_OP_SEND_IMM) &&
		    wr->len <= c->max_inline)
			swr->send_flags |= IBV_SEND_INLINE;
	}
	return 0;
}

/* The one ibv_post_send, for every operation, built (build_swr) or
 * prepared: here imm goes to network order, the signal is decided and the
 * send slot taken. */
static int post_swr(struct verbs_conn *c, struct ibv_send_wr *swr, const struct wimm_wr *wr)
{
	struct ibv_send_wr *bad;
	int signaled, rc;

	if (c->dead)
		return WIMM_E_DISCONNECTED;
	/* user WRs get sq_depth slots; the core's credit writes the rest */
	if (!wimm_send_ring_has_room(&c->sq, wr->internal))
		return WIMM_E_AGAIN;
	if (wr->op == WIMM_OP_WRITE_IMM || wr->op == WIMM_OP_SEND_IMM)
		swr->imm_data = htonl(wr->imm);
	signaled = wimm_send_ring_must_signal(&c->sq, wr->signal);
	swr->send_flags = signaled ? swr->send_flags | IBV_SEND_SIGNALED
				   : swr->send_flags & ~(unsigned)IBV_SEND_SIGNALED;
	swr->wr_id = VERBS_WRID(c->gen, wimm_send_ring_head(&c->sq));

	rc = ibv_post_send(c->qp, swr, &bad);
	if (rc) {
		if (rc == ENOMEM)
			return WIMM_E_AGAIN;
		return verbs_err(c->vc, WIMM_E_PROVIDER, rc, "ibv_post_send: %s", strerror(rc));
	}
	/* An atomic's byte_len is the device's business: it moved a word. */
	wimm_send_ring_push(
	    &c->sq, wr,
	    wr->op == WIMM_OP_FETCH_ADD || wr->op == WIMM_OP_CMP_SWAP ? 8u : (uint32_t)wr->len,
	    signaled);
	return 0;
}

int verbs_post(void *bconn, const struct wimm_wr *wr)
{
	struct verbs_conn *c = bconn;
	struct ibv_send_wr swr;
	struct ibv_sge sge;
	int rc = build_swr(c, wr, &swr, &sge);

	return rc ? rc : post_swr(c, &swr, wr);
}

/* A prepared operation's work request, built once. */
struct verbs_prep {
	struct ibv_send_wr swr;
	struct ibv_sge sge;
};

int verbs_prep_new(void *bconn, const struct wimm_wr *wr, void **out)
{
	struct verbs_prep *p = calloc(1, sizeof(*p));
	int rc;

	if (!p)
		return WIMM_E_NOMEM;
	rc = build_swr(bconn, wr, &p->swr, &p->sge);
	if (rc) {
		free(p);
		return rc;
	}
	*out = p;
	return 0;
}

int verbs_prep_post(void *bconn, void *bprep, const struct wimm_wr *wr)
{
	return post_swr(bconn, &((struct verbs_prep *)bprep)->swr, wr);
}

void verbs_prep_delete(void *bprep)
{
	free(bprep);
}

/* Atomics where the device has them (atomic_cap; rxe: IBV_ATOMIC_HCA, atomic
 * against the other atomics of the device, which is all the core promises).
 * The QP grants remote atomics through rdma_cm: the kernel CM sets
 * IB_ACCESS_REMOTE_ATOMIC with the responder resources it negotiates. */
int verbs_post_atomic(void *bconn, const struct wimm_wr *wr)
{
	struct verbs_conn *c = bconn;

	if (c->vc->dattr.atomic_cap == IBV_ATOMIC_NONE)
		return verbs_err(c->vc, WIMM_E_NOTSUP, 0,
				 "%s: device reports atomic_cap IBV_ATOMIC_NONE", c->vc->fabric);
	return verbs_post(bconn, wr);
}

/* The one completion decoder. Returns 1 when *out was filled, 0 when the
 * completion is swallowed (forced signal, stale, flushed receive). */
static int verbs_decode(struct verbs_ctx *vc, const struct ibv_wc *wc, struct wimm_cqe *out)
{
	struct verbs_conn *c = verbs_tab_find(vc, wc->qp_num);
	int is_recv = (wc->wr_id & VERBS_WRID_RECV) != 0;
	uint64_t pos;
	uint32_t slot;
	int status;

	if (!c)
		return 0; /* its connection was deleted */
	if ((!is_recv || !c->use_srq) && VERBS_WRID_GEN(wc->wr_id) != c->gen)
		return 0; /* an older QP with the same number */
	memset(out, 0, sizeof(*out));
	out->conn = c->core;

	if (is_recv) {
		if (wc->status != IBV_WC_SUCCESS) {
			/* flushed or failed receive: the QP is in error */
			if (c->down.state == WIMM_DOWN_ALIVE && wc->status != IBV_WC_WR_FLUSH_ERR)
				verbs_err(vc, 0, wc->status, "receive: %s",
					  ibv_wc_status_str(wc->status));
			verbs_conn_mark_down(c, verbs_status_to_wimm(wc->status), wc->status);
			return 0;
		}
		slot = (uint32_t)wc->wr_id;
		wimm_recv_slots_deliver(&c->rx);
		out->len = wc->byte_len;
		if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
			/* docs/errata.md E3: byte_len is the length of the write */
			out->kind = WIMM_CQE_RECV_WRITE_IMM;
			out->imm = ntohl(wc->imm_data);
		} else {
			out->kind = WIMM_CQE_RECV_SEND_IMM;
			out->imm = (wc->wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc->imm_data) : 0;
			out->data = c->recv_size ? c->rx_buf + (size_t)slot * c->recv_size : NULL;
		}
		return 1;
	}

	/* A send completion retires its slot and every unsignaled one before
	 * it (completions are in order on a QP). */
	pos = wimm_send_ring_pos32(&c->sq, (uint32_t)wc->wr_id);
	if (pos == UINT64_MAX)
		return 0; /* not outstanding: stale */
	if (wc->status == IBV_WC_SUCCESS)
		return wimm_send_ring_complete(&c->sq, pos, 0, 0, c->core, out);
	status = verbs_status_to_wimm(wc->status);
	if (wc->status != IBV_WC_WR_FLUSH_ERR)
		verbs_err(vc, 0, wc->status, "%s", ibv_wc_status_str(wc->status));
	/* any send error leaves an RC QP in error: the connection is over */
	verbs_conn_mark_down(c, status, wc->status);
	return wimm_send_ring_complete(&c->sq, pos, status, wc->status, c->core, out);
}

/* One CONN_DOWN per connection; also tell the peer at once. */
static int verbs_emit_down(struct verbs_ctx *vc, struct wimm_cqe *out, int n)
{
	int got = 0;
	uint32_t i;

	for (i = 0; i < vc->tab_size && got < n && vc->down_pending; i++) {
		struct verbs_conn *c = vc->tab[i];

		if (!c || !wimm_down_emit(&c->down, &out[got], c->core))
			continue;
		got++;
		vc->down_pending--;
		rdma_disconnect(c->id);
		c->established = 0;
	}
	return got;
}

/* One CONN_UP per accepted connection whose ESTABLISHED arrived. */
static int verbs_emit_up(struct verbs_ctx *vc, struct wimm_cqe *out, int n)
{
	int got = 0;

	for (uint32_t i = 0; i < vc->tab_size && got < n && vc->up_pending; i++) {
		struct verbs_conn *c = vc->tab[i];

		if (!c || c->up != 1)
			continue;
		c->up = 2;
		vc->up_pending--;
		out[got++] = (struct wimm_cqe){.kind = WIMM_CQE_CONN_UP, .conn = c->core};
	}
	return got;
}

/* A receive completing on a connection still accepting: the peer's first
 * message beat ESTABLISHED (the RTU is late or lost; COMM_EST asked the CM to
 * deliver it). Data on the QP proves it up: report so before the message.
 * 1 when *out took the CONN_UP. */
static int verbs_first_recv(struct verbs_ctx *vc, const struct ibv_wc *wc, struct wimm_cqe *out)
{
	struct verbs_conn *c;

	if (!(wc->wr_id & VERBS_WRID_RECV) || wc->status != IBV_WC_SUCCESS)
		return 0;
	c = verbs_tab_find(vc, wc->qp_num);
	if (!c || !c->accepting || (!c->use_srq && VERBS_WRID_GEN(wc->wr_id) != c->gen))
		return 0;
	verbs_conn_mark_up(c);
	c->up = 2;
	vc->up_pending--;
	*out = (struct wimm_cqe){.kind = WIMM_CQE_CONN_UP, .conn = c->core};
	return 1;
}

/* wc[0..k) into out (room n). A CONN_UP may go before a receive, so what
 * then does not fit waits in the stash, which is empty whenever this runs
 * (poll empties it first, and calls this with no room when it cannot). */
static int verbs_decode_all(struct verbs_ctx *vc, const struct ibv_wc *wc, int k,
			    struct wimm_cqe *out, int n)
{
	int got = 0;

	for (int i = 0; i < k; i++) {
		if (got < n)
			got += verbs_first_recv(vc, &wc[i], &out[got]);
		if (got == n) {
			memcpy(vc->stash, &wc[i], (size_t)(k - i) * sizeof(*wc));
			vc->stash_n = k - i;
			vc->stash_pos = 0;
			break;
		}
		got += verbs_decode(vc, &wc[i], &out[got]);
	}
	return got;
}

/* Completions of the CQ into out, up to n; stops when the CQ is empty. */
static int verbs_drain(struct verbs_ctx *vc, struct wimm_cqe *out, int n)
{
	struct ibv_wc wc[VERBS_POLL_BATCH];
	int got = 0;

	while (got < n) {
		int want = n - got < VERBS_POLL_BATCH ? n - got : VERBS_POLL_BATCH;
		int k = ibv_poll_cq(vc->cq, want, wc);

		if (k < 0)
			return verbs_err(vc, WIMM_E_PROVIDER, k, "ibv_poll_cq failed");
		got += verbs_decode_all(vc, wc, k, &out[got], n - got);
		if (k < want || vc->stash_pos < vc->stash_n)
			break;
	}
	return got;
}

int verbs_poll(void *bctx, struct wimm_cqe *out, int n)
{
	struct verbs_ctx *vc = bctx;
	int got = 0;
	/* A CONN_DOWN waits for the CQ to come back empty (so it follows the
	 * connection's last completions), but not for ever: after a few polls
	 * that filled the array, one place is kept for it. */
	int limit = vc->down_pending && vc->full_polls >= VERBS_CTL_FULL_POLLS && n > 1 ? n - 1 : n;

	/* A connection that came up is announced before its first data. */
	if (vc->up_pending)
		got += verbs_emit_up(vc, out, limit);
	while (got < limit && vc->stash_pos < vc->stash_n) {
		const struct ibv_wc *wc = &vc->stash[vc->stash_pos];

		got += verbs_first_recv(vc, wc, &out[got]);
		if (got == limit)
			break;
		vc->stash_pos++;
		got += verbs_decode(vc, wc, &out[got]);
	}
	int k = verbs_drain(vc, &out[got], limit - got);
	if (k < 0)
		return k;
	got += k;
	/* The control channels also while the CQ keeps the array full, so
	 * requests and disconnects are never starved by a stream. */
	if (wimm_ctl_due(&vc->ctl))
		verbs_control(vc);
	if (got == n) {
		vc->full_polls++;
		return got;
	}
	vc->full_polls = 0;
	if (vc->down_pending) {
		/* A peer's last messages complete here before its disconnect
		 * reaches the CM channel: take what the CQ holds now, so the
		 * DISCONNECT follows them, and report it once the CQ is empty. */
		k = verbs_drain(vc, &out[got], limit - got);
		if (k < 0)
			return got ? got : k;
		got += k;
		if (got < n)
			got += verbs_emit_down(vc, &out[got], n - got);
	}
	return got;
}
