/* libfabric backend: the doorbell ring of the tcp provider (the why and the
 * wire format: ofi_ring_wire.h). Our ring, which the peer writes, is offered
 * in the handshake; the peer's, which we write, is taken from its handshake.
 * ofi_poll.c merges the entries with the doorbells that still come through
 * the CQ (send-with-imm) in the order they were posted. */
#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ofi/ofi_internal.h"

int ofi_ring_open(struct ofi_conn *c, const struct wimm_bmr *window)
{
	size_t bytes = (size_t)c->rx_depth * OFI_RING_ENTRY_LEN;
	int ret;

	if (!c->ctx->ring)
		return 0;
	/* Credits bound the doorbells in flight to our receive window: one
	 * slot each. Zeroed: no slot holds a seal yet. */
	c->ring = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
	if (!c->ring)
		return WIMM_E_NOMEM;
	memset(c->ring, 0, bytes);
	ret = ofi_reg(c->ctx, c->ring, bytes, FI_REMOTE_WRITE, &c->ring_mr);
	if (ret) {
		free(c->ring);
		c->ring = NULL;
		c->ring_mr = NULL;
		return ofi_err(c->ctx, ret, "fi_mr_reg (doorbell ring)");
	}
	c->ring_entries = c->rx_depth;
	c->ring_slot = 0;
	c->ring_seal = OFI_RING_FIRST_SEAL;
	c->ring_max_len = window ? window->len : 0;
	return 0;
}

void ofi_ring_free(struct ofi_conn *c)
{
	if (c->ring_mr)
		fi_close(&c->ring_mr->fid);
	free(c->ring);
	free(c->ring_out);
}

int ofi_ring_offer(const struct ofi_conn *c, uint8_t *buf, size_t *len)
{
	if (!c->ring) {
		*len = 0;
		return 0;
	}
	if (*len < OFI_RING_OFFER_LEN)
		return WIMM_E_NOMEM;
	ofi_ring_offer_encode(buf, &(struct ofi_ring_offer){.entries = c->ring_entries,
							    .addr = (uint64_t)(uintptr_t)c->ring,
							    .key = fi_mr_key(c->ring_mr)});
	*len = OFI_RING_OFFER_LEN;
	return 0;
}

int ofi_ring_take_offer(struct ofi_conn *c, const struct wimm_handshake *peer)
{
	struct ofi_ring_offer o;

	if (peer->addr_len == 0)
		return 0; /* a peer without a ring: doorbells as remote CQ data */
	/* Fewer slots than the credits it grants would let us overwrite an
	 * entry it has not read. */
	if (ofi_ring_offer_decode(peer->addr, peer->addr_len, &o) || o.entries < peer->rx_depth ||
	    o.entries > OFI_RING_MAX_ENTRIES) {
		wimm_ctx_set_provider_error(c->ctx->core, 0,
					    "the peer's doorbell ring offer is malformed");
		return WIMM_E_PROTO;
	}
	/* A peer may offer one where we would not use it (another provider's
	 * peer cannot reach us here, but a raw one may try). */
	if (!c->ctx->ring)
		return 0;
	c->ring_out = aligned_alloc(64, (size_t)wimm_send_ring_slots(&c->sq) * OFI_RING_ENTRY_LEN);
	if (!c->ring_out)
		return WIMM_E_NOMEM;
	c->peer_ring_entries = o.entries;
	c->peer_ring_slot = 0;
	c->peer_ring_seal = OFI_RING_FIRST_SEAL;
	c->peer_ring_addr = o.addr;
	c->peer_ring_key = o.key;
	return 0;
}

ssize_t ofi_ring_post_once(struct ofi_conn *c, const struct wimm_wr *wr, uint32_t pos,
			   uint64_t flags)
{
	/* The entry lives in the send slot until the write completes: a write
	 * that is not injected is sent from it later. */
	struct ofi_ring_entry *ent = &c->ring_out[pos];
	struct iovec iov[2] = {{.iov_base = wr->local, .iov_len = wr->len},
			       {.iov_base = ent, .iov_len = OFI_RING_ENTRY_LEN}};
	void *desc[2] = {wr->lmr ? wr->lmr->desc : NULL, NULL};
	struct fi_rma_iov rma[2] = {
	    {.addr = wr->raddr, .len = wr->len, .key = wr->rkey},
	    {.addr = c->peer_ring_addr + (uint64_t)c->peer_ring_slot * OFI_RING_ENTRY_LEN,
	     .len = OFI_RING_ENTRY_LEN,
	     .key = c->peer_ring_key}};
	int skip = wr->len ? 0 : 1; /* a pure doorbell is its entry alone */
	struct fi_msg_rma m = {
	    .msg_iov = iov + skip,
	    .desc = desc + skip,
	    .iov_count = (size_t)(2 - skip),
	    .addr = c->peer,
	    .rma_iov = rma + skip,
	    .rma_iov_count = (size_t)(2 - skip),
	    .context = ofi_cookie(c, 0, pos),
	};

	*ent = (struct ofi_ring_entry){
	    .imm = htole32(wr->imm),
	    .len = htole32((uint32_t)wr->len),
	    .sends_before = htole32(c->sends_posted),
	    .seal = c->peer_ring_seal,
	};
	return fi_writemsg(c->ep, &m, flags);
}

void ofi_ring_posted(struct ofi_conn *c, const struct wimm_wr *wr, int ringed)
{
	if (ringed)
		ofi_ring_advance(&c->peer_ring_slot, &c->peer_ring_seal, c->peer_ring_entries);
	else if (wr->op == WIMM_OP_SEND_IMM || wr->op == WIMM_OP_WRITE_IMM)
		c->sends_posted++;
}

int ofi_ring_peek(const struct ofi_conn *c, int32_t *ahead)
{
	const struct ofi_ring_entry *ent;

	if (!c->ring || c->ring_broken)
		return 0;
	ent = &c->ring[c->ring_slot];
	/* The provider wrote it in this thread, inside a fi_cq_read: the
	 * seal, the entry's last byte, says all of it is there. */
	if (__atomic_load_n(&ent->seal, __ATOMIC_ACQUIRE) != c->ring_seal)
		return 0;
	*ahead = (int32_t)(le32toh(ent->sends_before) - c->cq_bells);
	return 1;
}

int ofi_ring_pending(const struct ofi_conn *c)
{
	int32_t ahead;

	return ofi_ring_peek(c, &ahead);
}

int ofi_ring_take(struct ofi_conn *c, struct wimm_cqe *e)
{
	struct ofi_ring_entry ent = c->ring[c->ring_slot];
	uint32_t len = le32toh(ent.len);

	if (len > c->ring_max_len)
		return 0;
	ofi_ring_advance(&c->ring_slot, &c->ring_seal, c->ring_entries);
	*e = (struct wimm_cqe){
	    .kind = WIMM_CQE_RECV_WRITE_IMM,
	    .conn = c->core,
	    .imm = le32toh(ent.imm),
	    .len = len,
	};
	return 1;
}

void ofi_ring_violation(struct ofi_conn *c, const char *what)
{
	char text[160];

	snprintf(text, sizeof(text), "the peer broke the doorbell ring's rules: %s", what);
	wimm_ctx_set_provider_error(c->ctx->core, 0, text);
	c->ring_broken = 1;
	/* Nothing more of it lands; the core reports the loss and deletes. */
	if (c->ep && c->connected)
		fi_shutdown(c->ep, 0);
	c->connected = 0;
	ofi_conn_down(c, WIMM_E_PROTO, 0);
}
