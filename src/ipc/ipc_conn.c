/* ipc backend: connections. Each side owns the ring it produces into (a
 * sealed memfd sized for its own send depth) and maps the peer's read-write
 * (it writes the consumer index and the status of what it consumed). The
 * peer's memfds are checked before they are mapped: sealed against
 * resizing (no SIGBUS from a peer that shrinks them), of the size their
 * geometry says; the geometry is copied once and trusted no more. A window
 * in wimm_mr_alloc memory is offered to a peer of our user for mapping
 * (ipc_wire.h): its writes then store into it, behind the gate that
 * ipc_gate.c keeps. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ipc/ipc_internal.h"

#define IPC_SEALS (F_SEAL_SHRINK | F_SEAL_GROW)

static uint32_t ipc_pow2(uint32_t v)
{
	uint32_t n = IPC_MIN_ENTRIES;

	while (n < v)
		n <<= 1;
	return n;
}

static int ipc_txq_new(struct ipc_conn *c, const struct wimm_conn_cfg *cfg)
{
	struct ipc_txq *q = &c->tx;
	struct ipc_ctx *x = c->ctx;
	uint32_t entries = ipc_pow2(cfg->sq_depth + cfg->sq_reserve);
	int ret = wimm_send_ring_init(&q->ops, cfg->sq_depth, cfg->sq_reserve, entries);

	/* The shared ring and the send ring: one index for both. */
	if (ret)
		return ret;
	entries = wimm_send_ring_slots(&q->ops);
	q->n = entries;
	q->mask = entries - 1;
	q->map_len = ipc_ring_bytes(entries, IPC_DATA_BYTES);
	q->rec = calloc(entries, sizeof(*q->rec));
	if (!q->rec)
		return WIMM_E_NOMEM;
	q->fd = memfd_create("wimm-ipc-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (q->fd < 0)
		return ipc_errno_err(x, errno, "memfd_create (ring)", WIMM_E_PROVIDER);
	if (ftruncate(q->fd, (off_t)q->map_len) ||
	    fcntl(q->fd, F_ADD_SEALS, IPC_SEALS | F_SEAL_SEAL))
		return ipc_errno_err(x, errno, "sealing the ring", WIMM_E_PROVIDER);
	q->hdr = mmap(NULL, q->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, q->fd, 0);
	if (q->hdr == MAP_FAILED) {
		q->hdr = NULL;
		return ipc_errno_err(x, errno, "mmap (ring)", WIMM_E_PROVIDER);
	}
	q->hdr->magic = IPC_MAGIC;
	q->hdr->entries = entries;
	q->hdr->data_bytes = IPC_DATA_BYTES;
	q->hdr->self = (uint64_t)(uintptr_t)q->hdr;
	q->ent = ipc_entries(q->hdr);
	q->data = (uint8_t *)(q->ent + entries);
	return 0;
}

static int ipc_conn_index(struct ipc_ctx *x, struct ipc_conn *c)
{
	for (uint32_t k = 0; k < IPC_MAX_CONNS; k++) {
		uint32_t i = (x->next_idx + k) % IPC_MAX_CONNS;
		if (x->tab[i])
			continue;
		x->tab[i] = c;
		c->idx = i;
		/* Round robin: a freed index is reused last, so a stale bit set
		 * by a gone peer rarely names a new connection (harmless anyway). */
		x->next_idx = i + 1;
		x->nconns++;
		return 0;
	}
	wimm_ctx_set_provider_error(x->core, 0, "ipc: too many connections in one context");
	return WIMM_E_AGAIN;
}

int ipc_conn_new(void *bctx, void *breq, const struct wimm_conn_cfg *cfg, void **bconn)
{
	struct ipc_ctx *x = bctx;
	struct ipc_req *req = breq;
	struct ipc_conn *c;
	int ret;

	c = calloc(1, sizeof(*c));
	if (!c) {
		ret = WIMM_E_NOMEM;
		goto err_refuse;
	}
	c->ctx = x;
	c->core = cfg->core;
	c->sock = -1;
	c->tx.fd = -1;
	c->peer_efd = -1;
	for (int i = 0; i < IPC_NFDS_MAX; i++)
		c->peer_fd[i] = -1;
	/* Only a writable window in memory wimm allocated can be mapped. */
	if (cfg->window && cfg->window->memfd >= 0 && (cfg->window->access & WIMM_REMOTE_WRITE))
		c->win = cfg->window;
	c->rx_depth = cfg->rx_depth;
	wimm_recv_slots_init(&c->rx_slots, cfg->rx_depth);
	c->recv_size = cfg->recv_size;
	ret = ipc_conn_index(x, c);
	if (ret)
		goto err_free;
	if (c->recv_size) {
		c->slots = malloc((size_t)c->rx_depth * c->recv_size);
		if (!c->slots) {
			ret = WIMM_E_NOMEM;
			goto err_delete;
		}
	}
	ret = ipc_txq_new(c, cfg);
	if (ret)
		goto err_delete;
	if (req) {
		/* The request is the endpoint's now: deleting it refuses. */
		c->passive = 1;
		c->sock = req->sock;
		memcpy(c->peer_fd, req->fd, sizeof(c->peer_fd));
		free(req);
	}
	*bconn = c;
	return 0;

err_delete:
	ipc_conn_delete(c);
	c = NULL;
err_free:
	free(c);
err_refuse:
	if (req) {
		uint8_t msg[WIMM_HS_REJECT_LEN];
		wimm_hs_encode_reject(ret, msg);
		ipc_reject(req, msg, sizeof(msg));
	}
	return ret;
}

/* The pid the kernel names for the peer at the other end of the socket
 * when it runs as our user (it could read and write our memory anyway,
 * process_vm_writev: offering it direct payloads or our mapped window gives
 * it nothing new), and when WIMM_IPC_DIRECT allows either; else 0. */
static pid_t ipc_peer_of_our_user(const struct ipc_conn *c)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (!c->ctx->direct || c->sock < 0 ||
	    getsockopt(c->sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) || cred.uid != geteuid())
		return 0;
	return cred.pid > 0 ? cred.pid : 0;
}

int ipc_conn_fds(struct ipc_conn *c, int *fd)
{
	fd[0] = c->tx.fd;
	fd[1] = c->ctx->pgfd;
	fd[2] = c->ctx->efd;
	c->win_offered = c->win && ipc_peer_of_our_user(c) > 0;
	if (!c->win_offered)
		return IPC_NFDS;
	fd[3] = c->win->memfd;
	return IPC_NFDS_MAX;
}

int ipc_conn_addr(void *bconn, uint8_t *buf, size_t *len)
{
	struct ipc_conn *c = bconn;
	size_t need = c->win ? IPC_ADDR_WIN_LEN : IPC_ADDR_LEN;

	if (*len < need)
		return WIMM_E_NOMEM;
	uint32_t v[2] = {IPC_ADDR_MAGIC, c->idx};
	memcpy(buf, v, sizeof(v));
	/* Where the window starts in its memfd, should we send the memfd. */
	if (c->win)
		memcpy(buf + IPC_ADDR_LEN, &c->win->memfd_off, sizeof(c->win->memfd_off));
	*len = need;
	return 0;
}

/* A memfd of the peer's, sealed against resizing and of `len` bytes. */
static int ipc_check_memfd(struct ipc_conn *c, int fd, size_t *len, const char *what)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0 || (seals & IPC_SEALS) != IPC_SEALS || fstat(fd, &st) || st.st_size <= 0) {
		char text[120];
		snprintf(text, sizeof(text), "the peer's %s is no sealed memfd", what);
		wimm_ctx_set_provider_error(c->ctx->core, 0, text);
		return WIMM_E_PROTO;
	}
	*len = (size_t)st.st_size;
	return 0;
}

/* The peer's eventfd, never blocking us: a peer sending another kind of
 * fd (a pipe that fills) must not hang our writes. */
static int ipc_check_eventfd(struct ipc_conn *c, int fd)
{
	char path[64], link[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, link, sizeof(link) - 1);

	if (n <= 0 || (link[n] = 0, strcmp(link, "anon_inode:[eventfd]") != 0) ||
	    fcntl(fd, F_SETFL, O_NONBLOCK)) {
		wimm_ctx_set_provider_error(c->ctx->core, 0, "the peer's wake fd is no eventfd");
		return WIMM_E_PROTO;
	}
	return 0;
}

/* The peer's window, offered with its memfd (the fourth fd): mapped so
 * that our writes into it are stores. The window the handshake names must
 * lie inside the memfd, which is sealed against shrinking. */
static int ipc_map_peer_window(struct ipc_conn *c, const struct wimm_handshake *peer, int fd)
{
	uint64_t off = 0;
	size_t len;
	int ret = ipc_check_memfd(c, fd, &len, "window");

	if (ret)
		return ret;
	if (peer->addr_len == IPC_ADDR_WIN_LEN)
		memcpy(&off, peer->addr + IPC_ADDR_LEN, sizeof(off));
	if (peer->addr_len != IPC_ADDR_WIN_LEN || !(peer->flags & WIMM_HS_F_WINDOW_WRITE) ||
	    peer->window_len == 0 || off > len || peer->window_len > len - off) {
		wimm_ctx_set_provider_error(c->ctx->core, 0,
					    "the peer's window does not fit the memfd it sent");
		return WIMM_E_PROTO;
	}
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t start = off & ~(page - 1);
	size_t map_len = (size_t)((off + peer->window_len + page - 1) / page * page - start);
	void *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
	if (m == MAP_FAILED)
		return ipc_errno_err(c->ctx, errno, "mmap (peer window)", WIMM_E_PROVIDER);
	c->pw_map = m;
	c->pw_map_len = map_len;
	c->pw_base = c->pw_map + (off - start);
	c->pw_addr = peer->window_addr;
	c->pw_len = peer->window_len;
	c->pw_key = peer->window_key;
	c->gate_light = ipc_gate_register();
	return 0;
}

static int ipc_map_peer_ring(struct ipc_conn *c, int fd)
{
	struct ipc_rxq *q = &c->rx;
	size_t len;
	int ret = ipc_check_memfd(c, fd, &len, "ring");

	if (ret)
		return ret;
	if (len < IPC_HDR_BYTES)
		goto err_geometry;
	q->hdr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (q->hdr == MAP_FAILED) {
		q->hdr = NULL;
		return ipc_errno_err(c->ctx, errno, "mmap (peer ring)", WIMM_E_PROVIDER);
	}
	q->map_len = len;
	uint64_t magic = __atomic_load_n(&q->hdr->magic, __ATOMIC_RELAXED);
	uint64_t n = __atomic_load_n(&q->hdr->entries, __ATOMIC_RELAXED);
	uint64_t d = __atomic_load_n(&q->hdr->data_bytes, __ATOMIC_RELAXED);
	if (magic != IPC_MAGIC || n < IPC_MIN_ENTRIES || n > (1u << 20) || (n & (n - 1)) ||
	    d > (64u << 20) || ipc_ring_bytes(n, d) != len)
		goto err_geometry;
	q->n = (uint32_t)n;
	q->mask = q->n - 1;
	q->data_bytes = d;
	q->ent = ipc_entries(q->hdr);
	q->data = (const uint8_t *)(q->ent + n);
	/* Our count starts where the ring is now: a peer that published
	 * before we mapped must still be within one ring of it. */
	q->cons = __atomic_load_n(&q->hdr->cons, __ATOMIC_ACQUIRE);
	q->published = q->cons;
	return 0;

err_geometry:
	wimm_ctx_set_provider_error(c->ctx->core, 0, "the peer's ring has a bad geometry");
	return WIMM_E_PROTO;
}

/* Offer the peer to leave its large payloads in place (ipc_wire.h): only
 * a peer of our own user, which could read our memory anyway, and only
 * when we can read its memory now, through the pid the kernel names for
 * the connection's socket (not one the peer could choose). */
static void ipc_offer_direct(struct ipc_conn *c)
{
	pid_t pid = ipc_peer_of_our_user(c);
	uint64_t magic = 0;
	struct iovec mine = {.iov_base = &magic, .iov_len = sizeof(magic)};
	/* Read once here: the peer may rewrite it, but it names only its own memory. */
	uint64_t self = __atomic_load_n(&c->rx.hdr->self, __ATOMIC_RELAXED);
	struct iovec theirs = {.iov_base = (void *)(uintptr_t)self, .iov_len = sizeof(magic)};

	if (pid <= 0 || process_vm_readv(pid, &mine, 1, &theirs, 1, 0) != (ssize_t)sizeof(magic) ||
	    magic != IPC_MAGIC)
		return;
	c->rx.pid = pid;
	__atomic_store_n(&c->rx.hdr->direct, 1, __ATOMIC_RELEASE);
}

int ipc_conn_ready(void *bconn, const struct wimm_handshake *peer)
{
	struct ipc_conn *c = bconn;
	struct ipc_ctx *x = c->ctx;
	size_t len;
	uint32_t v[2];
	int ret;

	if ((peer->addr_len != IPC_ADDR_LEN && peer->addr_len != IPC_ADDR_WIN_LEN) ||
	    c->peer_fd[0] < 0) {
		wimm_ctx_set_provider_error(x->core, 0, "the peer sent no ipc address");
		return WIMM_E_PROTO;
	}
	memcpy(v, peer->addr, sizeof(v));
	if (v[0] != IPC_ADDR_MAGIC || v[1] >= IPC_MAX_CONNS) {
		wimm_ctx_set_provider_error(x->core, 0, "the peer's ipc address is malformed");
		return WIMM_E_PROTO;
	}
	c->peer_idx = v[1];
	ret = ipc_map_peer_ring(c, c->peer_fd[0]);
	if (ret)
		return ret;
	ipc_offer_direct(c);
	ipc_gate_offer(c);
	ret = ipc_check_memfd(c, c->peer_fd[1], &len, "wake page");
	if (ret)
		return ret;
	if (len != IPC_PAGE_BYTES) {
		wimm_ctx_set_provider_error(x->core, 0, "the peer's wake page has a bad size");
		return WIMM_E_PROTO;
	}
	ret = ipc_check_eventfd(c, c->peer_fd[2]);
	if (ret)
		return ret;
	if (c->peer_fd[3] >= 0 && (ret = ipc_map_peer_window(c, peer, c->peer_fd[3])))
		return ret;
	c->peer_page =
	    mmap(NULL, IPC_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, c->peer_fd[1], 0);
	if (c->peer_page == MAP_FAILED) {
		c->peer_page = NULL;
		return ipc_errno_err(x, errno, "mmap (peer wake page)", WIMM_E_PROVIDER);
	}
	/* The mappings hold what we need; the eventfd stays open. */
	c->peer_efd = c->peer_fd[2];
	c->peer_fd[2] = -1;
	ipc_close_fds(c->peer_fd, IPC_NFDS_MAX);
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
	if (epoll_ctl(x->epfd, EPOLL_CTL_ADD, c->sock, &ev))
		return ipc_errno_err(x, errno, "epoll (connection socket)", WIMM_E_PROVIDER);
	c->in_epoll = 1;
	c->mapped = 1;
	/* The passive side reports its CONN_UP from poll (accept never
	 * blocks); anything the peer already sent is looked at then too. */
	if (c->passive) {
		c->up_pending = 1;
		ipc_evq_add(c);
	}
	ipc_ready_add(c);
	return 0;
}

void ipc_conn_shutdown(void *bconn)
{
	struct ipc_conn *c = bconn;

	c->cut = 1;
	ipc_gate_close(c);
	if (c->sock >= 0)
		shutdown(c->sock, SHUT_RDWR);
}

static void ipc_unlink(struct ipc_conn **head, struct ipc_conn *c, int ready)
{
	for (struct ipc_conn **p = head; *p; p = ready ? &(*p)->ready_next : &(*p)->evq_next)
		if (*p == c) {
			*p = ready ? c->ready_next : c->evq_next;
			return;
		}
}

void ipc_conn_delete(void *bconn)
{
	struct ipc_conn *c = bconn;
	struct ipc_ctx *x = c->ctx;

	if (c->in_ready)
		ipc_unlink(&x->ready, c, 1);
	if (c->in_evq)
		ipc_unlink(&x->evq, c, 0);
	if (x->tab[c->idx] == c) {
		x->tab[c->idx] = NULL;
		x->nconns--;
	}
	if (c->in_epoll)
		epoll_ctl(x->epfd, EPOLL_CTL_DEL, c->sock, NULL);
	ipc_gate_close(c);
	if (c->sock >= 0)
		close(c->sock);
	if (c->pw_map)
		munmap(c->pw_map, c->pw_map_len);
	if (c->rx.hdr)
		munmap(c->rx.hdr, c->rx.map_len);
	if (c->peer_page)
		munmap(c->peer_page, IPC_PAGE_BYTES);
	if (c->peer_efd >= 0)
		close(c->peer_efd);
	ipc_close_fds(c->peer_fd, IPC_NFDS_MAX);
	if (c->tx.hdr)
		munmap(c->tx.hdr, c->tx.map_len);
	if (c->tx.fd >= 0)
		close(c->tx.fd);
	free(c->tx.rec);
	wimm_send_ring_fini(&c->tx.ops);
	free(c->slots);
	free(c);
}

/* ------------------------------------------------------------------- post */

/* Room for len payload bytes in the data area, contiguous (a payload that
 * would wrap starts at 0 instead); UINT64_MAX when full. */
static uint64_t ipc_data_alloc(struct ipc_txq *q, uint32_t len, uint64_t *end)
{
	uint64_t need = ((uint64_t)len + IPC_LINE - 1) & ~(uint64_t)(IPC_LINE - 1);

	if (q->data_head == q->data_tail && q->data_head % IPC_DATA_BYTES) {
		q->data_head += IPC_DATA_BYTES - q->data_head % IPC_DATA_BYTES;
		q->data_tail = q->data_head;
	}
	uint64_t pos = q->data_head % IPC_DATA_BYTES;
	uint64_t skip = pos + need > IPC_DATA_BYTES ? IPC_DATA_BYTES - pos : 0;

	if (q->data_head + skip + need - q->data_tail > IPC_DATA_BYTES)
		return UINT64_MAX;
	*end = q->data_head + skip + need;
	return skip ? 0 : pos;
}

static enum ipc_op ipc_op_of(enum wimm_op op)
{
	switch (op) {
	case WIMM_OP_WRITE_IMM:
		return IPC_OP_WRITE_IMM;
	case WIMM_OP_SEND_IMM:
		return IPC_OP_SEND_IMM;
	case WIMM_OP_READ:
		return IPC_OP_READ;
	case WIMM_OP_FETCH_ADD:
		return IPC_OP_FETCH_ADD;
	case WIMM_OP_CMP_SWAP:
		return IPC_OP_CMP_SWAP;
	default:
		return IPC_OP_WRITE;
	}
}

static int ipc_is_atomic(enum wimm_op op)
{
	return op == WIMM_OP_FETCH_ADD || op == WIMM_OP_CMP_SWAP;
}

/* A range of the peer's window that we mapped: stores go there. The core
 * checked the range against the window the peer named; this checks it
 * against what we mapped, which is that window. */
static int ipc_mapped_range(const struct ipc_conn *c, uint64_t raddr, uint64_t rkey, size_t len)
{
	return c->pw_base && rkey == c->pw_key && raddr >= c->pw_addr &&
	       raddr - c->pw_addr <= c->pw_len && len <= c->pw_len - (raddr - c->pw_addr);
}

static int ipc_mapped_target(const struct ipc_conn *c, const struct wimm_wr *wr)
{
	return (wr->op == WIMM_OP_WRITE || wr->op == WIMM_OP_WRITE_IMM) &&
	       ipc_mapped_range(c, wr->raddr, wr->rkey, wr->len);
}

/* A plain write that wants no completion is done once stored: the receiver
 * learns nothing of it on any fabric, and a later doorbell's entry is
 * published after these bytes. */
int ipc_store(void *bconn, uint64_t raddr, uint64_t rkey, const void *src, size_t len)
{
	struct ipc_conn *c = bconn;

	if (c->cut || c->down.state != WIMM_DOWN_ALIVE)
		return WIMM_E_DISCONNECTED;
	if (!ipc_mapped_range(c, raddr, rkey, len))
		return WIMM_E_NOTSUP;
	return ipc_gate_store(c, raddr, src, len);
}

int ipc_post(void *bconn, const struct wimm_wr *wr)
{
	struct ipc_conn *c = bconn;
	struct ipc_txq *q = &c->tx;
	int ret;

	if (c->cut || c->down.state != WIMM_DOWN_ALIVE)
		return WIMM_E_DISCONNECTED;
	if (!c->mapped)
		return WIMM_E_AGAIN;
	/* Stored into the peer's window by us (a mapped window, ipc_wire.h). */
	int mapped = wr->len && ipc_mapped_target(c, wr);
	/* As ipc_store, for a write that reached post() (posted before the
	 * connection was up). */
	if (mapped && wr->op == WIMM_OP_WRITE && !wr->signal && !wr->delivered)
		return ipc_gate_store(c, wr->raddr, wr->local, wr->len);
	/* The user's operations leave the reserve to the core's own. */
	if (!wimm_send_ring_has_room(&q->ops, wr->internal) && ipc_tx_retire(c, NULL, 0) < 0)
		return WIMM_E_DISCONNECTED;
	if (!wimm_send_ring_has_room(&q->ops, wr->internal))
		return WIMM_E_AGAIN;
	int atomic = ipc_is_atomic(wr->op);
	/* An atomic's 8-byte result comes back in the entry. */
	uint32_t len = atomic ? 8 : (uint32_t)wr->len;
	int fetch = atomic || wr->op == WIMM_OP_READ;
	if (mapped && (ret = ipc_gate_store(c, wr->raddr, wr->local, wr->len)))
		return ret;
	/* Left in place for the consumer to copy (ipc_wire.h), once it said it can. */
	int direct = !fetch && !mapped && len >= IPC_DIRECT_MIN &&
		     __atomic_load_n(&q->hdr->direct, __ATOMIC_ACQUIRE);
	/* The payload goes through our data area, which only retiring frees. */
	int in_data = len > IPC_INLINE && !direct && !mapped;
	uint64_t doff = 0, dend = q->data_head;
	if (in_data) {
		if (q->data_head % IPC_DATA_BYTES > IPC_DATA_RESET &&
		    wimm_send_ring_outstanding(&q->ops) && ipc_tx_retire(c, NULL, 0) < 0)
			return WIMM_E_DISCONNECTED;
		doff = ipc_data_alloc(q, len, &dend);
		if (doff == UINT64_MAX && ipc_tx_retire(c, NULL, 0) >= 0)
			doff = ipc_data_alloc(q, len, &dend);
		if (doff == UINT64_MAX)
			return WIMM_E_AGAIN;
	}
	uint64_t head = wimm_send_ring_head(&q->ops);
	struct ipc_entry *e = &q->ent[head & q->mask];
	/* Reads and atomics complete only through the owner's look at them.
	 * The consumer's index comes back only when we ask (IPC_F_PUBLISH):
	 * for the core's own operations (its reserve is small), for bytes
	 * in the data area, and once half the ring is outstanding. */
	int publish = wr->internal || in_data || wimm_send_ring_half_full(&q->ops);
	uint16_t flags =
	    (uint16_t)((wr->signal || fetch ? IPC_F_NOTIFY : 0) | (publish ? IPC_F_PUBLISH : 0) |
		       (direct ? IPC_F_DIRECT : 0) | (mapped ? IPC_F_MAPPED : 0));
	if (in_data && !fetch)
		memcpy(q->data + doff, wr->local, len);
	q->rec[head & q->mask] = (struct ipc_tx){
	    .data_end = dend,
	    .local = fetch ? wr->local : NULL,
	    .doff = doff,
	};
	q->data_head = dend;
	wimm_send_ring_push(&q->ops, wr, len, 1);
	/* The entry's line last, its stores in one burst with the seq that
	 * publishes them right after: the consumer polls this line, and a look
	 * of its between our stores would cost the line a second trip. */
	e->op = (uint16_t)ipc_op_of(wr->op);
	e->flags = flags;
	e->len = len;
	e->imm = wr->imm;
	e->status = 0;
	e->raddr = wr->raddr;
	e->rkey = wr->rkey;
	if (atomic) {
		memcpy(e->u.inl + IPC_ATOMIC_OPERAND, &wr->operand, 8);
		memcpy(e->u.inl + IPC_ATOMIC_COMPARE, &wr->compare, 8);
	} else if (mapped) {
		e->u.doff = 0;
	} else if (direct) {
		e->u.doff = (uint64_t)(uintptr_t)wr->local;
	} else if (in_data) {
		e->u.doff = doff;
	} else if (len && !fetch) {
		memcpy(e->u.inl, wr->local, len);
	}
	__atomic_store_n(&e->seq, (uint32_t)(head + 1), __ATOMIC_RELEASE);
	ipc_notify(c->peer_page, &q->hdr->watch, c->peer_efd, c->peer_idx);
	return 0;
}

int ipc_post_atomic(void *bconn, const struct wimm_wr *wr)
{
	return ipc_post(bconn, wr);
}

int ipc_rx_release(void *bconn, uint32_t n)
{
	struct ipc_conn *c = bconn;

	/* The slots are ours: handing them back is counting. */
	int ret = wimm_recv_slots_check_release(&c->rx_slots, n);

	if (!ret)
		wimm_recv_slots_release(&c->rx_slots, n);
	return ret;
}
