/* The side channel of backends without a connection manager: sidechan.h. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/sidechan.h"

#define SIDECHAN_SLICE_MS 10 /* a connect's wait between two heartbeats */

int wimm_sidechan_code(int err)
{
	switch (err) {
	case ETIMEDOUT:
		return WIMM_E_TIMEDOUT;
	case EMSGSIZE:
	case EPROTO:
		return WIMM_E_PROTO;
	case ECONNREFUSED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case ENOENT:
		return WIMM_E_UNREACHABLE;
	case ECONNRESET:
	case EPIPE:
		return WIMM_E_DISCONNECTED;
	default:
		return WIMM_E_PROVIDER;
	}
}

int wimm_sidechan_fail(struct wimm_ctx *ctx, int err, const char *what)
{
	char text[160];

	snprintf(text, sizeof(text), "%s: %s", what, strerror(err));
	wimm_ctx_set_provider_error(ctx, err, text);
	return wimm_sidechan_code(err);
}

/* --------------------------------------------------------------- listening */

int wimm_sidechan_open(struct wimm_sidechan *sc, struct wimm_ctx *core, int sock)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = sock};

	*sc = (struct wimm_sidechan){.core = core, .sock = sock};
	sc->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (sc->epfd < 0 || epoll_ctl(sc->epfd, EPOLL_CTL_ADD, sock, &ev)) {
		wimm_sidechan_fail(core, errno, "epoll (listener)");
		if (sc->epfd >= 0)
			close(sc->epfd);
		close(sock);
		sc->epfd = sc->sock = -1;
		return WIMM_E_PROVIDER;
	}
	return 0;
}

static void sidechan_drop(struct wimm_sidechan *sc, int i)
{
	epoll_ctl(sc->epfd, EPOLL_CTL_DEL, sc->pend[i].fd, NULL);
	close(sc->pend[i].fd);
	sc->pend[i] = sc->pend[--sc->npend];
}

void wimm_sidechan_close(struct wimm_sidechan *sc)
{
	while (sc->npend)
		sidechan_drop(sc, 0);
	free(sc->pend);
	sc->pend = NULL;
	sc->cap = 0;
	if (sc->epfd >= 0)
		close(sc->epfd);
	if (sc->sock >= 0)
		close(sc->sock);
	sc->epfd = sc->sock = -1;
}

/* Room for one more connector; 0 when the table is at its limit (the
 * others wait in the backlog) or out of memory. */
static int sidechan_room(struct wimm_sidechan *sc)
{
	if (sc->npend < sc->cap)
		return 1;
	if (sc->cap >= WIMM_SIDECHAN_PENDING_MAX)
		return 0;
	int cap = sc->cap ? 2 * sc->cap : 16;
	struct wimm_sidechan_pend *p = realloc(sc->pend, (size_t)cap * sizeof(*p));

	if (!p)
		return 0;
	sc->pend = p;
	sc->cap = cap;
	return 1;
}

/* Take every connector waiting in the accept queue. */
static int sidechan_take(struct wimm_sidechan *sc)
{
	while (sidechan_room(sc)) {
		int fd = accept4(sc->sock, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

		if (fd < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
			    errno == ECONNABORTED)
				return 0;
			return wimm_sidechan_fail(sc->core, errno, "accept");
		}
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
		if (epoll_ctl(sc->epfd, EPOLL_CTL_ADD, fd, &ev)) {
			int ret = wimm_sidechan_fail(sc->core, errno, "epoll (connector)");

			close(fd);
			return ret;
		}
		struct wimm_sidechan_pend *p = &sc->pend[sc->npend++];

		p->fd = fd;
		p->got = 0;
		p->deadline_ms = wimm_now_ms() + WIMM_SIDECHAN_READ_MS;
	}
	return 0;
}

/* A connector whose handshake is whole, without waiting on any: its index
 * (taken out of the table, its fd in *fd), WIMM_E_AGAIN, or the error of
 * one connector, which is dropped. */
static int sidechan_ready(struct wimm_sidechan *sc, wimm_sidechan_read_fn read, void *arg, int *fd)
{
	int64_t now = wimm_now_ms();
	int ret = sidechan_take(sc);

	if (ret)
		return ret;
	for (int i = 0; i < sc->npend; i++) {
		ret = read(&sc->pend[i], arg);
		if (ret < 0) {
			sidechan_drop(sc, i);
			return ret;
		}
		if (ret == 0) {
			if (now < sc->pend[i].deadline_ms)
				continue;
			sidechan_drop(sc, i);
			return wimm_sidechan_fail(sc->core, ETIMEDOUT, "reading handshake");
		}
		*fd = sc->pend[i].fd;
		epoll_ctl(sc->epfd, EPOLL_CTL_DEL, *fd, NULL);
		sc->pend[i] = sc->pend[--sc->npend];
		return 0;
	}
	return WIMM_E_AGAIN;
}

int wimm_sidechan_request(struct wimm_sidechan *sc, int timeout_ms, wimm_sidechan_read_fn read,
			  void *arg, wimm_sidechan_idle_fn idle, void *idle_arg, int *fd)
{
	int64_t deadline = wimm_now_ms() + timeout_ms;

	for (;;) {
		struct epoll_event ev[8];
		int ret = sidechan_ready(sc, read, arg, fd);

		if (ret != WIMM_E_AGAIN)
			return ret;
		if (timeout_ms == 0)
			return WIMM_E_AGAIN;
		int wait = timeout_ms < 0 ? -1 : wimm_remaining_ms(deadline);
		if (wait == 0)
			return WIMM_E_TIMEDOUT;
		/* Wake for the next connector's deadline too. */
		if (sc->npend && (wait < 0 || wait > 100))
			wait = 100;
		if (idle) {
			idle(idle_arg);
			if (wait < 0 || wait > 1)
				wait = 1;
		}
		if (epoll_wait(sc->epfd, ev, 8, wait) < 0 && errno != EINTR)
			return wimm_sidechan_fail(sc->core, errno, "epoll_wait (listener)");
	}
}

/* ------------------------------------------------------------------ frames */

int wimm_sidechan_wait_fd(int fd, short events, int64_t deadline, struct wimm_ctx *ctx)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = events};
		int left = wimm_remaining_ms(deadline);
		int slice =
		    ctx && (left < 0 || left > SIDECHAN_SLICE_MS) ? SIDECHAN_SLICE_MS : left;
		int r = poll(&p, 1, slice);

		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (left == 0)
			return -ETIMEDOUT;
		/* The context's other connections must not look silent. */
		if (ctx)
			wimm_ctx_keepalive(ctx);
	}
}

static int sidechan_io_all(int fd, void *buf, size_t len, int64_t deadline, int out)
{
	uint8_t *p = buf;

	while (len) {
		int ret = wimm_sidechan_wait_fd(fd, out ? POLLOUT : POLLIN, deadline, NULL);

		if (ret)
			return ret;
		ssize_t r = out ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
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

static uint32_t sidechan_be32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

int wimm_sidechan_send_frame(int fd, const uint8_t *buf, size_t len, int64_t deadline)
{
	uint8_t frame[4 + WIMM_HS_MAX_LEN];

	if (len > WIMM_HS_MAX_LEN)
		return -EMSGSIZE;
	frame[0] = (uint8_t)(len >> 24);
	frame[1] = (uint8_t)(len >> 16);
	frame[2] = (uint8_t)(len >> 8);
	frame[3] = (uint8_t)len;
	memcpy(frame + 4, buf, len);
	return sidechan_io_all(fd, frame, 4 + len, deadline, 1);
}

int wimm_sidechan_recv_frame(int fd, uint8_t *buf, size_t cap, size_t *len, int64_t deadline)
{
	uint8_t hdr[4];
	int ret = sidechan_io_all(fd, hdr, 4, deadline, 0);

	if (ret)
		return ret;
	uint32_t n = sidechan_be32(hdr);
	if (n > cap || n > WIMM_HS_MAX_LEN)
		return -EMSGSIZE;
	*len = n;
	return sidechan_io_all(fd, buf, n, deadline, 0);
}

int wimm_sidechan_read_frame(struct wimm_sidechan_pend *p)
{
	for (;;) {
		size_t want = p->got < 4 ? 4 - p->got : 0;

		if (!want) {
			uint32_t n = sidechan_be32(p->buf);

			if (n > WIMM_HS_MAX_LEN)
				return -EMSGSIZE;
			want = 4 + n - p->got;
			if (!want)
				return 1;
		}
		ssize_t r = recv(p->fd, p->buf + p->got, want, MSG_DONTWAIT);
		if (r == 0)
			return -ECONNRESET;
		if (r < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0
											 : -errno;
		p->got += (size_t)r;
	}
}

/* ---------------------------------------------------------------- liveness */

int wimm_sidechan_alive(int fd)
{
	char buf[64];
	ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

	if (r == 0)
		return ECONNRESET;
	if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		return errno;
	return 0;
}
