/* libfabric backend: fabric, domain, memory regions, limits, discovery. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "ofi/ofi_internal.h"

#define OFI_CAPS                                                                                   \
	(FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_WRITE | FI_REMOTE_READ | FI_SEND |       \
	 FI_RECV)

int ofi_err(struct ofi_ctx *x, int fi_ret, const char *what)
{
	char text[160];

	snprintf(text, sizeof(text), "%s: %s", what, fi_strerror(fi_ret < 0 ? -fi_ret : fi_ret));
	wimm_ctx_set_provider_error(x->core, fi_ret < 0 ? fi_ret : -fi_ret, text);
	switch (fi_ret < 0 ? -fi_ret : fi_ret) {
	case FI_ENOMEM:
		return WIMM_E_NOMEM;
	case FI_EAGAIN:
		return WIMM_E_AGAIN;
	case FI_ECONNREFUSED:
	case FI_EHOSTUNREACH:
	case FI_ENETUNREACH:
		return WIMM_E_UNREACHABLE;
	case FI_ETIMEDOUT:
		return WIMM_E_TIMEDOUT;
	case FI_ECONNRESET:
	case FI_ENOTCONN:
	case FI_ECONNABORTED:
	case EPIPE:
	case FI_ESHUTDOWN:
		return WIMM_E_DISCONNECTED;
	default:
		return WIMM_E_PROVIDER;
	}
}

int ofi_errno_err(struct ofi_ctx *x, int err, const char *what, int code)
{
	char text[160];

	snprintf(text, sizeof(text), "%s: %s", what, strerror(err));
	wimm_ctx_set_provider_error(x->core, err, text);
	return code;
}

struct fi_info *ofi_hints(const char *prov, enum fi_ep_type type)
{
	struct fi_info *h = fi_allocinfo();

	if (!h)
		return NULL;
	h->caps = OFI_CAPS;
	/* RDM endpoints are shared by the connections of a lane: completions
	 * are told apart by source, receives aimed at their peer. */
	if (type == FI_EP_RDM)
		h->caps |= FI_SOURCE | FI_DIRECTED_RECV;
	h->mode = 0;
	h->ep_attr->type = type;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	/* Credits and "writes, then one doorbell" need a write to land before
	 * a later write or send of the same endpoint: ask, so that a provider
	 * that cannot promise it does not match (shm then also stops doing
	 * plain writes by CMA beside its ordered command queue). Nagle: tcp
	 * sets TCP_NODELAY on its sockets unless the traffic class is
	 * FI_TC_BULK_DATA (libfabric >= 1.12, tcpx_setup_socket), so the
	 * unset class here is all it takes; FI_TCP_NODELAY=0 from the user
	 * still turns it off. */
	h->tx_attr->msg_order = OFI_ORDER;
	if (prov) {
		h->fabric_attr->prov_name = strdup(prov);
		if (!h->fabric_attr->prov_name) {
			fi_freeinfo(h);
			return NULL;
		}
	}
	return h;
}

/* Would the provider match with FI_RX_CQ_DATA mode accepted (libfabric's
 * verbs provider would), or without the ordering asked for? Only to name
 * the reason in the error. */
static int ofi_matches_if(const char *prov, uint64_t mode, uint64_t msg_order)
{
	struct fi_info *hints = ofi_hints(prov, FI_EP_UNSPEC);
	struct fi_info *list = NULL;
	int found;

	if (!hints)
		return 0;
	hints->mode = mode;
	hints->tx_attr->msg_order = msg_order;
	found = fi_getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list) == 0;
	fi_freeinfo(list);
	fi_freeinfo(hints);
	return found;
}

/* The providers wimm runs on: the ones its conformance suite covers. Others
 * that libfabric offers (layered ones such as tcp;ofi_rxm, sockets, udp,
 * net) differ in ways the backend does not handle (zero-length RMA without
 * an iov, progress, address formats) and are refused at open. */
static const struct {
	const char *prov;
	enum fi_ep_type type;
} ofi_supported[] = {{"tcp", FI_EP_MSG}, {"shm", FI_EP_RDM}};

static int ofi_is_supported(const char *prov, enum fi_ep_type type)
{
	for (size_t k = 0; k < sizeof(ofi_supported) / sizeof(ofi_supported[0]); k++)
		if (!strcmp(ofi_supported[k].prov, prov) && ofi_supported[k].type == type)
			return 1;
	return 0;
}

/* fi_getinfo for the provider, with the endpoint type wimm runs it with.
 * Only infos with remote CQ data count. */
static int ofi_find(struct ofi_ctx *x, const char *prov, struct fi_info **out)
{
	static const enum fi_ep_type types[] = {FI_EP_MSG, FI_EP_RDM};
	int last = -FI_ENODATA, offered = 0;

	/* Each type with atomics first (ofi_atomic.c), then without: atomics
	 * never decide the endpoint type, only come with it where they can. */
	for (size_t t = 0; t < 2 * sizeof(types) / sizeof(types[0]); t++) {
		struct fi_info *hints = ofi_hints(prov, types[t / 2]);
		struct fi_info *list = NULL;
		int ret;

		if (!hints)
			return WIMM_E_NOMEM;
		if (t % 2 == 0)
			hints->caps |= FI_ATOMIC;
		ret = fi_getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list);
		fi_freeinfo(hints);
		if (ret) {
			last = ret;
			continue;
		}
		for (struct fi_info *i = list; i; i = i->next) {
			/* A layered name ("tcp;ofi_rxm") is not the provider asked for. */
			if (strcmp(i->fabric_attr->prov_name, prov) ||
			    i->domain_attr->cq_data_size < 4)
				continue;
			if (!ofi_is_supported(prov, i->ep_attr->type)) {
				offered = 1;
				continue;
			}
			*out = fi_dupinfo(i);
			fi_freeinfo(list);
			return *out ? 0 : WIMM_E_NOMEM;
		}
		fi_freeinfo(list);
	}
	if (offered) {
		wimm_ctx_set_provider_error(
		    x->core, 0,
		    "wimm's ofi backend runs on libfabric's tcp (FI_EP_MSG) "
		    "and shm (FI_EP_RDM) providers, the ones its conformance "
		    "suite covers; on one host ipc is faster");
		return WIMM_E_NOTSUP;
	}
	wimm_ctx_set_provider_error(x->core, last,
				    ofi_matches_if(prov, FI_RX_CQ_DATA, OFI_ORDER)
					? "the provider needs FI_RX_CQ_DATA (a posted receive "
					  "for each remote CQ data), which wimm's ofi backend does "
					  "not offer; use the native verbs:<device> backend"
				    : ofi_matches_if(prov, 0, 0)
					? "the provider does not order a write before a later "
					  "write or send (FI_ORDER_WAW | FI_ORDER_SAW), which "
					  "credits and doorbells depend on"
					: "no libfabric provider of that name with RMA and remote "
					  "CQ data");
	return WIMM_E_NODEV;
}

/* Zero-length doorbells to a peer without a window name key 0 at address 0:
 * where we choose the keys, key 0 is an 8-byte dummy region placed so that
 * address 0 falls inside it, so such writes pass the provider's key check. */
static int ofi_reg_null_mr(struct ofi_ctx *x)
{
	int ret;

	if (x->prov_key)
		return 0;
	ret = fi_mr_reg(x->domain, &x->null_word, sizeof(x->null_word), FI_REMOTE_WRITE,
			(uint64_t)(uintptr_t)&x->null_word, 0, 0, &x->null_mr, NULL);
	if (ret)
		return ofi_err(x, ret, "fi_mr_reg (null window)");
	return 0;
}

static void ofi_ctx_close(void *bctx);

/* The doorbell ring (ofi_ring_wire.h) is for tcp, whose remote CQ data
 * costs a signal per completion; it needs a write of two segments from
 * unregistered memory. WIMM_OFI_RING=0 keeps remote CQ data. */
static int ofi_ring_usable(const struct fi_info *i)
{
	const char *env = getenv("WIMM_OFI_RING");

	return i->ep_attr->type == FI_EP_MSG && !strcmp(i->fabric_attr->prov_name, "tcp") &&
	       i->tx_attr->iov_limit >= 2 && i->tx_attr->rma_iov_limit >= 2 &&
	       !(i->domain_attr->mr_mode & FI_MR_LOCAL) && (!env || strcmp(env, "0") != 0);
}

static int ofi_ctx_open(struct wimm_ctx *ctx, const char *spec, uint32_t cq_budget, unsigned flags,
			void **bctx)
{
	struct ofi_ctx *x;
	struct fid_cq *probe;
	struct fi_cq_attr cqa = {.size = 4, .format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_FD};
	int ret;

	x = calloc(1, sizeof(*x));
	if (!x)
		return WIMM_E_NOMEM;
	x->core = ctx;
	x->epfd = -1;
	x->timerfd = -1;
	x->eq_fd = -1;
	x->cq_budget = cq_budget; /* sizes lanes (RDM); MSG CQs are per connection */
	if (!spec || !*spec)
		spec = "tcp";
	ret = ofi_find(x, spec, &x->info);
	if (ret)
		goto err_free;
	x->msg = x->info->ep_attr->type == FI_EP_MSG;
	x->data_wide = x->info->domain_attr->cq_data_size >= 8;
	x->inject_size = x->info->tx_attr->inject_size;
	x->prov_key = !!(x->info->domain_attr->mr_mode & FI_MR_PROV_KEY);
	x->ring = ofi_ring_usable(x->info);
	/* Remote addresses are always virtual addresses: the core sends the
	 * window's address. Providers that default to offsets (tcp) accept
	 * FI_MR_VIRT_ADDR when the domain asks for it. */
	x->info->domain_attr->mr_mode |= FI_MR_VIRT_ADDR;
	snprintf(x->fabric_name, sizeof(x->fabric_name), "ofi:%s", x->info->fabric_attr->prov_name);

	ret = fi_fabric(x->info->fabric_attr, &x->fabric, NULL);
	if (ret) {
		ret = ofi_err(x, ret, "fi_fabric");
		goto err_freeinfo;
	}
	ret = fi_domain(x->fabric, x->info, &x->domain, NULL);
	if (ret) {
		ret = ofi_err(x, ret, "fi_domain");
		goto err_close_fabric;
	}
	ret = ofi_reg_null_mr(x);
	if (ret)
		goto err_close_domain;
	ofi_atomic_probe(x);

	x->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (x->epfd < 0) {
		ret = ofi_errno_err(x, errno, "epoll_create1", WIMM_E_PROVIDER);
		goto err_close_null_mr;
	}
	/* Does the provider give CQs a wait fd? (tcp: yes; shm 1.17: no.) A
	 * polling context does without: tcp signals the fd on every completion. */
	if (!(flags & WIMM_CTX_POLLING) && !fi_cq_open(x->domain, &cqa, &probe, NULL)) {
		x->cq_wait_fd = 1;
		fi_close(&probe->fid);
	}
	if (!x->cq_wait_fd) {
		/* No fd to sleep on: a 1 ms tick bounds the sleep instead of spinning. */
		struct itimerspec its = {.it_interval = {0, 1000000}, .it_value = {0, 1000000}};

		x->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (x->timerfd < 0 || timerfd_settime(x->timerfd, 0, &its, NULL) ||
		    ofi_epoll_add(x, x->timerfd, NULL, OFI_TAG_TIMER)) {
			ret = ofi_errno_err(x, errno, "timerfd", WIMM_E_PROVIDER);
			goto err_close_timer;
		}
	}
	if (x->msg) {
		/* One EQ for the CM events of every connection: an EQ per
		 * connection was three more descriptors each (tcp's wait set
		 * and its signal pair) and one more read per control check. */
		struct fi_eq_attr eqa = {.size = 256, .wait_obj = FI_WAIT_FD};

		ret = fi_eq_open(x->fabric, &eqa, &x->eq, x);
		if (ret) {
			ret = ofi_err(x, ret, "fi_eq_open");
			goto err_close_timer;
		}
		ret = fi_control(&x->eq->fid, FI_GETWAIT, &x->eq_fd);
		if (ret || ofi_epoll_add(x, x->eq_fd, NULL, OFI_TAG_EQ)) {
			ret = ret ? ofi_err(x, ret, "fi_control FI_GETWAIT eq")
				  : ofi_errno_err(x, errno, "epoll_ctl (eq)", WIMM_E_PROVIDER);
			goto err_close_eq;
		}
	}
	*bctx = x;
	return 0;

err_close_eq:
	fi_close(&x->eq->fid);
err_close_timer:
	if (x->timerfd >= 0)
		close(x->timerfd);
	close(x->epfd);
err_close_null_mr:
	if (x->null_mr)
		fi_close(&x->null_mr->fid);
err_close_domain:
	fi_close(&x->domain->fid);
err_close_fabric:
	fi_close(&x->fabric->fid);
err_freeinfo:
	fi_freeinfo(x->info);
err_free:
	free(x);
	return ret;
}

static void ofi_ctx_close(void *bctx)
{
	struct ofi_ctx *x = bctx;

	if (!x)
		return;
	while (x->conns)
		ofi_conn_delete(x->conns);
	ofi_lane_close_all(x);
	if (x->eq)
		fi_close(&x->eq->fid);
	if (x->timerfd >= 0)
		close(x->timerfd);
	close(x->epfd);
	if (x->null_mr)
		fi_close(&x->null_mr->fid);
	fi_close(&x->domain->fid);
	fi_close(&x->fabric->fid);
	fi_freeinfo(x->info);
	free(x->tab);
	free(x->free_idx);
	free(x->fids);
	free(x);
}

struct ofi_conn *ofi_conn_lookup(struct ofi_ctx *x, uint32_t idx, uint32_t gen)
{
	struct ofi_conn *c = idx < x->tab_cap ? x->tab[idx] : NULL;

	return c && c->gen == gen ? c : NULL;
}

struct ofi_conn *ofi_cookie_conn(struct ofi_ctx *x, const void *k)
{
	uint64_t v = (uintptr_t)k;

	return ofi_conn_lookup(x, (uint32_t)(v >> 20) & 0xfffffu, (uint32_t)(v >> 40));
}

/* Scratch room for n fids (fi_trywait in arm), grown while connections are
 * made so that arm itself need not allocate. */
int ofi_fids_reserve(struct ofi_ctx *x, size_t n)
{
	struct fid **f;

	if (n <= x->fids_cap)
		return 0;
	f = realloc(x->fids, 2 * n * sizeof(*f));
	if (!f)
		return WIMM_E_NOMEM;
	x->fids = f;
	x->fids_cap = 2 * n;
	return 0;
}

static const char *ofi_ctx_fabric(void *bctx)
{
	return ((struct ofi_ctx *)bctx)->fabric_name;
}

static uint32_t ofi_min32(size_t a, size_t b)
{
	size_t m = a < b ? a : b;

	return m > UINT32_MAX ? UINT32_MAX : (uint32_t)m;
}

static int ofi_ctx_limits(void *bctx, struct wimm_fabric_limits *out)
{
	struct ofi_ctx *x = bctx;
	size_t max = x->info->ep_attr->max_msg_size;

	/* The length travels in the upper 32 bits of the CQ data. */
	out->max_msg = max > UINT32_MAX ? UINT32_MAX : max;
	out->inject_size = x->info->tx_attr->inject_size;
	out->imm_bytes = (uint32_t)x->info->domain_attr->cq_data_size;
	/* RDM (shm): doorbells take two slots of the peer's rx-sized command
	 * queue; half of the rest stays free for plain writes and reads. */
	out->max_depth = ofi_min32(x->info->tx_attr->size,
				   x->msg ? x->info->rx_attr->size : x->info->rx_attr->size / 4);
	/* MSG: the provider's CM data; RDM: wimm's own frames. */
	out->private_max = x->msg ? OFI_MSG_CM_DATA : WIMM_HS_MAX_LEN;
	out->atomic_bytes = x->atomics ? 8 : 0;
	return 0;
}

static int ofi_cq_resize(void *bctx, uint32_t total)
{
	struct ofi_ctx *x = bctx;

	/* MSG: every connection has its own CQ, sized for it at conn_new.
	 * RDM: lanes opened from now on are sized for the new total; a lane
	 * takes a connection only while its own CQ has room for it. */
	x->cq_budget = total;
	return 0;
}

static const char *ofi_ep_name(enum fi_ep_type t)
{
	return t == FI_EP_MSG ? "msg" : t == FI_EP_RDM ? "rdm" : "dgram";
}

static int ofi_describe(FILE *f, int json, int *first)
{
	struct fi_info *hints = ofi_hints(NULL, FI_EP_UNSPEC);
	struct fi_info *list = NULL;
	char seen[16][80];
	int nseen = 0;
	int ret;

	if (!hints)
		return WIMM_E_NOMEM;
	ret = fi_getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &list);
	fi_freeinfo(hints);
	if (ret)
		return 0; /* nothing usable is not an error for `wimm info` */
	for (struct fi_info *i = list; i; i = i->next) {
		char key[80];
		int dup = 0;

		if (i->domain_attr->cq_data_size < 4 ||
		    !ofi_is_supported(i->fabric_attr->prov_name, i->ep_attr->type))
			continue;
		snprintf(key, sizeof(key), "%s/%s", i->fabric_attr->prov_name,
			 ofi_ep_name(i->ep_attr->type));
		for (int k = 0; k < nseen; k++)
			dup |= !strcmp(seen[k], key);
		if (dup || nseen == 16)
			continue;
		memcpy(seen[nseen++], key, sizeof(key));
		/* What wimm can use: lengths travel in 32 bits (see ofi_limits). */
		size_t max_msg =
		    i->ep_attr->max_msg_size < UINT32_MAX ? i->ep_attr->max_msg_size : UINT32_MAX;
		if (json) {
			fprintf(f,
				"%s{\"fabric\":\"ofi:%s\",\"ep_type\":\"%s\",\"domain\":\"%s\","
				"\"imm_bytes\":4,\"max_msg\":%zu,\"inject_size\":%zu,"
				"\"cq_data_size\":%zu,\"tx_size\":%zu,\"rx_size\":%zu}",
				*first ? "" : ",", i->fabric_attr->prov_name,
				ofi_ep_name(i->ep_attr->type), i->domain_attr->name, max_msg,
				i->tx_attr->inject_size, i->domain_attr->cq_data_size,
				i->tx_attr->size, i->rx_attr->size);
			*first = 0;
		} else {
			fprintf(f,
				"ofi:%-16s ep=%s domain=%s imm=4B max_msg=%zu inject=%zu "
				"cq_data=%zuB tx=%zu rx=%zu\n",
				i->fabric_attr->prov_name, ofi_ep_name(i->ep_attr->type),
				i->domain_attr->name, max_msg, i->tx_attr->inject_size,
				i->domain_attr->cq_data_size, i->tx_attr->size, i->rx_attr->size);
		}
	}
	fi_freeinfo(list);
	return 0;
}

static int ofi_auto_probe(char *spec, size_t spec_len)
{
	/* ofi is the fallback of `auto`, never its first choice. */
	(void)spec;
	(void)spec_len;
	return 0;
}

/* A key the peer cannot guess: where the provider leaves keys to us (tcp),
 * sequential ones would let anyone who learnt one key name every other
 * region. Never 0, which is the null window's. */
static uint64_t ofi_random_key(void)
{
	uint64_t key = 0;

	while (key == 0) {
		if (getrandom(&key, sizeof(key), 0) != (ssize_t)sizeof(key)) {
			/* No entropy (an old kernel, a seccomp filter): still not
			 * sequential, though guessable. */
			key = (uint64_t)wimm_now_ns() * 0x9e3779b97f4a7c15ull;
		}
	}
	return key;
}

int ofi_reg(struct ofi_ctx *x, void *addr, size_t len, uint64_t acc, struct fid_mr **mr)
{
	int ret;

	for (int tries = 0;; tries++) {
		ret = fi_mr_reg(x->domain, addr, len, acc, 0, x->prov_key ? 0 : ofi_random_key(), 0,
				mr, NULL);
		/* A key another registration holds: draw again. */
		if (ret != -FI_ENOKEY || x->prov_key || tries == 8)
			break;
	}
	return ret;
}

static int ofi_mr_reg(void *bctx, void *addr, size_t len, unsigned access, struct wimm_bmr *out)
{
	struct ofi_ctx *x = bctx;
	uint64_t acc = FI_SEND | FI_RECV | FI_READ | FI_WRITE;
	struct fid_mr *mr;
	int ret;

	if (access & WIMM_REMOTE_WRITE)
		acc |= FI_REMOTE_WRITE;
	if (access & WIMM_REMOTE_READ)
		acc |= FI_REMOTE_READ;
	/* libfabric has no access bit of atomics' own: they write the target
	 * and fetch from it. */
	if (access & WIMM_REMOTE_ATOMIC)
		acc |= FI_REMOTE_WRITE | FI_REMOTE_READ;
	ret = ofi_reg(x, addr, len, acc, &mr);
	if (ret)
		return ofi_err(x, ret, "fi_mr_reg");
	out->addr = addr;
	out->len = len;
	out->access = access;
	out->key = fi_mr_key(mr);
	out->desc = fi_mr_desc(mr);
	out->priv = mr;
	return 0;
}

static void ofi_mr_dereg(void *bctx, struct wimm_bmr *mr)
{
	(void)bctx;
	if (mr && mr->priv)
		fi_close(&((struct fid_mr *)mr->priv)->fid);
}

const struct wimm_backend_ops wimm_ofi_ops = {
    .scheme = "ofi",
    .ctx_open = ofi_ctx_open,
    .ctx_close = ofi_ctx_close,
    .ctx_fabric = ofi_ctx_fabric,
    .ctx_limits = ofi_ctx_limits,
    .cq_resize = ofi_cq_resize,
    .describe = ofi_describe,
    .auto_probe = ofi_auto_probe,
    .mr_reg = ofi_mr_reg,
    .mr_dereg = ofi_mr_dereg,
    .listen = ofi_listen,
    .listener_close = ofi_listener_close,
    .listener_fd = ofi_listener_fd,
    .get_request = ofi_get_request,
    .listener_pending = ofi_listener_pending,
    .request_peer = ofi_request_peer,
    .reject = ofi_reject,
    .conn_new = ofi_conn_new,
    .conn_addr = ofi_conn_addr,
    .connect = ofi_connect,
    .accept = ofi_accept,
    .conn_ready = ofi_conn_ready,
    .conn_shutdown = ofi_conn_shutdown,
    .conn_delete = ofi_conn_delete,
    .post = ofi_post,
    .post_atomic = ofi_post_atomic,
    .rx_release = ofi_rx_release,
    .poll = ofi_poll,
    .fd = ofi_fd,
    .arm = ofi_arm,
};
