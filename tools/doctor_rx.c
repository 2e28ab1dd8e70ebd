/* One end of the doctor's raw RC pair, and the receiver's checks. Raw
 * verbs rather than wimm: the doctor has to build the broken states wimm
 * refuses to build (a QP left in RTR, a window without REMOTE_WRITE, no
 * receive posted) and to query what wimm keeps private. */
#ifdef DOCTOR_HAVE_VERBS
#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "doctor_verbs.h"

#define ERR(...) (snprintf(err, errlen, __VA_ARGS__), -1)

static int pick_gid(struct dv_end *e, int want, char *err, size_t errlen)
{
	struct ibv_gid_entry g[64];
	ssize_t n = ibv_query_gid_table(e->ctx, g, 64, 0);

	for (ssize_t i = 0; i < n; i++) {
		const uint8_t *r = g[i].gid.raw;
		/* ::ffff:a.b.c.d: the RoCEv2 GID of an IPv4 address, the
		 * one rdma_cm and perftest (-x) use on Soft-RoCE. */
		int v4 = !memcmp(r, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12);

		if (g[i].port_num != DV_PORT)
			continue;
		if (want >= 0 ? (int)g[i].gid_index != want
			      : !(v4 && g[i].gid_type == IBV_GID_TYPE_ROCE_V2))
			continue;
		e->gid_index = (int)g[i].gid_index;
		e->gid = g[i].gid;
		if (!g[i].ndev_ifindex || !if_indextoname(g[i].ndev_ifindex, e->netdev))
			e->netdev[0] = '\0';
		return 0;
	}
	if (want >= 0)
		return ERR("%s port %d has no GID index %d", e->dev, DV_PORT, want);
	return ERR("%s port %d has no RoCEv2 GID of an IPv4 address (give one with --gid)", e->dev,
		   DV_PORT);
}

int dv_open(struct dv_end *e, const char *dev, int gid_index, char *err, size_t errlen)
{
	struct ibv_device **list;
	struct ibv_port_attr pa;
	char names[256] = "";
	int n = 0;

	memset(e, 0, sizeof(*e));
	snprintf(e->dev, sizeof(e->dev), "%s", dev);
	list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n; i++) {
		const char *name = ibv_get_device_name(list[i]);

		dr_cat(names, sizeof(names), "%s%s", names[0] ? ", " : "", name);
		if (!e->ctx && !strcmp(name, dev))
			e->ctx = ibv_open_device(list[i]);
	}
	if (list)
		ibv_free_device_list(list);
	if (!e->ctx)
		return ERR("no RDMA device '%s' (devices here: %s)", dev,
			   names[0] ? names : "none");
	if (ibv_query_port(e->ctx, DV_PORT, &pa))
		return ERR("%s: ibv_query_port(%d) failed", dev, DV_PORT);
	if (pa.state != IBV_PORT_ACTIVE)
		return ERR("%s port %d is %s, not ACTIVE", dev, DV_PORT,
			   ibv_port_state_str(pa.state));
	e->port_mtu = pa.active_mtu;
	{
		char path[160];

		/* Software devices (rxe, siw) have no bus device behind them. */
		snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device", dev);
		e->hw = access(path, F_OK) == 0;
	}
	/* Async events are read after the probes without blocking. */
	fcntl(e->ctx->async_fd, F_SETFL, fcntl(e->ctx->async_fd, F_GETFL) | O_NONBLOCK);
	return pick_gid(e, gid_index, err, errlen);
}

int dv_auto_device(char *name, size_t cap)
{
	struct ibv_device **list;
	int n = 0, found = 0;

	list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n && !found; i++) {
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct ibv_port_attr pa;

		if (!ctx)
			continue;
		if (!ibv_query_port(ctx, DV_PORT, &pa) && pa.state == IBV_PORT_ACTIVE) {
			snprintf(name, cap, "%s", ibv_get_device_name(list[i]));
			found = 1;
		}
		ibv_close_device(ctx);
	}
	if (list)
		ibv_free_device_list(list);
	return found ? 0 : -1;
}

void dv_close(struct dv_end *e)
{
	if (e->qp)
		ibv_destroy_qp(e->qp);
	for (int i = 0; i < DV_MAX_LIVE; i++)
		if (e->live[i])
			ibv_dereg_mr(e->live[i]);
	if (e->cq)
		ibv_destroy_cq(e->cq);
	if (e->pd)
		ibv_dealloc_pd(e->pd);
	if (e->ctx)
		ibv_close_device(e->ctx);
	free(e->buf);
	memset(e, 0, sizeof(*e));
}

int dv_create(struct dv_end *e, int cqe, unsigned mr_access, char *err, size_t errlen)
{
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = DV_SQ_DEPTH,
					      .max_recv_wr = DV_RX_DEPTH,
					      .max_send_sge = 1,
					      .max_recv_sge = 1}};
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
				.port_num = DV_PORT,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};

	e->pd = ibv_alloc_pd(e->ctx);
	if (!e->pd)
		return ERR("%s: ibv_alloc_pd: %m", e->dev);
	e->cq = ibv_create_cq(e->ctx, cqe, NULL, NULL, 0);
	if (!e->cq)
		return ERR("%s: ibv_create_cq(%d): %m", e->dev, cqe);
	if (posix_memalign((void **)&e->buf, 4096, DV_BUF_LEN))
		return ERR("out of memory");
	memset(e->buf, 0, DV_BUF_LEN);
	e->live[0] = ibv_reg_mr(e->pd, e->buf, DV_BUF_LEN, (int)mr_access);
	e->live_access[0] = mr_access;
	e->live[1] = ibv_reg_mr(e->pd, &e->credit_word, sizeof(e->credit_word),
				IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	e->live_access[1] = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	if (!e->live[0] || !e->live[1])
		return ERR("%s: ibv_reg_mr: %m", e->dev);
	qa.send_cq = qa.recv_cq = e->cq;
	e->qp = ibv_create_qp(e->pd, &qa);
	if (!e->qp)
		return ERR("%s: ibv_create_qp: %m", e->dev);
	if (ibv_modify_qp(e->qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return ERR("%s: QP to INIT: %m", e->dev);
	return 0;
}

int dv_to_rtr(struct dv_end *e, const struct dv_id *peer, int mtu, char *err, size_t errlen)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
				.path_mtu = (enum ibv_mtu)mtu,
				.dest_qp_num = peer->qpn,
				.rq_psn = peer->psn,
				.max_dest_rd_atomic = 1,
				.min_rnr_timer = DV_MIN_RNR_TIMER};

	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer->gid;
	a.ah_attr.grh.sgid_index = (uint8_t)e->gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = DV_PORT;
	if (ibv_modify_qp(e->qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return ERR("%s: QP to RTR: %m", e->dev);
	return 0;
}

int dv_to_rts(struct dv_end *e, char *err, size_t errlen)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS,
				.sq_psn = e->qp->qp_num & 0xffffff,
				.timeout = DV_TIMEOUT,
				.retry_cnt = DV_RETRY_CNT,
				.rnr_retry = DV_RNR_RETRY,
				.max_rd_atomic = 1};

	if (ibv_modify_qp(e->qp, &a,
			  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			      IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		return ERR("%s: QP to RTS: %m", e->dev);
	return 0;
}

void dv_id_of(const struct dv_end *e, struct dv_id *out)
{
	out->qpn = e->qp->qp_num;
	/* The starting PSN is the QP number: distinct per QP, no state. */
	out->psn = e->qp->qp_num & 0xffffff;
	out->gid = e->gid;
	out->mtu = e->port_mtu;
}

int dv_rx_setup(struct dv_end *rx, enum dr_fault fault, const struct dv_id *tx, struct dv_id *id,
		struct dv_target *t, char *err, size_t errlen)
{
	unsigned access = IBV_ACCESS_LOCAL_WRITE |
			  (fault == DR_FAULT_NO_REMOTE_WRITE ? 0 : IBV_ACCESS_REMOTE_WRITE);
	int mtu;

	if (dv_create(rx, fault == DR_FAULT_CQ_SMALL ? 1 : DV_CQE, access, err, errlen))
		return -1;
	/* Receives before RTR: none of the sender's packets can find the RQ
	 * empty, except by the no-recv fault. A write-with-imm needs the WQE,
	 * not a buffer: zero SGEs (ERRATA E1). */
	for (int i = 0; fault != DR_FAULT_NO_RECV && i < DV_RX_DEPTH; i++) {
		struct ibv_recv_wr wr = {.wr_id = DV_RECV_WRID | (uint64_t)i}, *bad;

		if (ibv_post_recv(rx->qp, &wr, &bad))
			return ERR("%s: ibv_post_recv: %m", rx->dev);
		rx->recv_posted++;
	}
	dv_id_of(rx, id);
	mtu = tx->mtu < rx->port_mtu ? tx->mtu : rx->port_mtu;
	if (dv_to_rtr(rx, tx, mtu, err, errlen) || dv_to_rts(rx, err, errlen))
		return -1;
	t->addr = (uintptr_t)rx->buf;
	t->rkey = rx->live[0]->rkey;
	t->len = DV_BUF_LEN;
	/* The classic: the receiver frees the window after it handed out the
	 * key. The sender still holds addr and rkey; they name nothing now. */
	if (fault == DR_FAULT_MR_DEREG) {
		ibv_dereg_mr(rx->live[0]);
		rx->live[0] = NULL;
	}
	return 0;
}

void dv_query(struct dv_end *e, struct dv_qp_attr *a)
{
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr q;

	memset(a, 0, sizeof(*a));
	if (ibv_query_qp(e->qp, &q,
			 IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_TIMEOUT | IBV_QP_MIN_RNR_TIMER | IBV_QP_ACCESS_FLAGS,
			 &init))
		return;
	a->ok = 1;
	a->state = q.qp_state;
	a->mtu = q.path_mtu;
	a->retry = q.retry_cnt;
	a->rnr_retry = q.rnr_retry;
	a->timeout = q.timeout;
	a->min_rnr = q.min_rnr_timer;
	a->access = (unsigned)q.qp_access_flags;
}

void dv_rx_key(const struct dv_end *rx, const struct dv_target *t, struct dv_key *k)
{
	memset(k, 0, sizeof(*k));
	for (int i = 0; i < DV_MAX_LIVE; i++) {
		const struct ibv_mr *mr = rx->live[i];

		if (!mr)
			continue;
		k->nlive++;
		if (mr->rkey != t->rkey)
			continue;
		k->live = 1;
		k->access = rx->live_access[i];
		k->mr_addr = (uintptr_t)mr->addr;
		k->mr_len = mr->length;
		k->in_bounds = t->addr >= k->mr_addr && t->len <= k->mr_len &&
			       t->addr - k->mr_addr <= k->mr_len - t->len;
	}
}

void dv_cq_info(struct dv_end *e, struct dv_cq *c)
{
	struct ibv_async_event ae;

	/* Drain what the device reported since the last look. */
	while (!ibv_get_async_event(e->ctx, &ae)) {
		if (ae.event_type == IBV_EVENT_CQ_ERR)
			e->cq_err++;
		/* A CQ overrun raises one event per lost completion: count
		 * them by type rather than list each. */
		if ((unsigned)ae.event_type < DV_EVENT_TYPES)
			e->events[ae.event_type]++;
		ibv_ack_async_event(&ae);
	}
	memset(c, 0, sizeof(*c));
	c->cqe = e->cq->cqe;
	c->recv_posted = e->recv_posted;
	/* Each posted receive can complete without being polled, and so can
	 * each signaled send of this end (none on the receiver). */
	c->outstanding = e->recv_posted;
	c->cq_err = e->cq_err;
	for (int t = 0; t < DV_EVENT_TYPES; t++)
		if (e->events[t])
			dr_cat(c->async, sizeof(c->async), "%s%s x%d", c->async[0] ? ", " : "",
			       ibv_event_type_str((enum ibv_event_type)t), e->events[t]);
}

int dv_poll(struct dv_end *e, int timeout_ms, int want, struct dv_wc *wc, int max)
{
	int64_t deadline = dr_now_ms() + timeout_ms;
	int got = 0;

	do {
		struct ibv_wc w;

		while (got < max && ibv_poll_cq(e->cq, 1, &w) == 1) {
			wc[got].status = w.status;
			wc[got].opcode = w.opcode;
			wc[got].with_imm = !!(w.wc_flags & IBV_WC_WITH_IMM);
			wc[got].imm = ntohl(w.imm_data);
			wc[got].len = w.byte_len;
			/* An error completion's opcode is undefined: wr_id tells. */
			if ((w.wr_id & DV_RECV_WRID) && e->recv_posted > 0)
				e->recv_posted--;
			got++;
		}
		if (got >= want || got >= max)
			break;
		usleep(500);
	} while (dr_now_ms() < deadline);
	return got;
}

const char *dv_qp_state_name(int state)
{
	static const char *const n[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};

	return state >= 0 && state < 7 ? n[state] : "UNKNOWN";
}

const char *dv_wc_opcode_name(int op)
{
	switch (op) {
	case IBV_WC_RDMA_WRITE:
		return "RDMA_WRITE";
	case IBV_WC_RECV_RDMA_WITH_IMM:
		return "RECV_RDMA_WITH_IMM";
	case IBV_WC_RECV:
		return "RECV";
	case IBV_WC_SEND:
		return "SEND";
	default:
		return "other";
	}
}

void dv_access_text(unsigned access, char *buf, size_t cap)
{
	buf[0] = '\0';
	if (access & IBV_ACCESS_LOCAL_WRITE)
		dr_cat(buf, cap, "LOCAL_WRITE");
	if (access & IBV_ACCESS_REMOTE_WRITE)
		dr_cat(buf, cap, "%sREMOTE_WRITE", buf[0] ? "|" : "");
	if (access & IBV_ACCESS_REMOTE_READ)
		dr_cat(buf, cap, "%sREMOTE_READ", buf[0] ? "|" : "");
	if (!buf[0])
		dr_cat(buf, cap, "none");
}
#endif /* DOCTOR_HAVE_VERBS */
