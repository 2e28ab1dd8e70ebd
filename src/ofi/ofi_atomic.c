/* libfabric backend: fetch-and-add and compare-and-swap on 64-bit words.
 *
 * Where the provider offers FI_ATOMIC on the endpoint type wimm uses (shm
 * in libfabric 1.17: yes; tcp's MSG endpoints: no, only tcp;ofi_rxm's RDM
 * ones), the context asks for it at open and fi_query_atomic says whether
 * FI_UINT64 with FI_SUM (fetch) and FI_CSWAP (compare) are there. Elsewhere
 * post_atomic fails with NOTSUP and a text that says which of those was
 * missing.
 *
 * The operands travel from memory the provider may read at any time until
 * the completion (FI_INJECT is not defined for fetching atomics), so each
 * connection has a registered array of two words per send slot, made at
 * its first atomic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_atomic.h>

#include "ofi/ofi_internal.h"

/* What fi_query_atomic says of one (op, kind); 0 when usable. */
static int ofi_atomic_query(struct ofi_ctx *x, enum fi_op op, uint64_t kind, const char *name)
{
	struct fi_atomic_attr attr = {0};
	int ret = fi_query_atomic(x->domain, FI_UINT64, op, &attr, kind);

	if (ret == 0 && attr.count >= 1 && attr.size == sizeof(uint64_t))
		return 0;
	snprintf(x->atomic_why, sizeof(x->atomic_why), "%s: fi_query_atomic(FI_UINT64, %s): %s",
		 x->fabric_name, name, ret ? fi_strerror(-ret) : "no 64-bit count");
	return -1;
}

void ofi_atomic_probe(struct ofi_ctx *x)
{
	x->atomics = 0;
	if (!(x->info->caps & FI_ATOMIC)) {
		snprintf(x->atomic_why, sizeof(x->atomic_why),
			 "%s: the provider offers no FI_ATOMIC on %s endpoints", x->fabric_name,
			 x->msg ? "FI_EP_MSG" : "FI_EP_RDM");
		return;
	}
	if (ofi_atomic_query(x, FI_SUM, FI_FETCH_ATOMIC, "FI_SUM, FI_FETCH_ATOMIC") ||
	    ofi_atomic_query(x, FI_CSWAP, FI_COMPARE_ATOMIC, "FI_CSWAP, FI_COMPARE_ATOMIC"))
		return;
	x->atomics = 1;
}

static int ofi_atomic_operands(struct ofi_conn *c)
{
	/* Two words per send slot: the slot index names them. */
	size_t bytes = (size_t)wimm_send_ring_slots(&c->sq) * 2 * sizeof(uint64_t);
	int ret;

	c->atom = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	if (!c->atom)
		return WIMM_E_NOMEM;
	ret = ofi_reg(c->ctx, c->atom, bytes, FI_READ | FI_WRITE | FI_SEND, &c->atom_mr);
	if (ret) {
		free(c->atom);
		c->atom = NULL;
		c->atom_mr = NULL;
		return ofi_err(c->ctx, ret, "fi_mr_reg (atomic operands)");
	}
	return 0;
}

void ofi_atomic_free(struct ofi_conn *c)
{
	if (c->atom_mr)
		fi_close(&c->atom_mr->fid);
	free(c->atom);
}

int ofi_post_atomic(void *bconn, const struct wimm_wr *wr)
{
	struct ofi_conn *c = bconn;
	int ret;

	if (!c->ctx->atomics) {
		wimm_ctx_set_provider_error(c->ctx->core, -FI_EOPNOTSUPP, c->ctx->atomic_why);
		return WIMM_E_NOTSUP;
	}
	if (!c->atom) {
		ret = ofi_atomic_operands(c);
		if (ret)
			return ret;
	}
	return ofi_post(bconn, wr);
}

ssize_t ofi_atomic_post_once(struct ofi_conn *c, const struct wimm_wr *wr, uint32_t pos,
			     uint64_t flags)
{
	uint64_t *op = &c->atom[2 * (size_t)pos];
	void *op_desc = fi_mr_desc(c->atom_mr);
	void *res_desc = wr->lmr->desc;
	struct fi_ioc operand = {.addr = &op[0], .count = 1};
	struct fi_ioc compare = {.addr = &op[1], .count = 1};
	struct fi_ioc result = {.addr = wr->local, .count = 1};
	struct fi_rma_ioc target = {.addr = wr->raddr, .count = 1, .key = wr->rkey};
	struct fi_msg_atomic m = {
	    .msg_iov = &operand,
	    .desc = &op_desc,
	    .iov_count = 1,
	    .addr = c->peer,
	    .rma_iov = &target,
	    .rma_iov_count = 1,
	    .datatype = FI_UINT64,
	    .op = wr->op == WIMM_OP_FETCH_ADD ? FI_SUM : FI_CSWAP,
	    .context = ofi_cookie(c, 0, pos),
	};

	op[0] = wr->operand;
	op[1] = wr->compare;
	if (wr->op == WIMM_OP_FETCH_ADD)
		return fi_fetch_atomicmsg(c->ep, &m, &result, &res_desc, 1, flags);
	return fi_compare_atomicmsg(c->ep, &m, &compare, &op_desc, 1, &result, &res_desc, 1, flags);
}
