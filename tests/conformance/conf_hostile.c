/* Hostile peers: a raw provider peer (libfabric tcp, rdma_cm + verbs) that
 * does wimm's handshake itself and then ignores everything the honest
 * sender checks: it writes outside its window, uses the key of an earlier
 * connection, posts doorbells beyond its credits. The receiver enforces
 * (docs/design.md, "windows"): the writes fail at the transport, the
 * server's memory outside the window stays as it was, the overdraft drops
 * that connection, and an honest client of the same server goes on.
 *
 * The server (wimm) and the raw peer live in one thread: every wait drives
 * both. On ofi:shm the raw peer is an RDM endpoint that speaks wimm's side
 * channel (a TCP socket carrying one length-prefixed handshake each way).
 * On ipc the raw peer maps the rings itself and writes entries that name
 * anything (src/ipc/ipc_wire.h): the server checks each one it consumes. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "conf.h"
#include "core/handshake.h"
#include "ipc/ipc_wire.h"

#ifdef CONF_HAVE_OFI
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#endif
#ifdef CONF_HAVE_VERBS
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#endif

#define RAW_MSG 1
#define RAW_CM 2
#define RAW_RDM 3
#define RAW_IPC 4
/* The raw ipc peer's ring: room for every doorbell of the overdraft test. */
#define RAW_IPC_ENTRIES 256
#define RAW_IPC_DATA 65536

struct raw_peer {
	int kind;
	struct wimm_handshake srv; /* the server's reply */
	uint64_t *ctl;		   /* where the server returns credits (128 B) */
	uint8_t *src;		   /* what we write from */
	int posted, done, failed;
	char text[200];
#ifdef CONF_HAVE_OFI
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_eq *eq;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fid_mr *ctl_mr, *src_mr;
	struct fid_av *av; /* RDM */
	fi_addr_t srv_addr;
	int sock; /* RDM: the side channel */
#endif
	/* RAW_IPC: our ring and wake page, the server's (mapped from its fds). */
	int ipc_sock, ipc_fd[IPC_NFDS];
	struct ipc_ring_hdr *ring, *srv_ring;
	size_t srv_ring_len;
	struct ipc_page *page, *srv_page;
	int srv_efd;
	uint32_t srv_idx;
	uint64_t prod;
#ifdef CONF_HAVE_VERBS
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *vcq;
	struct ibv_mr *ctl_vmr, *src_vmr;
#endif
};

#define RAW_SRC 4096

/* What the server saw, per connection of interest. */
struct seen {
	struct wimm_conn *conn;
	int doorbells;
	int down, down_status;
};

/* Drive the server for ms (taking requests and accepting them with the
 * listener's attributes), counting events of the tracked connections. */
static void pump(struct wimm_ctx *ctx, struct wimm_listener *l, struct wimm_conn **accepted,
		 struct seen *s, int ns, int ms)
{
	int64_t until = conf_now_ms() + ms;
	struct wimm_event ev[16];

	do {
		struct wimm_request *r = NULL;
		if (l && accepted && !*accepted && wimm_listener_request(l, 0, &r) == 0)
			wimm_request_accept(&r, NULL, accepted);
		int n = wimm_poll(ctx, ev, 16);
		for (int i = 0; i < n; i++)
			for (int j = 0; j < ns; j++) {
				if (ev[i].conn != s[j].conn)
					continue;
				if (ev[i].type == WIMM_EV_WRITE_IMM)
					s[j].doorbells++;
				if (ev[i].type == WIMM_EV_DISCONNECT) {
					s[j].down = 1;
					s[j].down_status = ev[i].status;
				}
			}
		if (n == 0)
			conf_sleep_us(100);
	} while (conf_now_ms() < until);
}

static int raw_alloc(struct raw_peer *r, int kind)
{
	memset(r, 0, sizeof(*r));
	r->kind = kind;
	if (posix_memalign((void **)&r->ctl, 64, 128) ||
	    posix_memalign((void **)&r->src, 4096, RAW_SRC))
		return -1;
	memset(r->ctl, 0, 128);
	memset(r->src, 0, RAW_SRC);
	return 0;
}

/* Our half of the handshake: no window, a receive window of 64, credits
 * returned into r->ctl under `key`. */
static int raw_handshake(struct raw_peer *r, uint64_t key, uint8_t *buf, size_t cap)
{
	struct wimm_handshake hs;

	memset(&hs, 0, sizeof(hs));
	hs.version = WIMM_HS_VERSION;
	hs.rx_depth = 64;
	hs.credit_addr = (uint64_t)(uintptr_t)r->ctl;
	hs.credit_key = key;
	return wimm_hs_encode(&hs, buf, cap);
}

static int raw_reply(struct raw_peer *r, const uint8_t *b, size_t n)
{
	int rc = wimm_hs_decode(b, wimm_hs_wire_len(b, n), &r->srv);
	if (rc)
		snprintf(r->text, sizeof(r->text), "the server's reply does not decode: %s",
			 wimm_err_name(rc));
	return rc;
}

/* ------------------------------------------------------ raw libfabric MSG */
#ifdef CONF_HAVE_OFI
static void raw_ofi_progress(struct raw_peer *r);

/* All of buf over the side channel, or -1; the server is pumped meanwhile. */
static int raw_sock_io(int fd, uint8_t *buf, size_t len, int out, struct wimm_ctx *ctx,
		       struct wimm_listener *l, struct wimm_conn **sconn)
{
	int64_t deadline = conf_now_ms() + CONNECT_TIMEOUT_MS;

	while (len && conf_now_ms() < deadline) {
		pump(ctx, l, sconn, NULL, 0, 1);
		ssize_t n = out ? send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL)
				: recv(fd, buf, len, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			return -1;
		if (n > 0) {
			buf += n;
			len -= (size_t)n;
		}
	}
	return len ? -1 : 0;
}

/* wimm's side channel by hand: our handshake (with our RDM name) in a
 * 4-byte big-endian length frame, the server's in one back; then the
 * server's endpoint goes into our address vector. */
static int raw_rdm_handshake(struct raw_peer *r, const char *host, const char *port,
			     struct wimm_ctx *ctx, struct wimm_listener *l,
			     struct wimm_conn **sconn)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *ai = NULL;
	struct wimm_handshake hs;
	uint8_t frame[4 + WIMM_HS_MAX_LEN], reply[WIMM_HS_MAX_LEN], hdr[4];
	size_t alen = sizeof(hs.addr);

	memset(&hs, 0, sizeof(hs));
	hs.version = WIMM_HS_VERSION;
	hs.rx_depth = 64;
	hs.credit_addr = (uint64_t)(uintptr_t)r->ctl;
	hs.credit_key = fi_mr_key(r->ctl_mr);
	if (fi_getname(&r->ep->fid, hs.addr, &alen)) {
		snprintf(r->text, sizeof(r->text), "raw rdm: fi_getname failed");
		return -1;
	}
	hs.addr_len = (uint16_t)alen;
	int n = wimm_hs_encode(&hs, frame + 4, sizeof(frame) - 4);
	if (n < 0 || getaddrinfo(host, port, &hints, &ai)) {
		snprintf(r->text, sizeof(r->text), "raw rdm: handshake or address");
		return -1;
	}
	r->sock = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int rc = r->sock < 0 ? -1 : connect(r->sock, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	frame[0] = (uint8_t)(n >> 24);
	frame[1] = (uint8_t)(n >> 16);
	frame[2] = (uint8_t)(n >> 8);
	frame[3] = (uint8_t)n;
	if (rc || raw_sock_io(r->sock, frame, 4 + (size_t)n, 1, ctx, l, sconn) ||
	    raw_sock_io(r->sock, hdr, 4, 0, ctx, l, sconn)) {
		snprintf(r->text, sizeof(r->text), "raw rdm: side channel: %s", strerror(errno));
		return -1;
	}
	size_t len = (size_t)hdr[0] << 24 | (size_t)hdr[1] << 16 | (size_t)hdr[2] << 8 | hdr[3];
	if (len > sizeof(reply) || raw_sock_io(r->sock, reply, len, 0, ctx, l, sconn)) {
		snprintf(r->text, sizeof(r->text), "raw rdm: no reply frame");
		return -1;
	}
	if (raw_reply(r, reply, len))
		return -1;
	if (fi_av_insert(r->av, r->srv.addr, 1, &r->srv_addr, 0, NULL) != 1) {
		snprintf(r->text, sizeof(r->text), "raw rdm: fi_av_insert of the server failed");
		return -1;
	}
	/* Both sides take each other's shm name: the server's first write to
	 * us lands in our progress. */
	int64_t until = conf_now_ms() + 300;
	while (conf_now_ms() < until) {
		pump(ctx, l, sconn, NULL, 0, 1);
		raw_ofi_progress(r);
	}
	return 0;
}

static int raw_ofi_connect(struct raw_peer *r, const char *prov, const char *host, const char *port,
			   struct wimm_ctx *ctx, struct wimm_listener *l, struct wimm_conn **sconn)
{
	struct fi_info *hints = fi_allocinfo(), *list = NULL;
	struct fi_eq_attr eqa = {.size = 16, .wait_obj = FI_WAIT_UNSPEC};
	struct fi_cq_attr cqa = {.size = 512, .format = FI_CQ_FORMAT_DATA};
	struct fi_av_attr ava = {.type = FI_AV_TABLE, .count = 4};
	uint8_t hs[WIMM_HS_MAX_LEN];
	int rdm = r->kind == RAW_RDM;
	int ret = -FI_ENOMEM;

	if (!hints)
		goto fail;
	hints->caps = FI_MSG | FI_RMA | FI_WRITE | FI_REMOTE_WRITE;
	hints->ep_attr->type = rdm ? FI_EP_RDM : FI_EP_MSG;
	hints->domain_attr->mr_mode =
	    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->fabric_attr->prov_name = strdup(prov);
	ret = rdm ? fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &list)
		  : fi_getinfo(FI_VERSION(1, 9), host, port, 0, hints, &list);
	fi_freeinfo(hints);
	if (ret)
		goto fail;
	for (struct fi_info *i = list; i && !r->info; i = i->next)
		if (!strcmp(i->fabric_attr->prov_name, prov))
			r->info = fi_dupinfo(i);
	fi_freeinfo(list);
	ret = r->info ? 0 : -FI_ENODATA;
	if (!ret)
		ret = fi_fabric(r->info->fabric_attr, &r->fabric, NULL);
	if (!ret)
		ret = fi_domain(r->fabric, r->info, &r->domain, NULL);
	if (!ret && !rdm)
		ret = fi_eq_open(r->fabric, &eqa, &r->eq, NULL);
	if (!ret && rdm)
		ret = fi_av_open(r->domain, &ava, &r->av, NULL);
	if (!ret)
		ret = fi_cq_open(r->domain, &cqa, &r->cq, NULL);
	if (!ret)
		ret = fi_endpoint(r->domain, r->info, &r->ep, NULL);
	if (!ret)
		ret = rdm ? fi_ep_bind(r->ep, &r->av->fid, 0) : fi_ep_bind(r->ep, &r->eq->fid, 0);
	if (!ret)
		ret = fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV);
	if (!ret)
		ret = fi_enable(r->ep);
	/* Keys of our own choosing where the provider lets us choose. */
	uint64_t key = 0x5a5a0000u + (uint64_t)(conf_now_us() & 0xffff) * 2;
	if (!ret)
		ret =
		    fi_mr_reg(r->domain, r->ctl, 128, FI_REMOTE_WRITE, 0, key, 0, &r->ctl_mr, NULL);
	if (!ret)
		ret = fi_mr_reg(r->domain, r->src, RAW_SRC, FI_WRITE, 0, key + 1, 0, &r->src_mr,
				NULL);
	if (ret)
		goto fail;
	if (rdm)
		return raw_rdm_handshake(r, host, port, ctx, l, sconn);
	int n = raw_handshake(r, fi_mr_key(r->ctl_mr), hs, sizeof(hs));
	ret = n < 0 ? -FI_EINVAL : fi_connect(r->ep, r->info->dest_addr, hs, (size_t)n);
	if (ret)
		goto fail;
	int64_t deadline = conf_now_ms() + CONNECT_TIMEOUT_MS;
	while (conf_now_ms() < deadline) {
		union {
			struct fi_eq_cm_entry e;
			uint8_t b[sizeof(struct fi_eq_cm_entry) + 512];
		} u;
		uint32_t event;
		pump(ctx, l, sconn, NULL, 0, 1);
		ssize_t rd = fi_eq_read(r->eq, &event, &u, sizeof(u), 0);
		if (rd == -FI_EAGAIN)
			continue;
		if (rd < 0 || event != FI_CONNECTED) {
			snprintf(r->text, sizeof(r->text), "raw connect: EQ %zd event %u", rd,
				 event);
			return -1;
		}
		return raw_reply(r, u.e.data, (size_t)rd - sizeof(u.e));
	}
	snprintf(r->text, sizeof(r->text), "raw connect: no FI_CONNECTED in time");
	return -1;
fail:
	snprintf(r->text, sizeof(r->text), "raw %s peer: %s", prov, fi_strerror(-ret));
	return -1;
}

static int raw_ofi_write(struct raw_peer *r, uint64_t addr, uint64_t key, size_t len, int doorbell,
			 uint32_t imm)
{
	struct iovec iov = {.iov_base = r->src, .iov_len = len};
	void *desc = fi_mr_desc(r->src_mr);
	struct fi_rma_iov rma = {.addr = addr, .len = len, .key = key};
	struct fi_msg_rma m = {.msg_iov = &iov,
			       .desc = &desc,
			       .iov_count = len ? 1 : 0,
			       .addr = r->kind == RAW_RDM ? r->srv_addr : 0,
			       .rma_iov = &rma,
			       .rma_iov_count = 1,
			       .data = ((uint64_t)len << 32) | imm};
	ssize_t ret;

	do {
		ret = fi_writemsg(r->ep, &m, FI_COMPLETION | (doorbell ? FI_REMOTE_CQ_DATA : 0));
		if (ret == -FI_EAGAIN) {
			struct fi_cq_data_entry d[16];
			ssize_t k = fi_cq_read(r->cq, d, 16);
			if (k > 0)
				r->done += (int)k;
			if (k == -FI_EAVAIL) {
				struct fi_cq_err_entry e = {0};
				fi_cq_readerr(r->cq, &e, 0);
				r->failed++;
			}
		}
	} while (ret == -FI_EAGAIN);
	if (ret)
		return -1;
	r->posted++;
	return 0;
}

static void raw_ofi_progress(struct raw_peer *r)
{
	struct fi_cq_data_entry d[16];
	ssize_t k = fi_cq_read(r->cq, d, 16);

	if (k > 0)
		r->done += (int)k;
	if (k == -FI_EAVAIL) {
		struct fi_cq_err_entry e = {0};
		fi_cq_readerr(r->cq, &e, 0);
		r->failed++;
	}
}

static void raw_ofi_close(struct raw_peer *r)
{
	if (r->sock > 0)
		close(r->sock); /* the server learns of it from this */
	if (r->ep)
		fi_close(&r->ep->fid);
	if (r->av)
		fi_close(&r->av->fid);
	if (r->ctl_mr)
		fi_close(&r->ctl_mr->fid);
	if (r->src_mr)
		fi_close(&r->src_mr->fid);
	if (r->cq)
		fi_close(&r->cq->fid);
	if (r->eq)
		fi_close(&r->eq->fid);
	if (r->domain)
		fi_close(&r->domain->fid);
	if (r->fabric)
		fi_close(&r->fabric->fid);
	fi_freeinfo(r->info);
}
#endif

/* ------------------------------------------------------------ raw ipc peer */

int conf_ipc_dial(const char *addr)
{
	const char *colon = strrchr(addr, ':');
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	if (!colon)
		return -1;
	/* The listener's abstract name (src/ipc/ipc_cm.c). */
	int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "wimm-ipc:%s", colon + 1);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);

	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sl) == 0)
		return fd;
	if (fd >= 0)
		close(fd);
	return -1;
}

/* A sealed memfd of len bytes, mapped: what the server insists on. */
static void *raw_ipc_memfd(int *fd, size_t len)
{
	*fd = memfd_create("raw-ipc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (*fd < 0 || ftruncate(*fd, (off_t)len) ||
	    fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
		return NULL;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* A handshake message with the three fds the ipc fabric expects. */
static int raw_ipc_send(int sock, const uint8_t *hs, size_t len, const int *fd)
{
	union {
		char buf[CMSG_SPACE(IPC_NFDS * sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = {.iov_base = (void *)hs, .iov_len = len};
	struct msghdr m = {.msg_iov = &iov,
			   .msg_iovlen = 1,
			   .msg_control = cm.buf,
			   .msg_controllen = sizeof(cm.buf)};

	memset(&cm, 0, sizeof(cm));
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(IPC_NFDS * sizeof(int));
	memcpy(CMSG_DATA(h), fd, IPC_NFDS * sizeof(int));
	return sendmsg(sock, &m, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

static int raw_ipc_fail(struct raw_peer *r, const char *what)
{
	snprintf(r->text, sizeof(r->text), "raw ipc: %s: %s", what, strerror(errno));
	return -1;
}

/* Our handshake with our three fds, the server's with its three back. */
static int raw_ipc_connect(struct raw_peer *r, const char *addr, struct wimm_ctx *ctx,
			   struct wimm_listener *l, struct wimm_conn **sconn)
{
	union {
		char buf[CMSG_SPACE(IPC_NFDS * sizeof(int))];
		struct cmsghdr align;
	} cm;
	uint8_t hs[WIMM_HS_MAX_LEN], reply[WIMM_HS_MAX_LEN];
	struct wimm_handshake mine;
	uint32_t a[2] = {IPC_ADDR_MAGIC, 0};
	struct stat st;
	int srv_fd[IPC_NFDS] = {-1, -1, -1};

	r->ipc_sock = r->srv_efd = -1;
	r->ring = raw_ipc_memfd(&r->ipc_fd[0], ipc_ring_bytes(RAW_IPC_ENTRIES, RAW_IPC_DATA));
	r->page = raw_ipc_memfd(&r->ipc_fd[1], IPC_PAGE_BYTES);
	r->ipc_fd[2] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!r->ring || !r->page || r->ipc_fd[2] < 0)
		return raw_ipc_fail(r, "memfds");
	*r->ring = (struct ipc_ring_hdr){
	    .magic = IPC_MAGIC, .entries = RAW_IPC_ENTRIES, .data_bytes = RAW_IPC_DATA};
	memset(&mine, 0, sizeof(mine));
	mine.version = WIMM_HS_VERSION;
	mine.rx_depth = 64;
	mine.credit_addr = (uint64_t)(uintptr_t)r->ctl;
	mine.credit_key = 0x5a5a;
	mine.addr_len = sizeof(a);
	memcpy(mine.addr, a, sizeof(a));
	int n = wimm_hs_encode(&mine, hs, sizeof(hs));
	r->ipc_sock = conf_ipc_dial(addr);
	if (n < 0 || r->ipc_sock < 0)
		return raw_ipc_fail(r, "dial");
	if (raw_ipc_send(r->ipc_sock, hs, (size_t)n, r->ipc_fd))
		return raw_ipc_fail(r, "sending the handshake");
	int64_t deadline = conf_now_ms() + CONNECT_TIMEOUT_MS;
	ssize_t got = -1;
	struct iovec iov;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf};
	while (got < 0 && conf_now_ms() < deadline) {
		pump(ctx, l, sconn, NULL, 0, 1);
		iov = (struct iovec){.iov_base = reply, .iov_len = sizeof(reply)};
		m.msg_controllen = sizeof(cm.buf);
		got = recvmsg(r->ipc_sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	}
	struct cmsghdr *h = got > 0 ? CMSG_FIRSTHDR(&m) : NULL;
	if (!h || h->cmsg_type != SCM_RIGHTS || h->cmsg_len != CMSG_LEN(sizeof(srv_fd)))
		return raw_ipc_fail(r, "no reply with three fds");
	memcpy(srv_fd, CMSG_DATA(h), sizeof(srv_fd));
	r->srv_efd = srv_fd[2];
	if (raw_reply(r, reply, (size_t)got) || r->srv.addr_len != sizeof(a)) {
		close(srv_fd[0]);
		close(srv_fd[1]);
		return -1;
	}
	memcpy(a, r->srv.addr, sizeof(a));
	r->srv_idx = a[1];
	fstat(srv_fd[0], &st);
	r->srv_ring_len = (size_t)st.st_size;
	r->srv_ring = mmap(NULL, r->srv_ring_len, PROT_READ | PROT_WRITE, MAP_SHARED, srv_fd[0], 0);
	r->srv_page = mmap(NULL, IPC_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, srv_fd[1], 0);
	close(srv_fd[0]);
	close(srv_fd[1]);
	if (r->srv_ring == MAP_FAILED || r->srv_page == MAP_FAILED) {
		r->srv_ring = NULL;
		r->srv_page = NULL;
		return raw_ipc_fail(r, "mapping the server's fds");
	}
	/* The server's CONN_UP comes from its next polls. */
	pump(ctx, l, sconn, NULL, 0, 50);
	return 0;
}

/* One entry in our ring, whatever it names: the server is the one that
 * checks. Payloads over the inline bytes go to the data area, at doff
 * (UINT64_MAX: a quarter of the area of our choosing). */
static int raw_ipc_entry(struct raw_peer *r, enum ipc_op op, uint64_t addr, uint64_t key,
			 size_t len, uint32_t imm, uint64_t doff)
{
	if (r->prod - __atomic_load_n(&r->ring->cons, __ATOMIC_ACQUIRE) >= RAW_IPC_ENTRIES ||
	    len > RAW_IPC_DATA / 4)
		return -1;
	struct ipc_entry *e = &ipc_entries(r->ring)[r->prod % RAW_IPC_ENTRIES];
	*e = (struct ipc_entry){.op = (uint16_t)op,
				.flags = IPC_F_NOTIFY,
				.len = (uint32_t)len,
				.imm = imm,
				.raddr = addr,
				.rkey = key};
	uint8_t *data = (uint8_t *)(ipc_entries(r->ring) + RAW_IPC_ENTRIES);
	if (len <= IPC_INLINE) {
		memcpy(e->u.inl, r->src, len);
	} else {
		e->u.doff = doff != UINT64_MAX ? doff : (r->prod % 4) * (RAW_IPC_DATA / 4);
		if (e->u.doff + len <= RAW_IPC_DATA)
			memcpy(data + e->u.doff, r->src, len);
	}
	r->prod++;
	__atomic_store_n(&e->seq, (uint32_t)r->prod, __ATOMIC_RELEASE);
	ipc_notify(r->srv_page, &r->ring->watch, r->srv_efd, r->srv_idx);
	r->posted++;
	return 0;
}

static int raw_ipc_write(struct raw_peer *r, uint64_t addr, uint64_t key, size_t len, int doorbell,
			 uint32_t imm)
{
	return raw_ipc_entry(r, doorbell ? IPC_OP_WRITE_IMM : IPC_OP_WRITE, addr, key, len, imm,
			     UINT64_MAX);
}

/* What the server consumed (and refused), and the server's own entries
 * taken unread so its ring never fills. */
static void raw_ipc_progress(struct raw_peer *r)
{
	uint64_t cons = __atomic_load_n(&r->ring->cons, __ATOMIC_ACQUIRE);

	if (cons > r->prod)
		cons = r->prod;
	while ((uint64_t)(r->done + r->failed) < cons) {
		const struct ipc_entry *e =
		    &ipc_entries(r->ring)[(uint64_t)(r->done + r->failed) % RAW_IPC_ENTRIES];
		if (__atomic_load_n(&e->status, __ATOMIC_RELAXED))
			r->failed++;
		else
			r->done++;
	}
	if (!r->srv_ring)
		return;
	const struct ipc_entry *se = ipc_entries(r->srv_ring);
	uint64_t n = r->srv_ring->entries, sc = r->srv_ring->cons;
	while (__atomic_load_n(&se[sc % n].seq, __ATOMIC_ACQUIRE) == (uint32_t)(sc + 1))
		sc++;
	__atomic_store_n(&r->srv_ring->cons, sc, __ATOMIC_RELEASE);
}

static void raw_ipc_close(struct raw_peer *r)
{
	if (r->ipc_sock >= 0)
		close(r->ipc_sock); /* the server learns of it from this */
	if (r->srv_ring)
		munmap(r->srv_ring, r->srv_ring_len);
	if (r->srv_page)
		munmap(r->srv_page, IPC_PAGE_BYTES);
	if (r->ring)
		munmap(r->ring, ipc_ring_bytes(RAW_IPC_ENTRIES, RAW_IPC_DATA));
	if (r->page)
		munmap(r->page, IPC_PAGE_BYTES);
	if (r->srv_efd >= 0)
		close(r->srv_efd);
	for (int i = 0; i < IPC_NFDS; i++)
		if (r->ipc_fd[i] > 0)
			close(r->ipc_fd[i]);
}

/* ----------------------------------------------------- raw rdma_cm + verbs */
#ifdef CONF_HAVE_VERBS
static int raw_cm_wait(struct raw_peer *r, int want, struct wimm_ctx *ctx, struct wimm_listener *l,
		       struct wimm_conn **sconn)
{
	int64_t deadline = conf_now_ms() + CONNECT_TIMEOUT_MS;
	struct rdma_cm_event *ev;

	while (conf_now_ms() < deadline) {
		pump(ctx, l, sconn, NULL, 0, 1);
		if (rdma_get_cm_event(r->ch, &ev))
			continue;
		int type = ev->event;
		if (type == RDMA_CM_EVENT_ESTABLISHED && ev->param.conn.private_data) {
			int rc = raw_reply(r, ev->param.conn.private_data,
					   ev->param.conn.private_data_len);
			rdma_ack_cm_event(ev);
			return type == want ? rc : -1;
		}
		rdma_ack_cm_event(ev);
		if (type != want)
			snprintf(r->text, sizeof(r->text), "raw cm: %s",
				 rdma_event_str((enum rdma_cm_event_type)type));
		return type == want ? 0 : -1;
	}
	snprintf(r->text, sizeof(r->text), "raw cm: no event in time");
	return -1;
}

static int raw_cm_connect(struct raw_peer *r, const char *host, const char *port,
			  struct wimm_ctx *ctx, struct wimm_listener *l, struct wimm_conn **sconn)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	struct ibv_qp_init_attr qa = {0};
	struct rdma_conn_param cp = {0};
	uint8_t hs[WIMM_HS_MAX_LEN];

	r->ch = rdma_create_event_channel();
	if (!r->ch || fcntl(r->ch->fd, F_SETFL, O_NONBLOCK) ||
	    rdma_create_id(r->ch, &r->id, NULL, RDMA_PS_TCP) ||
	    getaddrinfo(host, port, &hints, &ai)) {
		snprintf(r->text, sizeof(r->text), "raw cm set-up: %s", strerror(errno));
		return -1;
	}
	int rc = rdma_resolve_addr(r->id, NULL, ai->ai_addr, 2000);
	freeaddrinfo(ai);
	if (rc || raw_cm_wait(r, RDMA_CM_EVENT_ADDR_RESOLVED, ctx, NULL, NULL) ||
	    rdma_resolve_route(r->id, 2000) ||
	    raw_cm_wait(r, RDMA_CM_EVENT_ROUTE_RESOLVED, ctx, NULL, NULL))
		return -1;
	r->pd = ibv_alloc_pd(r->id->verbs);
	r->vcq = r->pd ? ibv_create_cq(r->id->verbs, 1024, NULL, NULL, 0) : NULL;
	r->ctl_vmr =
	    r->pd ? ibv_reg_mr(r->pd, r->ctl, 128, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
		  : NULL;
	r->src_vmr = r->pd ? ibv_reg_mr(r->pd, r->src, RAW_SRC, IBV_ACCESS_LOCAL_WRITE) : NULL;
	qa.send_cq = qa.recv_cq = r->vcq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = 512;
	qa.cap.max_recv_wr = 1;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (!r->ctl_vmr || !r->src_vmr || rdma_create_qp(r->id, r->pd, &qa)) {
		snprintf(r->text, sizeof(r->text), "raw QP set-up: %s", strerror(errno));
		return -1;
	}
	int n = raw_handshake(r, r->ctl_vmr->rkey, hs, sizeof(hs));
	cp.private_data = hs;
	cp.private_data_len = (uint8_t)n;
	cp.responder_resources = cp.initiator_depth = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 3; /* give up soon when the server has no receive */
	if (n < 0 || rdma_connect(r->id, &cp)) {
		snprintf(r->text, sizeof(r->text), "rdma_connect: %s", strerror(errno));
		return -1;
	}
	return raw_cm_wait(r, RDMA_CM_EVENT_ESTABLISHED, ctx, l, sconn);
}

static void raw_cm_progress(struct raw_peer *r)
{
	struct ibv_wc wc[16];
	int k = ibv_poll_cq(r->vcq, 16, wc);

	for (int i = 0; i < k; i++) {
		if (wc[i].status == IBV_WC_SUCCESS)
			r->done++;
		else
			r->failed++;
	}
}

static int raw_cm_write(struct raw_peer *r, uint64_t addr, uint64_t key, size_t len, int doorbell,
			uint32_t imm)
{
	struct ibv_sge sge = {
	    .addr = (uintptr_t)r->src, .length = (uint32_t)len, .lkey = r->src_vmr->lkey};
	struct ibv_send_wr wr = {0}, *bad;

	wr.opcode = doorbell ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
	wr.imm_data = htonl(imm);
	wr.sg_list = len ? &sge : NULL;
	wr.num_sge = len ? 1 : 0;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = (uint32_t)key;
	for (int tries = 0; tries < 1000; tries++) {
		int rc = ibv_post_send(r->id->qp, &wr, &bad);
		if (rc == 0) {
			r->posted++;
			return 0;
		}
		if (rc != ENOMEM)
			return -1;
		raw_cm_progress(r);
		conf_sleep_us(100);
	}
	return -1;
}

static void raw_cm_close(struct raw_peer *r)
{
	if (r->id && r->id->qp) {
		rdma_disconnect(r->id);
		rdma_destroy_qp(r->id);
	}
	if (r->ctl_vmr)
		ibv_dereg_mr(r->ctl_vmr);
	if (r->src_vmr)
		ibv_dereg_mr(r->src_vmr);
	if (r->vcq)
		ibv_destroy_cq(r->vcq);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	if (r->id)
		rdma_destroy_id(r->id);
	if (r->ch)
		rdma_destroy_event_channel(r->ch);
}
#endif

/* --------------------------------------------------------- dispatching */

/* Which raw peer speaks to the listener of `uri`, or 0 (with a reason). */
static int raw_kind(const char *uri, const char **why)
{
	*why = "";
	if (!strcmp(uri, "ipc"))
		return RAW_IPC;
#ifdef CONF_HAVE_OFI
	if (!strcmp(uri, "ofi:tcp"))
		return RAW_MSG;
	if (!strcmp(uri, "ofi:shm"))
		return RAW_RDM;
#endif
#ifdef CONF_HAVE_VERBS
	if (!strncmp(uri, "verbs", 5))
		return RAW_CM;
#endif
	*why = "no raw peer for this fabric here (ofi:shm: RDM behind wimm's side channel)";
	return 0;
}

static int raw_connect(struct raw_peer *r, const char *uri, const char *addr, struct wimm_ctx *ctx,
		       struct wimm_listener *l, struct wimm_conn **sconn)
{
	char host[256], port[16];
	const char *colon = strrchr(addr, ':');

	snprintf(host, sizeof(host), "%.*s", (int)(colon - addr), addr);
	snprintf(port, sizeof(port), "%s", colon + 1);
	*sconn = NULL;
	if (r->kind == RAW_IPC)
		return raw_ipc_connect(r, addr, ctx, l, sconn);
#ifdef CONF_HAVE_OFI
	if (r->kind == RAW_MSG || r->kind == RAW_RDM)
		return raw_ofi_connect(r, uri + 4, host, port, ctx, l, sconn);
#endif
#ifdef CONF_HAVE_VERBS
	if (r->kind == RAW_CM)
		return raw_cm_connect(r, host, port, ctx, l, sconn);
#endif
	(void)uri;
	(void)ctx;
	(void)l;
	return -1;
}

static int raw_write(struct raw_peer *r, uint64_t addr, uint64_t key, size_t len, int doorbell,
		     uint32_t imm)
{
	if (r->kind == RAW_IPC)
		return raw_ipc_write(r, addr, key, len, doorbell, imm);
#ifdef CONF_HAVE_OFI
	if (r->kind == RAW_MSG || r->kind == RAW_RDM)
		return raw_ofi_write(r, addr, key, len, doorbell, imm);
#endif
#ifdef CONF_HAVE_VERBS
	if (r->kind == RAW_CM)
		return raw_cm_write(r, addr, key, len, doorbell, imm);
#endif
	return -1;
}

static void raw_progress(struct raw_peer *r)
{
	if (r->kind == RAW_IPC)
		raw_ipc_progress(r);
#ifdef CONF_HAVE_OFI
	if (r->kind == RAW_MSG || r->kind == RAW_RDM)
		raw_ofi_progress(r);
#endif
#ifdef CONF_HAVE_VERBS
	if (r->kind == RAW_CM)
		raw_cm_progress(r);
#endif
}

static void raw_close(struct raw_peer *r)
{
	if (r->kind == RAW_IPC)
		raw_ipc_close(r);
#ifdef CONF_HAVE_OFI
	if (r->kind == RAW_MSG || r->kind == RAW_RDM)
		raw_ofi_close(r);
#endif
#ifdef CONF_HAVE_VERBS
	if (r->kind == RAW_CM)
		raw_cm_close(r);
#endif
	free(r->ctl);
	free(r->src);
	memset(r, 0, sizeof(*r));
}

/* Pump the server and the raw peer together for ms. */
static void pump_both(struct wimm_ctx *ctx, struct raw_peer *r, struct seen *s, int ns, int ms)
{
	int64_t until = conf_now_ms() + ms;

	while (conf_now_ms() < until) {
		pump(ctx, NULL, NULL, s, ns, 1);
		raw_progress(r);
	}
}

/* ------------------------------------------------------------ the tests */

struct arena {
	struct pair p;
	struct region *win; /* 2 x HALF: the window is the first half */
	char addr[300];
};

#define HALF 4096

/* A server whose listener exposes [0, HALF) of an 8 KiB region (the second
 * half a canary), and an honest client connected to it. */
static int arena_open(struct arena *a, const char *uri, uint32_t rx_depth)
{
	struct wimm_conn_attr sattr = {.rx_depth = rx_depth, .window_len = HALF};

	memset(a, 0, sizeof(*a));
	if (pair_open(&a->p, uri))
		return -1;
	a->win = pair_region(&a->p, a->p.sctx, 2 * HALF, WIMM_REMOTE_WRITE);
	if (!a->win)
		return -1;
	memset(a->win->buf, 0xCC, 2 * HALF);
	sattr.window = a->win->mr;
	if (conf_listen(a->p.sctx, &sattr, &a->p.l, a->addr, sizeof(a->addr)))
		return -1;
	return pair_connect_on(&a->p, a->addr, NULL);
}

/* The honest client still gets its doorbells through. */
static int honest_ok(struct arena *a)
{
	struct wimm_event ev;
	int got = 0;

	for (int i = 0; i < 10; i++)
		if (wimm_write_imm(a->p.c, NULL, 0, 0, 0, 1000u + (uint32_t)i, WIMM_F_WAIT))
			return 0;
	while (got < 10 &&
	       wait_event(a->p.sctx, a->p.cctx, WIMM_EV_WRITE_IMM, a->p.s, &ev, 5000, NULL) == 1)
		got += ev.imm == 1000u + (uint32_t)got;
	return got == 10;
}

static size_t canary_damage(const struct arena *a)
{
	const uint8_t *b = (const uint8_t *)a->win->buf + HALF;

	for (size_t i = 0; i < HALF; i++)
		if (b[i] != 0xCC)
			return i + 1;
	return 0;
}

/* Measured here: libfabric 1.17's shm does not check a write's range at the
 * target (a raw shm peer wrote past its window into the canary), and a
 * process of the same user on the same host can write another's memory
 * anyway (process_vm_writev, ptrace). On shm the window is the honest
 * sender's promise only; docs/design.md says so. */
static int shm_unenforced(int kind)
{
	if (kind != RAW_RDM)
		return 0;
	conf_skip("libfabric shm does not enforce registrations at the target (measured: a raw "
		  "peer wrote past its window); same-host peers of one user are trusted");
	return 1;
}

/* The arena, a raw peer of the fabric's kind, connected: 0, or 1 when the
 * test does not apply here (skipped), or -1 (a failure is recorded). */
static int hostile_open(const char *uri, uint32_t depth, int need_windows, struct arena *a,
			struct raw_peer *r, struct wimm_conn **hc, int *kind)
{
	const char *why;

	*kind = raw_kind(uri, &why);
	if (!*kind) {
		conf_skip("%s", why);
		return 1;
	}
	if (need_windows && shm_unenforced(*kind))
		return 1;
	if (arena_open(a, uri, depth) || raw_alloc(r, *kind))
		return -1;
	if (raw_connect(r, uri, a->addr, a->p.sctx, a->p.l, hc) || !*hc) {
		conf_fail(__FILE__, __LINE__, "raw peer: %s", r->text);
		return -1;
	}
	return 0;
}

static void t_hostile_outside_window(const char *uri)
{
	struct arena a;
	struct raw_peer r = {0};
	struct wimm_conn *hc = NULL;
	int kind, open = hostile_open(uri, 64, 1, &a, &r, &hc, &kind);

	if (open > 0)
		return;
	if (open < 0)
		goto out;
	CHECK(hc != NULL);
	CHECK_EQ(r.srv.window_len, HALF);
	struct seen s = {.conn = hc};
	/* The control: a write inside the window lands. */
	memset(r.src, 0x5A, 64);
	CHECK(raw_write(&r, r.srv.window_addr, r.srv.window_key, 64, 0, 0) == 0);
	pump_both(a.p.sctx, &r, &s, 1, 300);
	CHECKF(((uint8_t *)a.win->buf)[0] == 0x5A && ((uint8_t *)a.win->buf)[63] == 0x5A,
	       "the raw peer's write inside its window did not land");
	/* Just past the end, straddling the end, and far beyond: all with the
	 * window's own key, all inside the application's registration. */
	memset(r.src, 0xEE, RAW_SRC);
	raw_write(&r, r.srv.window_addr + HALF, r.srv.window_key, 64, 0, 0);
	raw_write(&r, r.srv.window_addr + HALF - 32, r.srv.window_key, 64, 0, 0);
	raw_write(&r, r.srv.window_addr + HALF + 1024, r.srv.window_key, 8, 1, 7);
	pump_both(a.p.sctx, &r, &s, 1, 1000);
	size_t bad = canary_damage(&a);
	CHECKF(bad == 0, "the server's memory past the window changed at byte %zu", bad - 1);
	conf_diag("raw peer: %d posted, %d completed, %d failed; server: %d doorbells, %s",
		  r.posted, r.done, r.failed, s.doorbells, s.down ? "dropped" : "still up");
	CHECKF(s.doorbells == 0, "a doorbell outside the window reached the application");
	CHECK(honest_ok(&a));
out:
	wimm_conn_delete(&hc);
	raw_close(&r);
	pair_close(&a.p);
}

static void t_hostile_old_key(const char *uri)
{
	struct arena a;
	struct raw_peer r = {0};
	struct wimm_conn *hc = NULL;
	int kind, open = hostile_open(uri, 64, 1, &a, &r, &hc, &kind);

	if (open > 0)
		return;
	if (open < 0)
		goto out;
	struct wimm_handshake first = r.srv;
	struct seen s = {.conn = hc};
	raw_close(&r);
	pump(a.p.sctx, NULL, NULL, &s, 1, 300);
	for (int i = 0; i < 50 && !s.down; i++)
		pump(a.p.sctx, NULL, NULL, &s, 1, 100);
	CHECKF(s.down, "the server did not see the raw peer go");
	wimm_conn_delete(&hc);
	/* Again, and this time with the first connection's key. */
	CHECK(raw_alloc(&r, kind) == 0);
	CHECKF(raw_connect(&r, uri, a.addr, a.p.sctx, a.p.l, &hc) == 0, "%s", r.text);
	s = (struct seen){.conn = hc};
	conf_diag("window keys: first %#llx, second %#llx", (unsigned long long)first.window_key,
		  (unsigned long long)r.srv.window_key);
	CHECK(first.window_key != r.srv.window_key);
	memset(r.src, 0x66, 64);
	CHECK(raw_write(&r, r.srv.window_addr, r.srv.window_key, 64, 0, 0) == 0);
	pump_both(a.p.sctx, &r, &s, 1, 300);
	CHECKF(((uint8_t *)a.win->buf)[0] == 0x66, "a write with the current key did not land");
	memset(r.src, 0x77, 64);
	raw_write(&r, first.window_addr, first.window_key, 64, 0, 0);
	pump_both(a.p.sctx, &r, &s, 1, 1000);
	for (int i = 0; i < 64; i++)
		CHECKF(((uint8_t *)a.win->buf)[i] == 0x66,
		       "the old key wrote byte %d of the window", i);
	CHECK(canary_damage(&a) == 0);
	CHECK(honest_ok(&a));
out:
	wimm_conn_delete(&hc);
	raw_close(&r);
	pair_close(&a.p);
}

static void t_hostile_overdraft(const char *uri)
{
	enum { DEPTH = 16, SENT = 160 };
	struct arena a;
	struct raw_peer r = {0};
	struct wimm_conn *hc = NULL;
	int kind, open = hostile_open(uri, DEPTH, 0, &a, &r, &hc, &kind);

	if (open > 0)
		return;
	if (open < 0)
		goto out;
	CHECK_EQ(r.srv.rx_depth, DEPTH);
	struct seen s = {.conn = hc};
	/* Ten windows' worth of doorbells, no look at the credit word. */
	int64_t t0 = conf_now_ms();
	for (int i = 0; i < SENT; i++)
		if (raw_write(&r, r.srv.window_addr, r.srv.window_key, 8, 1, (uint32_t)i))
			break;
	conf_diag("raw peer posted %d doorbells in %lld ms", r.posted,
		  (long long)(conf_now_ms() - t0));
	for (int i = 0; i < 50 && !s.down; i++)
		pump_both(a.p.sctx, &r, &s, 1, 100);
	conf_diag("server: %d doorbells delivered, %s (%s); raw peer: %d completed, %d failed",
		  s.doorbells, s.down ? "dropped" : "still up", wimm_err_name(s.down_status),
		  r.done, r.failed);
	/* Never more than the window plus what was returned in time. */
	CHECKF(s.doorbells < SENT, "all %d doorbells beyond the credits were delivered", SENT);
	/* On verbs the responder's receive queue bounds the peer itself: a
	 * doorbell finds a posted receive or is refused with RNR, so how many
	 * get through depends on how fast the server hands slots back, and
	 * the receiver's count may never see an overdraft. Elsewhere the
	 * receiver's own count drops the peer. */
	if (kind != RAW_CM) {
		CHECKF(s.down, "the peer that ignored its credits is still connected");
		CHECK_RC(s.down_status, WIMM_E_OVERDRAFT);
	}
	struct wimm_ctx_stats st;
	CHECK_OK(wimm_ctx_stats(a.p.sctx, &st));
	if (kind != RAW_CM)
		CHECK_EQ(st.dropped_overdraft, 1);
	CHECK(honest_ok(&a));
out:
	wimm_conn_delete(&hc);
	raw_close(&r);
	pair_close(&a.p);
}

/* ---------------------------------------------------- ipc's own surfaces */

/* The raw ipc peer connected to an arena, or 1 (skipped) off ipc. */
static int ipc_open(const char *uri, struct arena *a, struct raw_peer *r, struct wimm_conn **hc)
{
	int kind;

	if (strcmp(uri, "ipc") != 0) {
		conf_skip("the rings and fds are the ipc fabric's");
		return 1;
	}
	return hostile_open(uri, 64, 1, a, r, hc, &kind);
}

static const char *const ipc_ring_cases[] = {"payload past the data area", "unknown operation",
					     "consumer index beyond the server's ring"};

static void ipc_ring_case(const char *uri, int i)
{
	const char *what = ipc_ring_cases[i];
	struct arena a;
	struct raw_peer r = {0};
	struct wimm_conn *hc = NULL;

	if (ipc_open(uri, &a, &r, &hc))
		goto out;
	struct seen s = {.conn = hc};
	memset(r.src, 0xEE, RAW_SRC);
	if (i == 0)
		raw_ipc_entry(&r, IPC_OP_WRITE_IMM, r.srv.window_addr, r.srv.window_key, 100, 1,
			      RAW_IPC_DATA - 16);
	if (i == 1)
		raw_ipc_entry(&r, (enum ipc_op)77, r.srv.window_addr, r.srv.window_key, 8, 1, 0);
	if (i == 2) {
		/* Claim to have consumed far more than the server sent, then
		 * make it look at the connection. */
		__atomic_store_n(&r.srv_ring->cons, 1u << 20, __ATOMIC_RELEASE);
		raw_ipc_write(&r, r.srv.window_addr, r.srv.window_key, 8, 1, 2);
	}
	for (int k = 0; k < 30 && !s.down; k++)
		pump_both(a.p.sctx, &r, &s, 1, 100);
	CHECKF(s.down, "%s: the raw peer is still connected", what);
	CHECKF(s.down_status == WIMM_E_PROTO, "%s: dropped with %s, expected WIMM_E_PROTO", what,
	       wimm_err_name(s.down_status));
	CHECKF(i == 2 || s.doorbells == 0, "%s: its doorbell was delivered", what);
	CHECKF(((uint8_t *)a.win->buf)[0] == (i == 2 ? 0xEE : 0xCC),
	       "%s: the window holds what it should not", what);
	CHECK(canary_damage(&a) == 0);
	CHECK(honest_ok(&a));
out:
	wimm_conn_delete(&hc);
	raw_close(&r);
	pair_close(&a.p);
}

/* Entries that lie about the data area, name an unknown operation, or a
 * consumer index beyond what the server published: each connection is
 * dropped with WIMM_E_PROTO and nothing of the server's memory changes. */
static void t_hostile_ipc_ring(const char *uri)
{
	if (strcmp(uri, "ipc") != 0) {
		conf_skip("the rings are the ipc fabric's");
		return;
	}
	for (int i = 0; i < 3; i++)
		ipc_ring_case(uri, i);
}

/* A handshake whose fds are not what they claim: an unsealed ring (the
 * peer could shrink it under the server: SIGBUS), a wake page of the wrong
 * size, a pipe for the eventfd (a full pipe would block the server's
 * writes). Each is refused at accept with WIMM_E_PROTO; the listener
 * goes on. */
static void t_hostile_ipc_fds(const char *uri)
{
	struct arena a;
	struct raw_peer good = {0};
	struct wimm_conn *hc = NULL;
	int open = ipc_open(uri, &a, &good, &hc);

	if (open > 0)
		return;
	if (open < 0)
		goto out;
	for (int i = 0; i < 3; i++) {
		size_t ring_len = ipc_ring_bytes(RAW_IPC_ENTRIES, RAW_IPC_DATA);
		int fd[IPC_NFDS], pipefd[2] = {-1, -1};
		void *ring = raw_ipc_memfd(&fd[0], ring_len);
		void *page = raw_ipc_memfd(&fd[1], i == 1 ? 2 * IPC_PAGE_BYTES : IPC_PAGE_BYTES);
		fd[2] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		CHECK(ring && page && fd[2] >= 0);
		*(struct ipc_ring_hdr *)ring = (struct ipc_ring_hdr){
		    .magic = IPC_MAGIC, .entries = RAW_IPC_ENTRIES, .data_bytes = RAW_IPC_DATA};
		if (i == 0) {
			/* The same ring, in an unsealed memfd. */
			close(fd[0]);
			fd[0] = memfd_create("raw-unsealed", MFD_CLOEXEC);
			CHECK(fd[0] >= 0 && ftruncate(fd[0], (off_t)ring_len) == 0);
			CHECK(pwrite(fd[0], ring, sizeof(struct ipc_ring_hdr), 0) > 0);
		}
		if (i == 2) {
			CHECK(pipe2(pipefd, O_CLOEXEC) == 0);
			close(fd[2]);
			fd[2] = pipefd[1];
		}
		uint8_t hs[WIMM_HS_MAX_LEN];
		struct wimm_handshake mine = {.version = WIMM_HS_VERSION, .rx_depth = 64};
		uint32_t addr[2] = {IPC_ADDR_MAGIC, 0};
		mine.credit_addr = (uint64_t)(uintptr_t)good.ctl;
		mine.credit_key = 1;
		mine.addr_len = sizeof(addr);
		memcpy(mine.addr, addr, sizeof(addr));
		int n = wimm_hs_encode(&mine, hs, sizeof(hs));
		int sock = conf_ipc_dial(a.addr);
		CHECK(n > 0 && sock >= 0);
		if (n > 0 && sock >= 0)
			CHECK(raw_ipc_send(sock, hs, (size_t)n, fd) == 0);
		struct wimm_conn *bogus = NULL;
		int rc = wimm_accept(a.p.l, 3000, &bogus);
		CHECKF(rc == WIMM_E_PROTO,
		       "fds case %d: wimm_accept gave %s, expected WIMM_E_PROTO", i,
		       wimm_err_name(rc));
		CHECK(bogus == NULL);
		wimm_conn_delete(&bogus);
		if (sock >= 0)
			close(sock);
		munmap(ring, ring_len);
		munmap(page, i == 1 ? 2 * IPC_PAGE_BYTES : IPC_PAGE_BYTES);
		for (int k = 0; k < IPC_NFDS; k++)
			close(fd[k]);
		if (pipefd[0] >= 0)
			close(pipefd[0]);
	}
	CHECK(honest_ok(&a));
out:
	wimm_conn_delete(&hc);
	raw_close(&good);
	pair_close(&a.p);
}

/* The ipc fabric's addressing errors: a spec it does not take, hosts
 * other than this one, a port already taken. */
static void t_ipc_addresses(const char *uri)
{
	struct wimm_ctx *ctx = NULL;
	struct wimm_listener *l = NULL, *l2 = NULL;
	struct wimm_conn *c = NULL;
	char addr[64];

	if (strcmp(uri, "ipc") != 0) {
		conf_skip("the addressing rules are the ipc fabric's");
		return;
	}
	CHECK_RC(wimm_ctx_open("ipc:shm", NULL, &ctx), WIMM_E_NODEV);
	CHECK(ctx == NULL);
	CHECK_OK(wimm_ctx_open("ipc", NULL, &ctx));
	CHECK(strcmp(wimm_ctx_fabric(ctx), "ipc") == 0);
	CHECK_RC(wimm_listen(ctx, "192.0.2.1:0", NULL, &l), WIMM_E_ADDR);
	CHECK_RC(wimm_listen(ctx, "127.0.0.1:http", NULL, &l), WIMM_E_ADDR);
	CHECK_RC(wimm_connect(ctx, "192.0.2.1:7471", NULL, 2000, &c), WIMM_E_UNREACHABLE);
	CHECK(c == NULL);
	CHECK_OK(wimm_listen(ctx, "localhost:0", NULL, &l));
	int port = wimm_listener_port(l);
	CHECK(port > 0 && port < 65536);
	snprintf(addr, sizeof(addr), "[::1]:%d", port);
	CHECK_RC(wimm_listen(ctx, addr, NULL, &l2), WIMM_E_ADDR);
	CHECK(l2 == NULL);
	wimm_listener_delete(&l);
	/* Nobody listens there any more. */
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	CHECK_RC(wimm_connect(ctx, addr, NULL, 2000, &c), WIMM_E_UNREACHABLE);
out:
	wimm_conn_delete(&c);
	wimm_listener_delete(&l);
	wimm_listener_delete(&l2);
	wimm_ctx_close(&ctx);
}

const struct conf_test conf_tests_hostile[] = {
    {"hostile_outside_window", t_hostile_outside_window, 60},
    {"hostile_old_key", t_hostile_old_key, 60},
    {"hostile_overdraft", t_hostile_overdraft, 60},
    {"hostile_ipc_ring", t_hostile_ipc_ring, 60},
    {"hostile_ipc_fds", t_hostile_ipc_fds, 60},
    {"ipc_addresses", t_ipc_addresses, 60},
    {NULL, NULL, 0},
};
