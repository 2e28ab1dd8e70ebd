/* docs/errata.md E1-E5 on the real kernel RDMA stack, with raw libibverbs.
 *
 *   errata_rnr [DEVICE]      (default: WIMM_SOFTROCE_DEVICE or rxe0)
 *
 * wimm never lets a doorbell outrun the peer's receives, so proving what
 * happens when one does needs plain verbs. Two QPs of one device are joined
 * by hand (INIT/RTR/RTS with GID index WIMM_ERRATA_GID, default 1 =
 * ::ffff:192.0.2.1 in the Soft-RoCE guest): the same process owns both ends,
 * so no out-of-band exchange is needed and the responder's min_rnr_timer,
 * which rdma_cm does not let user space choose, can be kept short.
 *
 *   rc_no_receive_*    E1: write-with-imm to an RC QP with no receive posted
 *                      is answered with RNR NAKs and fails with
 *                      IBV_WC_RNR_RETRY_EXC_ERR after rnr_retry retries
 *                      (one-packet and three-packet messages); E2: of
 *                      the three-packet message, the bytes of First and
 *                      Middle are placed, and only the Last packet, which
 *                      carries ImmDt, is refused
 *   rc_zero_sge_recv   E1/E3/E4: one zero-SGE receive per write-with-imm is
 *                      enough; byte_len is the written length, imm_data is
 *                      big-endian; each write-with-imm consumes one receive
 *   uc_no_receive      E1 on UC: the message is dropped without a trace
 *   cq_overrun         E5: a CQ overrun raises IBV_EVENT_CQ_ERR
 */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errata.h"

#define BUF_LEN 8192
#define WRITE_LEN 3000 /* three packets at MTU 1024: First, Middle, Last with Immediate */
#define IMM 0x11223344u
#define RNR_RETRY 1
#define MIN_RNR_TIMER 1 /* 0.01 ms; 0 would mean 655 ms */
#define PORT 1
#define MTU 1024 /* IBV_MTU_1024 below */

static struct ibv_context *dev_ctx;
static union ibv_gid gid;
static int gid_index = 1;
static const char *dev_name;

struct end {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
};

struct link {
	struct ibv_pd *pd;
	struct end req, rsp; /* requester and responder */
};

static int end_open(struct link *l, struct end *e, enum ibv_qp_type type, int cqe)
{
	struct ibv_qp_init_attr qa = {
	    .qp_type = type,
	    .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};

	e->cq = ibv_create_cq(dev_ctx, cqe, NULL, NULL, 0);
	if (!e->cq || posix_memalign((void **)&e->buf, 4096, BUF_LEN))
		return -1;
	memset(e->buf, 0, BUF_LEN);
	e->mr =
	    ibv_reg_mr(l->pd, e->buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!e->mr)
		return -1;
	qa.send_cq = qa.recv_cq = e->cq;
	e->qp = ibv_create_qp(l->pd, &qa);
	return e->qp ? 0 : -1;
}

/* RESET -> INIT -> RTR -> RTS towards the QP numbered dqpn on this device. */
static int qp_connect(struct ibv_qp *qp, uint32_t dqpn)
{
	int rc = qp->qp_type == IBV_QPT_RC, mask;
	struct ibv_qp_attr a = {
	    .qp_state = IBV_QPS_INIT,
	    .pkey_index = 0,
	    .port_num = PORT,
	    .qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
	};

	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dqpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = MIN_RNR_TIMER;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = PORT;
	mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (rc)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	if (ibv_modify_qp(qp, &a, mask))
		return -1;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = RNR_RETRY;
	a.max_rd_atomic = 1;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (rc)
		mask |=
		    IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	return ibv_modify_qp(qp, &a, mask);
}

static void end_close(struct end *e)
{
	if (e->qp)
		ibv_destroy_qp(e->qp);
	if (e->mr)
		ibv_dereg_mr(e->mr);
	if (e->cq)
		ibv_destroy_cq(e->cq);
	free(e->buf);
}

static void link_close(struct link *l)
{
	end_close(&l->req);
	end_close(&l->rsp);
	if (l->pd)
		ibv_dealloc_pd(l->pd);
	memset(l, 0, sizeof(*l));
}

/* req_cqe: the requester's CQ size (the responder's is 32). */
static int link_open(struct link *l, enum ibv_qp_type type, int req_cqe)
{
	memset(l, 0, sizeof(*l));
	l->pd = ibv_alloc_pd(dev_ctx);
	if (!l->pd || end_open(l, &l->req, type, req_cqe) || end_open(l, &l->rsp, type, 32) ||
	    qp_connect(l->req.qp, l->rsp.qp->qp_num) || qp_connect(l->rsp.qp, l->req.qp->qp_num)) {
		perror("# QP set-up");
		link_close(l);
		return -1;
	}
	return 0;
}

/* Signaled write-with-imm of len bytes from req.buf to rsp.buf + off; len 0
 * sends no SGE at all. */
static int post_write_imm(struct link *l, uint64_t wr_id, uint32_t len, size_t off, uint32_t imm)
{
	struct ibv_sge sge = {
	    .addr = (uintptr_t)l->req.buf, .length = len, .lkey = l->req.mr->lkey};
	struct ibv_send_wr wr = {
	    .wr_id = wr_id,
	    .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
	    .sg_list = len ? &sge : NULL,
	    .num_sge = len ? 1 : 0,
	    .send_flags = IBV_SEND_SIGNALED,
	    .imm_data = htonl(imm),
	};
	struct ibv_send_wr *bad;

	wr.wr.rdma.remote_addr = (uintptr_t)l->rsp.buf + off;
	wr.wr.rdma.rkey = l->rsp.mr->rkey;
	return ibv_post_send(l->req.qp, &wr, &bad);
}

/* Signaled plain RDMA write of 8 bytes: a send completion, no receive. */
static int post_write(struct link *l, uint64_t wr_id)
{
	struct ibv_sge sge = {.addr = (uintptr_t)l->req.buf, .length = 8, .lkey = l->req.mr->lkey};
	struct ibv_send_wr wr = {
	    .wr_id = wr_id,
	    .opcode = IBV_WR_RDMA_WRITE,
	    .sg_list = &sge,
	    .num_sge = 1,
	    .send_flags = IBV_SEND_SIGNALED,
	};
	struct ibv_send_wr *bad;

	wr.wr.rdma.remote_addr = (uintptr_t)l->rsp.buf;
	wr.wr.rdma.rkey = l->rsp.mr->rkey;
	return ibv_post_send(l->req.qp, &wr, &bad);
}

/* A receive without buffer: write-with-imm needs the WQE, not memory. */
static int post_zero_sge_recv(struct link *l, uint64_t wr_id)
{
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = NULL, .num_sge = 0}, *bad;

	return ibv_post_recv(l->rsp.qp, &wr, &bad);
}

/* One completion within timeout_ms; 0 if none came. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, int64_t timeout_ms)
{
	int64_t deadline = errata_now_ms() + timeout_ms;

	memset(wc, 0, sizeof(*wc));
	do {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n)
			return n;
		usleep(200);
	} while (errata_now_ms() < deadline);
	return 0;
}

static void fill(uint8_t *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(i * 7 + seed * 13) | 1; /* never 0, the fresh buffer's value */
}

static long long delta(const struct hw_counters *a, const struct hw_counters *b, const char *name)
{
	return errata_counter(b, name) - errata_counter(a, name);
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr a;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &init))
		return IBV_QPS_UNKNOWN;
	return a.qp_state;
}

/* len 64 is one packet (RDMA WRITE Only with Immediate); WRITE_LEN is
 * three, and rxe resends the whole message after an RNR NAK. */
static void t_rc_no_receive(const char *name, uint32_t len)
{
	int one_packet = len <= MTU;
	struct hw_counters c0, c1;
	struct ibv_wc wc;
	struct link l;
	size_t placed = 0;
	long long nak;
	int got;

	if (!errata_check(link_open(&l, IBV_QPT_RC, 32) == 0, "E1 %s: RC QPs connected", name))
		return;
	fill(l.req.buf, len, 1);
	errata_counters_read(dev_name, &c0);
	/* The responder has posted no receive at all. */
	errata_check(post_write_imm(&l, 1, len, 0, IMM) == 0,
		     "E1 %s: write-with-imm posted (%u bytes, rnr_retry %d)", name, len, RNR_RETRY);
	got = poll_one(l.req.cq, &wc, errata_timeout_ms(10000));
	errata_counters_read(dev_name, &c1);
	errata_counters_diff(&c0, &c1);
	errata_check(got == 1 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR,
		     "E1 %s: requester completion is IBV_WC_RNR_RETRY_EXC_ERR (got %s)", name,
		     got == 1 ? ibv_wc_status_str(wc.status) : "no completion in time");
	/* The first try and each retry are answered with an RNR NAK; a
	 * resent multi-packet message may draw more. */
	nak = delta(&c0, &c1, "rcvd_rnr_err");
	errata_check(one_packet ? nak == RNR_RETRY + 1 : nak >= RNR_RETRY + 1,
		     "E1 %s: rcvd_rnr_err (RNR NAKs received) grew by %s%d (%lld -> %lld)", name,
		     one_packet ? "" : "at least ", RNR_RETRY + 1,
		     errata_counter(&c0, "rcvd_rnr_err"), errata_counter(&c1, "rcvd_rnr_err"));
	errata_check(delta(&c0, &c1, "send_rnr_err") == nak,
		     "E1 %s: send_rnr_err (RNR NAKs sent by the responder) grew as much (%lld -> "
		     "%lld)",
		     name, errata_counter(&c0, "send_rnr_err"),
		     errata_counter(&c1, "send_rnr_err"));
	errata_check(delta(&c0, &c1, "retry_rnr_exceeded_err") == 1,
		     "E1 %s: retry_rnr_exceeded_err grew by 1 (%lld -> %lld)", name,
		     errata_counter(&c0, "retry_rnr_exceeded_err"),
		     errata_counter(&c1, "retry_rnr_exceeded_err"));
	errata_check(qp_state(l.req.qp) == IBV_QPS_ERR,
		     "E1 %s: the requester QP is now in the error state", name);
	errata_check(poll_one(l.rsp.cq, &wc, 100) == 0, "E1 %s: the responder got no completion",
		     name);
	/* E2: First (RETH) and Middle carry no ImmDt, look like a plain
	 * write and need no receive, so the responder places them; only the Last
	 * packet, which carries ImmDt, asks for a receive and is refused. An
	 * Only packet carries RETH and ImmDt together and is refused whole. */
	while (placed < len && l.rsp.buf[placed] == l.req.buf[placed])
		placed++;
	errata_check(placed == (len - 1) / MTU * MTU,
		     "E2 %s: %zu of %u bytes were placed although the operation failed (expected "
		     "%u: %s)",
		     name, placed, len, (len - 1) / MTU * MTU,
		     one_packet ? "the Only packet carries ImmDt and was refused whole"
				: "First and Middle placed, the Last packet carries ImmDt and was "
				  "refused");
	link_close(&l);
}

static void t_rc_zero_sge_recv(void)
{
	const size_t off = 128;
	struct hw_counters c0, c1;
	struct ibv_wc wc;
	struct link l;
	int got;

	if (!errata_check(link_open(&l, IBV_QPT_RC, 32) == 0,
			  "E1 rc_zero_sge_recv: RC QPs connected"))
		return;
	fill(l.req.buf, WRITE_LEN, 2);
	errata_counters_read(dev_name, &c0);
	/* Two receives, three writes: the third finds none left. */
	errata_check(post_zero_sge_recv(&l, 101) == 0 && post_zero_sge_recv(&l, 102) == 0,
		     "E1 rc_zero_sge_recv: two receives with num_sge = 0 posted");

	errata_check(post_write_imm(&l, 1, WRITE_LEN, off, IMM) == 0,
		     "E1 rc_zero_sge_recv: write-with-imm of %d bytes posted", WRITE_LEN);
	got = poll_one(l.req.cq, &wc, errata_timeout_ms(10000));
	errata_check(got == 1 && wc.status == IBV_WC_SUCCESS,
		     "E1 rc_zero_sge_recv: requester completion is IBV_WC_SUCCESS (got %s)",
		     got == 1 ? ibv_wc_status_str(wc.status) : "no completion in time");
	got = poll_one(l.rsp.cq, &wc, errata_timeout_ms(10000));
	errata_check(got == 1 && wc.status == IBV_WC_SUCCESS &&
			 wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && wc.wr_id == 101 &&
			 (wc.wc_flags & IBV_WC_WITH_IMM),
		     "E1 rc_zero_sge_recv: responder completion IBV_WC_RECV_RDMA_WITH_IMM with "
		     "IBV_WC_WITH_IMM on the first receive (got %s, opcode %d, wr_id %llu, "
		     "flags 0x%x)",
		     got == 1 ? ibv_wc_status_str(wc.status) : "none", (int)wc.opcode,
		     (unsigned long long)wc.wr_id, (unsigned)wc.wc_flags);
	errata_check(got == 1 && wc.byte_len == WRITE_LEN,
		     "E3 byte_len of the receive completion is the written length %d (got %u)",
		     WRITE_LEN, wc.byte_len);
	errata_check(got == 1 && ntohl(wc.imm_data) == IMM,
		     "E4 ntohl(wc.imm_data) is 0x%08x (got 0x%08x)", IMM, ntohl(wc.imm_data));
	errata_check(got == 1 && !memcmp(&wc.imm_data, "\x11\x22\x33\x44", 4),
		     "E4 wc.imm_data is big-endian in memory: bytes 11 22 33 44");
	errata_check(!memcmp(l.rsp.buf + off, l.req.buf, WRITE_LEN) && l.rsp.buf[off - 1] == 0 &&
			 l.rsp.buf[off + WRITE_LEN] == 0,
		     "E1 rc_zero_sge_recv: the %d bytes are in place at offset %zu, nothing around "
		     "them touched",
		     WRITE_LEN, off);

	/* A pure doorbell: no SGE on either side. */
	errata_check(post_write_imm(&l, 2, 0, 0, 0xa5a50001u) == 0,
		     "E1 rc_zero_sge_recv: zero-length write-with-imm posted");
	got = poll_one(l.req.cq, &wc, errata_timeout_ms(10000));
	errata_check(got == 1 && wc.status == IBV_WC_SUCCESS,
		     "E1 rc_zero_sge_recv: zero-length requester completion is IBV_WC_SUCCESS (got "
		     "%s)",
		     got == 1 ? ibv_wc_status_str(wc.status) : "no completion in time");
	got = poll_one(l.rsp.cq, &wc, errata_timeout_ms(10000));
	errata_check(got == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 102 &&
			 wc.byte_len == 0 && ntohl(wc.imm_data) == 0xa5a50001u,
		     "E1 rc_zero_sge_recv: zero-length doorbell used the second receive, byte_len "
		     "0, imm 0xa5a50001 (got wr_id %llu, byte_len %u, imm 0x%08x)",
		     (unsigned long long)wc.wr_id, wc.byte_len, ntohl(wc.imm_data));
	errata_counters_read(dev_name, &c1);
	errata_counters_diff(&c0, &c1);
	errata_check(delta(&c0, &c1, "rcvd_rnr_err") == 0 && delta(&c0, &c1, "send_rnr_err") == 0,
		     "E1 rc_zero_sge_recv: no RNR NAK while a receive was posted");

	/* Both receives are used up: one write-with-imm, one receive. */
	errata_check(post_write_imm(&l, 3, 0, 0, 3) == 0,
		     "E1 rc_zero_sge_recv: third write-with-imm posted with no receive left");
	got = poll_one(l.req.cq, &wc, errata_timeout_ms(10000));
	errata_check(got == 1 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR,
		     "E1 each write-with-imm consumed one receive: the third fails with "
		     "IBV_WC_RNR_RETRY_EXC_ERR (got %s)",
		     got == 1 ? ibv_wc_status_str(wc.status) : "no completion in time");
	link_close(&l);
}

static void t_uc_no_receive(void)
{
	struct hw_counters c0, c1;
	struct ibv_wc wc;
	struct link l;
	int got;

	if (!errata_check(link_open(&l, IBV_QPT_UC, 32) == 0, "E1 uc_no_receive: UC QPs connected"))
		return;
	errata_counters_read(dev_name, &c0);
	errata_check(post_write_imm(&l, 1, 64, 0, 1) == 0,
		     "E1 uc_no_receive: write-with-imm posted, no receive");
	/* UC has no acknowledgement: the requester completes on sending. */
	got = poll_one(l.req.cq, &wc, errata_timeout_ms(10000));
	errata_check(got == 1 && wc.status == IBV_WC_SUCCESS,
		     "E1 uc_no_receive: requester completion is IBV_WC_SUCCESS (got %s)",
		     got == 1 ? ibv_wc_status_str(wc.status) : "no completion in time");
	errata_check(poll_one(l.rsp.cq, &wc, 300) == 0,
		     "E1 uc_no_receive: the responder got no completion");
	errata_check(post_zero_sge_recv(&l, 201) == 0 && post_write_imm(&l, 2, 64, 0, 2) == 0,
		     "E1 uc_no_receive: a receive posted, then a second write-with-imm");
	got = poll_one(l.rsp.cq, &wc, errata_timeout_ms(10000));
	errata_check(got == 1 && wc.status == IBV_WC_SUCCESS && ntohl(wc.imm_data) == 2,
		     "E1 uc_no_receive: the receive completes with the second imm (2), the first "
		     "message was dropped (got %s, imm %u)",
		     got == 1 ? ibv_wc_status_str(wc.status) : "none", ntohl(wc.imm_data));
	errata_check(poll_one(l.rsp.cq, &wc, 100) == 0,
		     "E1 uc_no_receive: no further completion at the responder");
	poll_one(l.req.cq, &wc, errata_timeout_ms(10000));
	errata_counters_read(dev_name, &c1);
	errata_counters_diff(&c0, &c1);
	errata_check(delta(&c0, &c1, "send_rnr_err") == 0 && delta(&c0, &c1, "rcvd_rnr_err") == 0,
		     "E1 uc_no_receive: UC sends no RNR NAK (rnr counters unchanged)");
	link_close(&l);
}

/* E5: more completions than the CQ holds, none polled. The device reports
 * the overrun as the async event IBV_EVENT_CQ_ERR on that CQ. */
static void t_cq_overrun(void)
{
	struct ibv_async_event ae;
	struct ibv_wc wc[16];
	struct link l;
	int cap, posted = 0, got = 0, cq_err = 0, others = 0;
	int64_t deadline;

	if (!errata_check(link_open(&l, IBV_QPT_RC, 1) == 0,
			  "E5 cq_overrun: RC QPs connected, requester CQ of 1 entry"))
		return;
	cap = l.req.cq->cqe;
	for (int i = 0; i < cap + 3 && i < 8; i++)
		posted += post_write(&l, (uint64_t)i) == 0;
	errata_check(posted == cap + 3 && posted <= 8,
		     "E5 cq_overrun: %d signaled writes posted, the CQ holds %d", posted, cap);
	deadline = errata_now_ms() + errata_timeout_ms(5000);
	while (!cq_err && errata_now_ms() < deadline) {
		struct pollfd p = {.fd = dev_ctx->async_fd, .events = POLLIN};

		if (poll(&p, 1, 100) != 1 || ibv_get_async_event(dev_ctx, &ae))
			continue;
		if (ae.event_type == IBV_EVENT_CQ_ERR && ae.element.cq == l.req.cq)
			cq_err = 1;
		else
			others++;
		ibv_ack_async_event(&ae);
	}
	errata_check(cq_err,
		     "E5 cq_overrun: async event IBV_EVENT_CQ_ERR on the overrun CQ (%d "
		     "other async events)",
		     others);
	/* What is left is implementation-defined; say what this one does. */
	for (int n; (n = ibv_poll_cq(l.req.cq, 16, wc)) > 0;)
		got += n;
	errata_diag("cq_overrun: %d of %d completions could be polled afterwards; the requester "
		    "QP is %s",
		    got, posted,
		    qp_state(l.req.qp) == IBV_QPS_ERR	? "in the error state"
		    : qp_state(l.req.qp) == IBV_QPS_RTS ? "still in RTS"
							: "in another state");
	link_close(&l);
}

int main(int argc, char **argv)
{
	const char *name = dev_name = argc > 1 ? argv[1] : errata_device();
	const char *g = getenv("WIMM_ERRATA_GID");
	struct ibv_device **list;
	struct hw_counters c;
	char gtext[INET6_ADDRSTRLEN] = "";
	int n;

	if (g && *g)
		gid_index = atoi(g);
	list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			dev_ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	if (!errata_check(dev_ctx != NULL, "device %s opened", name))
		return errata_summary();
	errata_counters_read(name, &c);
	if (!errata_check(
		errata_counter(&c, "rcvd_rnr_err") >= 0 &&
		    errata_counter(&c, "send_rnr_err") >= 0 &&
		    errata_counter(&c, "retry_rnr_exceeded_err") >= 0,
		"RNR counters readable under /sys/class/infiniband/%s/ports/1/hw_counters", name))
		return errata_summary();
	n = ibv_query_gid(dev_ctx, PORT, gid_index, &gid);
	inet_ntop(AF_INET6, gid.raw, gtext, sizeof(gtext));
	if (!errata_check(n == 0 && (gid.global.subnet_prefix || gid.global.interface_id),
			  "GID index %d of %s port %d is %s", gid_index, name, PORT, gtext))
		return errata_summary();

	t_rc_no_receive("rc_no_receive_1pkt", 64);
	t_rc_no_receive("rc_no_receive_3pkt", WRITE_LEN);
	t_rc_zero_sge_recv();
	t_uc_no_receive();
	t_cq_overrun();
	ibv_close_device(dev_ctx);
	return errata_summary();
}
