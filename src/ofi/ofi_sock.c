/* libfabric backend: connection set-up of RDM providers (shm), which have
 * no CM: a TCP socket carries the handshake (a 4-byte big-endian length and
 * that many bytes) and then stays open as the connection's liveness channel.
 * The sockets' part shared with ipc is core/sidechan.c. A listener never
 * waits on one connector: requests are read a piece at a time
 * (ofi_sock_request), accepting never blocks (the passive side's
 * first write towards the peer is retried from poll, ofi_kick_pending). */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/handshake.h"
#include "core/sidechan.h"
#include "ofi/ofi_internal.h"

#define OFI_KICK_MS 200

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
	if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, SOMAXCONN) ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl)) {
		ret = ofi_errno_err(l->ctx, errno, "bind/listen", WIMM_E_PROVIDER);
		goto err_close;
	}
	freeaddrinfo(res);
	/* The listener's fd: readable when a connector or a handshake moves. */
	ret = wimm_sidechan_open(&l->sc, l->ctx->core, fd);
	if (ret)
		return ret;
	l->fd = l->sc.epfd;
	*port_out = ofi_sockaddr_port((struct sockaddr *)&ss);
	return 0;

err_close:
	close(fd);
err_freeaddr:
	freeaddrinfo(res);
	return ret;
}

/* Where a whole request goes (ofi_sock_read). */
struct ofi_hs_out {
	struct ofi_ctx *x;
	uint8_t *hs;
	size_t *hs_len;
};

/* A connector's frame, a piece at a time; once whole, its handshake. */
static int ofi_sock_read(struct wimm_sidechan_pend *p, void *arg)
{
	struct ofi_hs_out *o = arg;
	int ret = wimm_sidechan_read_frame(p);

	if (ret < 0)
		return wimm_sidechan_fail(o->x->core, -ret, "reading handshake");
	if (ret == 1) {
		size_t n = p->got - 4;

		if (n > *o->hs_len)
			n = *o->hs_len;
		memcpy(o->hs, p->buf + 4, n);
		*o->hs_len = n;
	}
	return ret;
}

/* shm moves only when we read our CQs: a connector that is finishing its
 * set-up with us (its first write waits for our progress to take its
 * name) would otherwise wait for as long as we wait for the next one.
 * What progress finds stays in the lanes' rings. */
static void ofi_sock_idle(void *arg)
{
	struct ofi_ctx *x = arg;

	if (x->nkick)
		ofi_kick_pending(x);
	for (struct ofi_lane *ln = x->lanes; ln; ln = ln->next)
		ofi_lane_fill(ln, x);
}

int ofi_sock_request(struct ofi_lis *l, int timeout_ms, struct ofi_req *req, uint8_t *hs,
		     size_t *hs_len)
{
	struct ofi_hs_out o = {l->ctx, hs, hs_len};

	return wimm_sidechan_request(&l->sc, timeout_ms, ofi_sock_read, &o,
				     l->ctx->lanes ? ofi_sock_idle : NULL, l->ctx, &req->sock);
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
	err = -wimm_sidechan_wait_fd(fd, POLLOUT, deadline, NULL);
	if (!err && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el))
		err = errno;
	if (!err)
		err = -wimm_sidechan_send_frame(fd, hs, hs_len, deadline);
	if (!err)
		err = -wimm_sidechan_recv_frame(fd, reply, *reply_len, reply_len, deadline);
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
	ret = wimm_sidechan_fail(x->core, err, "connect");
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
		ret = wimm_sidechan_send_frame(c->sock, c->frame, c->frame_len, wimm_now_ms());
		free(c->frame);
		c->frame = NULL;
		if (ret)
			return wimm_sidechan_fail(c->ctx->core, -ret, "sending handshake");
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
