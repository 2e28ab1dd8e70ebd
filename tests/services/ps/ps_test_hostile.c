/* ps_test hostile: a raw libfabric tcp endpoint that does wimm's handshake
 * itself, with the ps hello as its private data, joins as worker 1 and then
 * writes, with the key of its own window, into worker 0's receive region
 * (just before its window, straddling its start, and with a doorbell that
 * claims worker 0). The transport refuses every one: the server's memory
 * there stays as it was, no doorbell reaches the service, nothing is
 * applied; its own write inside its window lands and counts. The server
 * runs in this process (one thread drives both) so the test can look at
 * its memory through ps_server.h.
 *
 * Only on ofi:tcp: libfabric's shm provider does not check a write's range
 * at the target (tests/conformance/conf_hostile.c measured it), so there a
 * window is the honest sender's promise, as docs/design.md says. */
#include <string.h>

#include "ps_server.h"
#include "ps_test.h"

#ifdef PS_TEST_HAVE_OFI
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "core/handshake.h"

#define SHARDS 4
#define SHARD 1024u
#define SRC 4096

struct raw {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_eq *eq;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fid_mr *ctl_mr, *src_mr, *win_mr;
	uint64_t ctl[16];	       /* credits and heartbeats come here */
	float src[SRC / 4];	       /* what we write */
	float win[SHARDS * SHARD / 4]; /* our window: the server's parameters */
	struct wimm_handshake srv;
	int posted, done, failed;
};

static void progress(struct raw *r)
{
	struct fi_cq_data_entry d[16];
	ssize_t k = fi_cq_read(r->cq, d, 16);
	if (k > 0)
		for (ssize_t i = 0; i < k; i++)
			r->done += (d[i].flags & FI_REMOTE_CQ_DATA) == 0;
	if (k == -FI_EAVAIL) {
		struct fi_cq_err_entry e = {0};
		fi_cq_readerr(r->cq, &e, 0);
		r->failed++;
	}
}

/* Drive the server and the raw peer for ms. */
static void pump(struct wimm_ps_server *s, struct raw *r, int ms)
{
	int64_t until = now_ms() + ms;
	do {
		wimm_ps_server_run(s, 1);
		progress(r);
	} while (now_ms() < until);
}

static int raw_open(struct raw *r)
{
	struct fi_info *hints = fi_allocinfo(), *list = NULL;
	struct fi_eq_attr eqa = {.size = 16, .wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr cqa = {.size = 512, .format = FI_CQ_FORMAT_DATA};
	if (!hints)
		return -FI_ENOMEM;
	hints->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
	hints->ep_attr->type = FI_EP_MSG;
	hints->domain_attr->mr_mode =
	    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup("tcp");
	int ret = fi_getinfo(FI_VERSION(1, 9), "127.0.0.1", NULL, 0, hints, &list);
	fi_freeinfo(hints);
	if (ret)
		return ret;
	r->info = fi_dupinfo(list);
	fi_freeinfo(list);
	/* As wimm's ofi backend: remote addresses are virtual addresses (tcp
	 * defaults to offsets, and then the server's writes into our window
	 * would miss it). */
	if (r->info)
		r->info->domain_attr->mr_mode |= FI_MR_VIRT_ADDR;
	ret = r->info ? fi_fabric(r->info->fabric_attr, &r->fabric, NULL) : -FI_ENODATA;
	if (!ret)
		ret = fi_domain(r->fabric, r->info, &r->domain, NULL);
	if (!ret)
		ret = fi_eq_open(r->fabric, &eqa, &r->eq, NULL);
	if (!ret)
		ret = fi_cq_open(r->domain, &cqa, &r->cq, NULL);
	if (!ret)
		ret = fi_endpoint(r->domain, r->info, &r->ep, NULL);
	if (!ret)
		ret = fi_ep_bind(r->ep, &r->eq->fid, 0);
	if (!ret)
		ret = fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!ret)
		ret = fi_enable(r->ep);
	uint64_t key = 0x7a7a0000u + (uint64_t)(now_ms() & 0xfff) * 4;
	if (!ret)
		ret = fi_mr_reg(r->domain, r->ctl, sizeof(r->ctl), FI_REMOTE_WRITE, 0, key, 0,
				&r->ctl_mr, NULL);
	if (!ret)
		ret = fi_mr_reg(r->domain, r->src, sizeof(r->src), FI_WRITE, 0, key + 1, 0,
				&r->src_mr, NULL);
	if (!ret)
		ret = fi_mr_reg(r->domain, r->win, sizeof(r->win), FI_REMOTE_WRITE, 0, key + 2, 0,
				&r->win_mr, NULL);
	return ret;
}

/* Connect to the server at port as worker `rank`, its handshake by hand. */
static int raw_connect(struct raw *r, struct wimm_ps_server *s, int port, uint32_t rank)
{
	struct wimm_handshake hs = {.version = WIMM_HS_VERSION,
				    .flags = WIMM_HS_F_WINDOW_WRITE,
				    .rx_depth = 64,
				    .window_addr = (uint64_t)(uintptr_t)r->win,
				    .window_len = sizeof(r->win),
				    .window_key = fi_mr_key(r->win_mr),
				    .credit_addr = (uint64_t)(uintptr_t)r->ctl,
				    .credit_key = fi_mr_key(r->ctl_mr),
				    .priv_len = PS_HELLO_LEN};
	uint8_t buf[WIMM_HS_MAX_LEN];
	char service[16];
	struct fi_info *hints = fi_dupinfo(r->info), *dest = NULL;
	ps_hello_encode(hs.priv,
			&(struct ps_hello){.role = PS_ROLE_WORKER, .rank = rank, .world = 2});
	snprintf(service, sizeof(service), "%d", port);
	int n = wimm_hs_encode(&hs, buf, sizeof(buf));
	int ret = hints && n > 0
		      ? fi_getinfo(FI_VERSION(1, 9), "127.0.0.1", service, 0, hints, &dest)
		      : -FI_EINVAL;
	fi_freeinfo(hints);
	if (!ret)
		ret = fi_connect(r->ep, dest->dest_addr, buf, (size_t)n);
	fi_freeinfo(dest);
	if (ret)
		return ret;
	int64_t until = now_ms() + 10000 * scale();
	while (now_ms() < until) {
		union {
			struct fi_eq_cm_entry e;
			uint8_t b[sizeof(struct fi_eq_cm_entry) + 512];
		} u;
		uint32_t event;
		wimm_ps_server_run(s, 1);
		ssize_t rd = fi_eq_read(r->eq, &event, &u, sizeof(u), 0);
		if (rd == -FI_EAGAIN)
			continue;
		if (rd < 0 || event != FI_CONNECTED)
			return -FI_ECONNREFUSED;
		size_t len = (size_t)rd - sizeof(u.e);
		return wimm_hs_decode(u.e.data, wimm_hs_wire_len(u.e.data, len), &r->srv)
			   ? -FI_EINVAL
			   : 0;
	}
	return -FI_ETIMEDOUT;
}

static int raw_write(struct raw *r, uint64_t addr, size_t len, int doorbell, uint32_t imm)
{
	struct iovec iov = {.iov_base = r->src, .iov_len = len};
	void *desc = fi_mr_desc(r->src_mr);
	struct fi_rma_iov rma = {.addr = addr, .len = len, .key = r->srv.window_key};
	struct fi_msg_rma m = {.msg_iov = &iov,
			       .desc = &desc,
			       .iov_count = 1,
			       .rma_iov = &rma,
			       .rma_iov_count = 1,
			       .data = ((uint64_t)len << 32) | imm};
	ssize_t ret;
	do {
		ret = fi_writemsg(r->ep, &m, FI_COMPLETION | (doorbell ? FI_REMOTE_CQ_DATA : 0));
		if (ret == -FI_EAGAIN)
			progress(r);
	} while (ret == -FI_EAGAIN);
	r->posted += ret == 0;
	return (int)ret;
}

static void raw_close(struct raw *r)
{
	struct fid *f[] = {r->ep ? &r->ep->fid : NULL,	       r->ctl_mr ? &r->ctl_mr->fid : NULL,
			   r->src_mr ? &r->src_mr->fid : NULL, r->win_mr ? &r->win_mr->fid : NULL,
			   r->cq ? &r->cq->fid : NULL,	       r->eq ? &r->eq->fid : NULL,
			   r->domain ? &r->domain->fid : NULL, r->fabric ? &r->fabric->fid : NULL};
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (f[i])
			fi_close(f[i]);
	fi_freeinfo(r->info);
}

static void say(void *arg, enum wimm_log_level lvl, const char *msg)
{
	(void)arg;
	if (lvl <= WIMM_LOG_INFO)
		fprintf(stderr, "server: %s\n", msg);
}

int t_hostile(void)
{
	static struct raw r;
	struct wimm_ps_server *s = NULL;
	struct wimm_ps_stats st;
	if (strcmp(fabric, "ofi:tcp") != 0)
		die("hostile runs on ofi:tcp only (libfabric shm does not enforce windows)");
	struct wimm_ps_server_attr a = {.fabric = fabric,
					.addr = "127.0.0.1:0",
					.shards = SHARDS,
					.shard_size = SHARD,
					.workers = 2,
					.liveness_ms = 30000,
					.log = say};
	int rc = wimm_ps_server_new(&a, &s);
	if (rc < 0)
		die("server: %s", wimm_strerror(rc));
	int ret = raw_open(&r);
	if (!ret)
		ret = raw_connect(&r, s, wimm_ps_server_port(s), 1);
	if (ret)
		die("raw tcp peer: %s", fi_strerror(ret < 0 ? -ret : ret));
	CHECK(r.srv.window_len == SHARDS * SHARD, "the server's window for us: %llu bytes",
	      (unsigned long long)r.srv.window_len);
	pump(s, &r, 300);
	/* Worker 0's region: zero, for nobody has written it. */
	const unsigned char *w0 = (const unsigned char *)s->recv;
	size_t region = SHARDS * SHARD;
	/* The control: our own shard 0, inside our window, with its doorbell. */
	for (size_t j = 0; j < SRC / 4; j++)
		r.src[j] = 3.0f;
	CHECK(raw_write(&r, r.srv.window_addr, SHARD, 1, ps_imm_in(1, 0, 0)) == 0, "write");
	pump(s, &r, 300);
	wimm_ps_server_stats(s, &st);
	CHECK(st.pushes == 1 && ((float *)(w0 + region))[0] == 3.0f,
	      "our own push did not land (pushes %llu, live %llu; raw: %d posted, %d done, %d "
	      "failed)",
	      (unsigned long long)st.pushes, (unsigned long long)st.workers_live, r.posted, r.done,
	      r.failed);
	/* Into worker 0's region: before our window, straddling its start,
	 * and with a doorbell that claims worker 0 and its shard 1. */
	for (size_t j = 0; j < SRC / 4; j++)
		r.src[j] = 1e30f;
	raw_write(&r, r.srv.window_addr - region, SHARD, 0, 0);
	raw_write(&r, r.srv.window_addr - SHARD / 2, SHARD, 0, 0);
	raw_write(&r, r.srv.window_addr - region + SHARD, SHARD, 1, ps_imm_in(0, 1, 0));
	pump(s, &r, 1500);
	size_t damaged = 0;
	for (size_t i = 0; i < region; i++)
		damaged += w0[i] != 0;
	wimm_ps_server_stats(s, &st);
	printf("hostile: %d posted, %d completed, %d failed; server: pushes %llu, bad_worker %llu, "
	       "applied %llu, worker 0's region: %zu bytes changed\n",
	       r.posted, r.done, r.failed, (unsigned long long)st.pushes,
	       (unsigned long long)st.bad_worker, (unsigned long long)st.applied, damaged);
	CHECK(damaged == 0, "%zu bytes of worker 0's region changed", damaged);
	CHECK(st.pushes == 1 && st.bad_worker == 0 && st.applied == 0,
	      "a write outside the window reached the service");
	raw_close(&r);
	wimm_ps_server_delete(&s);
	return 0;
}
#else
static void say(void *arg, enum wimm_log_level lvl, const char *msg)
{
	(void)arg;
	if (lvl <= WIMM_LOG_INFO)
		fprintf(stderr, "server: %s\n", msg);
}

int t_hostile(void)
{
	die("built without libfabric: no raw tcp peer");
}
#endif
