/* libfabric backend: connection set-up. MSG providers (tcp, verbs) use the
 * provider's CM and carry the handshake as CM data, CM events of every
 * connection arriving on the context's one EQ; RDM providers (shm) have no
 * CM: ofi_sock.c. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/handshake.h"
#include "ofi/ofi_internal.h"

#define OFI_CM_BUF (sizeof(struct fi_eq_cm_entry) + WIMM_HS_MAX_LEN + 64)

int ofi_sockaddr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

/* ------------------------------------------------------------- listening */

static int ofi_pep_listen(struct ofi_lis *l, const char *host, const char *port, int *port_out)
{
	struct ofi_ctx *x = l->ctx;
	struct fi_info *hints = ofi_hints(x->info->fabric_attr->prov_name, FI_EP_MSG);
	struct fi_eq_attr eqa = {.size = 64, .wait_obj = FI_WAIT_FD};
	struct sockaddr_storage ss;
	size_t sl = sizeof(ss);
	int ret;

	if (!hints)
		return WIMM_E_NOMEM;
	ret = fi_getinfo(OFI_API_VERSION, *host ? host : NULL, port, FI_SOURCE, hints, &l->info);
	fi_freeinfo(hints);
	if (ret) {
		ofi_err(x, ret, "fi_getinfo (listen address)");
		return WIMM_E_ADDR;
	}
	ret = fi_passive_ep(x->fabric, l->info, &l->pep, l);
	if (ret) {
		ret = ofi_err(x, ret, "fi_passive_ep");
		goto err_freeinfo;
	}
	ret = fi_eq_open(x->fabric, &eqa, &l->eq, l);
	if (ret) {
		ret = ofi_err(x, ret, "fi_eq_open");
		goto err_close_pep;
	}
	ret = fi_pep_bind(l->pep, &l->eq->fid, 0);
	if (ret) {
		ret = ofi_err(x, ret, "fi_pep_bind");
		goto err_close_eq;
	}
	ret = fi_listen(l->pep);
	if (ret) {
		ret = ofi_err(x, ret, "fi_listen");
		goto err_close_eq;
	}
	ret = fi_control(&l->eq->fid, FI_GETWAIT, &l->fd);
	if (ret) {
		ret = ofi_err(x, ret, "fi_control FI_GETWAIT (listener)");
		goto err_close_eq;
	}
	ret = fi_getname(&l->pep->fid, &ss, &sl);
	if (ret) {
		ret = ofi_err(x, ret, "fi_getname (listener)");
		goto err_close_eq;
	}
	*port_out = ofi_sockaddr_port((struct sockaddr *)&ss);
	return 0;

err_close_eq:
	fi_close(&l->eq->fid);
err_close_pep:
	fi_close(&l->pep->fid);
err_freeinfo:
	fi_freeinfo(l->info);
	return ret;
}

int ofi_listen(void *bctx, const char *host, const char *port, void **blis, int *port_out)
{
	struct ofi_ctx *x = bctx;
	struct ofi_lis *l;
	int ret;

	l = calloc(1, sizeof(*l));
	if (!l)
		return WIMM_E_NOMEM;
	l->ctx = x;
	l->fd = -1;
	l->sc.sock = l->sc.epfd = -1;
	ret = x->msg ? ofi_pep_listen(l, host, port, port_out)
		     : ofi_sock_listen(l, host, port, port_out);
	if (ret) {
		free(l);
		return ret;
	}
	*blis = l;
	return 0;
}

void ofi_listener_close(void *blis)
{
	struct ofi_lis *l = blis;

	if (!l)
		return;
	if (l->pep) {
		fi_close(&l->pep->fid);
		fi_close(&l->eq->fid);
		fi_freeinfo(l->info);
	} else {
		wimm_sidechan_close(&l->sc);
	}
	free(l);
}

int ofi_listener_fd(void *blis)
{
	return ((struct ofi_lis *)blis)->fd;
}

static int ofi_pep_request(struct ofi_lis *l, int timeout_ms, struct ofi_req *req, uint8_t *hs,
			   size_t *hs_len)
{
	union {
		struct fi_eq_cm_entry e;
		uint8_t b[OFI_CM_BUF];
	} u;
	int64_t deadline = wimm_now_ms() + timeout_ms;
	uint32_t event;
	ssize_t r;

	for (;;) {
		int wait = timeout_ms < 0 ? -1 : wimm_remaining_ms(deadline);

		r = wait ? fi_eq_sread(l->eq, &event, &u, sizeof(u), wait, 0)
			 : fi_eq_read(l->eq, &event, &u, sizeof(u), 0);
		if (r == -FI_EAGAIN || r == -FI_ETIMEDOUT)
			return timeout_ms ? WIMM_E_TIMEDOUT : WIMM_E_AGAIN;
		if (r == -FI_EAVAIL) {
			struct fi_eq_err_entry err = {0};

			fi_eq_readerr(l->eq, &err, 0);
			return ofi_err(l->ctx, -err.err, "listener event");
		}
		if (r < 0)
			return ofi_err(l->ctx, (int)r, "fi_eq_sread (listener)");
		if (event != FI_CONNREQ)
			continue;
		if ((size_t)r < sizeof(u.e)) {
			fi_freeinfo(u.e.info);
			continue;
		}
		size_t n = (size_t)r - sizeof(u.e);
		/* Cut to the core's buffer, which is one byte longer than any
		 * valid handshake: the decoder still sees "too long". */
		if (n > *hs_len)
			n = *hs_len;
		memcpy(hs, u.e.data, n);
		*hs_len = n;
		req->info = u.e.info;
		req->pep = l->pep;
		return 0;
	}
}

/* libfabric tcp reads a connector's CM data from a socket that the
 * listener's EQ fd does not watch, so a request can be complete while the
 * fd stays quiet: a peek drives the CM's progress and tells. */
int ofi_listener_pending(void *blis)
{
	struct ofi_lis *l = blis;
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + 64];
	uint32_t event;

	if (!l->pep)
		return 0; /* RDM: the epoll fd of the sockets is exact */
	ssize_t r = fi_eq_read(l->eq, &event, buf, sizeof(buf), FI_PEEK);
	return r > 0 || r == -FI_EAVAIL || r == -FI_ETOOSMALL ? 1 : 0;
}

int ofi_get_request(void *blis, int timeout_ms, void **breq, uint8_t *hs, size_t *hs_len)
{
	struct ofi_lis *l = blis;
	struct ofi_req *req;
	int ret;

	req = calloc(1, sizeof(*req));
	if (!req)
		return WIMM_E_NOMEM;
	req->sock = -1;
	ret = l->pep ? ofi_pep_request(l, timeout_ms, req, hs, hs_len)
		     : ofi_sock_request(l, timeout_ms, req, hs, hs_len);
	/* The EQ's wait fd stays readable until fi_trywait() resets it: rearm
	 * it so the listener fd means "a request is pending" again. */
	if (l->pep) {
		struct fid *f = &l->eq->fid;

		fi_trywait(l->ctx->fabric, &f, 1);
	}
	if (ret) {
		free(req);
		return ret;
	}
	if (req->sock >= 0)
		ofi_req_peer_name(req, hs, *hs_len);
	*breq = req;
	return 0;
}

void ofi_reject(void *breq, const uint8_t *msg, size_t len)
{
	struct ofi_req *req = breq;

	if (!req)
		return;
	if (req->info) {
		fi_reject(req->pep, req->info->handle, msg, len);
		fi_freeinfo(req->info);
	}
	if (req->sock >= 0) {
		/* Best effort, never waiting: the connector reads the reason. */
		wimm_sidechan_send_frame(req->sock, msg, len, wimm_now_ms());
		close(req->sock);
	}
	free(req);
}

int ofi_request_peer(void *breq, char *buf, size_t len)
{
	struct ofi_req *req = breq;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (req->info && req->info->dest_addr)
		return wimm_sockaddr_text(req->info->dest_addr, buf, len);
	if (req->sock >= 0 && getpeername(req->sock, (struct sockaddr *)&ss, &sl) == 0)
		return wimm_sockaddr_text((struct sockaddr *)&ss, buf, len);
	return WIMM_E_ADDR;
}

/* ------------------------------------------------------------ connecting */

/* MSG: one event of the context's EQ, to the connection it names (tcp
 * removes an endpoint's events from the EQ when it is closed, so the fid's
 * context is a live connection). */
void ofi_eq_dispatch(struct ofi_ctx *x, uint32_t event, const struct fi_eq_cm_entry *e, size_t len)
{
	struct ofi_conn *c = e->fid ? e->fid->context : NULL;

	(void)x;
	if (!c)
		return;
	if (event == FI_CONNECTED && c->accepting) {
		/* The passive side's set-up is complete. */
		c->accepting = 0;
		c->connected = 1;
		c->up_pending = 1;
		ofi_hot_add(c);
	} else if (event == FI_CONNECTED && !c->connected) {
		size_t n = len > sizeof(*e) ? len - sizeof(*e) : 0;

		if (c->cm_reply) {
			if (n > *c->cm_reply_len) {
				c->cm_err = -FI_EMSGSIZE;
				return;
			}
			memcpy(c->cm_reply, e->data, n);
			*c->cm_reply_len = n;
			c->cm_reply = NULL;
		}
		c->connected = 1;
	} else if (event == FI_SHUTDOWN) {
		if (c->connected || c->accepting) {
			c->accepting = 0;
			ofi_conn_down(c, WIMM_E_DISCONNECTED, 0);
		} else
			c->cm_err = -FI_ECONNRESET;
	}
}

static void ofi_eq_error(struct ofi_ctx *x)
{
	struct fi_eq_err_entry err = {0};
	struct ofi_conn *c;

	if (fi_eq_readerr(x->eq, &err, 0) < 0)
		return;
	c = err.fid ? err.fid->context : NULL;
	if (!c)
		return;
	if (c->connected || c->accepting) {
		c->accepting = 0;
		ofi_conn_down(c, WIMM_E_DISCONNECTED, -err.err);
		return;
	}
	c->cm_err = err.err ? -err.err : -FI_ECONNREFUSED;
	/* A wimm listener's reject carries its reason. */
	if (err.err == FI_ECONNREFUSED && err.err_data_size > 0 && c->cm_reply) {
		size_t n =
		    err.err_data_size < *c->cm_reply_len ? err.err_data_size : *c->cm_reply_len;

		memcpy(c->cm_reply, err.err_data, n);
		*c->cm_reply_len = n;
		c->cm_reply = NULL;
		c->cm_refused = 1;
	}
}

/* One event of the shared EQ, waiting up to wait_ms (0: not at all), to
 * whom it concerns. 0 when one was handled, else the negative fi_errno. */
static ssize_t ofi_eq_one(struct ofi_ctx *x, int wait_ms)
{
	union {
		struct fi_eq_cm_entry e;
		uint8_t b[OFI_CM_BUF];
	} u;
	uint32_t event;
	ssize_t r;

	r = wait_ms ? fi_eq_sread(x->eq, &event, &u, sizeof(u), wait_ms, 0)
		    : fi_eq_read(x->eq, &event, &u, sizeof(u), 0);
	if (r == -FI_EAVAIL) {
		ofi_eq_error(x);
		return 0;
	}
	if (r < 0)
		return r;
	ofi_eq_dispatch(x, event, &u.e, (size_t)r);
	return 0;
}

void ofi_eq_drain(struct ofi_ctx *x)
{
	struct fid *f = &x->eq->fid;

	while (ofi_eq_one(x, 0) == 0)
		;
	/* Reading leaves the EQ's wait fd readable (its signal is reset only
	 * by a wait): reset it, or every scan would read the EQ again. */
	fi_trywait(x->fabric, &f, 1);
}

/* Wait for FI_CONNECTED of c; the shared EQ may bring other connections'
 * events meanwhile, which go where they belong. */
static int ofi_wait_connected(struct ofi_conn *c, int64_t deadline)
{
	struct ofi_ctx *x = c->ctx;

	while (!c->connected && !c->cm_err) {
		/* The other connections' heartbeats go on while we wait. */
		wimm_ctx_keepalive(x->core);
		int left = wimm_remaining_ms(deadline);
		ssize_t r = ofi_eq_one(x, left > 100 ? 100 : left);

		if (r == -FI_EAGAIN || r == -FI_ETIMEDOUT) {
			if (wimm_remaining_ms(deadline) > 0)
				continue;
			wimm_ctx_set_provider_error(x->core, -FI_ETIMEDOUT,
						    "no FI_CONNECTED in time");
			return WIMM_E_TIMEDOUT;
		}
		if (r < 0)
			return ofi_err(x, (int)r, "fi_eq_sread");
	}
	c->cm_reply = NULL;
	if (c->cm_refused) {
		wimm_ctx_set_provider_error(x->core, -FI_ECONNREFUSED, "rejected by the listener");
		return WIMM_E_REFUSED;
	}
	if (c->cm_err == -FI_EMSGSIZE)
		return WIMM_E_PROTO;
	if (c->cm_err == -FI_ECONNRESET) {
		wimm_ctx_set_provider_error(x->core, -FI_ECONNRESET, "shut down during set-up");
		return WIMM_E_DISCONNECTED;
	}
	if (c->cm_err)
		return ofi_err(x, c->cm_err, "connection");
	return 0;
}

static int ofi_msg_connect(struct ofi_conn *c, const char *host, const char *port,
			   const uint8_t *hs, size_t hs_len, uint8_t *reply, size_t *reply_len,
			   int64_t deadline)
{
	struct ofi_ctx *x = c->ctx;
	struct fi_info *hints = ofi_hints(x->info->fabric_attr->prov_name, FI_EP_MSG);
	int ret;

	if (!hints)
		return WIMM_E_NOMEM;
	ret = fi_getinfo(OFI_API_VERSION, host, port, 0, hints, &c->info);
	fi_freeinfo(hints);
	if (ret) {
		c->info = NULL;
		ofi_err(x, ret, "fi_getinfo (peer address)");
		return WIMM_E_ADDR;
	}
	ret = ofi_conn_open_ep(c, c->info);
	if (ret)
		return ret;
	c->cm_reply = reply;
	c->cm_reply_len = reply_len;
	ret = fi_connect(c->ep, c->info->dest_addr, hs, hs_len);
	if (ret) {
		c->cm_reply = NULL;
		return ofi_err(x, ret, "fi_connect");
	}
	return ofi_wait_connected(c, deadline);
}

int ofi_connect(void *bconn, const char *host, const char *port, const uint8_t *hs, size_t hs_len,
		uint8_t *reply, size_t *reply_len, int timeout_ms)
{
	struct ofi_conn *c = bconn;
	int64_t deadline = wimm_deadline_ms(timeout_ms, OFI_DEFAULT_TIMEOUT_MS);

	if (c->ctx->msg)
		return ofi_msg_connect(c, host, port, hs, hs_len, reply, reply_len, deadline);
	return ofi_sock_connect(c, host, port, hs, hs_len, reply, reply_len, deadline);
}

int ofi_accept(void *bconn, const uint8_t *hs, size_t hs_len)
{
	struct ofi_conn *c = bconn;
	int ret;

	if (!c->ctx->msg) {
		/* Sent by conn_ready, once the peer is in the lane's AV: its
		 * first doorbell must find it there (ofi_lane.c). */
		c->frame = malloc(hs_len ? hs_len : 1);
		if (!c->frame)
			return WIMM_E_NOMEM;
		memcpy(c->frame, hs, hs_len);
		c->frame_len = hs_len;
		c->up_pending = 1;
		return 0;
	}
	ret = fi_accept(c->ep, hs, hs_len);
	if (ret)
		return ofi_err(c->ctx, ret, "fi_accept");
	/* FI_CONNECTED arrives on the context's EQ (ofi_eq_dispatch). */
	c->accepting = 1;
	return 0;
}

void ofi_conn_shutdown(void *bconn)
{
	struct ofi_conn *c = bconn;

	if (c->ctx->msg && c->ep && c->connected)
		fi_shutdown(c->ep, 0);
	if (c->sock >= 0) {
		if (c->in_epoll_sock)
			ofi_epoll_del(c->ctx, c->sock);
		c->in_epoll_sock = 0;
		shutdown(c->sock, SHUT_RDWR); /* the peer sees EOF at once */
	}
	/* RDM: what the peer still sends names no one, its slots are gone. */
	if (c->lane)
		ofi_lane_cut(c);
	c->connected = 0;
	c->accepting = 0;
	/* No CONN_DOWN of our own: the core already reported the drop. */
	c->down.state = WIMM_DOWN_REPORTED;
}

int ofi_conn_ready(void *bconn, const struct wimm_handshake *peer)
{
	struct ofi_conn *c = bconn;

	return c->ctx->msg ? ofi_ring_take_offer(c, peer) : ofi_sock_conn_ready(c, peer);
}
