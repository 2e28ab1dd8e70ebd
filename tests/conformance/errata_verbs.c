/* ERRATA checks that need a real verbs device and its counters (run in the
 * Soft-RoCE guest): wimm_errata_verbs [DEVICE]   (default rxe0)
 *
 *   e1_rnr_without_receive  raw verbs: a write-with-imm to an RC QP with no
 *                           receive posted is answered with RNR NAK; with
 *                           rnr_retry 0 it fails IBV_WC_RNR_RETRY_EXC_ERR and
 *                           the port counters rcvd_rnr_err / send_rnr_err grow
 *   e1_e3_e4_zero_len_recv  raw verbs: one zero-length receive (num_sge 0) is
 *                           enough; byte_len is the written length (E3), the
 *                           imm is big-endian on the wire (E4)
 *   e1_e5_library_flood     the library's credits: a flood into a slow
 *                           receiver leaves the RNR counters unchanged
 *
 * Output and exit status as wimm_conformance. Host: env WIMM_TEST_HOST
 * (default 192.0.2.1, the rxe netdev's address in the guest). */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"

static const char *dev = "rxe0";

static long long counter(const char *name)
{
	char path[256];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/hw_counters/%s", dev, name);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%lld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

static const char *errata_host(void)
{
	const char *h = getenv("WIMM_TEST_HOST");

	return h && *h ? h : "192.0.2.1";
}

/* ------------------------------------------------------------ raw verbs */

struct side {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *buf;
};

struct raw {
	struct side srv, cli;
	struct rdma_cm_id *listen;
};

#define RAW_BUF 8192

/* Next CM event of the wanted type within timeout_ms; *id gets its id. */
static int cm_wait(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		   struct rdma_cm_id **id)
{
	struct rdma_cm_event *ev;
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};

	if (poll(&p, 1, (int)(5000 * conf_scale())) != 1) {
		conf_fail(__FILE__, __LINE__, "no %s within 5 s", rdma_event_str(want));
		return -1;
	}
	if (rdma_get_cm_event(ch, &ev)) {
		conf_fail(__FILE__, __LINE__, "rdma_get_cm_event failed");
		return -1;
	}
	enum rdma_cm_event_type got = ev->event;

	if (id)
		*id = ev->id;
	rdma_ack_cm_event(ev);
	if (got != want) {
		conf_fail(__FILE__, __LINE__, "CM event %s, expected %s", rdma_event_str(got),
			  rdma_event_str(want));
		return -1;
	}
	return 0;
}

static int side_setup(struct side *s)
{
	struct ibv_qp_init_attr qa = {
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};

	s->pd = ibv_alloc_pd(s->id->verbs);
	s->cq = s->pd ? ibv_create_cq(s->id->verbs, 32, NULL, NULL, 0) : NULL;
	s->buf = calloc(1, RAW_BUF);
	s->mr = s->cq && s->buf ? ibv_reg_mr(s->pd, s->buf, RAW_BUF,
					     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
				: NULL;
	if (!s->mr) {
		conf_fail(__FILE__, __LINE__, "PD/CQ/MR set-up failed");
		return -1;
	}
	qa.send_cq = qa.recv_cq = s->cq;
	if (rdma_create_qp(s->id, s->pd, &qa)) {
		conf_fail(__FILE__, __LINE__, "rdma_create_qp failed");
		return -1;
	}
	return 0;
}

/* One RC connection over rdma_cm, both ends in this thread; rnr_retry 0,
 * so an RNR NAK fails the request at once instead of retrying. */
static int raw_connect(struct raw *r)
{
	struct rdma_conn_param cp = {
	    .responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 0};
	struct sockaddr_in sa = {.sin_family = AF_INET};

	memset(r, 0, sizeof(*r));
	inet_pton(AF_INET, errata_host(), &sa.sin_addr);
	r->srv.ch = rdma_create_event_channel();
	r->cli.ch = rdma_create_event_channel();
	if (!r->srv.ch || !r->cli.ch || rdma_create_id(r->srv.ch, &r->listen, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(r->listen, (struct sockaddr *)&sa) || rdma_listen(r->listen, 4)) {
		conf_fail(__FILE__, __LINE__, "rdma_cm listen on %s failed", errata_host());
		return -1;
	}
	sa.sin_port = rdma_get_src_port(r->listen);
	if (rdma_create_id(r->cli.ch, &r->cli.id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(r->cli.id, NULL, (struct sockaddr *)&sa, 2000) ||
	    cm_wait(r->cli.ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL) ||
	    rdma_resolve_route(r->cli.id, 2000) ||
	    cm_wait(r->cli.ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL) || side_setup(&r->cli) ||
	    rdma_connect(r->cli.id, &cp) ||
	    cm_wait(r->srv.ch, RDMA_CM_EVENT_CONNECT_REQUEST, &r->srv.id) || side_setup(&r->srv) ||
	    rdma_accept(r->srv.id, &cp) || cm_wait(r->cli.ch, RDMA_CM_EVENT_ESTABLISHED, NULL) ||
	    cm_wait(r->srv.ch, RDMA_CM_EVENT_ESTABLISHED, NULL)) {
		if (!conf_failed())
			conf_fail(__FILE__, __LINE__, "rdma_cm connect failed");
		return -1;
	}
	return 0;
}

static void side_close(struct side *s)
{
	if (s->id && s->id->qp)
		rdma_destroy_qp(s->id);
	if (s->mr)
		ibv_dereg_mr(s->mr);
	if (s->cq)
		ibv_destroy_cq(s->cq);
	if (s->pd)
		ibv_dealloc_pd(s->pd);
	if (s->id)
		rdma_destroy_id(s->id);
	if (s->ch)
		rdma_destroy_event_channel(s->ch);
	free(s->buf);
}

static void raw_close(struct raw *r)
{
	if (r->cli.id)
		rdma_disconnect(r->cli.id);
	side_close(&r->cli);
	if (r->listen)
		rdma_destroy_id(r->listen);
	side_close(&r->srv);
}

static int post_write_imm(struct raw *r, uint32_t len, uint32_t imm)
{
	struct ibv_sge sge = {
	    .addr = (uintptr_t)r->cli.buf, .length = len, .lkey = r->cli.mr->lkey};
	struct ibv_send_wr wr = {.opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				 .sg_list = &sge,
				 .num_sge = 1,
				 .send_flags = IBV_SEND_SIGNALED,
				 .imm_data = htonl(imm)},
			   *bad;

	wr.wr.rdma.remote_addr = (uintptr_t)r->srv.buf;
	wr.wr.rdma.rkey = r->srv.mr->rkey;
	return ibv_post_send(r->cli.id->qp, &wr, &bad);
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	int64_t deadline = conf_now_ms() + (int64_t)(5000 * conf_scale());

	while (conf_now_ms() < deadline) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n)
			return n;
		conf_sleep_us(100);
	}
	return 0;
}

static void t_rnr_without_receive(void)
{
	long long rcvd0 = counter("rcvd_rnr_err"), sent0 = counter("send_rnr_err");
	struct ibv_wc wc;
	struct raw r;

	memset(&r, 0, sizeof(r));
	CHECKF(rcvd0 >= 0 && sent0 >= 0, "no RNR counters under /sys/class/infiniband/%s", dev);
	if (raw_connect(&r))
		goto out;
	/* The responder posts no receive at all. */
	CHECK(post_write_imm(&r, 64, 0x11223344u) == 0);
	CHECKF(poll_one(r.cli.cq, &wc) == 1, "the request neither completed nor failed in 5 s");
	CHECKF(wc.status == IBV_WC_RNR_RETRY_EXC_ERR, "completion status %s, expected %s",
	       ibv_wc_status_str(wc.status), ibv_wc_status_str(IBV_WC_RNR_RETRY_EXC_ERR));
	conf_diag("rcvd_rnr_err %lld -> %lld, send_rnr_err %lld -> %lld", rcvd0,
		  counter("rcvd_rnr_err"), sent0, counter("send_rnr_err"));
	CHECK(counter("rcvd_rnr_err") > rcvd0);
	CHECK(counter("send_rnr_err") > sent0);
	/* And the responder saw no completion: the write was refused. */
	CHECK_EQ(ibv_poll_cq(r.srv.cq, 1, &wc), 0);
out:
	raw_close(&r);
}

static void t_zero_len_recv(void)
{
	long long rcvd0 = counter("rcvd_rnr_err");
	struct ibv_recv_wr rwr = {.wr_id = 42, .num_sge = 0}, *bad;
	const uint32_t len = 3000;
	struct ibv_wc wc;
	struct raw r;

	if (raw_connect(&r))
		goto out;
	CHECK(ibv_post_recv(r.srv.id->qp, &rwr, &bad) == 0);
	conf_fill(r.cli.buf, len, 3);
	CHECK(post_write_imm(&r, len, 0x11223344u) == 0);
	CHECKF(poll_one(r.cli.cq, &wc) == 1, "the write did not complete in 5 s");
	CHECKF(wc.status == IBV_WC_SUCCESS, "requester: %s", ibv_wc_status_str(wc.status));
	CHECKF(poll_one(r.srv.cq, &wc) == 1, "no receive completion in 5 s");
	CHECKF(wc.status == IBV_WC_SUCCESS, "responder: %s", ibv_wc_status_str(wc.status));
	CHECK(wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK(wc.wr_id == 42);
	CHECKF(wc.byte_len == len, "byte_len %u, expected %u (E3)", wc.byte_len, len);
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
	CHECKF(ntohl(wc.imm_data) == 0x11223344u, "imm 0x%08x after ntohl (E4)",
	       ntohl(wc.imm_data));
	CHECK_EQ(conf_verify(r.srv.buf, len, 3), 0);
	CHECK_EQ(counter("rcvd_rnr_err"), rcvd0);
out:
	raw_close(&r);
}

/* ------------------------------------------------------- library flood */

struct slow_rx {
	struct wimm_ctx *ctx;
	uint32_t total, got, bad;
	int64_t deadline;
	atomic_int stop; /* the sender gave up */
};

static void *slow_rx_thread(void *arg)
{
	struct slow_rx *s = arg;
	struct wimm_event ev[32];
	uint64_t rng = 5;

	while (s->got < s->total && conf_now_ms() < s->deadline && !atomic_load(&s->stop)) {
		int n = wimm_wait(s->ctx, ev, 32, WIMM_WAIT_ADAPTIVE, 100);

		for (int i = 0; i < n; i++) {
			if (ev[i].type != WIMM_EV_WRITE_IMM || ev[i].imm != s->got)
				s->bad++;
			s->got++;
		}
		if (conf_rand(&rng) % 64 == 0)
			conf_sleep_us(200 + (unsigned)(conf_rand(&rng) % 1800));
	}
	return NULL;
}

static void t_library_flood(void)
{
	struct wimm_conn_attr sattr = {.rx_depth = 16}, cattr = {0};
	struct slow_rx s = {.total = conf_quick() ? 2000 : 20000};
	long long rcvd0 = counter("rcvd_rnr_err"), sent0 = counter("send_rnr_err");
	char uri[64];
	int started = 0;
	pthread_t th;
	struct pair p;

	snprintf(uri, sizeof(uri), "verbs:%s", dev);
	if (pair_open(&p, uri))
		goto out;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	s.ctx = p.sctx;
	s.deadline = conf_now_ms() + (int64_t)(120000 * conf_scale());
	CHECK(pthread_create(&th, NULL, slow_rx_thread, &s) == 0);
	started = 1;
	for (uint32_t i = 0; i < s.total; i++) {
		int rc;

		/* AGAIN is the credit (or queue) limit working: retry. */
		while ((rc = wimm_write_imm(p.c, NULL, 0, 0, 0, i, 0)) == WIMM_E_AGAIN &&
		       conf_now_ms() < s.deadline)
			wimm_progress(p.cctx);
		CHECKF(rc == 0, "doorbell %u: %s", i, wimm_err_name(rc));
	}
	pthread_join(th, NULL);
	started = 0;
	conf_diag("%u doorbells; rcvd_rnr_err %lld -> %lld, send_rnr_err %lld -> %lld", s.got,
		  rcvd0, counter("rcvd_rnr_err"), sent0, counter("send_rnr_err"));
	CHECKF(s.got == s.total && s.bad == 0, "%u of %u arrived, %u out of order", s.got, s.total,
	       s.bad);
	CHECK_EQ(counter("rcvd_rnr_err"), rcvd0);
	CHECK_EQ(counter("send_rnr_err"), sent0);
out:
	if (started) {
		atomic_store(&s.stop, 1);
		pthread_join(th, NULL);
	}
	pair_close(&p);
}

static const struct {
	const char *name;
	void (*fn)(void);
} tests[] = {
    {"e1_rnr_without_receive", t_rnr_without_receive},
    {"e1_e3_e4_zero_len_recv", t_zero_len_recv},
    {"e1_e5_library_flood", t_library_flood},
};

int main(int argc, char **argv)
{
	char path[256], reason[480];
	int passed = 0, failed = 0;

	conf_self = argv[0];
	if (argc > 1)
		dev = argv[1];
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/hw_counters", dev);
	if (access(path, R_OK) != 0) {
		printf("# no %s: run this inside the Soft-RoCE guest (tests/softroce/run)\n", path);
		printf("0 passed, 1 failed\n");
		return 1;
	}
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		conf_reset();
		tests[i].fn();
		int st = conf_result(reason, sizeof(reason));

		if (st == 1) {
			printf("not ok - %s: %s\n", tests[i].name, reason);
			failed++;
		} else {
			printf(st == 2 ? "ok - %s # SKIP %s\n" : "ok - %s\n", tests[i].name,
			       reason);
			passed++;
		}
		fflush(stdout);
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
