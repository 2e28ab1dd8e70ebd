/* ipc backend: connection set-up. A listener is an abstract unix socket
 * (SOCK_SEQPACKET: one handshake is one message) named after its port, so
 * "127.0.0.1:PORT" reaches it like the other fabrics. Each side sends its
 * handshake with three fds (SCM_RIGHTS: its tx ring, its wake page, its
 * eventfd), a fourth when it offers its window for mapping (ipc_wire.h); a
 * refused connector gets the core's reject message and no fds.
 * The socket then stays open as the connection's liveness channel. A
 * listener never waits on one connector (requests are read when whole);
 * the sockets' part shared with ofi:shm is core/sidechan.c. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/sidechan.h"
#include "ipc/ipc_internal.h"

#define IPC_PORT_LO 32768
#define IPC_PORT_SPAN 28232 /* up to 60999, Linux's ephemeral range */
#define IPC_PORT_TRIES 256

void ipc_close_fds(int *fd, int n)
{
	for (int i = 0; i < n; i++)
		if (fd[i] >= 0) {
			close(fd[i]);
			fd[i] = -1;
		}
}

/* Loopback or "any": the only hosts a one-host fabric has. 1 if host is
 * one, 0 if it is another, WIMM_E_ADDR if it does not resolve. */
static int ipc_host_local(const char *host)
{
	static const char *const local[] = {"", "127.0.0.1", "localhost", "::1", "0.0.0.0", "::"};
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
	int loop = 0;

	for (size_t i = 0; i < sizeof(local) / sizeof(local[0]); i++)
		if (!strcmp(host, local[i]))
			return 1;
	if (getaddrinfo(host, NULL, &hints, &res))
		return WIMM_E_ADDR;
	/* Another name of the loopback interface (127.0.0.2, ip6-localhost). */
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		if (a->ai_family == AF_INET) {
			const struct sockaddr_in *in = (const void *)a->ai_addr;
			loop |= (ntohl(in->sin_addr.s_addr) >> 24) == 127;
		} else if (a->ai_family == AF_INET6) {
			const struct sockaddr_in6 *in6 = (const void *)a->ai_addr;
			loop |= IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
		}
	}
	freeaddrinfo(res);
	return loop;
}

static int ipc_parse_port(const char *port, int *out)
{
	char *end;
	long v = strtol(port, &end, 10);

	if (!*port || *end || v < 0 || v > 65535)
		return WIMM_E_ADDR;
	*out = (int)v;
	return 0;
}

static socklen_t ipc_sun(int port, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	/* Abstract namespace: no file to clean up, gone with the socket. */
	int n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "wimm-ipc:%d", port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int ipc_send_msg(int sock, const uint8_t *buf, size_t len, const int *fds, int nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * IPC_NFDS_MAX)];
		struct cmsghdr align;
	} cm;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

	if (nfds) {
		memset(&cm, 0, sizeof(cm));
		m.msg_control = cm.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *h = CMSG_FIRSTHDR(&m);
		h->cmsg_level = SOL_SOCKET;
		h->cmsg_type = SCM_RIGHTS;
		h->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(h), fds, sizeof(int) * (size_t)nfds);
	}
	ssize_t r = sendmsg(sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (r < 0)
		return -errno;
	return r == (ssize_t)len ? 0 : -EMSGSIZE;
}

/* One message and the fds it carries (never more than IPC_NFDS_MAX are kept:
 * extra ones a hostile peer attaches are closed). Bytes read, 0 at EOF, or
 * -errno. *nfds = -1 when the fds were cut (MSG_CTRUNC). */
static ssize_t ipc_recv_msg(int sock, uint8_t *buf, size_t cap, int *fds, int *nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 16)];
		struct cmsghdr align;
	} cm;
	struct iovec iov = {.iov_base = buf, .iov_len = cap};
	struct msghdr m = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf, .msg_controllen = sizeof(cm)};

	*nfds = 0;
	ssize_t r = recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (r < 0)
		return -errno;
	for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
			continue;
		int n = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		int got[16];
		memcpy(got, CMSG_DATA(h), sizeof(int) * (size_t)n);
		for (int i = 0; i < n; i++) {
			if (*nfds >= 0 && *nfds < IPC_NFDS_MAX)
				fds[(*nfds)++] = got[i];
			else
				close(got[i]);
		}
	}
	if (m.msg_flags & MSG_CTRUNC) {
		ipc_close_fds(fds, *nfds > 0 ? *nfds : 0);
		*nfds = -1;
	}
	return r;
}

/* --------------------------------------------------------------- listening */

static int ipc_bind(struct ipc_lis *l, int sock, int port, int *port_out)
{
	struct sockaddr_un sa;
	uint32_t r = 0;

	if (port) {
		if (bind(sock, (struct sockaddr *)&sa, ipc_sun(port, &sa)))
			return ipc_errno_err(l->ctx, errno, "bind", WIMM_E_ADDR);
		*port_out = port;
		return 0;
	}
	/* Port 0: a free one, from a random start in the ephemeral range. */
	if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
		r = (uint32_t)wimm_now_ns();
	for (int i = 0; i < IPC_PORT_TRIES; i++) {
		int p = IPC_PORT_LO + (int)((r + (uint32_t)i * 7919u) % IPC_PORT_SPAN);
		if (bind(sock, (struct sockaddr *)&sa, ipc_sun(p, &sa)) == 0) {
			*port_out = p;
			return 0;
		}
		if (errno != EADDRINUSE)
			return ipc_errno_err(l->ctx, errno, "bind", WIMM_E_PROVIDER);
	}
	return ipc_errno_err(l->ctx, EADDRINUSE, "bind (no free port)", WIMM_E_ADDR);
}

int ipc_listen(void *bctx, const char *host, const char *port, void **blis, int *port_out)
{
	struct ipc_ctx *x = bctx;
	struct ipc_lis *l;
	int p, ret;

	if (ipc_host_local(host) != 1) {
		wimm_ctx_set_provider_error(x->core, 0,
					    "ipc listens on this host only (127.0.0.1)");
		return WIMM_E_ADDR;
	}
	ret = ipc_parse_port(port, &p);
	if (ret)
		return ret;
	l = calloc(1, sizeof(*l));
	if (!l)
		return WIMM_E_NOMEM;
	l->ctx = x;
	int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (sock < 0) {
		ret = ipc_errno_err(x, errno, "socket", WIMM_E_PROVIDER);
		goto err_free;
	}
	ret = ipc_bind(l, sock, p, port_out);
	if (ret)
		goto err_close;
	if (listen(sock, SOMAXCONN)) {
		ret = ipc_errno_err(x, errno, "listen", WIMM_E_PROVIDER);
		goto err_close;
	}
	/* The listener fd: readable when a connector or a handshake moves. */
	ret = wimm_sidechan_open(&l->sc, x->core, sock);
	if (ret)
		goto err_free;
	*blis = l;
	return 0;

err_close:
	close(sock);
err_free:
	free(l);
	return ret;
}

void ipc_listener_close(void *blis)
{
	struct ipc_lis *l = blis;

	wimm_sidechan_close(&l->sc);
	free(l);
}

int ipc_listener_fd(void *blis)
{
	return ((struct ipc_lis *)blis)->sc.epfd;
}

/* Where a whole request goes (ipc_read). */
struct ipc_hs_out {
	struct ipc_ctx *x;
	uint8_t *hs;
	size_t *hs_len;
	struct ipc_req *req;
};

/* A connector's handshake, whole or not at all (SOCK_SEQPACKET), with
 * the three fds it must carry (four with a window): 1 and the request in
 * o->req. */
static int ipc_read(struct wimm_sidechan_pend *p, void *arg)
{
	struct ipc_hs_out *o = arg;
	int fds[IPC_NFDS_MAX] = {-1, -1, -1, -1}, nfds;
	ssize_t n = ipc_recv_msg(p->fd, o->hs, *o->hs_len, fds, &nfds);

	if (n == -EAGAIN || n == -EWOULDBLOCK || n == -EINTR)
		return 0;
	if (n <= 0 || nfds < IPC_NFDS) {
		ipc_close_fds(fds, nfds > 0 ? nfds : 0);
		if (n <= 0)
			return wimm_sidechan_fail(o->x->core, n ? (int)-n : ECONNRESET,
						  "reading handshake");
		return ipc_errno_err(o->x, EPROTO, "handshake without its three fds", WIMM_E_PROTO);
	}
	struct ipc_req *r = calloc(1, sizeof(*r));
	if (!r) {
		ipc_close_fds(fds, nfds);
		return WIMM_E_NOMEM;
	}
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	if (getsockopt(p->fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl))
		cred.pid = 0;
	/* The "port" of a connector is its process id. */
	snprintf(r->peer, sizeof(r->peer), "127.0.0.1:%d", (int)cred.pid);
	memcpy(r->fd, fds, sizeof(fds));
	*o->hs_len = (size_t)n;
	o->req = r;
	return 1;
}

int ipc_get_request(void *blis, int timeout_ms, void **breq, uint8_t *hs, size_t *hs_len)
{
	struct ipc_lis *l = blis;
	struct ipc_hs_out o = {l->ctx, hs, hs_len, NULL};
	int sock = -1;
	int ret = wimm_sidechan_request(&l->sc, timeout_ms, ipc_read, &o, NULL, NULL, &sock);

	if (ret)
		return ret;
	o.req->sock = sock;
	*breq = o.req;
	return 0;
}

int ipc_request_peer(void *breq, char *buf, size_t len)
{
	struct ipc_req *r = breq;

	if (snprintf(buf, len, "%s", r->peer) >= (int)len)
		return WIMM_E_INVAL;
	return 0;
}

void ipc_reject(void *breq, const uint8_t *msg, size_t len)
{
	struct ipc_req *r = breq;

	/* A fresh socket has room for one small message: never waits. */
	ipc_send_msg(r->sock, msg, len, NULL, 0);
	close(r->sock);
	ipc_close_fds(r->fd, IPC_NFDS_MAX);
	free(r);
}

/* ------------------------------------------------------------- connecting */

static int ipc_dial(struct ipc_conn *c, int port, int64_t deadline)
{
	struct sockaddr_un sa;
	socklen_t sl = ipc_sun(port, &sa);
	struct timespec pause = {0, 1000000};

	c->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->sock < 0)
		return -errno;
	/* A full backlog (EAGAIN) clears as the listener takes connectors. */
	while (connect(c->sock, (struct sockaddr *)&sa, sl)) {
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		if (wimm_now_ms() >= deadline)
			return -ETIMEDOUT;
		nanosleep(&pause, NULL);
	}
	return 0;
}

int ipc_connect(void *bconn, const char *host, const char *port, const uint8_t *hs, size_t hs_len,
		uint8_t *reply, size_t *reply_len, int timeout_ms)
{
	struct ipc_conn *c = bconn;
	struct ipc_ctx *x = c->ctx;
	int64_t deadline = wimm_now_ms() + timeout_ms;
	int p, nfds, mine[IPC_NFDS_MAX], ret = ipc_parse_port(port, &p);

	if (ret)
		return ret;
	ret = ipc_host_local(host);
	if (ret != 1) {
		wimm_ctx_set_provider_error(
		    x->core, 0, ret ? "unresolvable host" : "ipc reaches this host only");
		return ret ? ret : WIMM_E_UNREACHABLE;
	}
	int err = -ipc_dial(c, p, deadline);
	if (!err)
		err = -ipc_send_msg(c->sock, hs, hs_len, mine, ipc_conn_fds(c, mine));
	if (!err)
		err = -wimm_sidechan_wait_fd(c->sock, POLLIN, deadline, x->core);
	if (err)
		return wimm_sidechan_fail(x->core, err, "connect");
	ssize_t n = ipc_recv_msg(c->sock, reply, *reply_len, c->peer_fd, &nfds);
	if (n < 0)
		return wimm_sidechan_fail(x->core, (int)-n, "reading the reply");
	if (n == 0)
		return ipc_errno_err(x, ECONNRESET, "the listener closed", WIMM_E_DISCONNECTED);
	*reply_len = (size_t)n;
	if (nfds == 0) {
		/* No fds: a refusal (the core reads the reason from it). */
		int reason;
		return wimm_hs_decode_reject(reply, *reply_len, &reason) ? WIMM_E_REFUSED
									 : WIMM_E_PROTO;
	}
	if (nfds < IPC_NFDS) {
		ipc_close_fds(c->peer_fd, nfds > 0 ? nfds : 0);
		return ipc_errno_err(x, EPROTO, "reply without its three fds", WIMM_E_PROTO);
	}
	return 0;
}

int ipc_accept(void *bconn, const uint8_t *hs, size_t hs_len)
{
	struct ipc_conn *c = bconn;
	int mine[IPC_NFDS_MAX];

	/* A fresh socket has room for one small message: never waits. */
	int ret = ipc_send_msg(c->sock, hs, hs_len, mine, ipc_conn_fds(c, mine));
	if (ret)
		return wimm_sidechan_fail(c->ctx->core, -ret, "sending handshake");
	return 0;
}
