/* verbs backend: connections with librdmacm (RC QPs, RDMA_PS_TCP). The
 * handshake rides in the cm private data: the active side's 56 bytes in the
 * REQ (the IB/RoCE limit for rdma_connect), the passive side's reply in the
 * REP (up to 196 bytes). A listener has its own event channel, so its fd is
 * readable only for requests; a taken request moves to the context's
 * channel, where all connection events are dispatched by cm_id->context.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/handshake.h"
#include "verbs/verbs_internal.h"

#define VERBS_DEFAULT_TIMEOUT_MS 10000
#define VERBS_MAX_RD_ATOM 16
/* The most a connect REQ carries on IB/RoCE (rdma_cm takes the rest). */
#define VERBS_REQ_PDATA 56
/* RNR NAKs a requester retries before failing with RNR_RETRY_EXC_ERR: finite,
 * so a peer that stops reposting receives is an error, never a silent
 * hang (7 would mean for ever). wimm's credits keep honest peers from RNR. */
#define VERBS_RNR_RETRY 6

struct verbs_listener {
	struct verbs_ctx *vc;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
};

struct verbs_req {
	struct verbs_ctx *vc;
	struct rdma_cm_id *id;
	uint8_t resp_res, init_depth;
};

/* The cm pads private data to its own size with zeros, but the handshake
 * decoder wants the exact length the handshake says it has. */
static size_t verbs_hs_trim(const uint8_t *p, size_t len)
{
	return wimm_hs_wire_len(p, len);
}

static int verbs_resolve(struct verbs_ctx *vc, const char *host, const char *port, int passive,
			 struct addrinfo **res)
{
	struct addrinfo hints = {0};
	int rc;

	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
	if (passive && (!host || !host[0]))
		hints.ai_family = AF_INET;
	rc = getaddrinfo(host && host[0] ? host : NULL, port, &hints, res);
	if (rc)
		return verbs_err(vc, WIMM_E_ADDR, rc, "getaddrinfo(%s:%s): %s", host ? host : "",
				 port, gai_strerror(rc));
	return 0;
}

/* Wait for the next cm event of c (dispatching the others) until deadline. */
static int verbs_cm_wait(struct verbs_conn *c, int64_t deadline)
{
	struct verbs_ctx *vc = c->vc;
	struct pollfd pfd = {.fd = vc->cm_ch->fd, .events = POLLIN};
	int64_t left;

	for (;;) {
		verbs_cm_drain(vc);
		if (c->cm_ev >= 0)
			return 0;
		left = deadline - wimm_now_ms();
		if (left <= 0)
			return verbs_err(vc, WIMM_E_TIMEDOUT, ETIMEDOUT, "rdma_cm: timed out");
		/* The other connections' heartbeats go on while we wait. */
		wimm_ctx_keepalive(vc->core);
		if (poll(&pfd, 1, left > 100 ? 100 : (int)left) < 0 && errno != EINTR)
			return verbs_err(vc, WIMM_E_PROVIDER, errno, "poll: %s", strerror(errno));
	}
}

/* Turn an unexpected cm event into WIMM_E_*, keeping the event and status.
 * A reject that carries a message is REFUSED: the core reads the reason. */
static int verbs_cm_fail(struct verbs_conn *c, const char *what)
{
	struct verbs_ctx *vc = c->vc;
	int werr = WIMM_E_UNREACHABLE;

	int why;
	/* Only a wimm listener's message: rdma_cm pads the REJ of a port
	 * nothing listens on with zeros. */
	if (c->cm_ev == RDMA_CM_EVENT_REJECTED &&
	    wimm_hs_decode_reject(c->pdata, c->pdata_len, &why))
		werr = WIMM_E_REFUSED;
	if (c->cm_ev == RDMA_CM_EVENT_DISCONNECTED || c->cm_ev == RDMA_CM_EVENT_DEVICE_REMOVAL)
		werr = WIMM_E_DISCONNECTED;
	return verbs_err(vc, werr, c->cm_status, "%s: %s (status %d)", what,
			 rdma_event_str((enum rdma_cm_event_type)c->cm_ev), c->cm_status);
}

static int verbs_expect(struct verbs_conn *c, enum rdma_cm_event_type want, int64_t deadline,
			const char *what)
{
	int rc;

	c->cm_ev = -1;
	rc = verbs_cm_wait(c, deadline);
	if (rc)
		return rc;
	return c->cm_ev == (int)want ? 0 : verbs_cm_fail(c, what);
}

/* ----------------------------------------------------------------- listen */

int verbs_listen(void *bctx, const char *host, const char *port, void **blis, int *port_out)
{
	struct verbs_ctx *vc = bctx;
	struct verbs_listener *l;
	struct addrinfo *ai;
	int rc;

	rc = verbs_resolve(vc, host, port, 1, &ai);
	if (rc)
		return rc;
	l = calloc(1, sizeof(*l));
	if (!l) {
		rc = WIMM_E_NOMEM;
		goto err_free_ai;
	}
	l->vc = vc;
	l->ch = rdma_create_event_channel();
	if (!l->ch) {
		rc = verbs_err(vc, WIMM_E_PROVIDER, errno, "rdma_create_event_channel: %s",
			       strerror(errno));
		goto err_free_l;
	}
	if (fcntl(l->ch->fd, F_SETFL, fcntl(l->ch->fd, F_GETFL) | O_NONBLOCK) < 0 ||
	    rdma_create_id(l->ch, &l->id, NULL, RDMA_PS_TCP)) {
		rc = verbs_err(vc, WIMM_E_PROVIDER, errno, "rdma_create_id: %s", strerror(errno));
		goto err_destroy_ch;
	}
	if (rdma_bind_addr(l->id, ai->ai_addr)) {
		rc = verbs_err(vc, WIMM_E_PROVIDER, errno, "rdma_bind_addr(%s:%s): %s", host, port,
			       strerror(errno));
		goto err_destroy_id;
	}
	/* bound to one address: it must be on our device */
	if (l->id->verbs && l->id->verbs != vc->verbs) {
		rc = verbs_err(vc, WIMM_E_NODEV, ENODEV, "%s belongs to device %s, not %s", host,
			       ibv_get_device_name(l->id->verbs->device), vc->fabric);
		goto err_destroy_id;
	}
	if (rdma_listen(l->id, 128)) {
		rc = verbs_err(vc, WIMM_E_PROVIDER, errno, "rdma_listen: %s", strerror(errno));
		goto err_destroy_id;
	}
	*port_out = ntohs(rdma_get_src_port(l->id));
	*blis = l;
	freeaddrinfo(ai);
	return 0;

err_destroy_id:
	rdma_destroy_id(l->id);
err_destroy_ch:
	rdma_destroy_event_channel(l->ch);
err_free_l:
	free(l);
err_free_ai:
	freeaddrinfo(ai);
	return rc;
}

void verbs_listener_close(void *blis)
{
	struct verbs_listener *l = blis;

	if (!l)
		return;
	rdma_destroy_id(l->id);
	rdma_destroy_event_channel(l->ch);
	free(l);
}

int verbs_listener_fd(void *blis)
{
	return ((struct verbs_listener *)blis)->ch->fd;
}

int verbs_get_request(void *blis, int timeout_ms, void **breq, uint8_t *hs, size_t *hs_len)
{
	struct verbs_listener *l = blis;
	struct verbs_ctx *vc = l->vc;
	struct pollfd pfd = {.fd = l->ch->fd, .events = POLLIN};
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : wimm_now_ms() + timeout_ms;
	struct rdma_cm_event *ev;
	struct verbs_req *r;
	struct rdma_cm_id *id;
	size_t len;
	int64_t left;

	for (;;) {
		if (rdma_get_cm_event(l->ch, &ev) == 0) {
			if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
				break;
			rdma_ack_cm_event(ev);
			continue;
		}
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return verbs_err(vc, WIMM_E_PROVIDER, errno, "rdma_get_cm_event: %s",
					 strerror(errno));
		left = deadline - wimm_now_ms();
		if (timeout_ms == 0)
			return WIMM_E_AGAIN;
		if (left <= 0)
			return WIMM_E_TIMEDOUT;
		if (poll(&pfd, 1, left > 1000 ? 1000 : (int)left) < 0 && errno != EINTR)
			return verbs_err(vc, WIMM_E_PROVIDER, errno, "poll: %s", strerror(errno));
	}
	id = ev->id;
	len = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
	len = verbs_hs_trim(ev->param.conn.private_data, len);
	if (len > *hs_len)
		len = *hs_len; /* the core's buffer is longer than any valid handshake */
	memcpy(hs, ev->param.conn.private_data, len);
	*hs_len = len;
	r = calloc(1, sizeof(*r));
	if (r) {
		r->resp_res = ev->param.conn.responder_resources;
		r->init_depth = ev->param.conn.initiator_depth;
	}
	rdma_ack_cm_event(ev);
	/* Later events of this id go to the context's channel; none may be
	 * dispatched to a connection before conn_new claims it. */
	id->context = NULL;
	if (!r || rdma_migrate_id(id, vc->cm_ch)) {
		int e = r ? errno : ENOMEM;

		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		free(r);
		return verbs_err(vc, r ? WIMM_E_PROVIDER : WIMM_E_NOMEM, e, "rdma_migrate_id: %s",
				 strerror(e));
	}
	r->vc = vc;
	r->id = id;
	*breq = r;
	return 0;
}

void verbs_reject(void *breq, const uint8_t *msg, size_t len)
{
	struct verbs_req *r = breq;

	if (!r)
		return;
	rdma_reject(r->id, msg, (uint8_t)len);
	rdma_destroy_id(r->id);
	free(r);
}

int verbs_request_peer(void *breq, char *buf, size_t len)
{
	struct verbs_req *r = breq;

	return wimm_sockaddr_text(rdma_get_peer_addr(r->id), buf, len);
}

/* ------------------------------------------------------------ connections */

static int verbs_rx_alloc(struct verbs_conn *c)
{
	struct verbs_ctx *vc = c->vc;
	size_t bytes;

	c->rx_wr = calloc(c->rx_depth, sizeof(*c->rx_wr));
	c->rx_sge = calloc(c->rx_depth, sizeof(*c->rx_sge));
	if (!c->rx_wr || !c->rx_sge)
		return WIMM_E_NOMEM;
	if (!c->recv_size)
		return 0;
	/* one registered allocation for all slots, local write only */
	bytes = (size_t)c->rx_depth * c->recv_size;
	if (posix_memalign((void **)&c->rx_buf, 4096, bytes))
		return WIMM_E_NOMEM;
	c->rx_mr = ibv_reg_mr(vc->pd, c->rx_buf, bytes, IBV_ACCESS_LOCAL_WRITE);
	if (!c->rx_mr)
		return verbs_err(vc, WIMM_E_PROVIDER, errno, "ibv_reg_mr(receive slots, %zu): %s",
				 bytes, strerror(errno));
	return 0;
}

static void verbs_rx_free(struct verbs_conn *c)
{
	if (c->rx_mr)
		ibv_dereg_mr(c->rx_mr);
	free(c->rx_buf);
	free(c->rx_wr);
	free(c->rx_sge);
	wimm_send_ring_fini(&c->sq);
}

/* QP on c->id, then the receive window, before the peer can send. */
static int verbs_qp_create(struct verbs_conn *c)
{
	struct verbs_ctx *vc = c->vc;
	struct ibv_qp_init_attr ia = {0};
	struct ibv_qp_attr qa;
	uint32_t take;
	int rc;

	if (c->id->verbs != vc->verbs)
		return verbs_err(vc, WIMM_E_NODEV, ENODEV, "address on device %s, not %s",
				 c->id->verbs ? ibv_get_device_name(c->id->verbs->device) : "?",
				 vc->fabric);
	ia.qp_context = c;
	ia.send_cq = vc->cq;
	ia.recv_cq = vc->cq;
	ia.srq = c->use_srq ? vc->srq : NULL;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 0;
	ia.cap.max_send_wr = c->sq_size;
	ia.cap.max_recv_wr = c->use_srq ? 0 : c->rx_depth;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = vc->max_inline;
	if (rdma_create_qp(c->id, vc->pd, &ia))
		return verbs_err(vc, WIMM_E_PROVIDER, errno, "rdma_create_qp(sq %u, rq %u): %s",
				 c->sq_size, c->rx_depth, strerror(errno));
	c->qp = c->id->qp;
	c->qp_num = c->qp->qp_num;
	c->max_inline = vc->max_inline;
	if (ibv_query_qp(c->qp, &qa, IBV_QP_CAP, &ia) == 0)
		c->max_inline = ia.cap.max_inline_data;
	rc = verbs_tab_add(vc, c);
	if (rc)
		return rc;
	/* docs/errata.md E1: the source article says write-with-imm needs no receive
	 * WQE. Wrong: it consumes one at the responder, and with none posted
	 * an RC responder answers RNR NAK. Hence rx_depth receives posted
	 * up front (zero-length when recv_size is 0) and credits for them. */
	if (!c->use_srq)
		return verbs_rx_post(c, c->rx_depth);
	take = vc->srq_spare < c->rx_depth ? vc->srq_spare : c->rx_depth;
	rc = verbs_rx_post(c, c->rx_depth - take);
	if (rc)
		return rc;
	vc->srq_spare -= take;
	vc->srq_used += c->rx_depth;
	c->srq_counted = 1;
	return 0;
}

int verbs_conn_new(void *bctx, void *breq, const struct wimm_conn_cfg *cfg, void **bconn)
{
	struct verbs_ctx *vc = bctx;
	struct verbs_req *r = breq;
	struct verbs_conn *c;
	int rc;

	if (!cfg->rx_depth || !cfg->sq_depth)
		return WIMM_E_INVAL;
	if (cfg->sq_depth + cfg->sq_reserve > (uint32_t)vc->dattr.max_qp_wr ||
	    cfg->rx_depth > (uint32_t)vc->dattr.max_qp_wr)
		return verbs_err(vc, WIMM_E_INVAL, EINVAL, "depth above max_qp_wr %d",
				 vc->dattr.max_qp_wr);
	if (r && r->id->verbs != vc->verbs)
		return verbs_err(vc, WIMM_E_NODEV, ENODEV, "request arrived on device %s, not %s",
				 ibv_get_device_name(r->id->verbs->device), vc->fabric);
	c = calloc(1, sizeof(*c));
	if (!c)
		return WIMM_E_NOMEM;
	c->vc = vc;
	c->core = cfg->core;
	c->gen = vc->gen_next++ & 0x7fffffffu;
	c->cm_ev = -1;
	c->rx_depth = cfg->rx_depth;
	c->recv_size = cfg->recv_size;
	c->sq_size = cfg->sq_depth + cfg->sq_reserve;
	wimm_recv_slots_init(&c->rx, cfg->rx_depth);
	/* an SRQ holds zero-length receives only: slots with buffers stay in
	 * per-connection order on an RQ of their own */
	c->use_srq = !cfg->recv_size && verbs_srq_for(vc, cfg->rx_depth);
	rc = wimm_send_ring_init(&c->sq, cfg->sq_depth, cfg->sq_reserve, 0);
	if (!rc)
		rc = verbs_rx_alloc(c);
	if (rc)
		goto err_free_rx;
	if (r) {
		c->id = r->id;
		c->resp_res = r->resp_res;
		c->init_depth = r->init_depth;
		c->id->context = c;
		rc = verbs_qp_create(c);
		if (rc)
			goto err_destroy_qp;
		free(r);
	} else if (rdma_create_id(vc->cm_ch, &c->id, c, RDMA_PS_TCP)) {
		rc = verbs_err(vc, WIMM_E_PROVIDER, errno, "rdma_create_id: %s", strerror(errno));
		goto err_free_rx;
	}
	*bconn = c;
	return 0;

err_destroy_qp:
	/* the request stays the caller's, to reject */
	verbs_tab_del(vc, c);
	if (c->qp)
		rdma_destroy_qp(c->id);
	c->id->context = NULL;
err_free_rx:
	verbs_rx_free(c);
	free(c);
	return rc;
}

int verbs_conn_addr(void *bconn, uint8_t *buf, size_t *len)
{
	(void)bconn;
	(void)buf;
	*len = 0; /* rdma_cm addresses by host:port */
	return 0;
}

static void verbs_conn_param(struct verbs_conn *c, struct rdma_conn_param *p, const uint8_t *hs,
			     size_t hs_len, int passive)
{
	const struct ibv_device_attr *da = &c->vc->dattr;
	int resp = da->max_qp_rd_atom < VERBS_MAX_RD_ATOM ? da->max_qp_rd_atom : VERBS_MAX_RD_ATOM;
	int init = da->max_qp_init_rd_atom < VERBS_MAX_RD_ATOM ? da->max_qp_init_rd_atom
							       : VERBS_MAX_RD_ATOM;

	memset(p, 0, sizeof(*p));
	p->private_data = hs;
	p->private_data_len = (uint8_t)hs_len;
	if (passive) {
		/* no more than the requester asked for, for reads both ways */
		if (resp > c->init_depth)
			resp = c->init_depth;
		if (init > c->resp_res)
			init = c->resp_res;
	}
	p->responder_resources = (uint8_t)resp;
	p->initiator_depth = (uint8_t)init;
	p->retry_count = 7;
	p->rnr_retry_count = VERBS_RNR_RETRY;
}

int verbs_connect(void *bconn, const char *host, const char *port, const uint8_t *hs, size_t hs_len,
		  uint8_t *reply, size_t *reply_len, int timeout_ms)
{
	struct verbs_conn *c = bconn;
	struct verbs_ctx *vc = c->vc;
	int64_t deadline = wimm_deadline_ms(timeout_ms, VERBS_DEFAULT_TIMEOUT_MS);
	struct rdma_conn_param p;
	struct addrinfo *ai;
	size_t len;
	int rc;

	if (hs_len > VERBS_REQ_PDATA)
		return verbs_err(vc, WIMM_E_TOOBIG, EINVAL,
				 "handshake of %zu bytes exceeds the"
				 " %u-byte cm REQ private data",
				 hs_len, VERBS_REQ_PDATA);
	rc = verbs_resolve(vc, host, port, 0, &ai);
	if (rc)
		return rc;
	if (rdma_resolve_addr(c->id, NULL, ai->ai_addr, (int)(deadline - wimm_now_ms()))) {
		rc = verbs_err(vc, WIMM_E_ADDR, errno, "rdma_resolve_addr(%s): %s", host,
			       strerror(errno));
		freeaddrinfo(ai);
		return rc;
	}
	freeaddrinfo(ai);
	rc = verbs_expect(c, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, "address resolution");
	if (rc)
		return rc;
	if (rdma_resolve_route(c->id, (int)(deadline - wimm_now_ms())))
		return verbs_err(vc, WIMM_E_UNREACHABLE, errno, "rdma_resolve_route: %s",
				 strerror(errno));
	rc = verbs_expect(c, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, "route resolution");
	if (rc)
		return rc;
	rc = verbs_qp_create(c);
	if (rc)
		return rc;
	verbs_conn_param(c, &p, hs, hs_len, 0);
	if (rdma_connect(c->id, &p))
		return verbs_err(vc, WIMM_E_UNREACHABLE, errno, "rdma_connect: %s",
				 strerror(errno));
	rc = verbs_expect(c, RDMA_CM_EVENT_ESTABLISHED, deadline, "connect");
	if (rc == WIMM_E_REFUSED) {
		/* the listener's reject message, for the core to read */
		len = c->pdata_len < *reply_len ? c->pdata_len : *reply_len;
		memcpy(reply, c->pdata, len);
		*reply_len = len;
		return rc;
	}
	if (rc)
		return rc;
	c->established = 1;
	len = verbs_hs_trim(c->pdata, c->pdata_len);
	if (len > *reply_len)
		len = *reply_len;
	memcpy(reply, c->pdata, len);
	*reply_len = len;
	return 0;
}

int verbs_accept(void *bconn, const uint8_t *hs, size_t hs_len)
{
	struct verbs_conn *c = bconn;
	struct verbs_ctx *vc = c->vc;
	struct rdma_conn_param p;

	if (hs_len > 196)
		return verbs_err(vc, WIMM_E_INVAL, EINVAL,
				 "handshake of %zu bytes exceeds the"
				 " 196-byte cm REP private data",
				 hs_len);
	verbs_conn_param(c, &p, hs, hs_len, 1);
	c->cm_ev = -1;
	if (rdma_accept(c->id, &p))
		return verbs_err(vc, WIMM_E_PROVIDER, errno, "rdma_accept: %s", strerror(errno));
	/* ESTABLISHED (or a failure) arrives on the cm channel: verbs_cm_event
	 * turns it into CONN_UP (or CONN_DOWN) from poll. */
	c->accepting = 1;
	return 0;
}

void verbs_conn_shutdown(void *bconn)
{
	struct verbs_conn *c = bconn;

	/* DREQ to the peer, and the QP to error: nothing it sends lands. */
	c->dead = 1;
	rdma_disconnect(c->id);
}

int verbs_conn_ready(void *bconn, const struct wimm_handshake *peer)
{
	(void)bconn;
	(void)peer;
	return 0; /* the QP is connected by rdma_cm already */
}

void verbs_conn_delete(void *bconn)
{
	struct verbs_conn *c = bconn;
	struct verbs_ctx *vc;

	if (!c)
		return;
	vc = c->vc;
	/* out of the table first: completions still in the CQ are dropped */
	verbs_tab_del(vc, c);
	if (c->down.state == WIMM_DOWN_PENDING)
		vc->down_pending--;
	if (c->up == 1)
		vc->up_pending--;
	if (c->srq_counted) {
		/* its still-posted share of the SRQ serves the next connection */
		uint64_t held = wimm_recv_slots_held(&c->rx);

		vc->srq_used -= c->rx_depth;
		vc->srq_spare += held < c->rx_depth ? c->rx_depth - (uint32_t)held : 0;
	}
	if (c->established)
		rdma_disconnect(c->id);
	if (c->qp)
		rdma_destroy_qp(c->id);
	c->id->context = NULL;
	rdma_destroy_id(c->id);
	verbs_rx_free(c);
	free(c);
}
