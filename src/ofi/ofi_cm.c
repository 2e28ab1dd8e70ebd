/* libfabric backend: connection set-up. MSG providers (tcp, verbs) use the
 * provider's CM and carry the handshake as CM data; RDM providers (shm) have
 * no CM, so a TCP socket carries the handshake and then stays open as the
 * connection's liveness channel. */
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
#define OFI_HS_READ_MS 2000 /* a request's handshake must follow its connect */
#define OFI_KICK_MS 200

static int ofi_sockaddr_port(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

/* ---------------------------------------------------- socket helpers (RDM) */

static int ofi_wait_fd(int fd, short events, int64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = events};
	int r;

	do {
		r = poll(&p, 1, wimm_remaining_ms(deadline));
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return r ? 0 : -ETIMEDOUT;
}

static int ofi_io_all(int fd, void *buf, size_t len, int64_t deadline, int out)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t r;
		int ret = ofi_wait_fd(fd, out ? POLLOUT : POLLIN, deadline);

		if (ret)
			return ret;
		r = out ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
			: recv(fd, p, len, MSG_DONTWAIT);
		if (r == 0)
			return -ECONNRESET;
		if (r < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				continue;
			return -errno;
		}
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

/* A frame is a 4-byte big-endian length and that many handshake bytes. */
static int ofi_send_frame(int fd, const uint8_t *hs, size_t len, int64_t deadline)
{
	uint8_t frame[4 + WIMM_HS_MAX_LEN];

	if (len > WIMM_HS_MAX_LEN)
		return -EMSGSIZE;
	frame[0] = (uint8_t)(len >> 24);
	frame[1] = (uint8_t)(len >> 16);
	frame[2] = (uint8_t)(len >> 8);
	frame[3] = (uint8_t)len;
	memcpy(frame + 4, hs, len);
	return ofi_io_all(fd, frame, 4 + len, deadline, 1);
}

static int ofi_recv_frame(int fd, uint8_t *hs, size_t cap, size_t *len, int64_t deadline)
{
	uint8_t hdr[4];
	uint32_t n;
	int ret;

	ret = ofi_io_all(fd, hdr, 4, deadline, 0);
	if (ret)
		return ret;
	n = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
	if (n > cap || n > WIMM_HS_MAX_LEN)
		return -EMSGSIZE;
	*len = n;
	return ofi_io_all(fd, hs, n, deadline, 0);
}

static int ofi_sock_code(int err)
{
	switch (err) {
	case ETIMEDOUT:
		return WIMM_E_TIMEDOUT;
	case EMSGSIZE:
		return WIMM_E_PROTO;
	case ECONNREFUSED:
	case EHOSTUNREACH:
	case ENETUNREACH:
		return WIMM_E_UNREACHABLE;
	case ECONNRESET:
	case EPIPE:
		return WIMM_E_DISCONNECTED;
	default:
		return WIMM_E_PROVIDER;
	}
}

static int ofi_sock_listen(struct ofi_lis *l, const char *host, const char *port, int *port_out)
{
	struct addrinfo hints = {
	    .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *res;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int one = 1;
	int fd, ret;

	ret = getaddrinfo(*host ? host : NULL, port, &hints, &res);
	if (ret) {
		wimm_ctx_set_provider_error(l->ctx->core, ret, gai_strerror(ret));
		return WIMM_E_ADDR;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		ret = ofi_errno_err(l->ctx, errno, "socket", WIMM_E_PROVIDER);
		goto err_freeaddr;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 64) ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl)) {
		ret = ofi_errno_err(l->ctx, errno, "bind/listen", WIMM_E_PROVIDER);
		goto err_close;
	}
	freeaddrinfo(res);
	/* The listener's fd is an epoll set of the socket and the connectors
	 * still sending their handshake: readable when either moves. */
	l->lepfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
	if (l->lepfd < 0 || epoll_ctl(l->lepfd, EPOLL_CTL_ADD, fd, &ev)) {
		ret = ofi_errno_err(l->ctx, errno, "epoll (listener)", WIMM_E_PROVIDER);
		if (l->lepfd >= 0)
			close(l->lepfd);
		close(fd);
		return ret;
	}
	l->sock = fd;
	l->fd = l->lepfd;
	*port_out = ofi_sockaddr_port((struct sockaddr *)&ss);
	return 0;

err_close:
	close(fd);
err_freeaddr:
	freeaddrinfo(res);
	return ret;
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
	l->sock = -1;
	l->lepfd = -1;
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
		for (int i = 0; i < l->npend; i++)
			close(l->pend[i].fd);
		close(l->sock);
		close(l->lepfd);
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

static void ofi_pend_drop(struct ofi_lis *l, int i)
{
	epoll_ctl(l->lepfd, EPOLL_CTL_DEL, l->pend[i].fd, NULL);
	close(l->pend[i].fd);
	l->pend[i] = l->pend[--l->npend];
}

/* Take every connector waiting in the accept queue. */
static int ofi_sock_take(struct ofi_lis *l)
{
	while (l->npend < OFI_HS_PENDING) {
		int fd = accept4(l->sock, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

		if (fd < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
			    errno == ECONNABORTED)
				return 0;
			return ofi_errno_err(l->ctx, errno, "accept", WIMM_E_PROVIDER);
		}
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
		if (epoll_ctl(l->lepfd, EPOLL_CTL_ADD, fd, &ev)) {
			close(fd);
			return ofi_errno_err(l->ctx, errno, "epoll (connector)", WIMM_E_PROVIDER);
		}
		l->pend[l->npend] = (struct ofi_hs_pending){
		    .fd = fd, .deadline_ms = wimm_now_ms() + OFI_HS_READ_MS};
		l->npend++;
	}
	return 0;
}

/* Read what pend[i] has sent so far: 1 with a whole frame, 0 not yet, or
 * a negative WIMM_E_* (the connector is dropped). */
static int ofi_pend_read(struct ofi_lis *l, int i)
{
	struct ofi_hs_pending *p = &l->pend[i];

	for (;;) {
		size_t want = p->got < 4 ? 4 - p->got : 0;
		if (!want) {
			uint32_t n = (uint32_t)p->buf[0] << 24 | (uint32_t)p->buf[1] << 16 |
				     (uint32_t)p->buf[2] << 8 | p->buf[3];
			if (n > WIMM_HS_MAX_LEN)
				return ofi_errno_err(l->ctx, EMSGSIZE, "reading handshake",
						     WIMM_E_PROTO);
			want = 4 + n - p->got;
			if (!want)
				return 1;
		}
		ssize_t r = recv(p->fd, p->buf + p->got, want, MSG_DONTWAIT);
		if (r == 0)
			return ofi_errno_err(l->ctx, ECONNRESET, "reading handshake",
					     WIMM_E_DISCONNECTED);
		if (r < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				return 0;
			return ofi_errno_err(l->ctx, errno, "reading handshake",
					     ofi_sock_code(errno));
		}
		p->got += (size_t)r;
	}
}

/* A request whose whole handshake frame is here, without waiting on any
 * connector: a slow or silent one cannot hold up the others (it is
 * dropped when its OFI_HS_READ_MS run out). Errors of one connector are
 * returned once, as the request's failure, like a bad handshake. */
static int ofi_sock_ready(struct ofi_lis *l, struct ofi_req *req, uint8_t *hs, size_t *hs_len)
{
	int64_t now = wimm_now_ms();
	int ret = ofi_sock_take(l);

	if (ret)
		return ret;
	for (int i = 0; i < l->npend; i++) {
		ret = ofi_pend_read(l, i);
		if (ret < 0) {
			ofi_pend_drop(l, i);
			return ret;
		}
		if (ret == 0) {
			if (now < l->pend[i].deadline_ms)
				continue;
			ofi_pend_drop(l, i);
			return ofi_errno_err(l->ctx, ETIMEDOUT, "reading handshake",
					     WIMM_E_TIMEDOUT);
		}
		struct ofi_hs_pending *p = &l->pend[i];
		size_t n = p->got - 4;
		if (n > *hs_len)
			n = *hs_len;
		memcpy(hs, p->buf + 4, n);
		*hs_len = n;
		epoll_ctl(l->lepfd, EPOLL_CTL_DEL, p->fd, NULL);
		req->sock = p->fd;
		l->pend[i] = l->pend[--l->npend];
		return 0;
	}
	return WIMM_E_AGAIN;
}

static int ofi_sock_request(struct ofi_lis *l, int timeout_ms, struct ofi_req *req, uint8_t *hs,
			    size_t *hs_len)
{
	int64_t deadline = wimm_now_ms() + timeout_ms;

	for (;;) {
		struct epoll_event ev[8];
		int ret = ofi_sock_ready(l, req, hs, hs_len);

		if (ret != WIMM_E_AGAIN)
			return ret;
		if (timeout_ms == 0)
			return WIMM_E_AGAIN;
		int wait = timeout_ms < 0 ? -1 : wimm_remaining_ms(deadline);
		if (wait == 0)
			return WIMM_E_TIMEDOUT;
		/* Wake for the next connector's deadline too. */
		if (l->npend && (wait < 0 || wait > 100))
			wait = 100;
		if (epoll_wait(l->lepfd, ev, 8, wait) < 0 && errno != EINTR)
			return ofi_errno_err(l->ctx, errno, "epoll_wait (listener)",
					     WIMM_E_PROVIDER);
	}
}

/* RDM: which lane may take a request depends on who it is (ofi_lane.c).
 * A bad handshake is the core's to refuse; it then names no one. */
static void ofi_req_peer_name(struct ofi_req *req, const uint8_t *hs, size_t len)
{
	struct wimm_handshake peer;

	if (wimm_hs_decode(hs, len, &peer) == 0 && peer.addr_len <= OFI_NAME_MAX) {
		memcpy(req->peer_name, peer.addr, peer.addr_len);
		req->peer_name_len = peer.addr_len;
	}
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
		ofi_send_frame(req->sock, msg, len, wimm_now_ms());
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

void ofi_eq_drain(struct ofi_ctx *x)
{
	union {
		struct fi_eq_cm_entry e;
		uint8_t b[OFI_CM_BUF];
	} u;
	uint32_t event;
	ssize_t r;

	for (;;) {
		r = fi_eq_read(x->eq, &event, &u, sizeof(u), 0);
		if (r == -FI_EAVAIL) {
			ofi_eq_error(x);
			continue;
		}
		if (r < 0)
			return;
		ofi_eq_dispatch(x, event, &u.e, (size_t)r);
	}
}

/* Wait for FI_CONNECTED of c; the shared EQ may bring other connections'
 * events meanwhile, which go where they belong. */
static int ofi_wait_connected(struct ofi_conn *c, int64_t deadline)
{
	struct ofi_ctx *x = c->ctx;
	union {
		struct fi_eq_cm_entry e;
		uint8_t b[OFI_CM_BUF];
	} u;
	uint32_t event;
	ssize_t r;

	while (!c->connected && !c->cm_err) {
		int wait = wimm_remaining_ms(deadline);

		r = wait ? fi_eq_sread(x->eq, &event, &u, sizeof(u), wait, 0)
			 : fi_eq_read(x->eq, &event, &u, sizeof(u), 0);
		if (r == -FI_EAGAIN || r == -FI_ETIMEDOUT) {
			if (wimm_remaining_ms(deadline) > 0)
				continue;
			wimm_ctx_set_provider_error(x->core, -FI_ETIMEDOUT,
						    "no FI_CONNECTED in time");
			return WIMM_E_TIMEDOUT;
		}
		if (r == -FI_EAVAIL) {
			ofi_eq_error(x);
			continue;
		}
		if (r < 0)
			return ofi_err(x, (int)r, "fi_eq_sread");
		ofi_eq_dispatch(x, event, &u.e, (size_t)r);
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

static int ofi_sock_connect(struct ofi_conn *c, const char *host, const char *port,
			    const uint8_t *hs, size_t hs_len, uint8_t *reply, size_t *reply_len,
			    int64_t deadline)
{
	struct ofi_ctx *x = c->ctx;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res;
	socklen_t el = sizeof(int);
	int fd, ret, err = 0;

	ret = getaddrinfo(*host ? host : NULL, port, &hints, &res);
	if (ret) {
		wimm_ctx_set_provider_error(x->core, ret, gai_strerror(ret));
		return WIMM_E_ADDR;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		ret = ofi_errno_err(x, errno, "socket", WIMM_E_PROVIDER);
		goto err_freeaddr;
	}
	if (connect(fd, res->ai_addr, res->ai_addrlen) && errno != EINPROGRESS) {
		err = errno;
		goto err_close;
	}
	err = -ofi_wait_fd(fd, POLLOUT, deadline);
	if (!err && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el))
		err = errno;
	if (!err)
		err = -ofi_send_frame(fd, hs, hs_len, deadline);
	if (!err)
		err = -ofi_recv_frame(fd, reply, *reply_len, reply_len, deadline);
	if (err)
		goto err_close;
	freeaddrinfo(res);
	c->sock = fd;
	if (ofi_epoll_add(x, fd, c, OFI_TAG_SOCK) == 0)
		c->in_epoll_sock = 1;
	c->connected = 1;
	return 0;

err_close:
	close(fd);
	ret = ofi_errno_err(x, err, "connect", ofi_sock_code(err));
err_freeaddr:
	freeaddrinfo(res);
	return ret;
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
	c->down_pending = 0;
	c->down_reported = 1;
}

/* shm maps a new peer lazily: the first operation towards it sends our
 * name and fails with -FI_EAGAIN until the peer's progress has taken it. Do
 * that here, with a zero-length plain write (no event at the peer) to its
 * null window, while the peer is in its own set-up, so the application's
 * first post does not fail with WIMM_E_AGAIN. Best effort: a peer that stops
 * progressing leaves the first posts to retry. */
static void ofi_rdm_kick(struct ofi_conn *c)
{
	int64_t deadline = wimm_now_ms() + OFI_KICK_MS;
	struct fi_rma_iov rma = {0};
	struct fi_msg_rma m = {.addr = c->peer, .rma_iov = &rma, .rma_iov_count = 1};
	struct timespec pause = {0, 20000};

	while (fi_writemsg(c->ep, &m, FI_INJECT) == -FI_EAGAIN && wimm_now_ms() < deadline) {
		ofi_conn_stash_cq(c);
		nanosleep(&pause, NULL);
	}
}

int ofi_conn_ready(void *bconn, const struct wimm_handshake *peer)
{
	struct ofi_conn *c = bconn;
	int ret;

	if (c->ctx->msg)
		return 0;
	if (!peer->addr_len || peer->addr_len > OFI_NAME_MAX) {
		wimm_ctx_set_provider_error(c->ctx->core, 0, "peer sent no endpoint address");
		return WIMM_E_PROTO;
	}
	ret = ofi_lane_insert(c, peer->addr, peer->addr_len);
	if (ret)
		return ret;
	ret = ofi_conn_post_slots(c);
	if (ret)
		return ret;
	if (c->frame) {
		/* A fresh socket has room for one small frame: never waits. */
		ret = ofi_send_frame(c->sock, c->frame, c->frame_len, wimm_now_ms());
		free(c->frame);
		c->frame = NULL;
		if (ret)
			return ofi_errno_err(c->ctx, -ret, "sending handshake",
					     ofi_sock_code(-ret));
	}
	c->connected = 1;
	if (c->up_pending)
		ofi_lane_push_up(c);
	ofi_rdm_kick(c);
	return 0;
}
