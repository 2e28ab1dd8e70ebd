/* Hostile peers of the ipc fabric: a raw peer that does the handshake
 * over the listener's unix socket, maps the rings itself and writes
 * entries that name anything (src/ipc/ipc_wire.h); the server checks each
 * one it consumes. Also the ipc fabric's own surfaces: lying ring entries,
 * fds that are not what they claim, and its addressing errors. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "conf_hostile.h"

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

int conf_ipc_send(int sock, const uint8_t *hs, size_t len, const int *fd)
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

static int raw_ipc_fail(struct hostile_peer *r, const char *what)
{
	snprintf(r->raw.text, sizeof(r->raw.text), "raw ipc: %s: %s", what, strerror(errno));
	return -1;
}

/* Our handshake with our three fds, the server's with its three back. */
int raw_ipc_connect(struct hostile_peer *r, const char *addr, struct wimm_ctx *ctx,
		    struct wimm_listener *l, struct wimm_conn **sconn)
{
	union {
		char buf[CMSG_SPACE(IPC_NFDS_MAX * sizeof(int))];
		struct cmsghdr align;
	} cm;
	uint8_t hs[WIMM_HS_MAX_LEN], reply[WIMM_HS_MAX_LEN];
	struct wimm_handshake mine;
	uint32_t a[2] = {IPC_ADDR_MAGIC, 0};
	struct stat st;
	int srv_fd[IPC_NFDS_MAX] = {-1, -1, -1, -1};

	r->ipc_sock = r->srv_efd = r->srv_win_fd = -1;
	r->ring = raw_ipc_memfd(&r->ipc_fd[0], ipc_ring_bytes(RAW_IPC_ENTRIES, RAW_IPC_DATA));
	r->page = raw_ipc_memfd(&r->ipc_fd[1], IPC_PAGE_BYTES);
	r->ipc_fd[2] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!r->ring || !r->page || r->ipc_fd[2] < 0)
		return raw_ipc_fail(r, "memfds");
	/* self: the server may offer direct payloads (we are its own process). */
	*r->ring = (struct ipc_ring_hdr){.magic = IPC_MAGIC,
					 .entries = RAW_IPC_ENTRIES,
					 .data_bytes = RAW_IPC_DATA,
					 .self = (uint64_t)(uintptr_t)r->ring};
	memset(&mine, 0, sizeof(mine));
	mine.version = WIMM_HS_VERSION;
	mine.rx_depth = 64;
	mine.credit_addr = (uint64_t)(uintptr_t)r->raw.ctl;
	mine.credit_key = 0x5a5a;
	mine.addr_len = sizeof(a);
	memcpy(mine.addr, a, sizeof(a));
	int n = wimm_hs_encode(&mine, hs, sizeof(hs));
	r->ipc_sock = conf_ipc_dial(addr);
	if (n < 0 || r->ipc_sock < 0)
		return raw_ipc_fail(r, "dial");
	if (conf_ipc_send(r->ipc_sock, hs, (size_t)n, r->ipc_fd))
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
	/* Three fds, or four when the server offers its window for mapping. */
	int nfds =
	    h && h->cmsg_type == SCM_RIGHTS ? (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int)) : 0;
	if (nfds != IPC_NFDS && nfds != IPC_NFDS_MAX)
		return raw_ipc_fail(r, "no reply with three or four fds");
	memcpy(srv_fd, CMSG_DATA(h), (size_t)nfds * sizeof(int));
	r->srv_efd = srv_fd[2];
	r->srv_win_fd = srv_fd[3];
	if (raw_reply(r, reply, (size_t)got) ||
	    (r->raw.srv.addr_len != sizeof(a) && r->raw.srv.addr_len != IPC_ADDR_WIN_LEN) ||
	    (nfds == IPC_NFDS_MAX && r->raw.srv.addr_len != IPC_ADDR_WIN_LEN)) {
		close(srv_fd[0]);
		close(srv_fd[1]);
		return -1;
	}
	memcpy(a, r->raw.srv.addr, sizeof(a));
	if (r->raw.srv.addr_len == IPC_ADDR_WIN_LEN)
		memcpy(&r->srv_win_off, r->raw.srv.addr + sizeof(a), sizeof(r->srv_win_off));
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
 * (UINT64_MAX: a quarter of the area of our choosing); with IPC_F_DIRECT
 * in flags, doff is the address the server is told to read from. */
static int raw_ipc_entry_flags(struct hostile_peer *r, enum ipc_op op, uint16_t flags,
			       uint64_t addr, uint64_t key, size_t len, uint32_t imm, uint64_t doff)
{
	if (r->prod - __atomic_load_n(&r->ring->cons, __ATOMIC_ACQUIRE) >= RAW_IPC_ENTRIES ||
	    len > RAW_IPC_DATA / 4)
		return -1;
	struct ipc_entry *e = &ipc_entries(r->ring)[r->prod % RAW_IPC_ENTRIES];
	*e = (struct ipc_entry){.op = (uint16_t)op,
				.flags = (uint16_t)(IPC_F_NOTIFY | flags),
				.len = (uint32_t)len,
				.imm = imm,
				.raddr = addr,
				.rkey = key};
	uint8_t *data = (uint8_t *)(ipc_entries(r->ring) + RAW_IPC_ENTRIES);
	if (flags & IPC_F_DIRECT) {
		e->u.doff = doff;
	} else if (len <= IPC_INLINE) {
		memcpy(e->u.inl, r->raw.src, len);
	} else {
		e->u.doff = doff != UINT64_MAX ? doff : (r->prod % 4) * (RAW_IPC_DATA / 4);
		if (e->u.doff + len <= RAW_IPC_DATA)
			memcpy(data + e->u.doff, r->raw.src, len);
	}
	r->prod++;
	__atomic_store_n(&e->seq, (uint32_t)r->prod, __ATOMIC_RELEASE);
	ipc_notify(r->srv_page, &r->ring->watch, r->srv_efd, r->srv_idx);
	r->raw.posted++;
	return 0;
}

static int raw_ipc_entry(struct hostile_peer *r, enum ipc_op op, uint64_t addr, uint64_t key,
			 size_t len, uint32_t imm, uint64_t doff)
{
	return raw_ipc_entry_flags(r, op, 0, addr, key, len, imm, doff);
}

int raw_ipc_write(struct hostile_peer *r, uint64_t addr, uint64_t key, size_t len, int doorbell,
		  uint32_t imm)
{
	return raw_ipc_entry(r, doorbell ? IPC_OP_WRITE_IMM : IPC_OP_WRITE, addr, key, len, imm,
			     UINT64_MAX);
}

/* What the server consumed (and refused), and the server's own entries
 * taken unread so its ring never fills. */
void raw_ipc_progress(struct hostile_peer *r)
{
	uint64_t cons = __atomic_load_n(&r->ring->cons, __ATOMIC_ACQUIRE);

	if (cons > r->prod)
		cons = r->prod;
	while ((uint64_t)(r->raw.done + r->raw.failed) < cons) {
		const struct ipc_entry *e = &ipc_entries(
		    r->ring)[(uint64_t)(r->raw.done + r->raw.failed) % RAW_IPC_ENTRIES];
		if (__atomic_load_n(&e->status, __ATOMIC_RELAXED))
			r->raw.failed++;
		else
			r->raw.done++;
	}
	if (!r->srv_ring)
		return;
	const struct ipc_entry *se = ipc_entries(r->srv_ring);
	uint64_t n = r->srv_ring->entries, sc = r->srv_ring->cons;
	while (__atomic_load_n(&se[sc % n].seq, __ATOMIC_ACQUIRE) == (uint32_t)(sc + 1))
		sc++;
	__atomic_store_n(&r->srv_ring->cons, sc, __ATOMIC_RELEASE);
}

void raw_ipc_close(struct hostile_peer *r)
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
	if (r->srv_win_fd > 0)
		close(r->srv_win_fd);
	for (int i = 0; i < IPC_NFDS; i++)
		if (r->ipc_fd[i] > 0)
			close(r->ipc_fd[i]);
}

/* ---------------------------------------------------- ipc's own surfaces */

/* The raw ipc peer connected to an arena, or 1 (skipped) off ipc. */
static int ipc_open(const char *uri, struct arena *a, struct hostile_peer *r, struct wimm_conn **hc)
{
	int kind;

	if (strcmp(uri, "ipc") != 0) {
		conf_skip("the rings and fds are the ipc fabric's");
		return 1;
	}
	return hostile_open(uri, 64, 1, a, r, hc, &kind);
}

static const char *const ipc_ring_cases[] = {"payload past the data area",
					     "unknown operation",
					     "consumer index beyond the server's ring",
					     "direct payload at an address the peer cannot read",
					     "direct payload of a read",
					     "mapped write into a window never mapped",
					     "mapped read"};
#define IPC_RING_CASES (int)(sizeof(ipc_ring_cases) / sizeof(ipc_ring_cases[0]))

static void ipc_ring_case(const char *uri, int i)
{
	const char *what = ipc_ring_cases[i];
	struct arena a;
	struct hostile_peer r = {0};
	struct wimm_conn *hc = NULL;

	if (ipc_open(uri, &a, &r, &hc))
		goto out;
	struct seen s = {.conn = hc};
	memset(r.raw.src, 0xEE, RAW_SRC);
	if (i == 0)
		raw_ipc_entry(&r, IPC_OP_WRITE_IMM, r.raw.srv.window_addr, r.raw.srv.window_key,
			      100, 1, RAW_IPC_DATA - 16);
	if (i == 1)
		raw_ipc_entry(&r, (enum ipc_op)77, r.raw.srv.window_addr, r.raw.srv.window_key, 8,
			      1, 0);
	if (i == 2) {
		/* Claim to have consumed far more than the server sent, then
		 * make it look at the connection. */
		__atomic_store_n(&r.srv_ring->cons, 1u << 20, __ATOMIC_RELEASE);
		raw_ipc_write(&r, r.raw.srv.window_addr, r.raw.srv.window_key, 8, 1, 2);
	}
	/* Offered or not (WIMM_IPC_DIRECT=0), both are refused: page 0 is
	 * nobody's, and a read has no payload to leave in place. */
	if (i == 3)
		raw_ipc_entry_flags(&r, IPC_OP_WRITE_IMM, IPC_F_DIRECT, r.raw.srv.window_addr,
				    r.raw.srv.window_key, 100, 1, 64);
	if (i == 4)
		raw_ipc_entry_flags(&r, IPC_OP_READ, IPC_F_DIRECT, r.raw.srv.window_addr,
				    r.raw.srv.window_key, 100, 1, (uint64_t)(uintptr_t)r.raw.src);
	/* The arena's window is wimm_mr_reg memory: never offered for
	 * mapping, so an entry claiming its bytes are there already lies
	 * (and a read has no bytes to have stored). */
	if (i == 5)
		raw_ipc_entry_flags(&r, IPC_OP_WRITE_IMM, IPC_F_MAPPED, r.raw.srv.window_addr,
				    r.raw.srv.window_key, 100, 1, 0);
	if (i == 6)
		raw_ipc_entry_flags(&r, IPC_OP_READ, IPC_F_MAPPED, r.raw.srv.window_addr,
				    r.raw.srv.window_key, 100, 1, 0);
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
	hostile_close(&hc, &r, &a);
}

/* Entries that lie about the data area, name an unknown operation, or a
 * consumer index beyond what the server published: each connection is
 * dropped with WIMM_E_PROTO and nothing of the server's memory changes. */
void t_hostile_ipc_ring(const char *uri)
{
	if (strcmp(uri, "ipc") != 0) {
		conf_skip("the rings are the ipc fabric's");
		return;
	}
	for (int i = 0; i < IPC_RING_CASES; i++)
		ipc_ring_case(uri, i);
}

/* A direct payload (ipc_wire.h) where the raw peer really has it: the
 * server offers direct payloads to its own process unless
 * WIMM_IPC_DIRECT=0, says so in our ring header, and then copies the
 * payload from our memory; not offered, the same entry is refused. */
void t_hostile_ipc_direct(const char *uri)
{
	const char *env = getenv("WIMM_IPC_DIRECT");
	int offered = !env || strcmp(env, "0") != 0;
	struct arena a;
	struct hostile_peer r = {0};
	struct wimm_conn *hc = NULL;

	if (ipc_open(uri, &a, &r, &hc))
		goto out;
	struct seen s = {.conn = hc};
	CHECKF((int)__atomic_load_n(&r.ring->direct, __ATOMIC_ACQUIRE) == offered,
	       "the server %s direct payloads", offered ? "did not offer" : "offered");
	uint8_t *src = r.raw.src;
	for (size_t k = 0; k < 100; k++)
		src[k] = (uint8_t)(k * 7 + 1);
	raw_ipc_entry_flags(&r, IPC_OP_WRITE_IMM, IPC_F_DIRECT, r.raw.srv.window_addr,
			    r.raw.srv.window_key, 100, 5, (uint64_t)(uintptr_t)r.raw.src);
	for (int k = 0; k < 30 && !s.down && !s.doorbells; k++)
		pump_both(a.p.sctx, &r, &s, 1, 100);
	const uint8_t *w = a.win->buf;
	if (offered) {
		CHECKF(s.doorbells == 1 && !s.down, "direct payload: %d doorbells, down %d",
		       s.doorbells, s.down);
		CHECKF(memcmp(w, r.raw.src, 100) == 0, "direct payload: the window differs");
	} else {
		CHECKF(s.down && s.down_status == WIMM_E_PROTO,
		       "a direct payload never offered was not refused");
		CHECK(s.doorbells == 0 && w[0] == 0xCC);
	}
	CHECK(canary_damage(&a) == 0);
	CHECK(honest_ok(&a));
out:
	hostile_close(&hc, &r, &a);
}

/* A window offered for mapping (wimm_mr_alloc memory, a peer of our own
 * user: the raw peer is this process): the raw peer gets its memfd, maps
 * it and stores into it itself, then publishes IPC_F_MAPPED entries. An
 * honest one is delivered with the bytes it stored; one naming another
 * key, or a range past the window, ends the connection; and the server's
 * close shuts the gate in our ring header, waiting (boundedly) for a
 * writer that says it is inside a store. */
void t_hostile_ipc_mapped(const char *uri)
{
	struct arena a;
	struct hostile_peer r = {0};
	struct wimm_conn *hc = NULL;
	uint8_t *m = MAP_FAILED;
	int kind;

	if (strcmp(uri, "ipc") != 0) {
		conf_skip("mapped windows are the ipc fabric's");
		return;
	}
	const char *env = getenv("WIMM_IPC_DIRECT");
	if (env && strcmp(env, "0") == 0) {
		conf_skip("WIMM_IPC_DIRECT=0: no window is offered for mapping");
		return;
	}
	for (int i = 0; i < 4; i++) {
		if (hostile_open(uri, 64, 1 | HOSTILE_ALLOC, &a, &r, &hc, &kind))
			goto out;
		struct seen s = {.conn = hc};
		CHECKF(r.srv_win_fd >= 0, "case %d: the server did not offer its window", i);
		m = mmap(NULL, 2 * HALF, PROT_READ | PROT_WRITE, MAP_SHARED, r.srv_win_fd, 0);
		CHECK(m != MAP_FAILED);
		uint8_t *w = m + r.srv_win_off;
		if (i == 0) {
			/* Honest: the bytes first, then the entry that says so. */
			for (int k = 0; k < 100; k++)
				w[k] = (uint8_t)(k * 3 + 1);
			raw_ipc_entry_flags(&r, IPC_OP_WRITE_IMM, IPC_F_MAPPED,
					    r.raw.srv.window_addr, r.raw.srv.window_key, 100, 9, 0);
			for (int k = 0; k < 30 && !s.doorbells && !s.down; k++)
				pump_both(a.p.sctx, &r, &s, 1, 100);
			CHECKF(s.doorbells == 1 && !s.down,
			       "honest mapped write: %d doorbells, down %d", s.doorbells, s.down);
			CHECK(memcmp(a.win->buf, w, 100) == 0);
		} else if (i < 3) {
			/* Another key (the credit word's), or past the window. */
			uint64_t key = i == 1 ? r.raw.srv.credit_key : r.raw.srv.window_key;
			uint64_t at = i == 1 ? r.raw.srv.credit_addr : r.raw.srv.window_addr + HALF;
			raw_ipc_entry_flags(&r, IPC_OP_WRITE_IMM, IPC_F_MAPPED, at, key, 8, 9, 0);
			for (int k = 0; k < 30 && !s.down; k++)
				pump_both(a.p.sctx, &r, &s, 1, 100);
			CHECKF(s.down && s.doorbells == 0, "case %d: the lying entry was taken", i);
			CHECKF(s.down_status == WIMM_E_PROTO || s.down_status == WIMM_E_BOUNDS,
			       "case %d: dropped with %s", i, wimm_err_name(s.down_status));
		} else {
			/* A writer stuck inside a store: the close waits for it
			 * at most 100 ms, and leaves the gate shut. */
			__atomic_store_n(&r.ring->busy, 1, __ATOMIC_RELEASE);
			int64_t t0 = conf_now_ms();
			CHECK_OK(wimm_conn_delete(&hc));
			int64_t took = conf_now_ms() - t0;
			CHECKF(took >= 90 && took < 2000 * conf_scale(),
			       "the close took %lld ms with a writer inside a store",
			       (long long)took);
			CHECK(__atomic_load_n(&r.ring->closed, __ATOMIC_ACQUIRE) == 1);
		}
		CHECK(canary_damage(&a) == 0);
		CHECK(honest_ok(&a));
		munmap(m, 2 * HALF);
		m = MAP_FAILED;
		hostile_close(&hc, &r, &a);
	}
	return;
out:
	if (m != MAP_FAILED)
		munmap(m, 2 * HALF);
	hostile_close(&hc, &r, &a);
}

/* A handshake whose fds are not what they claim: an unsealed ring (the
 * peer could shrink it under the server: SIGBUS), a wake page of the wrong
 * size, a pipe for the eventfd (a full pipe would block the server's
 * writes). Each is refused at accept with WIMM_E_PROTO; the listener
 * goes on. */
void t_hostile_ipc_fds(const char *uri)
{
	struct arena a;
	struct hostile_peer good = {0};
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
		mine.credit_addr = (uint64_t)(uintptr_t)good.raw.ctl;
		mine.credit_key = 1;
		mine.addr_len = sizeof(addr);
		memcpy(mine.addr, addr, sizeof(addr));
		int n = wimm_hs_encode(&mine, hs, sizeof(hs));
		int sock = conf_ipc_dial(a.addr);
		CHECK(n > 0 && sock >= 0);
		if (n > 0 && sock >= 0)
			CHECK(conf_ipc_send(sock, hs, (size_t)n, fd) == 0);
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
	hostile_close(&hc, &good, &a);
}

/* The ipc fabric's addressing errors: a spec it does not take, hosts
 * other than this one, a port already taken. */
void t_ipc_addresses(const char *uri)
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
