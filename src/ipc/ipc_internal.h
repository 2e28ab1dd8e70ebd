/* Private declarations of the ipc backend (URI "ipc"): intra-host
 * connections over shared memory. Files: ipc_ctx.c (context, regions and
 * their key table, limits, wake-up), ipc_cm.c (abstract unix sockets:
 * listen, connect, accept, fd passing), ipc_conn.c (connections, mapping,
 * posting), ipc_poll.c (consuming the peers' rings, retiring our own,
 * liveness). The layout both processes share is in ipc_wire.h. */
#ifndef WIMM_IPC_INTERNAL_H
#define WIMM_IPC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "backend.h"
#include "core/handshake.h"
#include "core/recv_slots.h"
#include "core/send_ring.h"
#include "core/sidechan.h"
#include "ipc/ipc_wire.h"

#define IPC_DATA_BYTES (16u << 20) /* per direction, mapped, touched as used */
#define IPC_MAX_MSG (8u << 20)	   /* half of it: one always fits */
/* Past this point of the data area a post first retires what it can, so
 * that an idle area starts over at 0: what stays resident is about the
 * most a connection had in flight, not the whole area. */
#define IPC_DATA_RESET (1u << 20)
#define IPC_MAX_DEPTH 16384
#define IPC_MIN_ENTRIES 64
/* Empty polls a busy connection stays watched (polled directly, its
 * producer not setting bits): a round trip or two of a ping-pong. */
#define IPC_LINGER 128

struct ipc_conn;

/* A registered region, found by the key a peer names. */
struct ipc_mr {
	uint64_t key;
	char *addr;
	size_t len;
	unsigned access;
};

struct ipc_ctx {
	struct wimm_ctx *core;
	int epfd; /* the wait fd: eventfd + connection sockets */
	int efd;  /* our eventfd, which peers write when we are armed */
	int pgfd; /* our wake page (memfd) */
	struct ipc_page *page;
	/* Regions by key: open addressing, linear probing, tombstones. */
	struct ipc_mr **mrs;
	uint32_t mr_cap, mr_used;
	/* Connections by index (their bit in our wake page). */
	struct ipc_conn *tab[IPC_MAX_CONNS];
	uint32_t next_idx, nconns;
	/* Connections that may have work (their bit was set, or a drain
	 * stopped for lack of room): a list, so idle ones cost nothing. */
	struct ipc_conn *ready;
	/* Connections with a CONN_UP or CONN_DOWN to report. */
	struct ipc_conn *evq;
	struct wimm_ctl_throttle ctl; /* the connection sockets (liveness) */
	int direct; /* offer peers direct payloads (WIMM_IPC_DIRECT, default on) */
};

/* What ipc keeps of an operation beside its send-ring slot (same index). */
struct ipc_tx {
	uint64_t data_end; /* data area position after this entry's payload */
	void *local;	   /* READ: where the bytes go */
	uint64_t doff;	   /* our own copy: the peer can rewrite the entry */
};

/* One direction as its producer sees it (our tx ring, in our memfd). */
struct ipc_txq {
	int fd;
	struct ipc_ring_hdr *hdr;
	struct ipc_entry *ent;
	uint8_t *data;
	size_t map_len;
	uint32_t n, mask;
	struct wimm_send_ring ops;     /* head: published, tail: retired */
	uint64_t data_head, data_tail; /* byte positions in the data area */
	struct ipc_tx *rec;
};

/* The other direction as its consumer sees it (the peer's memfd). The
 * geometry is our own copy, taken once: the peer can rewrite its header. */
struct ipc_rxq {
	struct ipc_ring_hdr *hdr;
	struct ipc_entry *ent;
	const uint8_t *data;
	size_t map_len;
	uint32_t n, mask;
	uint64_t data_bytes;
	uint64_t cons;
	uint64_t published; /* the cons the producer can see (IPC_F_PUBLISH) */
	pid_t pid;	    /* > 0: we offered direct payloads, read them from pid */
};

struct ipc_conn {
	struct ipc_ctx *ctx;
	struct wimm_conn *core;
	uint32_t idx;
	int sock; /* handshake, fds, then liveness */
	int in_epoll;
	int mapped;  /* conn_ready done */
	int passive; /* made from a request: reports CONN_UP */
	int cut;     /* conn_shutdown: nothing lands, posts fail */
	struct ipc_conn *ready_next;
	int in_ready;
	struct ipc_conn *evq_next;
	int in_evq;
	int up_pending;
	struct wimm_down down;
	uint32_t down_left; /* entries the peer may still land once it went */
	int watching;	    /* in the ready list, our watch flag set */
	uint32_t linger;    /* empty polls left before we stop watching */

	/* The peer's fds (from its request or its reply) until conn_ready. */
	int peer_fd[IPC_NFDS_MAX];
	uint32_t peer_idx; /* our bit in its wake page */
	struct ipc_page *peer_page;
	int peer_efd;

	struct ipc_txq tx;
	struct ipc_rxq rx;

	/* Our window's registration when the peer can map it (wimm_mr_alloc
	 * memory, writable: its memfd, offset in it and key), else NULL. The
	 * connection's own, deleted after it: a mapped entry is checked
	 * against it without a lookup. */
	const struct wimm_bmr *win;
	int win_offered;  /* sent to the peer: its writes are stores (gate) */
	int gate_shut;	  /* ipc_gate_close done */
	int gate_barrier; /* we announced a membarrier at close (ipc_gate.c) */
	int gate_light;	  /* our stores into the peer's window may skip the fence */
	/* The peer's window, mapped: stores go to pw_base + (raddr - pw_addr). */
	uint8_t *pw_map, *pw_base;
	size_t pw_map_len;
	uint64_t pw_addr, pw_len, pw_key;

	uint32_t rx_depth, recv_size;
	uint8_t *slots;
	struct wimm_recv_slots rx_slots; /* every doorbell counts (overdraft) */
};

struct ipc_req {
	int sock;
	int fd[IPC_NFDS_MAX]; /* -1 past those received */
	char peer[64];
};

struct ipc_lis {
	struct ipc_ctx *ctx;
	struct wimm_sidechan sc; /* the listener fd: sc.epfd */
};

/* ipc_ctx.c */
int ipc_errno_err(struct ipc_ctx *x, int err, const char *what, int code);
const struct ipc_mr *ipc_mr_find(const struct ipc_ctx *x, uint64_t key);
void ipc_ready_add(struct ipc_conn *c);
void ipc_evq_add(struct ipc_conn *c);

/* ipc_cm.c */
int ipc_listen(void *bctx, const char *host, const char *port, void **blis, int *port_out);
void ipc_listener_close(void *blis);
int ipc_listener_fd(void *blis);
int ipc_get_request(void *blis, int timeout_ms, void **breq, uint8_t *hs, size_t *hs_len);
int ipc_request_peer(void *breq, char *buf, size_t len);
void ipc_reject(void *breq, const uint8_t *msg, size_t len);
int ipc_connect(void *bconn, const char *host, const char *port, const uint8_t *hs, size_t hs_len,
		uint8_t *reply, size_t *reply_len, int timeout_ms);
int ipc_accept(void *bconn, const uint8_t *hs, size_t hs_len);
void ipc_close_fds(int *fd, int n);

/* ipc_conn.c */
int ipc_conn_new(void *bctx, void *breq, const struct wimm_conn_cfg *cfg, void **bconn);
int ipc_conn_addr(void *bconn, uint8_t *buf, size_t *len);
int ipc_conn_ready(void *bconn, const struct wimm_handshake *peer);
void ipc_conn_shutdown(void *bconn);
void ipc_conn_delete(void *bconn);
int ipc_post(void *bconn, const struct wimm_wr *wr);
/* FETCH_ADD / CMP_SWAP: served by the target's progress, like a read. */
int ipc_post_atomic(void *bconn, const struct wimm_wr *wr);
/* An unsignaled plain write stored into the mapped window (backend.h). */
int ipc_store(void *bconn, uint64_t raddr, uint64_t rkey, const void *src, size_t len);
int ipc_rx_release(void *bconn, uint32_t n);
/* Our fds for the peer: tx memfd, wake page, eventfd, and the window's
 * memfd when we offer it (a peer of our user): how many. */
int ipc_conn_fds(struct ipc_conn *c, int *fd);

/* ipc_gate.c: the gate of a mapped window (ipc_wire.h). */
/* Owner: announce in the gate line that our close runs a membarrier, when
 * it can (after the peer's ring is mapped). */
void ipc_gate_offer(struct ipc_conn *c);
/* Writer: register this process for the owners' membarriers (once per
 * process); 1 when our stores may skip the fence where announced. */
int ipc_gate_register(void);
/* Writer: a copy of at most 16 bytes as at most two moves (the small
 * write's memcpy call was a tenth of its instructions, docs/performance.md,
 * section 16). Like memcpy, it promises no order among the bytes. */
static inline void ipc_copy_small(uint8_t *dst, const uint8_t *src, size_t len)
{
	if (len >= 8) {
		uint64_t head, tail;
		memcpy(&head, src, 8);
		memcpy(&tail, src + len - 8, 8);
		memcpy(dst, &head, 8);
		memcpy(dst + len - 8, &tail, 8);
	} else if (len >= 4) {
		uint32_t head, tail;
		memcpy(&head, src, 4);
		memcpy(&tail, src + len - 4, 4);
		memcpy(dst, &head, 4);
		memcpy(dst + len - 4, &tail, 4);
	} else {
		for (size_t i = 0; i < len; i++)
			dst[i] = src[i];
	}
}

/* Writer: the bytes of a write into the peer's mapped window, through the
 * gate: DISCONNECTED once the owner closed it (nothing may land then).
 * Inline: it is most of a small plain write's path. */
static inline int ipc_gate_store(struct ipc_conn *c, uint64_t raddr, const void *src, size_t len)
{
	struct ipc_ring_hdr *h = c->tx.hdr;

	__atomic_store_n(&h->busy, 1, __ATOMIC_RELAXED);
	/* `barrier`, once 1, stays 1: reading it early is harmless. */
	if (c->gate_light && __atomic_load_n(&h->barrier, __ATOMIC_RELAXED))
		__atomic_signal_fence(__ATOMIC_SEQ_CST);
	else
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&h->closed, __ATOMIC_RELAXED)) {
		__atomic_store_n(&h->busy, 0, __ATOMIC_RELEASE);
		return WIMM_E_DISCONNECTED;
	}
	uint8_t *dst = c->pw_base + (raddr - c->pw_addr);
	if (len <= 16)
		ipc_copy_small(dst, src, len);
	else
		memcpy(dst, src, len);
	__atomic_store_n(&h->busy, 0, __ATOMIC_RELEASE);
	return 0;
}
/* Owner: stores into our mapped window stop: after this returns nothing of
 * the peer's lands there (a live peer is waited for, 100 ms at most). */
void ipc_gate_close(struct ipc_conn *c);

/* ipc_poll.c */
void ipc_conn_down(struct ipc_conn *c, int status, int prov_err);
/* Retire consumed entries of our tx ring, filling up to room cqes. Stops
 * at the first that needs a cqe when room is 0; -1 on a broken peer. */
int ipc_tx_retire(struct ipc_conn *c, struct wimm_cqe *out, int room);
int ipc_poll(void *bctx, struct wimm_cqe *out, int n);
int ipc_arm(void *bctx);

#endif
