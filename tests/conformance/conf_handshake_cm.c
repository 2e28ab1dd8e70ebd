/* Hostile handshakes through the provider's own connection manager: a raw
 * peer that is not wimm speaks the CM a wimm listener uses (libfabric MSG
 * fi_connect with CM data, or librdmacm rdma_connect with private data) and
 * sends bytes no wimm peer would. Each request must be refused by
 * wimm_accept with its documented error, the raw peer must see the refusal
 * in bounded time, and the listener must then still accept a real wimm
 * connection. RDM fabrics (ofi:shm) have no CM: bad_handshake covers them
 * with raw TCP frames. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef CONF_HAVE_OFI
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#endif
#ifdef CONF_HAVE_VERBS
#include <rdma/rdma_cma.h>
#endif

#include "conf.h"

#define HS_LEN 56	   /* the fixed part of a version-2 handshake */
#define HS_MAX_ADDR 192	   /* its largest transport address */
#define CM_BUF_MAX 1024	   /* largest CM data this test sends */
#define IB_CM_REQ_PDATA 56 /* rdma_connect's private data on IB/RoCE (RDMA_PS_TCP) */

enum kind {
	K_NONE,	   /* no CM: skip */
	K_OFI_MSG, /* libfabric MSG endpoint, handshake in fi_connect's CM data */
	K_RDMA_CM, /* librdmacm, handshake in the REQ private data */
};

/* Where a case can be expressed: the IB CM pads private data with zeros to
 * 56 bytes, so on rdma_cm a short message is indistinguishable from its
 * zero-padded form, and nothing longer than 56 bytes can be sent. */
#define ON_OFI 1u
#define ON_CM 2u
#define ON_ALL (ON_OFI | ON_CM)

struct cm_case {
	const char *what;
	int want; /* wimm_accept's result */
	unsigned on;
};

static const struct cm_case cases[] = {
    {"control: a valid handshake", 0, ON_ALL},
    {"empty", WIMM_E_PROTO, ON_ALL},
    {"1 byte", WIMM_E_PROTO, ON_ALL},
    {"2 bytes, the magic alone", WIMM_E_PROTO, ON_OFI},
    {"55 bytes of garbage", WIMM_E_PROTO, ON_ALL},
    {"valid header cut to 55 bytes", WIMM_E_PROTO, ON_OFI},
    {"56 bytes of garbage", WIMM_E_PROTO, ON_ALL},
    {"57 bytes of garbage", WIMM_E_PROTO, ON_OFI},
    {"valid header and a trailing byte", WIMM_E_PROTO, ON_OFI},
    {"bad magic", WIMM_E_PROTO, ON_ALL},
    {"version 3", WIMM_E_VERSION, ON_ALL},
    {"version 3, 100 bytes", WIMM_E_VERSION, ON_OFI},
    {"rx_depth 0", WIMM_E_PROTO, ON_ALL},
    {"rx_depth 2^20 + 1", WIMM_E_PROTO, ON_ALL},
    {"recv_size 2^30 + 1", WIMM_E_PROTO, ON_ALL},
    {"unknown flag bit", WIMM_E_PROTO, ON_ALL},
    {"window flag without a window", WIMM_E_PROTO, ON_ALL},
    {"window range wraps", WIMM_E_PROTO, ON_ALL},
    {"priv_len without its bytes", WIMM_E_PROTO, ON_ALL},
    {"addr_len 200 in 56 bytes", WIMM_E_PROTO, ON_ALL},
    {"addr_len 8 in 56 bytes", WIMM_E_PROTO, ON_ALL},
    {"oversized garbage (the CM's maximum)", WIMM_E_PROTO, ON_OFI},
    {"oversized: a full handshake with bytes after it", WIMM_E_PROTO, ON_OFI},
    {"version 3 at the CM's maximum", WIMM_E_VERSION, ON_OFI},
};

static void put_be(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * (n - 1 - i)));
}

/* A well-formed version-2 handshake, no window, no address. */
static size_t good_hs(uint8_t *b)
{
	memset(b, 0, HS_LEN);
	put_be(b, 0x5749, 2);
	b[2] = 2;
	put_be(b + 4, 16, 4);	    /* rx_depth */
	put_be(b + 36, 0x10000, 8); /* credit_addr */
	put_be(b + 44, 0x1234, 8);  /* credit_key */
	return HS_LEN;
}

static void garbage(uint8_t *b, size_t n)
{
	for (size_t k = 0; k < n; k++)
		b[k] = (uint8_t)(k * 37 + 11); /* never starts with the magic */
}

/* The bytes of case i into b; cm_max is the most the CM carries. Returns the
 * length, or 0 with *skip set when the CM cannot carry the case. */
static size_t make_case(size_t i, uint8_t *b, size_t cm_max, int *skip)
{
	size_t n = good_hs(b);

	*skip = 0;
	switch (i) {
	case 0:
		break;
	case 1:
		n = 0;
		break;
	case 2:
		n = 1;
		break;
	case 3:
		n = 2;
		break;
	case 4:
		garbage(b, 55);
		n = 55;
		break;
	case 5:
		n = 55;
		break;
	case 6:
		garbage(b, 56);
		break;
	case 7:
		garbage(b, 57);
		n = 57;
		break;
	case 8:
		b[56] = 0;
		n = 57;
		break;
	case 9:
		put_be(b, 0x5748, 2);
		break;
	case 10:
		b[2] = 3;
		break;
	case 11:
		/* a newer peer's longer message: version first, not length */
		b[2] = 3;
		garbage(b + HS_LEN, 100 - HS_LEN);
		n = 100;
		break;
	case 12:
		put_be(b + 4, 0, 4);
		break;
	case 13:
		put_be(b + 4, (1u << 20) + 1, 4);
		break;
	case 14:
		put_be(b + 8, (1u << 30) + 1, 4);
		break;
	case 15:
		/* a valid window, so the unknown bit is the only fault */
		b[3] = 0x1 | 0x8; /* bit 2 is WIMM_HS_F_WINDOW_ATOMIC */
		put_be(b + 12, 0x100000, 8);
		put_be(b + 20, 4096, 8);
		break;
	case 16:
		b[3] = 0x1;
		break;
	case 17:
		b[3] = 0x1;
		put_be(b + 12, UINT64_MAX - 100, 8);
		put_be(b + 20, 4096, 8);
		break;
	case 18:
		b[55] = 1;
		break;
	case 19:
		put_be(b + 52, 200, 2);
		break;
	case 20:
		put_be(b + 52, 8, 2);
		break;
	case 21:
		garbage(b, cm_max);
		n = cm_max;
		break;
	case 22:
		/* Decoded as a whole it is too long; cut to 248 bytes it is a
		 * valid handshake, so a listener that truncates accepts it. */
		if (cm_max <= HS_LEN + HS_MAX_ADDR) {
			*skip = 1;
			return 0;
		}
		put_be(b + 52, HS_MAX_ADDR, 2);
		garbage(b + HS_LEN, cm_max - HS_LEN);
		n = cm_max;
		break;
	case 23:
		b[2] = 3;
		garbage(b + HS_LEN, cm_max - HS_LEN);
		n = cm_max;
		break;
	}
	return n;
}

/* --------------------------------------------------------- the raw peers */

enum raw_outcome {
	RAW_REFUSED,   /* the CM's reject */
	RAW_CONNECTED, /* the request was accepted */
	RAW_TIMEOUT,   /* no answer in time */
	RAW_ERROR,     /* anything else: text says what */
};

struct raw {
	enum kind kind;
	char host[256];
	char port[16];
	size_t cm_max;
	char text[200]; /* what happened, for failure messages */
	uint8_t reply[CM_BUF_MAX];
	size_t reply_len;
#ifdef CONF_HAVE_OFI
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_eq *eq;
	struct fid_cq *cq;
	struct fid_ep *ep;
#endif
#ifdef CONF_HAVE_VERBS
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *vcq;
#endif
};

#ifdef CONF_HAVE_OFI
/* The MSG provider wimm itself would use for "ofi:<prov>": the same name
 * and the same needs (ofi_find in src/ofi/ofi_ctx.c), so the raw peer
 * talks to a CM listener exactly when wimm listens with one. */
static int ofi_msg_info(const char *prov, const char *node, const char *service,
			struct fi_info **out)
{
	struct fi_info *hints = fi_allocinfo(), *list = NULL;
	int ret = -FI_ENODATA;

	*out = NULL;
	if (!hints)
		return -FI_ENOMEM;
	hints->caps = FI_MSG | FI_RMA;
	hints->ep_attr->type = FI_EP_MSG;
	hints->fabric_attr->prov_name = strdup(prov);
	if (hints->fabric_attr->prov_name)
		ret = fi_getinfo(FI_VERSION(1, 9), node, service, 0, hints, &list);
	fi_freeinfo(hints);
	if (ret)
		return ret;
	for (struct fi_info *i = list; i; i = i->next) {
		if (strcmp(i->fabric_attr->prov_name, prov) || i->domain_attr->cq_data_size < 4)
			continue;
		*out = fi_dupinfo(i);
		break;
	}
	fi_freeinfo(list);
	return *out ? 0 : -FI_ENODATA;
}

static void raw_ofi_close_ep(struct raw *r)
{
	if (r->ep)
		fi_close(&r->ep->fid);
	if (r->cq)
		fi_close(&r->cq->fid);
	if (r->eq)
		fi_close(&r->eq->fid);
	r->ep = NULL;
	r->cq = NULL;
	r->eq = NULL;
}

static int raw_ofi_open_ep(struct raw *r)
{
	struct fi_eq_attr eqa = {.size = 16, .wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr cqa = {.size = 16, .format = FI_CQ_FORMAT_CONTEXT};
	int ret;

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
	if (ret) {
		snprintf(r->text, sizeof(r->text), "raw endpoint set-up: %s", fi_strerror(-ret));
		raw_ofi_close_ep(r);
	}
	return ret;
}

static int raw_ofi_open(struct raw *r, const char *prov)
{
	size_t len = sizeof(r->cm_max);
	int ret = ofi_msg_info(prov, r->host, r->port, &r->info);

	if (!ret)
		ret = fi_fabric(r->info->fabric_attr, &r->fabric, NULL);
	if (!ret)
		ret = fi_domain(r->fabric, r->info, &r->domain, NULL);
	if (ret) {
		snprintf(r->text, sizeof(r->text), "raw %s peer: %s", prov, fi_strerror(-ret));
		return ret;
	}
	/* The oversized cases send as much as the provider's CM carries. */
	ret = raw_ofi_open_ep(r);
	if (ret)
		return ret;
	if (fi_getopt(&r->ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &r->cm_max, &len))
		r->cm_max = 256; /* the tcp provider's, older providers lack the option */
	if (r->cm_max > CM_BUF_MAX)
		r->cm_max = CM_BUF_MAX;
	raw_ofi_close_ep(r);
	return 0;
}

static void raw_ofi_close(struct raw *r)
{
	raw_ofi_close_ep(r);
	if (r->domain)
		fi_close(&r->domain->fid);
	if (r->fabric)
		fi_close(&r->fabric->fid);
	fi_freeinfo(r->info);
	r->domain = NULL;
	r->fabric = NULL;
	r->info = NULL;
}

static enum raw_outcome raw_ofi_attempt(struct raw *r, const uint8_t *b, size_t n, int64_t deadline)
{
	union {
		struct fi_eq_cm_entry e;
		uint8_t b[sizeof(struct fi_eq_cm_entry) + CM_BUF_MAX];
	} u;
	uint32_t event;
	ssize_t rd;
	int ret;

	if (raw_ofi_open_ep(r))
		return RAW_ERROR;
	ret = fi_connect(r->ep, r->info->dest_addr, n ? b : NULL, n);
	if (ret) {
		snprintf(r->text, sizeof(r->text), "fi_connect(%zu bytes): %s", n,
			 fi_strerror(-ret));
		return RAW_ERROR;
	}
	for (;;) {
		int64_t left = deadline - conf_now_ms();

		if (left <= 0)
			return RAW_TIMEOUT;
		rd = fi_eq_sread(r->eq, &event, &u, sizeof(u), left > 200 ? 200 : (int)left, 0);
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
			snprintf(r->text, sizeof(r->text), "fi_eq_sread: %s",
				 fi_strerror((int)-rd));
			return RAW_ERROR;
		}
		if (event == FI_CONNECTED) {
			r->reply_len = (size_t)rd > sizeof(u.e) ? (size_t)rd - sizeof(u.e) : 0;
			memcpy(r->reply, u.e.data, r->reply_len);
			snprintf(r->text, sizeof(r->text), "FI_CONNECTED");
			return RAW_CONNECTED;
		}
		snprintf(r->text, sizeof(r->text), "unexpected EQ event %u", event);
		return RAW_ERROR;
	}
}
#endif /* CONF_HAVE_OFI */

#ifdef CONF_HAVE_VERBS
/* Every wait on the raw channel is a bounded poll, never a blocking read. */
static int fcntl_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void raw_cm_close(struct raw *r)
{
	if (r->id && r->id->qp)
		rdma_destroy_qp(r->id);
	if (r->vcq)
		ibv_destroy_cq(r->vcq);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	if (r->id)
		rdma_destroy_id(r->id);
	if (r->ch)
		rdma_destroy_event_channel(r->ch);
	r->id = NULL;
	r->vcq = NULL;
	r->pd = NULL;
	r->ch = NULL;
}

/* The next event of the raw id, or -1 on an error, -2 on timeout (text
 * says which). */
static int raw_cm_event(struct raw *r, int64_t deadline, int *status)
{
	struct pollfd pfd = {.fd = r->ch->fd, .events = POLLIN};
	struct rdma_cm_event *ev;

	for (;;) {
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
		int64_t left = deadline - conf_now_ms();

		if (left <= 0) {
			snprintf(r->text, sizeof(r->text), "no rdma_cm event in time");
			return -2;
		}
		poll(&pfd, 1, left > 200 ? 200 : (int)left);
	}
}

static int raw_cm_expect(struct raw *r, int want, int64_t deadline)
{
	int status = 0, ev = raw_cm_event(r, deadline, &status);

	if (ev == want)
		return 0;
	if (ev >= 0)
		snprintf(r->text, sizeof(r->text), "%s (status %d), expected %s",
			 rdma_event_str((enum rdma_cm_event_type)ev), status,
			 rdma_event_str((enum rdma_cm_event_type)want));
	return -1;
}

static enum raw_outcome raw_cm_attempt(struct raw *r, const uint8_t *b, size_t n, int64_t deadline)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	struct ibv_qp_init_attr qa = {0};
	struct rdma_conn_param cp = {0};
	int status = 0, ev, rc;

	r->ch = rdma_create_event_channel();
	if (!r->ch || fcntl_nonblock(r->ch->fd) ||
	    rdma_create_id(r->ch, &r->id, NULL, RDMA_PS_TCP)) {
		snprintf(r->text, sizeof(r->text), "rdma_cm set-up: %s", strerror(errno));
		return RAW_ERROR;
	}
	rc = getaddrinfo(r->host, r->port, &hints, &ai);
	if (rc) {
		snprintf(r->text, sizeof(r->text), "getaddrinfo: %s", gai_strerror(rc));
		return RAW_ERROR;
	}
	rc = rdma_resolve_addr(r->id, NULL, ai->ai_addr, 2000);
	freeaddrinfo(ai);
	if (rc || raw_cm_expect(r, RDMA_CM_EVENT_ADDR_RESOLVED, deadline)) {
		if (rc)
			snprintf(r->text, sizeof(r->text), "rdma_resolve_addr: %s",
				 strerror(errno));
		return RAW_ERROR;
	}
	if (rdma_resolve_route(r->id, 2000) ||
	    raw_cm_expect(r, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline)) {
		if (!r->text[0])
			snprintf(r->text, sizeof(r->text), "rdma_resolve_route: %s",
				 strerror(errno));
		return RAW_ERROR;
	}
	/* An RC QP: rdma_connect needs one to fill the REQ. */
	r->pd = ibv_alloc_pd(r->id->verbs);
	r->vcq = r->pd ? ibv_create_cq(r->id->verbs, 4, NULL, NULL, 0) : NULL;
	qa.send_cq = r->vcq;
	qa.recv_cq = r->vcq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 1;
	qa.cap.max_recv_wr = 1;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	if (!r->vcq || rdma_create_qp(r->id, r->pd, &qa)) {
		snprintf(r->text, sizeof(r->text), "QP set-up: %s", strerror(errno));
		return RAW_ERROR;
	}
	cp.private_data = n ? b : NULL;
	cp.private_data_len = (uint8_t)n;
	cp.responder_resources = 1;
	cp.initiator_depth = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(r->id, &cp)) {
		snprintf(r->text, sizeof(r->text), "rdma_connect(%zu bytes): %s", n,
			 strerror(errno));
		return RAW_ERROR;
	}
	ev = raw_cm_event(r, deadline, &status);
	if (ev < 0)
		return ev == -2 ? RAW_TIMEOUT : RAW_ERROR;
	snprintf(r->text, sizeof(r->text), "%s (status %d)",
		 rdma_event_str((enum rdma_cm_event_type)ev), status);
	if (ev == RDMA_CM_EVENT_REJECTED)
		return RAW_REFUSED;
	return ev == RDMA_CM_EVENT_ESTABLISHED ? RAW_CONNECTED : RAW_ERROR;
}
#endif /* CONF_HAVE_VERBS */

static enum raw_outcome raw_attempt(struct raw *r, const uint8_t *b, size_t n, int64_t deadline)
{
	r->text[0] = '\0';
	r->reply_len = 0;
#ifdef CONF_HAVE_OFI
	if (r->kind == K_OFI_MSG)
		return raw_ofi_attempt(r, b, n, deadline);
#endif
#ifdef CONF_HAVE_VERBS
	if (r->kind == K_RDMA_CM)
		return raw_cm_attempt(r, b, n, deadline);
#endif
	(void)b;
	(void)n;
	(void)deadline;
	snprintf(r->text, sizeof(r->text), "no raw peer for this fabric");
	return RAW_ERROR;
}

/* Ends one attempt (a connection the raw peer got is dropped). */
static void raw_attempt_end(struct raw *r)
{
#ifdef CONF_HAVE_OFI
	if (r->kind == K_OFI_MSG)
		raw_ofi_close_ep(r);
#endif
#ifdef CONF_HAVE_VERBS
	if (r->kind == K_RDMA_CM)
		raw_cm_close(r);
#endif
	(void)r;
}

static void raw_close(struct raw *r)
{
	raw_attempt_end(r);
#ifdef CONF_HAVE_OFI
	if (r->kind == K_OFI_MSG)
		raw_ofi_close(r);
#endif
}

/* Which CM the fabric's listener uses; *why says why there is none. */
static enum kind fabric_kind(const char *uri, const char **why)
{
	if (strncmp(uri, "verbs", 5) == 0) {
#ifdef CONF_HAVE_VERBS
		return K_RDMA_CM;
#else
		*why = "built without rdma-core headers";
		return K_NONE;
#endif
	}
	if (strncmp(uri, "ofi:", 4) == 0) {
#ifdef CONF_HAVE_OFI
		struct fi_info *info = NULL;

		if (ofi_msg_info(uri + 4, NULL, NULL, &info) == 0) {
			fi_freeinfo(info);
			return K_OFI_MSG;
		}
		*why = "no MSG endpoint, so no CM (bad_handshake sends raw TCP frames there)";
#else
		*why = "built without libfabric headers";
#endif
		return K_NONE;
	}
	*why = "not an ofi: or verbs: fabric";
	return K_NONE;
}

/* ------------------------------------------------------------- the test */

struct acc {
	struct wimm_listener *l;
	struct wimm_conn *conn;
	int timeout_ms;
	int rc;
};

static void *acc_thread(void *arg)
{
	struct acc *a = arg;

	a->rc = wimm_accept(a->l, a->timeout_ms, &a->conn);
	return NULL;
}

static const char *outcome_name(enum raw_outcome o)
{
	static const char *const names[] = {"refused", "connected", "no answer in time", "error"};

	return names[o];
}

/* One request with case i's bytes. Returns -1 when the listener may be left
 * with a request still in flight, so later cases would not be meaningful. */
static int run_case(struct raw *r, struct wimm_listener *l, size_t i, int64_t *worst_ms, int *named)
{
	const struct cm_case *k = &cases[i];
	int accept_ms = (int)(5000 * conf_scale());
	struct acc a = {.l = l, .timeout_ms = accept_ms};
	uint8_t buf[CM_BUF_MAX];
	enum raw_outcome want = k->want ? RAW_REFUSED : RAW_CONNECTED, got;
	pthread_t th;
	int skip, ret = 0;
	size_t n = make_case(i, buf, r->cm_max, &skip);

	if (skip || n > r->cm_max) {
		conf_diag("%s: not expressible in %zu bytes of CM data", k->what, r->cm_max);
		return 0;
	}
	/* wimm_accept and the raw connect each wait for the other. */
	if (pthread_create(&th, NULL, acc_thread, &a)) {
		conf_fail(__FILE__, __LINE__, "pthread_create failed");
		return -1;
	}
	int64_t t0 = conf_now_ms();

	got = raw_attempt(r, buf, n, t0 + accept_ms + 1000);
	int64_t ms = conf_now_ms() - t0;

	pthread_join(th, NULL);
	if (ms > *worst_ms)
		*worst_ms = ms;
	if (a.rc != k->want) {
		conf_fail(__FILE__, __LINE__, "%s (%zu bytes): wimm_accept gave %s, expected %s",
			  k->what, n, wimm_err_name(a.rc), wimm_err_name(k->want));
		ret = a.rc == WIMM_E_TIMEDOUT ? -1 : 0;
	} else if ((a.conn != NULL) != (k->want == 0)) {
		conf_fail(__FILE__, __LINE__, "%s: wimm_accept returned %s with conn %p", k->what,
			  wimm_err_name(a.rc), (void *)a.conn);
	}
	if (got != want) {
		conf_fail(__FILE__, __LINE__,
			  "%s (%zu bytes): the raw peer saw %s (%s), expected %s", k->what, n,
			  outcome_name(got), r->text, outcome_name(want));
		if (got == RAW_TIMEOUT || got == RAW_ERROR)
			ret = -1;
	}
	/* The control's reply must be a wimm handshake: the raw peer really
	 * talked to the wimm listener. */
	if (got == RAW_CONNECTED && want == RAW_CONNECTED &&
	    (r->reply_len < HS_LEN || r->reply[0] != 0x57 || r->reply[1] != 0x49 ||
	     r->reply[2] != 2))
		conf_fail(__FILE__, __LINE__,
			  "%s: the listener's reply (%zu bytes) is no handshake", k->what,
			  r->reply_len);
	/* The verbs backend names its error in the REJ ("WRJ1", BE code), for
	 * its own wimm_connect: where it does, it must be the right one. */
	if (got == RAW_REFUSED && r->kind == K_RDMA_CM && r->reply_len >= 8 &&
	    !memcmp(r->reply, "WRJ1", 4)) {
		int32_t code = (int32_t)((uint32_t)r->reply[4] << 24 | (uint32_t)r->reply[5] << 16 |
					 (uint32_t)r->reply[6] << 8 | r->reply[7]);

		if (code != k->want)
			conf_fail(__FILE__, __LINE__, "%s: the REJ names %s, expected %s", k->what,
				  wimm_err_name(code), wimm_err_name(k->want));
		else
			(*named)++;
	}
	wimm_conn_delete(&a.conn);
	raw_attempt_end(r);
	return ret;
}

static void t_bad_handshake_cm(const char *uri)
{
	struct wimm_conn_attr sattr = {0}, cattr = {0};
	const char *why = "";
	enum kind kind;
	struct wimm_event ev;
	struct raw r;
	char addr[300];
	int64_t worst = 0;
	struct pair p;
	int tried = 0, named = 0;

	memset(&r, 0, sizeof(r));
	if (pair_open(&p, uri))
		goto out;
	/* What the URI resolved to ("auto", "verbs" name no provider). */
	kind = fabric_kind(wimm_ctx_fabric(p.sctx), &why);
	if (kind == K_NONE) {
		conf_skip("%s: %s", wimm_ctx_fabric(p.sctx), why);
		goto out;
	}
	if (conf_listen(p.sctx, &sattr, &p.l, addr, sizeof(addr)))
		goto out;
	r.kind = kind;
	snprintf(r.host, sizeof(r.host), "%s", conf_host());
	snprintf(r.port, sizeof(r.port), "%d", wimm_listener_port(p.l));
	r.cm_max = IB_CM_REQ_PDATA;
#ifdef CONF_HAVE_OFI
	if (kind == K_OFI_MSG && raw_ofi_open(&r, wimm_ctx_fabric(p.sctx) + 4)) {
		conf_fail(__FILE__, __LINE__, "%s", r.text);
		goto out;
	}
#endif
	conf_diag("raw %s peer, at most %zu bytes of CM data",
		  kind == K_OFI_MSG ? "fi_connect" : "rdma_connect", r.cm_max);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (!(cases[i].on & (kind == K_OFI_MSG ? ON_OFI : ON_CM)))
			continue;
		tried++;
		if (run_case(&r, p.l, i, &worst, &named))
			goto out;
	}
	conf_diag("%d requests, slowest answer to the raw peer %lld ms", tried, (long long)worst);
	if (kind == K_RDMA_CM)
		conf_diag("%d REJs named the right wimm error", named);
	CHECKF(worst < (int64_t)(3000 * conf_scale()), "the raw peer waited %lld ms for an answer",
	       (long long)worst);

	/* The listener still accepts a real wimm connection. */
	if (pair_connect_on(&p, addr, &cattr))
		goto out;
	CHECK_OK(wimm_write_imm(p.c, NULL, 0, 0, 0, 78, 0));
	CHECK_EQ(next_event(p.sctx, p.cctx, &ev, 5000), 1);
	CHECK(ev.type == WIMM_EV_WRITE_IMM && ev.imm == 78);
out:
	raw_close(&r);
	pair_close(&p);
}

const struct conf_test conf_tests_handshake_cm[] = {
    {"bad_handshake_cm", t_bad_handshake_cm, 120},
    {NULL, NULL, 0},
};
