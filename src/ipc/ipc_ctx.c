/* ipc backend: the context (wake page, eventfd, wait fd), registered
 * regions and the key table peers' writes are checked against, limits,
 * discovery, and the ops table. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "ipc/ipc_internal.h"

#define IPC_TOMB ((struct ipc_mr *)(uintptr_t)1)

int ipc_errno_err(struct ipc_ctx *x, int err, const char *what, int code)
{
	char text[160];

	snprintf(text, sizeof(text), "%s: %s", what, strerror(err));
	wimm_ctx_set_provider_error(x->core, err, text);
	return code;
}

void ipc_ready_add(struct ipc_conn *c)
{
	c->linger = IPC_LINGER;
	if (c->in_ready)
		return;
	c->in_ready = 1;
	c->ready_next = c->ctx->ready;
	c->ctx->ready = c;
	/* While we poll it, its producer need not tell us. */
	if (!c->watching) {
		c->watching = 1;
		__atomic_store_n(&c->rx.hdr->watch, 1, __ATOMIC_RELAXED);
	}
}

void ipc_evq_add(struct ipc_conn *c)
{
	if (c->in_evq)
		return;
	c->in_evq = 1;
	c->evq_next = c->ctx->evq;
	c->ctx->evq = c;
}

/* A sealed memfd of len bytes, mapped shared: peers may write it but can
 * neither shrink it under us (SIGBUS) nor grow it. */
static int ipc_page_new(struct ipc_ctx *x)
{
	x->pgfd = memfd_create("wimm-ipc-wake", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (x->pgfd < 0)
		return ipc_errno_err(x, errno, "memfd_create (wake page)", WIMM_E_PROVIDER);
	if (ftruncate(x->pgfd, IPC_PAGE_BYTES) ||
	    fcntl(x->pgfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		return ipc_errno_err(x, errno, "sealing the wake page", WIMM_E_PROVIDER);
	x->page = mmap(NULL, IPC_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, x->pgfd, 0);
	if (x->page == MAP_FAILED) {
		x->page = NULL;
		return ipc_errno_err(x, errno, "mmap (wake page)", WIMM_E_PROVIDER);
	}
	return 0;
}

static void ipc_ctx_close(void *bctx)
{
	struct ipc_ctx *x = bctx;

	if (!x)
		return;
	if (x->page)
		munmap(x->page, IPC_PAGE_BYTES);
	if (x->pgfd >= 0)
		close(x->pgfd);
	if (x->efd >= 0)
		close(x->efd);
	if (x->epfd >= 0)
		close(x->epfd);
	for (uint32_t i = 0; i < x->mr_cap; i++)
		if (x->mrs[i] && x->mrs[i] != IPC_TOMB)
			free(x->mrs[i]);
	free(x->mrs);
	free(x);
}

static int ipc_ctx_open(struct wimm_ctx *ctx, const char *spec, uint32_t cq_budget, unsigned flags,
			void **bctx)
{
	struct ipc_ctx *x;
	int ret;

	(void)cq_budget; /* completions are made in poll: nothing can overrun */
	(void)flags;
	if (spec && *spec) {
		wimm_ctx_set_provider_error(ctx, 0, "the ipc fabric takes no spec (URI \"ipc\")");
		return WIMM_E_NODEV;
	}
	x = calloc(1, sizeof(*x));
	if (!x)
		return WIMM_E_NOMEM;
	x->core = ctx;
	x->pgfd = x->efd = -1;
	/* Direct payloads (ipc_wire.h) unless WIMM_IPC_DIRECT=0. */
	const char *direct = getenv("WIMM_IPC_DIRECT");
	x->direct = !direct || strcmp(direct, "0") != 0;
	x->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (x->epfd < 0) {
		ret = ipc_errno_err(x, errno, "epoll_create1", WIMM_E_PROVIDER);
		goto err_close;
	}
	x->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	if (x->efd < 0 || epoll_ctl(x->epfd, EPOLL_CTL_ADD, x->efd, &ev)) {
		ret = ipc_errno_err(x, errno, "eventfd", WIMM_E_PROVIDER);
		goto err_close;
	}
	ret = ipc_page_new(x);
	if (ret)
		goto err_close;
	*bctx = x;
	return 0;

err_close:
	ipc_ctx_close(x);
	return ret;
}

static const char *ipc_ctx_fabric(void *bctx)
{
	(void)bctx;
	return "ipc";
}

static int ipc_ctx_limits(void *bctx, struct wimm_fabric_limits *out)
{
	(void)bctx;
	out->max_msg = IPC_MAX_MSG;
	out->inject_size = IPC_INLINE;
	out->imm_bytes = 4;
	out->max_depth = IPC_MAX_DEPTH;
	out->private_max = WIMM_HS_MAX_LEN;
	out->atomic_bytes = 8; /* run by the target's poll, one at a time */
	return 0;
}

static int ipc_cq_resize(void *bctx, uint32_t total)
{
	(void)bctx;
	(void)total;
	return 0;
}

static int ipc_describe(FILE *f, int json, int *first)
{
	if (json) {
		fprintf(f,
			"%s{\"fabric\":\"ipc\",\"ep_type\":\"shm-rings\",\"domain\":\"localhost\","
			"\"imm_bytes\":4,\"max_msg\":%u,\"inject_size\":%u,\"max_depth\":%u,"
			"\"max_conns\":%u}",
			*first ? "" : ",", IPC_MAX_MSG, IPC_INLINE, IPC_MAX_DEPTH, IPC_MAX_CONNS);
		*first = 0;
	} else {
		fprintf(f,
			"ipc                  intra-host shared-memory rings, receiver-checked "
			"windows imm=4B max_msg=%u inject=%u depth=%u conns=%u\n",
			IPC_MAX_MSG, IPC_INLINE, IPC_MAX_DEPTH, IPC_MAX_CONNS);
	}
	return 0;
}

static int ipc_auto_probe(char *spec, size_t spec_len)
{
	/* One host only: `auto` must reach other machines. */
	(void)spec;
	(void)spec_len;
	return 0;
}

/* ----------------------------------------------------------- the key table */

static uint32_t ipc_slot(uint64_t key, uint32_t cap)
{
	return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
}

const struct ipc_mr *ipc_mr_find(const struct ipc_ctx *x, uint64_t key)
{
	if (!x->mr_cap || !key)
		return NULL;
	for (uint32_t i = ipc_slot(key, x->mr_cap), k = 0; k < x->mr_cap;
	     k++, i = (i + 1) & (x->mr_cap - 1)) {
		const struct ipc_mr *m = x->mrs[i];
		if (!m)
			return NULL;
		if (m != IPC_TOMB && m->key == key)
			return m;
	}
	return NULL;
}

static void ipc_mr_place(struct ipc_mr **tab, uint32_t cap, struct ipc_mr *m)
{
	uint32_t i = ipc_slot(m->key, cap);

	while (tab[i] && tab[i] != IPC_TOMB)
		i = (i + 1) & (cap - 1);
	tab[i] = m;
}

/* Keep the table at most half full (tombstones count). */
static int ipc_mr_grow(struct ipc_ctx *x)
{
	if ((x->mr_used + 1) * 2 <= x->mr_cap)
		return 0;
	uint32_t live = 0;
	for (uint32_t i = 0; i < x->mr_cap; i++)
		live += x->mrs[i] && x->mrs[i] != IPC_TOMB;
	/* Mostly tombstones: rebuild at the same size. */
	uint32_t cap = !x->mr_cap ? 64 : (live + 1) * 4 <= x->mr_cap ? x->mr_cap : x->mr_cap * 2;
	struct ipc_mr **tab = calloc(cap, sizeof(*tab));
	if (!tab)
		return WIMM_E_NOMEM;
	for (uint32_t i = 0; i < x->mr_cap; i++)
		if (x->mrs[i] && x->mrs[i] != IPC_TOMB)
			ipc_mr_place(tab, cap, x->mrs[i]);
	free(x->mrs);
	x->mrs = tab;
	x->mr_cap = cap;
	x->mr_used = live;
	return 0;
}

/* Keys a peer cannot guess: one learnt key must not name other regions. */
static uint64_t ipc_random_key(void)
{
	uint64_t key = 0;

	while (key == 0)
		if (getrandom(&key, sizeof(key), 0) != (ssize_t)sizeof(key))
			key = (uint64_t)wimm_now_ns() * 0x9e3779b97f4a7c15ull;
	return key;
}

static int ipc_mr_reg(void *bctx, void *addr, size_t len, unsigned access, struct wimm_bmr *out)
{
	struct ipc_ctx *x = bctx;
	struct ipc_mr *m;

	if (ipc_mr_grow(x))
		return WIMM_E_NOMEM;
	m = malloc(sizeof(*m));
	if (!m)
		return WIMM_E_NOMEM;
	do
		m->key = ipc_random_key();
	while (ipc_mr_find(x, m->key));
	m->addr = addr;
	m->len = len;
	m->access = access;
	ipc_mr_place(x->mrs, x->mr_cap, m);
	x->mr_used++;
	*out =
	    (struct wimm_bmr){.addr = addr, .len = len, .access = access, .key = m->key, .priv = m};
	return 0;
}

static void ipc_mr_dereg(void *bctx, struct wimm_bmr *mr)
{
	struct ipc_ctx *x = bctx;
	struct ipc_mr *m = mr->priv;

	for (uint32_t i = ipc_slot(m->key, x->mr_cap);; i = (i + 1) & (x->mr_cap - 1))
		if (x->mrs[i] == m) {
			x->mrs[i] = IPC_TOMB;
			break;
		}
	free(m);
	mr->priv = NULL;
}

static int ipc_fd(void *bctx)
{
	return ((struct ipc_ctx *)bctx)->epfd;
}

const struct wimm_backend_ops wimm_ipc_ops = {
    .scheme = "ipc",
    .ctx_open = ipc_ctx_open,
    .ctx_close = ipc_ctx_close,
    .ctx_fabric = ipc_ctx_fabric,
    .ctx_limits = ipc_ctx_limits,
    .cq_resize = ipc_cq_resize,
    .describe = ipc_describe,
    .auto_probe = ipc_auto_probe,
    .mr_reg = ipc_mr_reg,
    .mr_dereg = ipc_mr_dereg,
    .listen = ipc_listen,
    .listener_close = ipc_listener_close,
    .listener_fd = ipc_listener_fd,
    .get_request = ipc_get_request,
    .listener_pending = NULL,
    .request_peer = ipc_request_peer,
    .reject = ipc_reject,
    .conn_new = ipc_conn_new,
    .conn_addr = ipc_conn_addr,
    .connect = ipc_connect,
    .accept = ipc_accept,
    .conn_ready = ipc_conn_ready,
    .conn_shutdown = ipc_conn_shutdown,
    .conn_delete = ipc_conn_delete,
    .post = ipc_post,
    .post_atomic = ipc_post_atomic,
    .store = ipc_store,
    .rx_release = ipc_rx_release,
    .poll = ipc_poll,
    .fd = ipc_fd,
    .arm = ipc_arm,
};
