/* The services' hostile peer: raw libfabric tcp, wimm's handshake by hand. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "raw_tcp_peer.h"

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void raw_tcp_peer_progress(struct raw_tcp_peer *r)
{
	struct fi_cq_data_entry d[16];
	ssize_t k = fi_cq_read(r->cq, d, 16);
	for (ssize_t i = 0; i < k; i++) {
		if (d[i].flags & FI_REMOTE_CQ_DATA)
			r->imm[r->doorbells++ % RAW_IMM_KEPT] = (uint32_t)d[i].data;
		if (d[i].flags & FI_RECV) {
			/* The slot's index is its context. */
			size_t slot = (size_t)(uintptr_t)d[i].op_context;
			r->received++;
			fi_recv(r->ep, r->rx[slot], RAW_RX_SIZE, fi_mr_desc(r->rx_mr), 0,
				(void *)(uintptr_t)slot);
		} else if (!(d[i].flags & FI_REMOTE_CQ_DATA)) {
			r->done++;
		}
	}
	if (k == -FI_EAVAIL) {
		struct fi_cq_err_entry e = {0};
		fi_cq_readerr(r->cq, &e, 0);
		r->failed++;
		r->last_error = e.err;
	}
	struct fi_eq_cm_entry cm;
	uint32_t event;
	ssize_t rd = fi_eq_read(r->eq, &event, &cm, sizeof(cm), 0);
	if (rd == -FI_EAVAIL) {
		struct fi_eq_err_entry e = {0};
		fi_eq_readerr(r->eq, &e, 0);
		r->shutdown = 1;
	} else if (rd >= 0 && event == FI_SHUTDOWN) {
		r->shutdown = 1;
	}
}

int raw_tcp_peer_open(struct raw_tcp_peer *r, void *src, size_t src_len, void *win, size_t win_len)
{
	struct fi_info *hints = fi_allocinfo(), *list = NULL;
	struct fi_eq_attr eqa = {.size = 16, .wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr cqa = {.size = 512, .format = FI_CQ_FORMAT_DATA};

	memset(r, 0, sizeof(*r));
	r->src = src;
	r->src_len = src_len;
	r->win = win;
	r->win_len = win_len;
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
	/* As wimm's ofi backend: remote addresses are virtual addresses. */
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
		ret = fi_mr_reg(r->domain, src, src_len, FI_WRITE, 0, key + 1, 0, &r->src_mr, NULL);
	if (!ret && win)
		ret = fi_mr_reg(r->domain, win, win_len, FI_REMOTE_WRITE, 0, key + 2, 0, &r->win_mr,
				NULL);
	if (!ret)
		ret = fi_mr_reg(r->domain, r->rx, sizeof(r->rx), FI_RECV, 0, key + 3, 0, &r->rx_mr,
				NULL);
	if (!ret)
		ret = fi_mr_reg(r->domain, &r->null_word, sizeof(r->null_word), FI_REMOTE_WRITE,
				(uint64_t)(uintptr_t)&r->null_word, 0, 0, &r->null_mr, NULL);
	for (size_t slot = 0; !ret && slot < RAW_RX_SLOTS; slot++)
		ret = (int)fi_recv(r->ep, r->rx[slot], RAW_RX_SIZE, fi_mr_desc(r->rx_mr), 0,
				   (void *)(uintptr_t)slot);
	return ret;
}

int raw_tcp_peer_connect(struct raw_tcp_peer *r, const char *host, int port, const void *priv,
			 size_t priv_len, void (*pump)(void *), void *arg, int timeout_ms)
{
	struct wimm_handshake hs = {.version = WIMM_HS_VERSION,
				    .flags = r->win ? WIMM_HS_F_WINDOW_WRITE : 0,
				    .rx_depth = RAW_RX_SLOTS,
				    .recv_size = RAW_RX_SIZE,
				    .window_addr = (uint64_t)(uintptr_t)r->win,
				    .window_len = r->win ? r->win_len : 0,
				    .window_key = r->win_mr ? fi_mr_key(r->win_mr) : 0,
				    .credit_addr = (uint64_t)(uintptr_t)r->ctl,
				    .credit_key = fi_mr_key(r->ctl_mr),
				    .priv_len = (uint32_t)priv_len};
	uint8_t buf[WIMM_HS_MAX_LEN];
	char service[16];

	if (priv_len > sizeof(hs.priv))
		return -FI_EINVAL;
	if (priv_len)
		memcpy(hs.priv, priv, priv_len);
	snprintf(service, sizeof(service), "%d", port);
	struct fi_info *hints = fi_dupinfo(r->info), *dest = NULL;
	int n = wimm_hs_encode(&hs, buf, sizeof(buf));
	int ret = hints && n > 0 ? fi_getinfo(FI_VERSION(1, 9), host, service, 0, hints, &dest)
				 : -FI_EINVAL;
	fi_freeinfo(hints);
	if (!ret)
		ret = fi_connect(r->ep, dest->dest_addr, buf, (size_t)n);
	fi_freeinfo(dest);
	if (ret)
		return ret;
	for (int64_t until = now_ms() + timeout_ms; now_ms() < until;) {
		union {
			struct fi_eq_cm_entry e;
			uint8_t b[sizeof(struct fi_eq_cm_entry) + 512];
		} u;
		uint32_t event;
		if (pump)
			pump(arg);
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

int raw_tcp_peer_write(struct raw_tcp_peer *r, uint64_t addr, size_t len, int doorbell,
		       uint32_t imm)
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

	if (len > r->src_len)
		return -FI_EINVAL;
	do {
		ret = fi_writemsg(r->ep, &m, FI_COMPLETION | (doorbell ? FI_REMOTE_CQ_DATA : 0));
		if (ret == -FI_EAGAIN)
			raw_tcp_peer_progress(r);
	} while (ret == -FI_EAGAIN);
	r->posted += ret == 0;
	return (int)ret;
}

void raw_tcp_peer_close(struct raw_tcp_peer *r)
{
	struct fid *f[] = {r->ep ? &r->ep->fid : NULL,	       r->rx_mr ? &r->rx_mr->fid : NULL,
			   r->ctl_mr ? &r->ctl_mr->fid : NULL, r->src_mr ? &r->src_mr->fid : NULL,
			   r->win_mr ? &r->win_mr->fid : NULL, r->null_mr ? &r->null_mr->fid : NULL,
			   r->cq ? &r->cq->fid : NULL,	       r->eq ? &r->eq->fid : NULL,
			   r->domain ? &r->domain->fid : NULL, r->fabric ? &r->fabric->fid : NULL};
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (f[i])
			fi_close(f[i]);
	fi_freeinfo(r->info);
	r->info = NULL;
}
