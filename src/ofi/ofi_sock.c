/* libfabric backend: connection set-up of RDM providers (shm), which have
 * no CM: a TCP socket carries the handshake (a 4-byte big-endian length and
 * that many bytes) and then stays open as the connection's liveness channel.
 * A listener never waits on one connector: requests are read a piece at a
 * time (ofi_sock_request), accepting never blocks (the passive side's
 * first write towards the peer is retried from poll, ofi_kick_pending). */
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

#define OFI_HS_READ_MS 2000 /* a request's handshake must follow its connect */
#define OFI_KICK_MS 200

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
int ofi_send_frame(int fd, const uint8_t *hs, size_t len, int64_t deadline)
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

int ofi_sock_code(int err)
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

int ofi_sock_listen(struct ofi_lis *l, const char *host, const char *port, int *port_out)
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

int ofi_sock_request(struct ofi_lis *l, int timeout_ms, struct ofi_req *req, uint8_t *hs,
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
		/* shm moves only when we read our CQs: a connector that is
		 * finishing its set-up with us (its first write waits for our
		 * progress to take its name) would otherwise wait for as long as
		 * we wait here for the next one. Progress every millisecond;
		 * what it finds stays in the lanes' rings. */
		if (l->ctx->lanes) {
			if (l->ctx->nkick)
				ofi_kick_pending(l->ctx);
			for (struct ofi_lane *ln = l->ctx->lanes; ln; ln = ln->next)
				ofi_lane_fill(ln, l->ctx, 0);
			if (wait < 0 || wait > 1)
				wait = 1;
		}
		if (epoll_wait(l->lepfd, ev, 8, wait) < 0 && errno != EINTR)
			return ofi_errno_err(l->ctx, errno, "epoll_wait (listener)",
					     WIMM_E_PROVIDER);
	}
}

/* RDM: which lane may take a request depends on who it is (ofi_lane.c).
 * A bad handshake is the core's to refuse; it then names no one. */
void ofi_req_peer_name(struct ofi_req *req, const uint8_t *hs, size_t len)
{
	struct wimm_handshake peer;

	if (wimm_hs_decode(hs, len, &peer) == 0 && peer.addr_len <= OFI_NAME_MAX) {
		memcpy(req->peer_name, peer.addr, peer.addr_len);
		req->peer_name_len = peer.addr_len;
	}
}

int ofi_sock_connect(struct ofi_conn *c, const char *host, const char *port, const uint8_t *hs,
		     size_t hs_len, uint8_t *reply, size_t *reply_len, int64_t deadline)
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

/* shm maps a new peer lazily: the first operation towards it sends our
 * name and fails with -FI_EAGAIN until the peer's progress has taken it. A
 * zero-length plain write (no event at the peer) to its null window does
 * that before the application's first post, so that post does not fail with
 * WIMM_E_AGAIN. One attempt: 1 once the peer has our name. */
static int ofi_kick_once(struct ofi_conn *c)
{
	struct fi_rma_iov rma = {0};
	struct fi_msg_rma m = {.addr = c->peer, .rma_iov = &rma, .rma_iov_count = 1};

	ssize_t ret = fi_writemsg(c->ep, &m, FI_INJECT);

	/* Any other failure is the first post's to report; say it now too. */
	if (ret && ret != -FI_EAGAIN)
		ofi_err(c->ctx, (int)ret, "fi_writemsg (first write to the peer)");
	return ret != -FI_EAGAIN;
}

/* Active side, inside connect (which may block until its timeout): while
 * the peer is in its own set-up. Best effort: a peer that stops
 * progressing leaves the first posts to retry. */
static void ofi_rdm_kick(struct ofi_conn *c)
{
	int64_t deadline = wimm_now_ms() + OFI_KICK_MS;
	struct timespec pause = {0, 20000};

	while (!ofi_kick_once(c) && wimm_now_ms() < deadline) {
		ofi_conn_stash_cq(c);
		nanosleep(&pause, NULL);
	}
}

/* Passive side: accept never blocks, so the kick is retried from poll and
 * the connection is up (CONN_UP) once the peer has our name. */
void ofi_kick_pending(struct ofi_ctx *x)
{
	int64_t now = 0;

	for (struct ofi_conn *c = x->conns; c && x->nkick; c = c->next) {
		if (!c->kicking)
			continue;
		if (ofi_kick_once(c)) {
			c->kicking = 0;
			x->nkick--;
			ofi_lane_push_up(c);
			continue;
		}
		if (!now)
			now = wimm_now_ms();
		if (now > c->kick_deadline) {
			c->kicking = 0;
			x->nkick--;
			wimm_ctx_set_provider_error(x->core, -FI_ETIMEDOUT,
						    "the peer never took our shm name");
			ofi_conn_down(c, WIMM_E_TIMEDOUT, -FI_ETIMEDOUT);
		}
	}
}

int ofi_sock_conn_ready(struct ofi_conn *c, const struct wimm_handshake *peer)
{
	int ret;

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
	if (!c->up_pending) {
		ofi_rdm_kick(c);
	} else if (ofi_kick_once(c)) {
		ofi_lane_push_up(c);
	} else {
		c->kicking = 1;
		c->kick_deadline = wimm_now_ms() + OFI_DEFAULT_TIMEOUT_MS;
		c->ctx->nkick++;
	}
	return 0;
}
