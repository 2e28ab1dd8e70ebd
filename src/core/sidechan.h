/* The side channel of backends whose fabric has no connection manager of
 * its own (ofi:shm over TCP, ipc over an abstract unix socket): a
 * listening socket and the connectors whose handshake has not all arrived
 * yet, read a piece at a time and never waited for (a slow or silent one
 * holds up no other and is dropped after its deadline); the framed
 * handshake of stream sockets; waiting on a socket within a deadline; and,
 * once a connection is up, its socket as the liveness channel. Which
 * sockets (family, address, binding) and what a handshake carries besides
 * its bytes (ipc: file descriptors) stay the backend's. */
#ifndef WIMM_CORE_SIDECHAN_H
#define WIMM_CORE_SIDECHAN_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "core/handshake.h"

/* A connector's handshake must follow its connect within this. */
#define WIMM_SIDECHAN_READ_MS 2000
/* Connectors read at once; more wait in the socket's backlog. */
#define WIMM_SIDECHAN_PENDING_MAX 1024

/* A connector whose handshake is not whole yet. */
struct wimm_sidechan_pend {
	int fd;
	int64_t deadline_ms;
	size_t got;			  /* framed: bytes of buf so far */
	uint8_t buf[4 + WIMM_HS_MAX_LEN]; /* framed: length and handshake */
};

struct wimm_sidechan {
	struct wimm_ctx *core; /* where errors are recorded */
	int sock;	       /* listening, non-blocking */
	int epfd;	       /* epoll of sock and the connectors: the listener's fd */
	struct wimm_sidechan_pend *pend;
	int npend, cap;
};

/* One try at connector p's handshake, never waiting: 1 when it is whole
 * (the backend has taken what it needs from p or the socket), 0 not yet,
 * or a negative WIMM_E_* with the provider error recorded (p is dropped). */
typedef int (*wimm_sidechan_read_fn)(struct wimm_sidechan_pend *p, void *arg);
/* Called while a request is waited for, at least every millisecond (ofi:
 * shm progress, which moves only inside calls). */
typedef void (*wimm_sidechan_idle_fn)(void *arg);

/* Take over sock (bound and listening, non-blocking): 0, or a WIMM_E_*
 * with sock closed. */
int wimm_sidechan_open(struct wimm_sidechan *sc, struct wimm_ctx *core, int sock);
/* Closes the listening socket, the connectors, the epoll set. */
void wimm_sidechan_close(struct wimm_sidechan *sc);
/* A connector whose handshake is whole, within timeout_ms (0: only what is
 * there, -1: no limit): 0 and its socket in *fd (now the caller's),
 * WIMM_E_AGAIN / WIMM_E_TIMEDOUT when none came, or the error of one
 * connector, returned once (it is dropped; the listener stays usable). */
int wimm_sidechan_request(struct wimm_sidechan *sc, int timeout_ms, wimm_sidechan_read_fn read,
			  void *arg, wimm_sidechan_idle_fn idle, void *idle_arg, int *fd);

/* Framed stream handshakes: a 4-byte big-endian length, then the bytes.
 * 0 or a negative errno (EMSGSIZE: too long, ECONNRESET: EOF). */
int wimm_sidechan_send_frame(int fd, const uint8_t *buf, size_t len, int64_t deadline);
int wimm_sidechan_recv_frame(int fd, uint8_t *buf, size_t cap, size_t *len, int64_t deadline);
/* What p's socket has of its frame, never waiting: 1 whole (the bytes at
 * p->buf + 4, p->got - 4 of them), 0 not yet, or a negative errno. */
int wimm_sidechan_read_frame(struct wimm_sidechan_pend *p);

/* Until fd is ready for events (poll), within deadline; with ctx, its
 * connections' heartbeats go on meanwhile. 0 or a negative errno. */
int wimm_sidechan_wait_fd(int fd, short events, int64_t deadline, struct wimm_ctx *ctx);
/* A connection's socket after its handshake: 0 while the peer holds it
 * open (whatever it sends is dropped), else the errno (ECONNRESET: EOF). */
int wimm_sidechan_alive(int fd);
/* A socket errno as a WIMM_E_* code; and that code with "what: strerror"
 * recorded as ctx's provider error. */
int wimm_sidechan_code(int err);
int wimm_sidechan_fail(struct wimm_ctx *ctx, int err, const char *what);

#endif
