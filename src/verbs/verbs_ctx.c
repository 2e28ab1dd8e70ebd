/* verbs backend: context (device, PD, the one CQ, completion channel, rdma_cm
 * event channel, async events), registration, the qp_num table, the control
 * path (cm and async events -> CONN_DOWN), fd/arm, and the ops table.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "verbs/verbs_internal.h"

/* Bumped by whichever context reads IBV_EVENT_PORT_ERR from the (process
 * wide, shared) async fd; every context then re-checks its ports. */
static atomic_uint verbs_port_err_gen;

int verbs_err(struct verbs_ctx *vc, int werr, int prov, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(vc->errbuf, sizeof(vc->errbuf), fmt, ap);
	va_end(ap);
	wimm_ctx_set_provider_error(vc->core, prov, vc->errbuf);
	return werr;
}

static int verbs_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	return 0;
}

/* ----------------------------------------------------------- qp_num table */

static uint32_t verbs_hash(uint32_t q, uint32_t size)
{
	return (q * 2654435761u) & (size - 1);
}

static int verbs_tab_grow(struct verbs_ctx *vc)
{
	uint32_t nsize = vc->tab_size ? vc->tab_size * 2 : 16;
	struct verbs_conn **nt = calloc(nsize, sizeof(*nt));
	uint32_t i, h;

	if (!nt)
		return WIMM_E_NOMEM;
	for (i = 0; i < vc->tab_size; i++) {
		if (!vc->tab[i])
			continue;
		h = verbs_hash(vc->tab[i]->qp_num, nsize);
		while (nt[h])
			h = (h + 1) & (nsize - 1);
		nt[h] = vc->tab[i];
	}
	free(vc->tab);
	vc->tab = nt;
	vc->tab_size = nsize;
	return 0;
}

int verbs_tab_add(struct verbs_ctx *vc, struct verbs_conn *c)
{
	uint32_t h;
	int rc;

	if ((vc->tab_used + 1) * 2 > vc->tab_size) {
		rc = verbs_tab_grow(vc);
		if (rc)
			return rc;
	}
	h = verbs_hash(c->qp_num, vc->tab_size);
	while (vc->tab[h])
		h = (h + 1) & (vc->tab_size - 1);
	vc->tab[h] = c;
	vc->tab_used++;
	c->in_tab = 1;
	return 0;
}

struct verbs_conn *verbs_tab_find(const struct verbs_ctx *vc, uint32_t qp_num)
{
	uint32_t h;

	if (!vc->tab_size)
		return NULL;
	h = verbs_hash(qp_num, vc->tab_size);
	while (vc->tab[h]) {
		if (vc->tab[h]->qp_num == qp_num)
			return vc->tab[h];
		h = (h + 1) & (vc->tab_size - 1);
	}
	return NULL;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
void verbs_tab_del(struct verbs_ctx *vc, struct verbs_conn *c)
{
	uint32_t mask = vc->tab_size - 1, i, j, home;

	if (!c->in_tab)
		return;
	i = verbs_hash(c->qp_num, vc->tab_size);
	while (vc->tab[i] != c)
		i = (i + 1) & mask;
	vc->tab[i] = NULL;
	j = i;
	for (;;) {
		j = (j + 1) & mask;
		if (!vc->tab[j])
			break;
		home = verbs_hash(vc->tab[j]->qp_num, vc->tab_size);
		/* move tab[j] into the hole if its home is not in (i, j] */
		if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
			vc->tab[i] = vc->tab[j];
			vc->tab[j] = NULL;
			i = j;
		}
	}
	vc->tab_used--;
	c->in_tab = 0;
}

/* ------------------------------------------------------------ control path */

void verbs_conn_mark_down(struct verbs_conn *c, int status, int prov)
{
	c->dead = 1;
	if (!c->established && !c->accepting)
		return;
	if (wimm_down_mark(&c->down, status, prov))
		c->vc->down_pending++;
}

/* The passive side's set-up is over: one CONN_UP to report from poll. */
void verbs_conn_mark_up(struct verbs_conn *c)
{
	c->accepting = 0;
	c->established = 1;
	c->up = 1;
	c->vc->up_pending++;
}

static void verbs_all_down(struct verbs_ctx *vc, int status, int prov, int port)
{
	uint32_t i;

	for (i = 0; i < vc->tab_size; i++) {
		struct verbs_conn *c = vc->tab[i];

		if (c && (!port || !c->id || c->id->port_num == port))
			verbs_conn_mark_down(c, status, prov);
	}
}

static void verbs_cm_event(struct rdma_cm_event *ev)
{
	struct verbs_conn *c = ev->id->context;
	size_t len;

	if (!c)
		return; /* a request not yet taken by conn_new */
	/* Data came first (verbs_decode_all) and made it up already. */
	if (ev->event == RDMA_CM_EVENT_ESTABLISHED && c->established)
		return;
	if (c->accepting) {
		/* The passive side's set-up ends here, reported from poll. */
		c->accepting = 0;
		if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
			verbs_conn_mark_up(c);
		} else {
			c->accepting = 1; /* so that mark_down reports it */
			verbs_conn_mark_down(c, WIMM_E_DISCONNECTED, ev->event);
			c->accepting = 0;
		}
		return;
	}
	switch (ev->event) {
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		if (c->established) {
			verbs_conn_mark_down(c, WIMM_E_DISCONNECTED, ev->event);
			return;
		}
		break;
	default:
		break;
	}
	c->cm_ev = ev->event;
	c->cm_status = ev->status;
	len = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
	if (len > sizeof(c->pdata))
		len = sizeof(c->pdata);
	if (len)
		memcpy(c->pdata, ev->param.conn.private_data, len);
	c->pdata_len = len;
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		c->resp_res = ev->param.conn.responder_resources;
		c->init_depth = ev->param.conn.initiator_depth;
	}
}

/* Dispatch every pending rdma_cm event of the context's channel (fd is
 * non-blocking). Events are acked at once: rdma_destroy_id waits for that. */
int verbs_cm_drain(struct verbs_ctx *vc)
{
	struct rdma_cm_event *ev;
	int n = 0;

	while (rdma_get_cm_event(vc->cm_ch, &ev) == 0) {
		verbs_cm_event(ev);
		rdma_ack_cm_event(ev);
		n++;
	}
	return n;
}

/* The async fd belongs to the ibv_context, which librdmacm shares between
 * all contexts of the process: an event may name another context's QP or
 * CQ. It cannot be freed under us (destroy waits for the ack), so flag it
 * with atomics and let the owner turn it into CONN_DOWN. */
static void verbs_async_drain(struct verbs_ctx *vc)
{
	struct ibv_async_event ae;
	struct verbs_conn *c;
	struct verbs_ctx *owner;

	while (ibv_get_async_event(vc->verbs, &ae) == 0) {
		switch (ae.event_type) {
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
			c = ae.element.qp->qp_context;
			if (c) {
				atomic_store(&c->async_ev, ae.event_type + 1);
				atomic_store(&c->vc->async_flag, 1);
			}
			break;
		case IBV_EVENT_COMM_EST:
			/* The peer's first message reached a QP whose RTU the CM
			 * has not seen: tell librdmacm, which then delivers
			 * ESTABLISHED (rdma_notify(3)); the owner calls it. */
			c = ae.element.qp->qp_context;
			if (c) {
				atomic_store(&c->comm_est, 1);
				atomic_store(&c->vc->async_flag, 1);
			}
			break;
		case IBV_EVENT_CQ_ERR:
			owner = ae.element.cq->cq_context;
			if (owner) {
				atomic_store(&owner->cq_err, 1);
				atomic_store(&owner->async_flag, 1);
			}
			break;
		case IBV_EVENT_PORT_ERR:
		case IBV_EVENT_DEVICE_FATAL:
			atomic_fetch_add(&verbs_port_err_gen, 1);
			break;
		default:
			break;
		}
		ibv_ack_async_event(&ae);
	}
}

static void verbs_check_ports(struct verbs_ctx *vc)
{
	struct ibv_port_attr pa;
	uint8_t p;

	for (p = 1; p <= vc->dattr.phys_port_cnt; p++) {
		if (ibv_query_port(vc->verbs, p, &pa) || pa.state != IBV_PORT_ACTIVE)
			verbs_all_down(vc, WIMM_E_PROVIDER, IBV_EVENT_PORT_ERR, p);
	}
}

/* Off the hot path: CQ events, cm events, async events. One epoll_wait
 * with a zero timeout tells which of the three fds has something, so a
 * quiet check costs one syscall, not three. */
void verbs_control(struct verbs_ctx *vc)
{
	struct epoll_event ready[3];
	struct ibv_cq *cq;
	void *cq_ctx;
	unsigned gen;
	uint32_t i;
	int k, j;

	k = epoll_wait(vc->epfd, ready, 3, 0);
	for (j = 0; j < k; j++) {
		if (ready[j].data.fd == vc->cch->fd) {
			while (ibv_get_cq_event(vc->cch, &cq, &cq_ctx) == 0) {
				if (++vc->cq_unacked >= VERBS_ACK_BATCH) {
					ibv_ack_cq_events(vc->cq, vc->cq_unacked);
					vc->cq_unacked = 0;
				}
			}
		} else if (ready[j].data.fd == vc->cm_ch->fd) {
			verbs_cm_drain(vc);
		} else {
			verbs_async_drain(vc);
		}
	}
	gen = atomic_load(&verbs_port_err_gen);
	if (gen != vc->port_gen_seen) {
		vc->port_gen_seen = gen;
		verbs_check_ports(vc);
	}
	if (atomic_exchange(&vc->async_flag, 0)) {
		if (atomic_exchange(&vc->cq_err, 0))
			verbs_all_down(vc, WIMM_E_PROVIDER, IBV_EVENT_CQ_ERR, 0);
		for (i = 0; i < vc->tab_size; i++) {
			struct verbs_conn *c = vc->tab[i];
			int ev = c ? atomic_exchange(&c->async_ev, 0) : 0;

			if (ev)
				verbs_conn_mark_down(c, WIMM_E_PROVIDER, ev - 1);
			/* EISCONN: the CM got there first, as it may. */
			if (c && atomic_exchange(&c->comm_est, 0) &&
			    rdma_notify(c->id, IBV_EVENT_COMM_EST) && errno != EISCONN)
				verbs_err(vc, 0, errno, "rdma_notify(COMM_EST): %s",
					  strerror(errno));
		}
	}
}

/* ---------------------------------------------------------------- context */

/* Largest max_inline_data the device grants an RC QP, asking from 256 down. */
uint32_t verbs_probe_inline(struct ibv_pd *pd, struct ibv_cq *cq)
{
	static const uint32_t want[] = {256, 128, 64, 32};
	struct ibv_qp_init_attr ia;
	struct ibv_qp *qp;
	size_t i;

	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		memset(&ia, 0, sizeof(ia));
		ia.send_cq = cq;
		ia.recv_cq = cq;
		ia.qp_type = IBV_QPT_RC;
		ia.cap.max_send_wr = 1;
		ia.cap.max_recv_wr = 1;
		ia.cap.max_send_sge = 1;
		ia.cap.max_recv_sge = 1;
		ia.cap.max_inline_data = want[i];
		qp = ibv_create_qp(pd, &ia);
		if (qp) {
			ibv_destroy_qp(qp);
			return ia.cap.max_inline_data;
		}
	}
	return 0;
}

/* The SRQ a new recv_size-0 connection of rx_depth slots should use, or
 * NULL for an RQ of its own. Sized once for the whole budget: the sum of
 * the windows it serves cannot exceed cq_budget. */
struct ibv_srq *verbs_srq_for(struct verbs_ctx *vc, uint32_t rx_depth)
{
	struct ibv_srq_init_attr sa = {0};

	if (vc->srq_mode == 0 || (vc->srq_mode < 0 && vc->tab_used < VERBS_SRQ_AUTO_CONNS))
		return NULL;
	if (!vc->srq) {
		/* The CQ grows with the connections; the SRQ is sized once, as
		 * large as the device allows up to VERBS_SRQ_MAX. */
		vc->srq_max = (uint32_t)vc->dattr.max_srq_wr < VERBS_SRQ_MAX
				  ? (uint32_t)vc->dattr.max_srq_wr
				  : VERBS_SRQ_MAX;
		if (vc->srq_max < vc->cq_budget && vc->cq_budget < (uint32_t)vc->dattr.max_srq_wr)
			vc->srq_max = vc->cq_budget;
		sa.attr.max_wr = vc->srq_max;
		sa.attr.max_sge = 1;
		vc->srq = ibv_create_srq(vc->pd, &sa);
		if (!vc->srq) {
			verbs_err(vc, WIMM_E_PROVIDER, errno, "ibv_create_srq(%u): %s", vc->srq_max,
				  strerror(errno));
			return NULL;
		}
	}
	return vc->srq_used + rx_depth <= vc->srq_max ? vc->srq : NULL;
}

static struct ibv_context *verbs_pick_device(struct ibv_context **devs, int n, const char *spec)
{
	int i;

	for (i = 0; i < n; i++) {
		if (!spec[0] || strcmp(ibv_get_device_name(devs[i]->device), spec) == 0)
			return devs[i];
	}
	return NULL;
}

static int verbs_epoll_add(int epfd, int fd)
{
	struct epoll_event ee = {.events = EPOLLIN, .data.fd = fd};

	if (verbs_set_nonblock(fd) || epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ee))
		return -1;
	return 0;
}

static int verbs_ctx_open(struct wimm_ctx *ctx, const char *spec, uint32_t cq_budget,
			  unsigned flags, void **bctx)
{
	struct verbs_ctx *vc;
	struct ibv_port_attr pa;
	const char *srq_env = getenv("WIMM_VERBS_SRQ");
	int ndev = 0, rc;

	(void)flags; /* a CQ costs nothing until armed: WIMM_CTX_POLLING changes nothing */

	vc = calloc(1, sizeof(*vc));
	if (!vc)
		return WIMM_E_NOMEM;
	vc->core = ctx;
	vc->epfd = -1;
	vc->gen_next = 1;
	vc->port_gen_seen = atomic_load(&verbs_port_err_gen);

	vc->devs = rdma_get_devices(&ndev);
	if (!vc->devs || ndev == 0) {
		rc =
		    verbs_err(vc, WIMM_E_NODEV, errno, "no RDMA device usable through rdma_cm (%s)",
			      strerror(errno ? errno : ENODEV));
		goto err_free_devs;
	}
	vc->verbs = verbs_pick_device(vc->devs, ndev, spec);
	if (!vc->verbs) {
		rc = verbs_err(vc, WIMM_E_NODEV, ENODEV, "no RDMA device named '%s'", spec);
		goto err_free_devs;
	}
	if (ibv_query_device(vc->verbs, &vc->dattr) || ibv_query_port(vc->verbs, 1, &pa)) {
		rc = verbs_err(vc, WIMM_E_PROVIDER, errno, "ibv_query_device/port: %s",
			       strerror(errno));
		goto err_free_devs;
	}
	vc->max_msg = pa.max_msg_sz;
	snprintf(vc->fabric, sizeof(vc->fabric), "verbs:%s",
		 ibv_get_device_name(vc->verbs->device));

	vc->pd = ibv_alloc_pd(vc->verbs);
	if (!vc->pd) {
		rc = verbs_err(vc, WIMM_E_PROVIDER, errno, "ibv_alloc_pd: %s", strerror(errno));
		goto err_free_devs;
	}
	/* CQ depth: every completion that can be outstanding is one per
	 * posted WR, so cqe >= sum over conns (rx_depth + sq_depth +
	 * sq_reserve), which the core keeps <= cq_budget. We add cq_budget
	 * again as slack for flush completions a just-deleted connection may
	 * still leave in the CQ (dropped when polled), capped by max_cqe; a
	 * device whose max_cqe is below cq_budget itself cannot keep the
	 * promise and is refused. */
	if (cq_budget == 0 || (int)cq_budget > vc->dattr.max_cqe) {
		rc = verbs_err(vc, WIMM_E_NOTSUP, EINVAL, "cq_budget %u exceeds max_cqe %d of %s",
			       cq_budget, vc->dattr.max_cqe, vc->fabric);
		goto err_dealloc_pd;
	}
	vc->cqe = (int)cq_budget * 2 < vc->dattr.max_cqe ? (int)cq_budget * 2 : vc->dattr.max_cqe;
	vc->cch = ibv_create_comp_channel(vc->verbs);
	if (!vc->cch) {
		rc = verbs_err(vc, WIMM_E_PROVIDER, errno, "ibv_create_comp_channel: %s",
			       strerror(errno));
		goto err_dealloc_pd;
	}
	vc->cq = ibv_create_cq(vc->verbs, vc->cqe, vc, vc->cch, 0);
	if (!vc->cq) {
		rc = verbs_err(vc, WIMM_E_PROVIDER, errno, "ibv_create_cq(%d): %s", vc->cqe,
			       strerror(errno));
		goto err_destroy_cch;
	}
	vc->cm_ch = rdma_create_event_channel();
	if (!vc->cm_ch) {
		rc = verbs_err(vc, WIMM_E_PROVIDER, errno, "rdma_create_event_channel: %s",
			       strerror(errno));
		goto err_destroy_cq;
	}
	vc->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (vc->epfd < 0 || verbs_epoll_add(vc->epfd, vc->cch->fd) ||
	    verbs_epoll_add(vc->epfd, vc->cm_ch->fd) ||
	    verbs_epoll_add(vc->epfd, vc->verbs->async_fd)) {
		rc = verbs_err(vc, WIMM_E_PROVIDER, errno, "epoll set-up: %s", strerror(errno));
		goto err_close_epoll;
	}
	vc->max_inline = verbs_probe_inline(vc->pd, vc->cq);

	vc->cq_budget = cq_budget;
	vc->srq_mode = !srq_env || !srq_env[0] ? -1 : strcmp(srq_env, "0") != 0;
	if (vc->srq_mode == 1 && !verbs_srq_for(vc, 0)) {
		rc = WIMM_E_PROVIDER;
		goto err_close_epoll;
	}
	*bctx = vc;
	return 0;

err_close_epoll:
	if (vc->epfd >= 0)
		close(vc->epfd);
	rdma_destroy_event_channel(vc->cm_ch);
err_destroy_cq:
	ibv_destroy_cq(vc->cq);
err_destroy_cch:
	ibv_destroy_comp_channel(vc->cch);
err_dealloc_pd:
	ibv_dealloc_pd(vc->pd);
err_free_devs:
	if (vc->devs)
		rdma_free_devices(vc->devs);
	free(vc);
	return rc;
}

static void verbs_ctx_close(void *bctx)
{
	struct verbs_ctx *vc = bctx;
	struct ibv_cq *cq;
	void *cq_ctx;

	if (!vc)
		return;
	if (vc->srq)
		ibv_destroy_srq(vc->srq);
	close(vc->epfd);
	rdma_destroy_event_channel(vc->cm_ch);
	/* every CQ event must be acked before ibv_destroy_cq, or it blocks */
	while (ibv_get_cq_event(vc->cch, &cq, &cq_ctx) == 0)
		vc->cq_unacked++;
	if (vc->cq_unacked)
		ibv_ack_cq_events(vc->cq, vc->cq_unacked);
	ibv_destroy_cq(vc->cq);
	ibv_destroy_comp_channel(vc->cch);
	ibv_dealloc_pd(vc->pd);
	rdma_free_devices(vc->devs);
	free(vc->tab);
	free(vc);
}

/* ERRATA E5's cure as connections come: the CQ holds every completion that
 * can be outstanding (plus as much again for flushes of deleted
 * connections, as at open), up to what the device allows. */
static int verbs_cq_resize(void *bctx, uint32_t total)
{
	struct verbs_ctx *vc = bctx;
	int want;

	if ((int64_t)total > vc->dattr.max_cqe)
		return verbs_err(vc, WIMM_E_AGAIN, ENOSPC,
				 "%u completions outstanding exceed max_cqe %d of %s", total,
				 vc->dattr.max_cqe, vc->fabric);
	want = (int64_t)total * 2 < vc->dattr.max_cqe ? (int)total * 2 : vc->dattr.max_cqe;
	if (want <= vc->cqe)
		return 0;
	int rc = ibv_resize_cq(vc->cq, want);
	if (rc)
		return verbs_err(vc, WIMM_E_AGAIN, rc, "ibv_resize_cq(%d): %s", want, strerror(rc));
	vc->cqe = vc->cq->cqe > want ? vc->cq->cqe : want;
	return 0;
}

static const char *verbs_ctx_fabric(void *bctx)
{
	return ((struct verbs_ctx *)bctx)->fabric;
}

static int verbs_ctx_limits(void *bctx, struct wimm_fabric_limits *out)
{
	struct verbs_ctx *vc = bctx;
	int depth =
	    vc->dattr.max_qp_wr < vc->dattr.max_cqe ? vc->dattr.max_qp_wr : vc->dattr.max_cqe;

	out->max_msg = vc->max_msg;
	out->inject_size = vc->max_inline;
	out->imm_bytes = 4;
	out->max_depth = depth > 0 ? (uint32_t)depth : 0;
	out->private_max = 56; /* rdma_cm REQ private data on IB/RoCE */
	out->atomic_bytes = vc->dattr.atomic_cap == IBV_ATOMIC_NONE ? 0 : 8;
	return 0;
}

/* --------------------------------------------------------------- regions */

static int verbs_mr_reg(void *bctx, void *addr, size_t len, unsigned access, struct wimm_bmr *out)
{
	struct verbs_ctx *vc = bctx;
	int fl = IBV_ACCESS_LOCAL_WRITE; /* read targets and receive slots */
	struct ibv_mr *mr;

	if (access & WIMM_REMOTE_WRITE)
		fl |= IBV_ACCESS_REMOTE_WRITE;
	if (access & WIMM_REMOTE_READ)
		fl |= IBV_ACCESS_REMOTE_READ;
	/* A device without atomics may refuse the bit: leave it off there,
	 * its atomics fail as NOTSUP at the sender anyway. */
	if ((access & WIMM_REMOTE_ATOMIC) && vc->dattr.atomic_cap != IBV_ATOMIC_NONE)
		fl |= IBV_ACCESS_REMOTE_ATOMIC;
	mr = ibv_reg_mr(vc->pd, addr, len, fl);
	if (!mr) {
		int e = errno;

		return verbs_err(vc, WIMM_E_PROVIDER, e, "ibv_reg_mr(%zu bytes): %s%s", len,
				 strerror(e), e == ENOMEM ? " (RLIMIT_MEMLOCK too low?)" : "");
	}
	out->addr = addr;
	out->len = len;
	out->access = access;
	out->key = mr->rkey;
	out->desc = mr;
	out->priv = mr;
	return 0;
}

static void verbs_mr_dereg(void *bctx, struct wimm_bmr *mr)
{
	(void)bctx;
	if (mr && mr->priv)
		ibv_dereg_mr(mr->priv);
	if (mr)
		mr->priv = mr->desc = NULL;
}

/* ------------------------------------------------------------ fd and arm */

static int verbs_fd(void *bctx)
{
	return ((struct verbs_ctx *)bctx)->epfd;
}

/* docs/errata.md E6: a CQE that arrived before ibv_req_notify_cq raises no event,
 * so poll once more after arming; what is found waits in the stash. */
static int verbs_arm(void *bctx)
{
	struct verbs_ctx *vc = bctx;
	int k;

	wimm_ctl_soon(&vc->ctl); /* the blocking path: control channels first */
	if (vc->stash_pos < vc->stash_n || vc->down_pending || vc->up_pending)
		return WIMM_E_AGAIN;
	if (ibv_req_notify_cq(vc->cq, 0))
		return verbs_err(vc, WIMM_E_PROVIDER, errno, "ibv_req_notify_cq: %s",
				 strerror(errno));
	k = ibv_poll_cq(vc->cq, VERBS_STASH, vc->stash);
	if (k < 0)
		return verbs_err(vc, WIMM_E_PROVIDER, k, "ibv_poll_cq failed");
	vc->stash_n = k;
	vc->stash_pos = 0;
	return k > 0 ? WIMM_E_AGAIN : 0;
}

const struct wimm_backend_ops wimm_verbs_ops = {
    .scheme = "verbs",
    .ctx_open = verbs_ctx_open,
    .ctx_close = verbs_ctx_close,
    .ctx_fabric = verbs_ctx_fabric,
    .ctx_limits = verbs_ctx_limits,
    .cq_resize = verbs_cq_resize,
    .describe = verbs_describe,
    .auto_probe = verbs_auto_probe,
    .mr_reg = verbs_mr_reg,
    .mr_dereg = verbs_mr_dereg,
    .listen = verbs_listen,
    .listener_close = verbs_listener_close,
    .listener_fd = verbs_listener_fd,
    .get_request = verbs_get_request,
    .request_peer = verbs_request_peer,
    .reject = verbs_reject,
    .conn_new = verbs_conn_new,
    .conn_addr = verbs_conn_addr,
    .connect = verbs_connect,
    .accept = verbs_accept,
    .conn_ready = verbs_conn_ready,
    .conn_shutdown = verbs_conn_shutdown,
    .conn_delete = verbs_conn_delete,
    .post = verbs_post,
    .prep_new = verbs_prep_new,
    .prep_post = verbs_prep_post,
    .prep_delete = verbs_prep_delete,
    .post_atomic = verbs_post_atomic,
    .rx_release = verbs_rx_release,
    .poll = verbs_poll,
    .fd = verbs_fd,
    .arm = verbs_arm,
};
