/* The raw peers (raw_peer.h): libfabric MSG and RDM, librdmacm + verbs. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifdef RAW_PEER_HAVE_OFI
#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#endif
#ifdef RAW_PEER_HAVE_VERBS
#include <arpa/inet.h>
#endif

#include <wimm.h>

#include "raw_peer.h"

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* How long one blocking look waits when no pump runs a server here. */
static int slice_ms(int64_t deadline)
{
	int64_t left = deadline - now_ms();
	return left > 200 ? 200 : left < 0 ? 0 : (int)left;
}

/* Keys of our own choosing where the provider lets us choose: a fresh base
 * each time, so a second peer's keys are not the first one's. */
static uint64_t key_base(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return 0x5a5a0000u + (uint64_t)((ts.tv_nsec / 1000) & 0xffff) * 4;
}

/* ------------------------------------------------------------- libfabric */
#ifdef RAW_PEER_HAVE_OFI
/* The provider wimm itself would use for "ofi:<prov>" of this endpoint type:
 * the same name and the same needs (ofi_find in src/ofi/ofi_ctx.c), so the
 * raw peer talks to a listener exactly when wimm listens with one. */
static int ofi_info(const char *prov, int rdm, const char *node, const char *service,
		    struct fi_info **out)
{
	struct fi_info *hints = fi_allocinfo(), *list = NULL;
	int ret = -FI_ENOMEM;

	*out = NULL;
	if (!hints)
		return ret;
	hints->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
	hints->ep_attr->type = rdm ? FI_EP_RDM : FI_EP_MSG;
	hints->domain_attr->mr_mode =
	    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(prov);
	if (hints->fabric_attr->prov_name)
		ret = fi_getinfo(FI_VERSION(1, 9), node, service, 0, hints, &list);
	fi_freeinfo(hints);
	if (ret)
		return ret;
	for (struct fi_info *i = list; i && !*out; i = i->next)
		/* A layered name ("tcp;ofi_rxm") is not the provider asked for. */
		if (!strcmp(i->fabric_attr->prov_name, prov) && i->domain_attr->cq_data_size >= 4)
			*out = fi_dupinfo(i);
	fi_freeinfo(list);
	return *out ? 0 : -FI_ENODATA;
}

static int ofi_fail(struct raw_peer *r, const char *what, int ret)
{
	snprintf(r->text, sizeof(r->text), "raw %s peer: %s: %s",
		 r->kind == RAW_PEER_OFI_RDM ? "rdm" : "msg", what, fi_strerror(-ret));
	return ret;
}

static void ofi_close_ep(struct raw_peer *r)
{
	struct fid *f[] = {r->ep ? &r->ep->fid : NULL, r->cq ? &r->cq->fid : NULL,
			   r->eq ? &r->eq->fid : NULL};

	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (f[i])
			fi_close(f[i]);
	r->ep = NULL;
	r->cq = NULL;
	r->eq = NULL;
}

/* A fresh endpoint (a MSG endpoint connects once), its receives posted. */
static int ofi_open_ep(struct raw_peer *r)
{
	struct fi_eq_attr eqa = {.size = 16, .wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr cqa = {.size = 512, .format = FI_CQ_FORMAT_DATA};
	int rdm = r->kind == RAW_PEER_OFI_RDM;
	int ret = rdm ? 0 : fi_eq_open(r->fabric, &eqa, &r->eq, NULL);

	if (!ret)
		ret = fi_cq_open(r->domain, &cqa, &r->cq, NULL);
	if (!ret)
		ret = fi_endpoint(r->domain, r->info, &r->ep, NULL);
	if (!ret)
		ret = rdm ? fi_ep_bind(r->ep, &r->av->fid, 0) : fi_ep_bind(r->ep, &r->eq->fid, 0);
	if (!ret)
		ret = fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!ret)
		ret = fi_enable(r->ep);
	/* The slot's index is its context. */
	for (size_t slot = 0; !ret && slot < r->rx_slots; slot++)
		ret = (int)fi_recv(r->ep, r->rx[slot], RAW_RX_SIZE, fi_mr_desc(r->rx_mr), 0,
				   (void *)(uintptr_t)slot);
	if (ret) {
		ofi_fail(r, "endpoint set-up", ret);
		ofi_close_ep(r);
	}
	return ret;
}

static int ofi_open(struct raw_peer *r, const struct raw_peer_attr *a)
{
	struct fi_av_attr ava = {.type = FI_AV_TABLE, .count = 4};
	uint64_t key = key_base();
	int ret = ofi_info(a->prov, r->kind == RAW_PEER_OFI_RDM, a->node, a->service, &r->info);

	if (ret)
		return ofi_fail(r, a->prov, ret);
	/* As wimm's ofi backend: remote addresses are virtual addresses. */
	r->info->domain_attr->mr_mode |= FI_MR_VIRT_ADDR;
	ret = fi_fabric(r->info->fabric_attr, &r->fabric, NULL);
	if (!ret)
		ret = fi_domain(r->fabric, r->info, &r->domain, NULL);
	if (!ret && r->kind == RAW_PEER_OFI_RDM)
		ret = fi_av_open(r->domain, &ava, &r->av, NULL);
	if (!ret)
		ret = fi_mr_reg(r->domain, r->ctl, sizeof(r->ctl), FI_REMOTE_WRITE, 0, key, 0,
				&r->ctl_mr, NULL);
	if (!ret)
		ret = fi_mr_reg(r->domain, r->src, r->src_len, FI_WRITE, 0, key + 1, 0, &r->src_mr,
				NULL);
	if (!ret && r->win)
		ret = fi_mr_reg(r->domain, r->win, r->win_len, FI_REMOTE_WRITE, 0, key + 2, 0,
				&r->win_mr, NULL);
	if (!ret && r->rx_slots)
		ret = fi_mr_reg(r->domain, r->rx, sizeof(r->rx), FI_RECV, 0, key + 3, 0, &r->rx_mr,
				NULL);
	if (!ret && r->kind == RAW_PEER_OFI_MSG)
		ret = fi_mr_reg(r->domain, &r->null_word, sizeof(r->null_word), FI_REMOTE_WRITE,
				(uint64_t)(uintptr_t)&r->null_word, 0, 0, &r->null_mr, NULL);
	if (ret)
		return ofi_fail(r, "domain set-up", ret);
	return ofi_open_ep(r);
}

static void ofi_close(struct raw_peer *r)
{
	ofi_close_ep(r);
	struct fid *f[] = {r->av ? &r->av->fid : NULL,	       r->rx_mr ? &r->rx_mr->fid : NULL,
			   r->ctl_mr ? &r->ctl_mr->fid : NULL, r->src_mr ? &r->src_mr->fid : NULL,
			   r->win_mr ? &r->win_mr->fid : NULL, r->null_mr ? &r->null_mr->fid : NULL,
			   r->domain ? &r->domain->fid : NULL, r->fabric ? &r->fabric->fid : NULL};
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		if (f[i])
			fi_close(f[i]);
	fi_freeinfo(r->info);
}

static enum raw_outcome ofi_connect_bytes(struct raw_peer *r, const char *host, const char *port,
					  const uint8_t *b, size_t n, raw_pump_fn pump, void *arg,
					  int64_t deadline)
{
	union {
		struct fi_eq_cm_entry e;
		uint8_t b[sizeof(struct fi_eq_cm_entry) + RAW_CM_MAX];
	} u;
	struct fi_info *hints = NULL, *dest = NULL;
	uint32_t event;
	int ret = r->ep ? 0 : ofi_open_ep(r);

	if (ret)
		return RAW_ERROR;
	if (host) {
		hints = fi_dupinfo(r->info);
		ret =
		    hints ? fi_getinfo(FI_VERSION(1, 9), host, port, 0, hints, &dest) : -FI_ENOMEM;
		fi_freeinfo(hints);
	}
	if (!ret)
		ret =
		    fi_connect(r->ep, dest ? dest->dest_addr : r->info->dest_addr, n ? b : NULL, n);
	fi_freeinfo(dest);
	if (ret) {
		snprintf(r->text, sizeof(r->text), "fi_connect(%zu bytes): %s", n,
			 fi_strerror(-ret));
		return RAW_ERROR;
	}
	while (now_ms() < deadline) {
		ssize_t rd;
		if (pump) {
			pump(arg);
			rd = fi_eq_read(r->eq, &event, &u, sizeof(u), 0);
		} else {
			rd = fi_eq_sread(r->eq, &event, &u, sizeof(u), slice_ms(deadline), 0);
		}
		if (rd == -FI_EAGAIN || rd == -FI_ETIMEDOUT)
			continue;
		if (rd == -FI_EAVAIL) {
			struct fi_eq_err_entry err = {0};

			fi_eq_readerr(r->eq, &err, 0);
			snprintf(r->text, sizeof(r->text), "EQ error %d (%s)", err.err,
				 fi_strerror(err.err));
			return err.err == FI_ECONNREFUSED ? RAW_REFUSED : RAW_ERROR;
		}
		if (rd < 0) {
			snprintf(r->text, sizeof(r->text), "fi_eq_read: %s", fi_strerror((int)-rd));
			return RAW_ERROR;
		}
		if (event != FI_CONNECTED) {
			snprintf(r->text, sizeof(r->text), "unexpected EQ event %u", event);
			return RAW_ERROR;
		}
		r->reply_len = (size_t)rd > sizeof(u.e) ? (size_t)rd - sizeof(u.e) : 0;
		memcpy(r->reply, u.e.data, r->reply_len);
		snprintf(r->text, sizeof(r->text), "FI_CONNECTED");
		r->shutdown = 0;
		return RAW_CONNECTED;
	}
	snprintf(r->text, sizeof(r->text), "no FI_CONNECTED in time");
	return RAW_TIMEOUT;
}

/* All of buf over the side channel, or -1; the server is pumped meanwhile. */
static int sock_io(int fd, uint8_t *buf, size_t len, int out, raw_pump_fn pump, void *arg,
		   int64_t deadline)
{
	while (len && now_ms() < deadline) {
		if (pump)
			pump(arg);
		else
			poll(&(struct pollfd){.fd = fd, .events = out ? POLLOUT : POLLIN}, 1,
			     slice_ms(deadline));
		ssize_t n = out ? send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL)
				: recv(fd, buf, len, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			return -1;
		if (n > 0) {
			buf += n;
			len -= (size_t)n;
		}
	}
	return len ? -1 : 0;
}

static int rdm_fail(struct raw_peer *r, const char *what)
{
	snprintf(r->text, sizeof(r->text), "raw rdm: %s", what);
	return -EPROTO;
}

/* wimm's side channel by hand: our handshake (with our RDM name) in a
 * 4-byte big-endian length frame, the server's in one back; then the
 * server's endpoint goes into our address vector. */
static int rdm_connect(struct raw_peer *r, const char *host, const char *port,
		       struct wimm_handshake *hs, raw_pump_fn pump, void *arg, int64_t deadline)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *ai = NULL;
	uint8_t frame[4 + WIMM_HS_MAX_LEN], hdr[4];
	size_t alen = sizeof(hs->addr);

	if (fi_getname(&r->ep->fid, hs->addr, &alen))
		return rdm_fail(r, "fi_getname failed");
	hs->addr_len = (uint16_t)alen;
	int n = wimm_hs_encode(hs, frame + 4, sizeof(frame) - 4);
	if (n < 0 || !host || getaddrinfo(host, port, &hints, &ai))
		return rdm_fail(r, "handshake or address");
	r->sock = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int rc = r->sock < 0 ? -1 : connect(r->sock, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	for (int i = 0; i < 4; i++)
		frame[i] = (uint8_t)((uint32_t)n >> (24 - 8 * i));
	if (rc || sock_io(r->sock, frame, 4 + (size_t)n, 1, pump, arg, deadline) ||
	    sock_io(r->sock, hdr, 4, 0, pump, arg, deadline)) {
		snprintf(r->text, sizeof(r->text), "raw rdm: side channel: %s", strerror(errno));
		return -ECONNREFUSED;
	}
	size_t len = (size_t)hdr[0] << 24 | (size_t)hdr[1] << 16 | (size_t)hdr[2] << 8 | hdr[3];
	r->reply_len = len;
	if (len > sizeof(r->reply) || sock_io(r->sock, r->reply, len, 0, pump, arg, deadline))
		return rdm_fail(r, "no reply frame");
	if (wimm_hs_decode(r->reply, wimm_hs_wire_len(r->reply, len), &r->srv))
		return rdm_fail(r, "the server's reply does not decode");
	if (fi_av_insert(r->av, r->srv.addr, 1, &r->srv_addr, 0, NULL) != 1)
		return rdm_fail(r, "fi_av_insert of the server failed");
	/* Both sides take each other's shm name: the server's first write to
	 * us lands in our progress. */
	for (int64_t until = now_ms() + 300; now_ms() < until;) {
		if (pump)
			pump(arg);
		raw_peer_progress(r);
	}
	return 0;
}

static int ofi_write(struct raw_peer *r, uint64_t addr, uint64_t key, size_t len, int doorbell,
		     uint32_t imm)
{
	struct iovec iov = {.iov_base = r->src, .iov_len = len};
	void *desc = fi_mr_desc(r->src_mr);
	struct fi_rma_iov rma = {.addr = addr, .len = len, .key = key};
	struct fi_msg_rma m = {.msg_iov = &iov,
			       .desc = &desc,
			       .iov_count = len ? 1 : 0,
			       .addr = r->kind == RAW_PEER_OFI_RDM ? r->srv_addr : 0,
			       .rma_iov = &rma,
			       .rma_iov_count = 1,
			       .data = ((uint64_t)len << 32) | imm};
	ssize_t ret;

	do {
		ret = fi_writemsg(r->ep, &m, FI_COMPLETION | (doorbell ? FI_REMOTE_CQ_DATA : 0));
		if (ret == -FI_EAGAIN)
			raw_peer_progress(r);
	} while (ret == -FI_EAGAIN);
	r->posted += ret == 0;
	return (int)ret;
}

static void ofi_progress(struct raw_peer *r)
{
	struct fi_cq_data_entry d[16];
	ssize_t k = r->cq ? fi_cq_read(r->cq, d, 16) : 0;

	for (ssize_t i = 0; i < k; i++) {
		if (d[i].flags & FI_RECV) {
			size_t slot = (size_t)(uintptr_t)d[i].op_context;
			r->received++;
			fi_recv(r->ep, r->rx[slot], RAW_RX_SIZE, fi_mr_desc(r->rx_mr), 0,
				(void *)(uintptr_t)slot);
		} else if (!(d[i].flags & FI_REMOTE_CQ_DATA)) {
			r->done++;
		}
		if (d[i].flags & FI_REMOTE_CQ_DATA)
			r->imm[r->doorbells++ % RAW_IMM_KEPT] = (uint32_t)d[i].data;
	}
	if (k == -FI_EAVAIL) {
		struct fi_cq_err_entry e = {0};
		fi_cq_readerr(r->cq, &e, 0);
		r->failed++;
		r->last_error = e.err;
	}
	if (r->kind != RAW_PEER_OFI_MSG || !r->eq)
		return;
	/* After the connection is up the EQ says only that it went. */
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
#endif /* RAW_PEER_HAVE_OFI */

/* ------------------------------------------------------ librdmacm + verbs */
#ifdef RAW_PEER_HAVE_VERBS
/* The next event of the raw id (its private data in r->reply), or -1 on an
 * error, -2 on timeout (text says which). Every wait is a bounded poll. */
static int cm_event(struct raw_peer *r, raw_pump_fn pump, void *arg, int64_t deadline, int *status)
{
	struct rdma_cm_event *ev;

	for (;;) {
		if (pump)
			pump(arg);
		if (rdma_get_cm_event(r->ch, &ev) == 0) {
			int type = ev->event;
			const struct rdma_conn_param *cp = &ev->param.conn;

			*status = ev->status;
			r->reply_len = 0;
			if (cp->private_data) { /* a uint8_t length: it fits */
				r->reply_len = cp->private_data_len;
				memcpy(r->reply, cp->private_data, r->reply_len);
			}
			rdma_ack_cm_event(ev);
			return type;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			snprintf(r->text, sizeof(r->text), "rdma_get_cm_event: %s",
				 strerror(errno));
			return -1;
		}
		if (now_ms() >= deadline) {
			snprintf(r->text, sizeof(r->text), "no rdma_cm event in time");
			return -2;
		}
		if (!pump)
			poll(&(struct pollfd){.fd = r->ch->fd, .events = POLLIN}, 1,
			     slice_ms(deadline));
	}
}

static int cm_expect(struct raw_peer *r, int want, raw_pump_fn pump, void *arg, int64_t deadline)
{
	int status = 0, ev = cm_event(r, pump, arg, deadline, &status);

	if (ev == want)
		return 0;
	if (ev >= 0)
		snprintf(r->text, sizeof(r->text), "%s (status %d), expected %s",
			 rdma_event_str((enum rdma_cm_event_type)ev), status,
			 rdma_event_str((enum rdma_cm_event_type)want));
	return -1;
}

static int cm_fail(struct raw_peer *r, const char *what)
{
	if (!r->text[0])
		snprintf(r->text, sizeof(r->text), "%s: %s", what, strerror(errno));
	return -1;
}

/* Channel, id, route, and an RC QP with our memory registered on the
 * device the route found: rdma_connect needs the QP to fill the REQ. */
static int cm_prepare(struct raw_peer *r, const char *host, const char *port, raw_pump_fn pump,
		      void *arg, int64_t deadline)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	struct ibv_qp_init_attr qa = {0};
	const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

	r->ch = rdma_create_event_channel();
	if (!r->ch || fcntl(r->ch->fd, F_SETFL, fcntl(r->ch->fd, F_GETFL) | O_NONBLOCK) ||
	    rdma_create_id(r->ch, &r->id, NULL, RDMA_PS_TCP))
		return cm_fail(r, "rdma_cm set-up");
	int rc = host ? getaddrinfo(host, port, &hints, &ai) : EAI_NONAME;
	if (rc) {
		snprintf(r->text, sizeof(r->text), "getaddrinfo: %s", gai_strerror(rc));
		return -1;
	}
	rc = rdma_resolve_addr(r->id, NULL, ai->ai_addr, 2000);
	freeaddrinfo(ai);
	if (rc)
		return cm_fail(r, "rdma_resolve_addr");
	if (cm_expect(r, RDMA_CM_EVENT_ADDR_RESOLVED, pump, arg, deadline))
		return -1;
	if (rdma_resolve_route(r->id, 2000))
		return cm_fail(r, "rdma_resolve_route");
	if (cm_expect(r, RDMA_CM_EVENT_ROUTE_RESOLVED, pump, arg, deadline))
		return -1;
	r->pd = ibv_alloc_pd(r->id->verbs);
	r->vcq = r->pd ? ibv_create_cq(r->id->verbs, 1024, NULL, NULL, 0) : NULL;
	r->ctl_vmr = r->pd ? ibv_reg_mr(r->pd, r->ctl, sizeof(r->ctl), rw) : NULL;
	r->src_vmr = r->pd ? ibv_reg_mr(r->pd, r->src, r->src_len, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (r->pd && r->win)
		r->win_vmr = ibv_reg_mr(r->pd, r->win, r->win_len, rw);
	qa.send_cq = qa.recv_cq = r->vcq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 512;
	qa.cap.max_recv_wr = 1;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (!r->vcq || !r->ctl_vmr || !r->src_vmr || (r->win && !r->win_vmr) ||
	    rdma_create_qp(r->id, r->pd, &qa))
		return cm_fail(r, "QP set-up");
	return 0;
}

static enum raw_outcome cm_connect_bytes(struct raw_peer *r, const uint8_t *b, size_t n,
					 raw_pump_fn pump, void *arg, int64_t deadline)
{
	struct rdma_conn_param cp = {0};
	int status = 0, ev;

	cp.private_data = n ? b : NULL;
	cp.private_data_len = (uint8_t)n;
	cp.responder_resources = cp.initiator_depth = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 3; /* give up soon when the server has no receive */
	if (n > 255 || rdma_connect(r->id, &cp)) {
		snprintf(r->text, sizeof(r->text), "rdma_connect(%zu bytes): %s", n,
			 strerror(errno));
		return RAW_ERROR;
	}
	ev = cm_event(r, pump, arg, deadline, &status);
	if (ev < 0)
		return ev == -2 ? RAW_TIMEOUT : RAW_ERROR;
	snprintf(r->text, sizeof(r->text), "%s (status %d)",
		 rdma_event_str((enum rdma_cm_event_type)ev), status);
	if (ev == RDMA_CM_EVENT_REJECTED)
		return RAW_REFUSED;
	return ev == RDMA_CM_EVENT_ESTABLISHED ? RAW_CONNECTED : RAW_ERROR;
}

static void cm_progress(struct raw_peer *r)
{
	struct ibv_wc wc[16];
	int k = r->vcq ? ibv_poll_cq(r->vcq, 16, wc) : 0;

	for (int i = 0; i < k; i++) {
		if (wc[i].status == IBV_WC_SUCCESS)
			r->done++;
		else
			r->failed++;
	}
}

static int cm_write(struct raw_peer *r, uint64_t addr, uint64_t key, size_t len, int doorbell,
		    uint32_t imm)
{
	struct ibv_sge sge = {
	    .addr = (uintptr_t)r->src, .length = (uint32_t)len, .lkey = r->src_vmr->lkey};
	struct ibv_send_wr wr = {0}, *bad;

	wr.opcode = doorbell ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
	wr.imm_data = htonl(imm);
	wr.sg_list = len ? &sge : NULL;
	wr.num_sge = len ? 1 : 0;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = (uint32_t)key;
	for (int tries = 0; tries < 1000; tries++) {
		int rc = ibv_post_send(r->id->qp, &wr, &bad);
		if (rc == 0) {
			r->posted++;
			return 0;
		}
		if (rc != ENOMEM)
			return -rc;
		cm_progress(r);
		usleep(100);
	}
	return -ENOMEM;
}

static void cm_close(struct raw_peer *r)
{
	if (r->id && r->id->qp) {
		rdma_disconnect(r->id);
		rdma_destroy_qp(r->id);
	}
	struct ibv_mr *mr[] = {r->ctl_vmr, r->src_vmr, r->win_vmr};
	for (size_t i = 0; i < sizeof(mr) / sizeof(mr[0]); i++)
		if (mr[i])
			ibv_dereg_mr(mr[i]);
	if (r->vcq)
		ibv_destroy_cq(r->vcq);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	if (r->id)
		rdma_destroy_id(r->id);
	if (r->ch)
		rdma_destroy_event_channel(r->ch);
	r->ctl_vmr = r->src_vmr = r->win_vmr = NULL;
	r->vcq = NULL;
	r->pd = NULL;
	r->id = NULL;
	r->ch = NULL;
}
#endif /* RAW_PEER_HAVE_VERBS */

/* ------------------------------------------------------------ dispatching */

int raw_peer_open(struct raw_peer *r, const struct raw_peer_attr *a)
{
	memset(r, 0, sizeof(*r));
	r->kind = a->kind;
	r->src = a->src;
	r->src_len = a->src_len;
	r->win = a->win;
	r->win_len = a->win ? a->win_len : 0;
	r->rx_slots = a->rx_slots < RAW_RX_SLOTS ? a->rx_slots : RAW_RX_SLOTS;
#ifdef RAW_PEER_HAVE_OFI
	if (a->kind == RAW_PEER_OFI_MSG || a->kind == RAW_PEER_OFI_RDM)
		return ofi_open(r, a);
#endif
#ifdef RAW_PEER_HAVE_VERBS
	/* The device is the one the server's address resolves to. */
	if (a->kind == RAW_PEER_VERBS_CM)
		return 0;
#endif
	snprintf(r->text, sizeof(r->text), "no raw peer of kind %d in this build", a->kind);
	return -ENOSYS;
}

enum raw_outcome raw_peer_connect_bytes(struct raw_peer *r, const char *host, const char *port,
					const uint8_t *b, size_t n, raw_pump_fn pump, void *arg,
					int timeout_ms)
{
	int64_t deadline = now_ms() + timeout_ms;

	r->text[0] = '\0';
	r->reply_len = 0;
	if (n > RAW_CM_MAX) {
		snprintf(r->text, sizeof(r->text), "%zu bytes of CM data: more than kept", n);
		return RAW_ERROR;
	}
#ifdef RAW_PEER_HAVE_OFI
	if (r->kind == RAW_PEER_OFI_MSG)
		return ofi_connect_bytes(r, host, port, b, n, pump, arg, deadline);
#endif
#ifdef RAW_PEER_HAVE_VERBS
	if (r->kind == RAW_PEER_VERBS_CM)
		return cm_prepare(r, host, port, pump, arg, deadline)
			   ? RAW_ERROR
			   : cm_connect_bytes(r, b, n, pump, arg, deadline);
#endif
	(void)host;
	(void)port;
	(void)b;
	(void)pump;
	(void)arg;
	(void)deadline;
	snprintf(r->text, sizeof(r->text), "no connection manager for this raw peer");
	return RAW_ERROR;
}

int raw_peer_connect(struct raw_peer *r, const char *host, const char *port,
		     const struct wimm_handshake *hs, raw_pump_fn pump, void *arg, int timeout_ms)
{
	struct wimm_handshake h = *hs;
	uint8_t buf[WIMM_HS_MAX_LEN];

	h.version = WIMM_HS_VERSION;
	h.credit_addr = (uint64_t)(uintptr_t)r->ctl;
	if (r->win) {
		h.flags |= WIMM_HS_F_WINDOW_WRITE;
		h.window_addr = (uint64_t)(uintptr_t)r->win;
		h.window_len = r->win_len;
	}
	r->text[0] = '\0';
#ifdef RAW_PEER_HAVE_OFI
	if (r->kind == RAW_PEER_OFI_RDM || r->kind == RAW_PEER_OFI_MSG) {
		h.credit_key = fi_mr_key(r->ctl_mr);
		h.window_key = r->win_mr ? fi_mr_key(r->win_mr) : 0;
	}
	if (r->kind == RAW_PEER_OFI_RDM)
		return rdm_connect(r, host, port, &h, pump, arg, now_ms() + timeout_ms);
#endif
	enum raw_outcome got = RAW_ERROR;
	int n = -1;
#ifdef RAW_PEER_HAVE_VERBS
	/* The keys are the device's, known once the route is: the bytes are
	 * made between preparing and connecting. */
	if (r->kind == RAW_PEER_VERBS_CM) {
		int64_t deadline = now_ms() + timeout_ms;
		if (cm_prepare(r, host, port, pump, arg, deadline))
			return -ECONNREFUSED;
		h.credit_key = r->ctl_vmr->rkey;
		h.window_key = r->win_vmr ? r->win_vmr->rkey : 0;
		n = wimm_hs_encode(&h, buf, sizeof(buf));
		got = n < 0 ? RAW_ERROR : cm_connect_bytes(r, buf, (size_t)n, pump, arg, deadline);
	}
#endif
	if (r->kind == RAW_PEER_OFI_MSG) {
		n = wimm_hs_encode(&h, buf, sizeof(buf));
		got = n < 0 ? RAW_ERROR
			    : raw_peer_connect_bytes(r, host, port, buf, (size_t)n, pump, arg,
						     timeout_ms);
	}
	if (n < 0) {
		snprintf(r->text, sizeof(r->text), "our handshake does not encode");
		return -EINVAL;
	}
	if (got == RAW_TIMEOUT)
		return -ETIMEDOUT;
	if (got != RAW_CONNECTED)
		return -ECONNREFUSED;
	int rc = wimm_hs_decode(r->reply, wimm_hs_wire_len(r->reply, r->reply_len), &r->srv);
	if (rc) {
		snprintf(r->text, sizeof(r->text), "the server's reply does not decode: %s",
			 wimm_err_name(rc));
		return -EINVAL;
	}
	return 0;
}

size_t raw_peer_cm_max(struct raw_peer *r)
{
#ifdef RAW_PEER_HAVE_OFI
	size_t max = 0, len = sizeof(max);
	if (r->kind == RAW_PEER_OFI_MSG) {
		if (!r->ep ||
		    fi_getopt(&r->ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &max, &len))
			max = 256; /* the tcp provider's, older providers lack the option */
		return max < RAW_CM_MAX ? max : RAW_CM_MAX;
	}
#endif
	(void)r;
	/* rdma_connect's private data on IB/RoCE (RDMA_PS_TCP): the IB CM pads
	 * it with zeros to 56 bytes. */
	return 56;
}

int raw_peer_write(struct raw_peer *r, uint64_t addr, uint64_t key, size_t len, int doorbell,
		   uint32_t imm)
{
	if (len > r->src_len)
		return -EINVAL;
#ifdef RAW_PEER_HAVE_OFI
	if ((r->kind == RAW_PEER_OFI_MSG || r->kind == RAW_PEER_OFI_RDM) && r->ep)
		return ofi_write(r, addr, key, len, doorbell, imm);
#endif
#ifdef RAW_PEER_HAVE_VERBS
	if (r->kind == RAW_PEER_VERBS_CM && r->id && r->id->qp)
		return cm_write(r, addr, key, len, doorbell, imm);
#endif
	(void)addr;
	(void)key;
	(void)doorbell;
	(void)imm;
	return -ENOTCONN;
}

void raw_peer_progress(struct raw_peer *r)
{
#ifdef RAW_PEER_HAVE_OFI
	if (r->kind == RAW_PEER_OFI_MSG || r->kind == RAW_PEER_OFI_RDM)
		ofi_progress(r);
#endif
#ifdef RAW_PEER_HAVE_VERBS
	if (r->kind == RAW_PEER_VERBS_CM)
		cm_progress(r);
#endif
	(void)r;
}

void raw_peer_disconnect(struct raw_peer *r)
{
	if (r->sock > 0)
		close(r->sock); /* the server learns of it from this */
	r->sock = 0;
#ifdef RAW_PEER_HAVE_OFI
	if (r->kind == RAW_PEER_OFI_MSG)
		ofi_close_ep(r);
#endif
#ifdef RAW_PEER_HAVE_VERBS
	if (r->kind == RAW_PEER_VERBS_CM)
		cm_close(r);
#endif
}

void raw_peer_close(struct raw_peer *r)
{
	raw_peer_disconnect(r);
#ifdef RAW_PEER_HAVE_OFI
	if (r->kind == RAW_PEER_OFI_MSG || r->kind == RAW_PEER_OFI_RDM)
		ofi_close(r);
#endif
	memset(r, 0, sizeof(*r));
}

enum raw_peer_kind raw_peer_kind_of(const char *fabric, const char **why)
{
	*why = "";
	if (!strncmp(fabric, "verbs", 5)) {
#ifdef RAW_PEER_HAVE_VERBS
		return RAW_PEER_VERBS_CM;
#else
		*why = "built without rdma-core headers";
		return RAW_PEER_NONE;
#endif
	}
	if (!strncmp(fabric, "ofi:", 4)) {
#ifdef RAW_PEER_HAVE_OFI
		struct fi_info *info = NULL;
		for (int rdm = 0; rdm < 2; rdm++)
			if (ofi_info(fabric + 4, rdm, NULL, NULL, &info) == 0) {
				fi_freeinfo(info);
				return rdm ? RAW_PEER_OFI_RDM : RAW_PEER_OFI_MSG;
			}
		*why = "the provider offers wimm neither a MSG nor an RDM endpoint";
#else
		*why = "built without libfabric headers";
#endif
		return RAW_PEER_NONE;
	}
	*why = "not an ofi: or verbs: fabric";
	return RAW_PEER_NONE;
}
