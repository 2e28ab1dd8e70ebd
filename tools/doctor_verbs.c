/* `wimm doctor` on a verbs device: a raw RC pair (sender here, receiver
 * local or behind --serve), three probe write-with-imms, and the six steps
 * judged from what the two ends, the device counters and the wire show. */
#ifdef DOCTOR_HAVE_VERBS
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "doctor_peer.h"
#include "doctor_wire.h"

#define NPROBES 3
#define IMM_BASE 0xd0c70000u

struct probe {
	uint32_t len;
	uint64_t off; /* into the target */
	uint32_t imm;
	int post_errno; /* 0: posted */
	int done;	/* a completion came */
	int status;
};

struct run {
	const struct dr_opts *o;
	struct dr_report *r;
	struct dv_end tx, rx_local;
	struct dv_peer peer;
	struct dp_conn conn;
	struct dv_id tx_id, rx_id;
	struct dv_target t;
	int mtu, mtu_bytes, posted;
	struct probe p[NPROBES];
	struct dv_qp_attr txa, rxa, txa_after, rxa_after;
	struct dv_key key;
	struct dv_cq rxcq, rxcq_after, txcq_after;
	struct hw_counters c0tx, c1tx, c0rx, c1rx;
	struct dv_wc rwc[DV_MAX_WC];
	int nrwc;
	int cap_ok, other_frames;
	char cap_err[256];
};

static double timeout_ms_of(int t)
{
	return 4.096e-3 * (double)(1ull << t);
}

static const char *wc_status(int s)
{
	return ibv_wc_status_str((enum ibv_wc_status)s);
}

/* "name +delta" for every counter that moved (whose name contains sub,
 * if not NULL), appended to buf. */
static void counters_moved(const struct hw_counters *a, const struct hw_counters *b,
			   const char *sub, char *buf, size_t cap)
{
	for (int i = 0; i < b->n; i++) {
		long long before = hw_counter(a, b->name[i]);

		if (before >= 0 && b->val[i] != before && (!sub || strstr(b->name[i], sub)))
			dr_cat(buf, cap, "%s%s %+lld", buf[0] ? ", " : "", b->name[i],
			       b->val[i] - before);
	}
}

static int same_device(const struct run *u)
{
	return u->peer.local && !strcmp(u->tx.dev, u->rx_local.dev);
}

/* ---------------------------------------------------------- the probes */

static void post_probes(struct run *u)
{
	/* 0 bytes and one packet: Write Only with Immediate; three packets:
	 * First, Middle, Last with Immediate (3000 bytes at MTU 1024). */
	const uint32_t lens[NPROBES] = {0, 64, (uint32_t)(3 * u->mtu_bytes - 72)};
	const uint64_t offs[NPROBES] = {0, 64, 4096};

	for (int i = 0; i < NPROBES; i++) {
		struct probe *p = &u->p[i];
		struct ibv_sge sge = {.addr = (uintptr_t)u->tx.buf + offs[i],
				      .length = lens[i],
				      .lkey = u->tx.live[0]->lkey};
		struct ibv_send_wr wr = {.wr_id = (uint64_t)i,
					 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					 .sg_list = lens[i] ? &sge : NULL,
					 .num_sge = lens[i] ? 1 : 0,
					 .send_flags = IBV_SEND_SIGNALED,
					 .imm_data = htonl(IMM_BASE + (uint32_t)i)},
				   *bad;

		p->len = lens[i];
		p->off = offs[i];
		p->imm = IMM_BASE + (uint32_t)i;
		for (uint32_t b = 0; b < p->len; b++)
			u->tx.buf[offs[i] + b] = (uint8_t)(b * 7 + (unsigned)i * 13) | 1;
		wr.wr.rdma.remote_addr = u->t.addr + offs[i];
		wr.wr.rdma.rkey = u->t.rkey;
		p->post_errno = ibv_post_send(u->tx.qp, &wr, &bad);
		if (p->post_errno < 0)
			p->post_errno = errno;
		u->posted += !p->post_errno;
	}
}

static void collect_sender(struct run *u)
{
	struct ibv_wc raw;
	int64_t deadline = dr_now_ms() + u->o->timeout_ms;
	int got = 0;

	/* Raw polling: the sender matches completions to probes by wr_id. */
	while (got < u->posted && dr_now_ms() < deadline) {
		if (ibv_poll_cq(u->tx.cq, 1, &raw) != 1) {
			usleep(500);
			continue;
		}
		if (raw.wr_id < NPROBES) {
			u->p[raw.wr_id].done = 1;
			u->p[raw.wr_id].status = raw.status;
		}
		got++;
	}
	for (int i = 0; i < NPROBES; i++) {
		struct probe *p = &u->p[i];

		dr_cat(u->r->sender_saw, sizeof(u->r->sender_saw),
		       "%sprobe %d (%u B): ", i ? "; " : "", i, p->len);
		if (p->post_errno)
			dr_cat(u->r->sender_saw, sizeof(u->r->sender_saw),
			       "ibv_post_send refused: %s", strerror(p->post_errno));
		else if (!p->done)
			dr_cat(u->r->sender_saw, sizeof(u->r->sender_saw),
			       "posted, no completion within %d ms", u->o->timeout_ms);
		else
			dr_cat(u->r->sender_saw, sizeof(u->r->sender_saw), "%s",
			       wc_status(p->status));
	}
}

static int collect_receiver(struct run *u, char *err, size_t errlen)
{
	char *s = u->r->receiver_saw;
	size_t cap = sizeof(u->r->receiver_saw);
	/* A sender that saw its probes complete has had them acknowledged:
	 * the receiver's completions are due; otherwise wait less. */
	int ms = u->posted ? u->o->timeout_ms / 4 : 200;

	u->nrwc = pe_poll(&u->peer, ms, u->posted, u->rwc, DV_MAX_WC, err, errlen);
	if (u->nrwc < 0)
		return -1;
	if (!u->nrwc)
		dr_cat(s, cap, "no completion within %d ms", ms);
	for (int i = 0, run; i < u->nrwc; i += run) {
		const struct dv_wc *w = &u->rwc[i];

		/* Error completions repeat (a flush per receive): count them. */
		for (run = 1; w->status != IBV_WC_SUCCESS && i + run < u->nrwc &&
			      u->rwc[i + run].status == w->status;
		     run++)
			;
		if (w->status == IBV_WC_SUCCESS)
			dr_cat(s, cap, "%s%s imm 0x%08x len %u", i ? "; " : "",
			       dv_wc_opcode_name(w->opcode), w->imm, w->len);
		else
			dr_cat(s, cap, run > 1 ? "%s%s x%d" : "%s%s", i ? "; " : "",
			       wc_status(w->status), run);
	}
	if (pe_cq(&u->peer, &u->rxcq_after, err, errlen))
		return -1;
	if (u->rxcq_after.async[0])
		dr_cat(s, cap, "; async events: %s", u->rxcq_after.async);
	dv_cq_info(&u->tx, &u->txcq_after);
	if (u->txcq_after.async[0])
		dr_cat(u->r->sender_saw, sizeof(u->r->sender_saw), "; async events: %s",
		       u->txcq_after.async);
	/* In a loopback run the bytes themselves can be compared. */
	if (u->peer.local && u->rx_local.buf) {
		int same = 0, total = 0;

		for (int i = 0; i < NPROBES; i++) {
			if (!u->p[i].len)
				continue;
			total++;
			same += !memcmp(u->rx_local.buf + u->p[i].off, u->tx.buf + u->p[i].off,
					u->p[i].len);
		}
		dr_cat(s, cap, "; bytes in place: %d of %d non-empty probes", same, total);
	}
	return 0;
}

/* ------------------------------------------------------------- steps */

static void step_recv(struct run *u)
{
	int rnr = 0;
	char ev[DR_TEXT] = "", naks[256] = "";

	/* rxe: rcvd_rnr_err, send_rnr_err, retry_rnr_exceeded_err; mlx5:
	 * rnr_nak_retry_err. */
	counters_moved(&u->c0tx, &u->c1tx, "rnr", naks, sizeof(naks));
	if (!same_device(u))
		counters_moved(&u->c0rx, &u->c1rx, "rnr", naks, sizeof(naks));
	for (int i = 0; i < NPROBES; i++)
		rnr += u->p[i].done && u->p[i].status == IBV_WC_RNR_RETRY_EXC_ERR;
	dr_cat(ev, sizeof(ev), "receiver had %d receives posted for %d probe write-with-imms",
	       u->rxcq.recv_posted, NPROBES);
	dr_cat(ev, sizeof(ev), "; probes ending in IBV_WC_RNR_RETRY_EXC_ERR: %d", rnr);
	dr_cat(ev, sizeof(ev), "; RNR counters: %s", naks[0] ? naks : "unchanged");
	if (u->rxcq.recv_posted < NPROBES || rnr)
		dr_set(u->r, DR_RECV, DR_FAIL,
		       "post one receive per write-with-imm before the peer may send it (a "
		       "zero-SGE receive is enough, ERRATA E1), and before the QP reaches RTR; "
		       "wimm does this with rx_depth and credits. A larger rnr_retry only hides a "
		       "receiver that falls behind",
		       "%s. Cause: every write-with-imm needs a receive WQE and is answered with "
		       "RNR NAKs "
		       "while none is posted",
		       ev);
	else
		dr_set(u->r, DR_RECV, DR_PASS, "", "%s", ev);
}

static void qp_text(char *buf, size_t cap, const char *who, uint32_t qpn,
		    const struct dv_qp_attr *a)
{
	char acc[64];

	dv_access_text(a->access, acc, sizeof(acc));
	if (!a->ok) {
		dr_cat(buf, cap, "%s QP 0x%x: ibv_query_qp failed", who, qpn);
		return;
	}
	dr_cat(buf, cap,
	       "%s QP 0x%x %s (path MTU %d, retry_cnt %d, rnr_retry %d, timeout %d = %.1f ms, "
	       "min_rnr_timer %d, access %s)",
	       who, qpn, dv_qp_state_name(a->state), 128 << a->mtu, a->retry, a->rnr_retry,
	       a->timeout, timeout_ms_of(a->timeout), a->min_rnr, acc);
}

static void step_qp(struct run *u)
{
	char ev[DR_TEXT] = "";
	int ok =
	    u->txa.ok && u->rxa.ok && u->txa.state == IBV_QPS_RTS && u->rxa.state == IBV_QPS_RTS;

	qp_text(ev, sizeof(ev), "before the probes: sender", u->tx_id.qpn, &u->txa);
	qp_text(ev, sizeof(ev), "; receiver", u->rx_id.qpn, &u->rxa);
	dr_cat(ev, sizeof(ev), "; after: sender %s, receiver %s",
	       dv_qp_state_name(u->txa_after.state), dv_qp_state_name(u->rxa_after.state));
	if (ok && u->txa.mtu != u->rxa.mtu) {
		dr_set(u->r, DR_QP, DR_FAIL,
		       "give both ends the same path_mtu in RTR (the smaller active_mtu of the two "
		       "ports)",
		       "%s. Cause: the path MTUs differ, packets larger than the receiver's are "
		       "dropped",
		       ev);
		return;
	}
	if (ok)
		dr_set(u->r, DR_QP, DR_PASS, "", "%s", ev);
	else
		dr_set(u->r, DR_QP, DR_FAIL,
		       "take both QPs RESET -> INIT -> RTR -> RTS: the sender needs RTS "
		       "(ibv_modify_qp with IBV_QPS_RTS, sq_psn, timeout, retry_cnt, rnr_retry) "
		       "to send; rdma_cm does it in rdma_connect/rdma_accept, so with rdma_cm look "
		       "for an ESTABLISHED event that never came",
		       "%s. Cause: a QP is not in RTS, a sender in RTR or INIT cannot send", ev);
}

static void step_key(struct run *u)
{
	char ev[DR_TEXT] = "";
	int rem_acc = 0;

	for (int i = 0; i < NPROBES; i++)
		rem_acc += u->p[i].done && u->p[i].status == IBV_WC_REM_ACCESS_ERR;
	dr_cat(ev, sizeof(ev), "sender holds addr 0x%" PRIx64 " rkey 0x%x len %u; ", u->t.addr,
	       u->t.rkey, u->t.len);
	if (u->key.live)
		dr_cat(ev, sizeof(ev),
		       "the receiver's live registration with rkey 0x%x covers [0x%" PRIx64
		       ", +%" PRIu64 ")%s (%d live registrations)",
		       u->t.rkey, u->key.mr_addr, u->key.mr_len,
		       u->key.in_bounds ? " and the target range" : " but not the target range",
		       u->key.nlive);
	else
		dr_cat(ev, sizeof(ev), "none of the receiver's %d live registrations has rkey 0x%x",
		       u->key.nlive, u->t.rkey);
	dr_cat(ev, sizeof(ev), "; probes ending in IBV_WC_REM_ACCESS_ERR: %d", rem_acc);
	if (u->key.live && u->key.in_bounds)
		dr_set(u->r, DR_KEY, DR_PASS, "", "%s", ev);
	else
		dr_set(u->r, DR_KEY, DR_FAIL,
		       "keep the window registered for as long as a peer may write into it: "
		       "deregister only after the peer was told or has gone, and hand out the new "
		       "rkey and address after any re-registration",
		       "%s. Cause: the sender writes to a registration the receiver no longer has",
		       ev);
}

static void step_access(struct run *u)
{
	char ev[DR_TEXT] = "", mra[64], qpa[64];
	int mr_ok = !!(u->key.access & IBV_ACCESS_REMOTE_WRITE);
	int qp_ok = !!(u->rxa.access & IBV_ACCESS_REMOTE_WRITE);

	if (!u->key.live) {
		dr_set(u->r, DR_ACCESS, DR_NA, "",
		       "no live registration matches the sender's rkey (step 2), so there are no "
		       "access rights to check");
		return;
	}
	dv_access_text(u->key.access, mra, sizeof(mra));
	dv_access_text(u->rxa.access, qpa, sizeof(qpa));
	dr_cat(ev, sizeof(ev), "target registration access %s; receiver QP qp_access_flags %s", mra,
	       qpa);
	for (int i = 0; i < u->r->npkts; i++)
		if (u->r->pkts[i].has_aeth && (u->r->pkts[i].syndrome >> 5) == 3)
			dr_cat(ev, sizeof(ev), "; on the wire the responder answered %s",
			       roce_aeth_name(u->r->pkts[i].syndrome));
	if (mr_ok && qp_ok)
		dr_set(u->r, DR_ACCESS, DR_PASS, "", "%s", ev);
	else
		dr_set(u->r, DR_ACCESS, DR_FAIL,
		       "register the window with IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE "
		       "and give the receiver QP qp_access_flags IBV_ACCESS_REMOTE_WRITE in INIT "
		       "(wimm: WIMM_REMOTE_WRITE)",
		       "%s. Cause: without REMOTE_WRITE the responder answers with a remote access "
		       "error "
		       "and writes nothing",
		       ev);
}

static void step_cq(struct run *u)
{
	char ev[DR_TEXT] = "";
	int tx_cqe = u->tx.cq->cqe;
	int tx_err = u->txcq_after.cq_err, rx_err = u->rxcq_after.cq_err;

	/* The sender's CQ takes a completion per signaled send (all probes
	 * are signaled), up to its send queue depth. */
	dr_cat(ev, sizeof(ev),
	       "receiver CQ has %d entries for %d completions that can be pending unpolled (its "
	       "posted receives); sender CQ has %d for %d send slots; CQ error async events: "
	       "receiver %d, sender %d (receiver: %s; sender: %s); device counters that moved: %s",
	       u->rxcq.cqe, u->rxcq.outstanding, tx_cqe, DV_SQ_DEPTH, rx_err, tx_err,
	       u->rxcq_after.async[0] ? u->rxcq_after.async : "no async event",
	       u->txcq_after.async[0] ? u->txcq_after.async : "no async event", u->r->counters);
	if (u->rxcq.cqe < u->rxcq.outstanding || tx_cqe < DV_SQ_DEPTH || rx_err || tx_err)
		dr_set(u->r, DR_CQ, DR_FAIL,
		       "size the CQ for every receive and signaled send that can complete before "
		       "the next poll (wimm: cq_budget >= sum of rx_depth + sq_depth + 4); after "
		       "IBV_EVENT_CQ_ERR the QPs on that CQ are in error and must be re-created",
		       "%s. Cause: completions beyond the CQ's depth overrun it and are lost", ev);
	else
		dr_set(u->r, DR_CQ, DR_PASS, "", "%s", ev);
}

/* One message as it went over the wire: its packets in order. */
struct wmsg {
	int npkts;
	uint8_t ops[16];
	int imm_at; /* 1-based packet that carried ImmDt, 0: none */
	uint32_t imm;
	int has_reth;
	uint64_t va;
	uint32_t rkey, dma_len, bytes;
};

static int is_start(uint8_t op)
{
	return op == ROCE_WRITE_FIRST || op == ROCE_WRITE_ONLY || op == ROCE_WRITE_ONLY_IMM;
}

static int is_end(uint8_t op)
{
	return op == ROCE_WRITE_LAST || op == ROCE_WRITE_LAST_IMM || op == ROCE_WRITE_ONLY ||
	       op == ROCE_WRITE_ONLY_IMM;
}

/* Requests to the receiver's QP, grouped into messages (a retransmission
 * after an RNR NAK or a timeout is a message of its own). */
static int group(const struct run *u, struct wmsg *m, int max)
{
	int n = 0, open = 0;

	for (int i = 0; i < u->r->npkts; i++) {
		const struct roce_pkt *k = &u->r->pkts[i];
		struct wmsg *c;

		if (k->dqpn != u->rx_id.qpn || k->opcode > ROCE_WRITE_ONLY_IMM ||
		    k->opcode < ROCE_WRITE_FIRST)
			continue;
		if (is_start(k->opcode)) {
			if (n == max)
				break;
			memset(&m[n++], 0, sizeof(*m));
			open = 1;
		} else if (!open) {
			continue; /* its start was not captured */
		}
		c = &m[n - 1];
		if (c->npkts < 16)
			c->ops[c->npkts] = k->opcode;
		c->npkts++;
		c->bytes += k->payload_len;
		if (k->has_reth) {
			c->has_reth = 1;
			c->va = k->va;
			c->rkey = k->rkey;
			c->dma_len = k->dma_len;
		}
		if (k->has_imm) {
			c->imm_at = c->npkts;
			c->imm = k->imm;
		}
		if (is_end(k->opcode))
			open = 0;
	}
	return n;
}

/* The packets the specification asks for: Only with Immediate for 0 or
 * one packet's worth, else First, Middle..., Last with Immediate. */
static int shape_ok(const struct wmsg *m, uint32_t len, int mtu)
{
	int want = len ? (int)((len + (uint32_t)mtu - 1) / (uint32_t)mtu) : 1;

	if (m->npkts != want || m->npkts > 16)
		return 0;
	if (want == 1)
		return m->ops[0] == ROCE_WRITE_ONLY_IMM;
	for (int i = 1; i < want - 1; i++)
		if (m->ops[i] != ROCE_WRITE_MIDDLE)
			return 0;
	return m->ops[0] == ROCE_WRITE_FIRST && m->ops[want - 1] == ROCE_WRITE_LAST_IMM;
}

static void step_wire(struct run *u)
{
	struct wmsg m[DR_MAX_PKTS];
	char ev[DR_TEXT] = "", acks[256] = "";
	int nm, bad = 0, nack = 0;
	const char *last_ack = NULL;

	if (!u->cap_ok) {
		dr_set(u->r, DR_WIRE, DR_NA, "", "cannot capture: %s", u->cap_err);
		return;
	}
	if (!u->posted) {
		dr_set(u->r, DR_WIRE, DR_NA, "",
		       "no probe was posted (the sender's posts were refused), so nothing went on "
		       "the wire; %d RoCEv2 packets seen on %s",
		       u->r->npkts, u->tx.netdev);
		return;
	}
	if (!u->r->npkts && u->tx.hw) {
		/* A NIC's RDMA engine sends and receives past the kernel's
		 * network stack: AF_PACKET sees none of it. */
		dr_set(u->r, DR_WIRE, DR_NA, "",
		       "captured 0 RoCEv2 packets on %s while %d probes ran: %s is a hardware "
		       "device, whose RDMA traffic bypasses the netdev (capture with the NIC's own "
		       "tool, e.g. ibdump or the mlx5 sniffer, or a mirror port)",
		       u->tx.netdev, u->posted, u->tx.dev);
		return;
	}
	if (!u->r->npkts) {
		if (!memcmp(&u->tx_id.gid, &u->rx_id.gid, sizeof(u->tx_id.gid)))
			dr_set(u->r, DR_WIRE, DR_NA, "",
			       "captured 0 RoCEv2 packets on %s (%d other frames) while %d probes "
			       "ran: sender and receiver share one GID, and rxe hands a packet for "
			       "its own address to its receive path without the netdev; run "
			       "against `wimm doctor --serve` on another device or host to see the "
			       "wire",
			       u->tx.netdev, u->other_frames, u->posted);
		else
			dr_set(
			    u->r, DR_WIRE, DR_FAIL,
			    "check the route and the link between the two GIDs (ping the "
			    "peer's address on this netdev, its MTU, a firewall on UDP 4791)",
			    "captured 0 RoCEv2 packets on %s while %d probes ran towards another "
			    "GID. Cause: nothing reached the wire",
			    u->tx.netdev, u->posted);
		return;
	}
	nm = group(u, m, DR_MAX_PKTS);
	for (int i = 0; i < NPROBES; i++) {
		const struct probe *p = &u->p[i];
		const struct wmsg *w = NULL;
		int sends = 0;

		if (p->post_errno)
			continue;
		for (int j = 0; j < nm; j++)
			if (m[j].has_reth && m[j].va == u->t.addr + p->off) {
				w = w ? w : &m[j];
				sends++;
			}
		dr_cat(ev, sizeof(ev), "%sprobe %d (%u B): ", ev[0] ? "; " : "", i, p->len);
		if (!w) {
			dr_cat(ev, sizeof(ev), "not seen on the wire");
			bad++;
			continue;
		}
		for (int k = 0; k < w->npkts && k < 16; k++)
			dr_cat(ev, sizeof(ev), "%s%s", k ? " / " : "", roce_opcode_name(w->ops[k]));
		dr_cat(ev, sizeof(ev), "; RETH va 0x%" PRIx64 " rkey 0x%x len %u", w->va, w->rkey,
		       w->dma_len);
		if (w->imm_at)
			dr_cat(ev, sizeof(ev), "; ImmDt 0x%08x in packet %d of %d%s", w->imm,
			       w->imm_at, w->npkts, w->imm_at == w->npkts ? " (the last)" : "");
		else
			dr_cat(ev, sizeof(ev), "; no ImmDt");
		if (sends > 1)
			dr_cat(ev, sizeof(ev), "; sent %d times", sends);
		if (!shape_ok(w, p->len, u->mtu_bytes) || w->imm_at != w->npkts ||
		    w->imm != p->imm || w->dma_len != p->len || w->bytes != p->len) {
			dr_cat(ev, sizeof(ev), " [not the packets the specification asks for]");
			bad++;
		}
		if (w->rkey != u->t.rkey) {
			dr_cat(ev, sizeof(ev), " [rkey differs from the target's 0x%x]", u->t.rkey);
			bad++;
		} else if (!u->key.live) {
			dr_cat(ev, sizeof(ev),
			       " [rkey matches no live registration on the receiver]");
			bad++;
		} else {
			dr_cat(ev, sizeof(ev),
			       "; the rkey is the target registration's, live on "
			       "the receiver");
		}
	}
	for (int i = 0; i < u->r->npkts; i++) {
		const struct roce_pkt *k = &u->r->pkts[i];

		if (k->dqpn != u->tx_id.qpn || !k->has_aeth)
			continue;
		if (last_ack && strcmp(last_ack, roce_aeth_name(k->syndrome))) {
			dr_cat(acks, sizeof(acks), "%s%s x%d", acks[0] ? ", " : "", last_ack, nack);
			nack = 0;
		}
		last_ack = roce_aeth_name(k->syndrome);
		nack++;
	}
	if (last_ack)
		dr_cat(acks, sizeof(acks), "%s%s x%d", acks[0] ? ", " : "", last_ack, nack);
	dr_cat(ev, sizeof(ev), "; the responder answered: %s", acks[0] ? acks : "nothing");
	if (bad)
		dr_set(
		    u->r, DR_WIRE, DR_FAIL,
		    "compare the RETH the sender puts on the wire with the receiver's "
		    "registration (address, rkey, length); a write-with-imm is First, Middle..., "
		    "Last with Immediate, or Only with Immediate",
		    "%s. Cause: what went on the wire is not a write-with-imm into a live "
		    "registration (see the [brackets])",
		    ev);
	else
		dr_set(u->r, DR_WIRE, DR_PASS, "", "%s", ev);
}

/* --------------------------------------------------------------- run */

static int setup(struct run *u, const struct dr_fabric *f, char *err, size_t errlen)
{
	const struct dr_opts *o = u->o;

	if (dv_open(&u->tx, f->name, o->gid_index, err, errlen) ||
	    dv_create(&u->tx, DV_CQE, IBV_ACCESS_LOCAL_WRITE, err, errlen))
		return -1;
	dv_id_of(&u->tx, &u->tx_id);
	if (o->host) {
		char uri[80];

		snprintf(uri, sizeof(uri), "verbs:%s", f->name);
		if (dp_connect(o->host, o->port, uri, o->timeout_ms, &u->conn, err, errlen))
			return -1;
		u->peer.remote = &u->conn;
	} else {
		if (dv_open(&u->rx_local, f->name, o->gid_index, err, errlen))
			return -1;
		u->peer.local = &u->rx_local;
	}
	if (pe_setup(&u->peer, o->fault, &u->tx_id, &u->rx_id, &u->t, err, errlen))
		return -1;
	u->mtu = u->tx_id.mtu < u->rx_id.mtu ? u->tx_id.mtu : u->rx_id.mtu;
	u->mtu_bytes = 128 << u->mtu;
	if (dv_to_rtr(&u->tx, &u->rx_id, u->mtu, err, errlen))
		return -1;
	/* qp-rtr: the sender stops one transition short. */
	if (o->fault != DR_FAULT_QP_RTR && dv_to_rts(&u->tx, err, errlen))
		return -1;
	return 0;
}

static int probe(struct run *u, char *err, size_t errlen)
{
	struct dr_report *r = u->r;
	struct dw_cap cap = {.fd = -1};

	dv_query(&u->tx, &u->txa);
	if (pe_qp(&u->peer, &u->rxa, err, errlen) ||
	    pe_key(&u->peer, &u->t, &u->key, err, errlen) || pe_cq(&u->peer, &u->rxcq, err, errlen))
		return -1;
	hw_counters_read(u->tx.dev, DV_PORT, &u->c0tx);
	if (!same_device(u) && pe_counters(&u->peer, &u->c0rx, err, errlen))
		return -1;
	if (!u->tx.netdev[0])
		snprintf(u->cap_err, sizeof(u->cap_err), "GID index %d of %s has no netdev",
			 u->tx.gid_index, u->tx.dev);
	else
		u->cap_ok = !dw_open(&cap, u->tx.netdev, u->cap_err, sizeof(u->cap_err));
	post_probes(u);
	collect_sender(u);
	/* Let the last ACKs (and retries) reach the capture. */
	usleep(50000);
	r->npkts =
	    dw_drain(&cap, r->pkts, DR_MAX_PKTS, &u->other_frames, u->o->verbose ? stderr : NULL);
	dw_close(&cap);
	if (collect_receiver(u, err, errlen))
		return -1;
	hw_counters_read(u->tx.dev, DV_PORT, &u->c1tx);
	if (!same_device(u) && pe_counters(&u->peer, &u->c1rx, err, errlen))
		return -1;
	counters_moved(&u->c0tx, &u->c1tx, NULL, r->counters, sizeof(r->counters));
	if (!same_device(u)) {
		char rx[400] = "";

		counters_moved(&u->c0rx, &u->c1rx, NULL, rx, sizeof(rx));
		snprintf(r->counters + strlen(r->counters),
			 sizeof(r->counters) - strlen(r->counters), "%s%s: %s",
			 r->counters[0] ? "; " : "", u->peer.dev, rx[0] ? rx : "none");
	}
	dv_query(&u->tx, &u->txa_after);
	return pe_qp(&u->peer, &u->rxa_after, err, errlen);
}

int dv_run(const struct dr_opts *o, const struct dr_fabric *f, struct dr_report *r, char *err,
	   size_t errlen)
{
	static struct run u; /* large; one run per process */
	int rc = -1;

	memset(&u, 0, sizeof(u));
	u.o = o;
	u.r = r;
	if (setup(&u, f, err, errlen))
		goto out;
	snprintf(r->setup, sizeof(r->setup),
		 "%s pair: sender %s QP 0x%x -> receiver %s QP 0x%x%s, GID index %d (%s), path "
		 "MTU %d",
		 o->host ? "remote" : "loopback", u.tx.dev, u.tx_id.qpn, u.peer.dev, u.rx_id.qpn,
		 o->host ? " (doctor peer)" : "", u.tx.gid_index, u.tx.netdev, u.mtu_bytes);
	if (probe(&u, err, errlen))
		goto out;
	snprintf(r->probe, sizeof(r->probe),
		 "%d signaled write-with-imm of %u, %u and %u bytes, imm 0x%08x..%x, into the "
		 "%u-byte window",
		 NPROBES, u.p[0].len, u.p[1].len, u.p[2].len, IMM_BASE, IMM_BASE + NPROBES - 1,
		 u.t.len);
	if (!r->counters[0])
		snprintf(r->counters, sizeof(r->counters), "%s",
			 u.c1tx.n < 0 ? "no hw_counters" : "none moved");
	step_recv(&u);
	step_qp(&u);
	step_key(&u);
	step_access(&u);
	step_cq(&u);
	step_wire(&u);
	rc = 0;
out:
	if (u.peer.remote)
		dp_close(&u.conn);
	dv_close(&u.tx);
	dv_close(&u.rx_local);
	return rc;
}
#endif /* DOCTOR_HAVE_VERBS */
