/* libfabric backend: completions, the control plane, the wait fd.
 *
 * What a poll costs with many connections. Figures: bench/scale.c, the
 * server thread's CPU time per wimm_poll, 8 client processes on the same
 * 2-core shared host, libfabric 1.17, default context attributes:
 *
 *                         1 conn   1000 conns   1000 conns, before
 *   tcp  idle poll        149 ns   259 ns       607 us (wall clock)
 *   tcp  1 of N busy      276 ns   289 ns       1.8 ms
 *   shm  idle poll         60 ns   308 ns       118 us
 *   shm  1 of N busy       78 ns   367 ns        88 us
 *
 * (1000 idle connections are not silent: each sends and receives a
 * heartbeat every 1.25 s.)
 *
 * RDM (shm) shares one endpoint and CQ per lane of up to 256 connections
 * (ofi_lane.c), so a poll reads one CQ per lane (1000 connections: 7).
 *
 * MSG (tcp) cannot share a CQ: libfabric 1.17's tcp provider reports a
 * remote write's CQ data with op_context and buf NULL and no source
 * (tcpx_report_success: ofi_cq_write(cq, xfer_entry->context = NULL, ...,
 * NULL, data, tag); FI_SOURCE is not supported on MSG), so nothing in the
 * entry says which of the endpoints bound to one CQ it came from, and the
 * CQ data is the peer's to choose. (One shared CQ would also still cost
 * O(n): tcpx_progress walks every endpoint bound to the CQ on each read.)
 * So each connection keeps its own CQ, but a poll reads only the "hot"
 * ones: those whose CQ wait fd x->epfd reported readable (tcp's wait fd is
 * an epoll set over the endpoint's socket and the CQ's signal, so it is
 * readable exactly when reading the CQ could find something), those that
 * returned completions in the last OFI_LINGER reads, and those with a
 * stashed completion or receive slots just posted again (a message may wait
 * in tcp's buffer for them). The readiness scan is one epoll_wait(0) on
 * every empty poll (every OFI_SCAN_EVERY-th in a polling context) and on
 * every OFI_SCAN_EVERY-th busy one; each CQ read
 * costs tcp one epoll_wait of its own (tcpx_progress), so an empty poll
 * costs one system call whatever the number of connections. Connections of
 * a WIMM_CTX_POLLING context have no wait fd and stay hot: that mode is for
 * few connections.
 *
 * Descriptors: a tcp connection holds 4 (its socket, its CQ's epoll set and
 * signal pair), the context 3 more for the EQ all connections share; an shm
 * connection holds 1 (its liveness socket). 1000 tcp connections need
 * RLIMIT_NOFILE above 4000, which the application sets; the library never
 * calls setrlimit.
 *
 * The control plane: the shared EQ (MSG) and the liveness sockets (RDM) are
 * in the same epoll set, so the scan also serves them: within
 * OFI_SCAN_EVERY polls on tcp, within 1 ms (the clock is read every 64th
 * poll) on shm, busy or idle. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ofi/ofi_internal.h"

int ofi_epoll_add(struct ofi_ctx *x, int fd, void *ptr, enum ofi_tag tag)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uintptr_t)ptr | (uint64_t)tag};

	return epoll_ctl(x->epfd, EPOLL_CTL_ADD, fd, &ev);
}

void ofi_epoll_del(struct ofi_ctx *x, int fd)
{
	epoll_ctl(x->epfd, EPOLL_CTL_DEL, fd, NULL);
}

/* The outstanding send position a cookie names, UINT64_MAX for none (not
 * ours, or retired already by a later completion). */
static uint64_t ofi_tx_of(struct ofi_conn *c, const void *k)
{
	if (!k || ofi_cookie_is_slot(k) || ofi_cookie_conn(c->ctx, k) != c)
		return UINT64_MAX;
	return wimm_send_ring_pos_of_index(&c->sq, ofi_cookie_pos(k));
}

static int ofi_is_slot(struct ofi_conn *c, const void *k)
{
	return k && ofi_cookie_is_slot(k) && ofi_cookie_conn(c->ctx, k) == c &&
	       ofi_cookie_pos(k) < c->rx_depth;
}

int ofi_convert(struct ofi_conn *c, const struct fi_cq_data_entry *d, struct wimm_cqe *e)
{
	int wide = c->ctx->data_wide;

	memset(e, 0, sizeof(*e));
	e->conn = c->core;
	if (d->flags & FI_REMOTE_CQ_DATA) {
		e->imm = (uint32_t)d->data;
		e->len = wide ? (uint32_t)(d->data >> 32) : (uint32_t)d->len;
		if (d->flags & FI_RECV) {
			if (!ofi_is_slot(c, d->op_context))
				return 0;
			e->kind = WIMM_CQE_RECV_SEND_IMM;
			e->data = c->rx_buf + (size_t)ofi_cookie_pos(d->op_context) * c->recv_size;
		} else {
			e->kind = WIMM_CQE_RECV_WRITE_IMM;
		}
		return 1;
	}
	/* Out of order (shm injects a write posted after a read and completes
	 * it first): marked, then taken in post order. A forced completion
	 * reports nothing. */
	wimm_send_ring_mark(&c->sq, ofi_tx_of(c, d->op_context), 0, 0);
	return wimm_send_ring_take(&c->sq, c->core, e);
}

int ofi_convert_err(struct ofi_conn *c, const struct fi_cq_err_entry *err, struct fid_cq *cq,
		    struct wimm_cqe *e)
{
	uint64_t pos;
	char text[200];

	memset(e, 0, sizeof(*e));
	e->conn = c->core;
	e->prov_err = -err->err;
	e->status = (err->err == FI_ECANCELED || err->err == FI_ECONNRESET ||
		     err->err == FI_ENOTCONN || err->err == EPIPE || err->err == FI_ESHUTDOWN)
			? WIMM_E_DISCONNECTED
			: WIMM_E_PROVIDER;
	if (ofi_is_slot(c, err->op_context)) {
		/* Receives flushed by a closing endpoint are not failures of ours. */
		if (err->err == FI_ECANCELED)
			return 0;
		snprintf(text, sizeof(text), "receive failed: %s (%s)", fi_strerror(err->err),
			 fi_cq_strerror(cq, err->prov_errno, err->err_data, NULL, 0));
		wimm_ctx_set_provider_error(c->ctx->core, -err->err, text);
		ofi_conn_down(c, e->status, e->prov_err);
		return 0;
	}
	snprintf(text, sizeof(text), "completion error: %s (%s)", fi_strerror(err->err),
		 fi_cq_strerror(cq, err->prov_errno, err->err_data, NULL, 0));
	wimm_ctx_set_provider_error(c->ctx->core, -err->err, text);
	pos = ofi_tx_of(c, err->op_context);
	/* An injected op has no context: blame the oldest outstanding one. */
	if (pos == UINT64_MAX && !err->op_context && wimm_send_ring_outstanding(&c->sq))
		pos = wimm_send_ring_tail(&c->sq);
	if (pos != UINT64_MAX) {
		int status = e->status, prov_err = e->prov_err;

		wimm_send_ring_mark(&c->sq, pos, status, prov_err);
		return wimm_send_ring_take(&c->sq, c->core, e);
	}
	/* None outstanding to blame: the endpoint itself failed. */
	ofi_conn_down(c, e->status, e->prov_err);
	return 0;
}

/* MSG: the connection's own CQ into out. */
static int ofi_conn_read_cq(struct ofi_conn *c, struct wimm_cqe *out, int n)
{
	struct fi_cq_data_entry d[16];
	int got = 0;

	while (got < n) {
		size_t want = (size_t)(n - got) < 16 ? (size_t)(n - got) : 16;
		ssize_t r = fi_cq_read(c->cq, d, want);

		if (r == -FI_EAGAIN)
			break;
		if (r == -FI_EAVAIL) {
			struct fi_cq_err_entry err = {0};

			if (fi_cq_readerr(c->cq, &err, 0) < 0)
				break;
			got += ofi_convert_err(c, &err, c->cq, &out[got]);
			continue;
		}
		if (r < 0) {
			ofi_err(c->ctx, (int)r, "fi_cq_read");
			break;
		}
		for (ssize_t i = 0; i < r; i++)
			got += ofi_convert(c, &d[i], &out[got]);
		/* What a completion let go after its own (see ofi_convert). */
		while (got < n && wimm_send_ring_take(&c->sq, c->core, &out[got]))
			got++;
		if ((size_t)r < want)
			break;
	}
	return got;
}

/* Drive progress outside poll() (post, arm) without losing what it finds. */
void ofi_conn_stash_cq(struct ofi_conn *c)
{
	if (c->lane) {
		ofi_lane_fill(c->lane, c->ctx);
		return;
	}
	while (c->stash_len < OFI_STASH) {
		unsigned tail = (c->stash_head + c->stash_len) % OFI_STASH;
		int room = (int)(OFI_STASH - tail);
		int got;

		/* Contiguous room from tail, bounded by the free entries. */
		if (room > (int)(OFI_STASH - c->stash_len))
			room = (int)(OFI_STASH - c->stash_len);
		got = ofi_conn_read_cq(c, &c->stash[tail], room);
		c->stash_len += (unsigned)got;
		if (got < room)
			break;
	}
	/* A ring entry lands in a CQ read too, and says nothing in the CQ. */
	if (c->stash_len || ofi_ring_pending(c))
		ofi_hot_add(c);
}

void ofi_conn_down(struct ofi_conn *c, int status, int prov_err)
{
	if (!wimm_down_mark(&c->down, status, prov_err))
		return;
	if (c->sock >= 0 && c->in_epoll_sock) {
		/* An EOF socket stays readable: keep it from waking sleepers forever. */
		ofi_epoll_del(c->ctx, c->sock);
		c->in_epoll_sock = 0;
	}
	if (c->lane)
		ofi_lane_push_down(c);
	else
		ofi_hot_add(c);
}

/* ------------------------------------------------------------ hot list */

void ofi_hot_add(struct ofi_conn *c)
{
	struct ofi_ctx *x = c->ctx;

	c->linger = OFI_LINGER;
	if (c->in_hot || c->lane)
		return;
	c->in_hot = 1;
	x->nhot++;
	if (!x->hot) {
		c->hot_next = c->hot_prev = c;
		x->hot = c;
		return;
	}
	/* At the tail: the ones already waiting are served first. */
	c->hot_next = x->hot;
	c->hot_prev = x->hot->hot_prev;
	c->hot_prev->hot_next = c;
	x->hot->hot_prev = c;
}

void ofi_hot_del(struct ofi_conn *c)
{
	struct ofi_ctx *x = c->ctx;

	if (!c->in_hot)
		return;
	c->in_hot = 0;
	x->nhot--;
	if (c->hot_next == c) {
		x->hot = NULL;
		return;
	}
	c->hot_prev->hot_next = c->hot_next;
	c->hot_next->hot_prev = c->hot_prev;
	if (x->hot == c)
		x->hot = c->hot_next;
}

static struct wimm_cqe *ofi_stash_pop(struct ofi_conn *c)
{
	struct wimm_cqe *e = &c->stash[c->stash_head];

	c->stash_head = (c->stash_head + 1) % OFI_STASH;
	c->stash_len--;
	return e;
}

/* With our doorbell ring (ofi_ring_wire.h): its entries and the CQ's
 * completions in the order the peer posted them. An entry goes after the
 * number of CQ doorbells it names; tcp keeps the peer's bytes in order, so
 * when an entry is there, every CQ doorbell posted before it is already in
 * the CQ, and one that is not is a peer breaking the rules. */
static int ofi_conn_emit_merged(struct ofi_conn *c, struct wimm_cqe *out, int n)
{
	int got = 0, read = 0;
	int32_t ahead;

	while (got < n) {
		int entry = ofi_ring_peek(c, &ahead);

		if (entry && ahead == 0) {
			if (!ofi_ring_take(c, &out[got])) {
				ofi_ring_violation(
				    c, "an entry claims more bytes than the window has");
				break;
			}
			got++;
			continue;
		}
		if (entry && ahead < 0) {
			ofi_ring_violation(c,
					   "an entry is placed before doorbells already delivered");
			break;
		}
		if (!c->stash_len) {
			/* Completions taken in post order that did not fit last time. */
			if (wimm_send_ring_take(&c->sq, c->core, &out[got])) {
				got++;
				continue;
			}
			/* One CQ read a call (each costs tcp a poll(2)), more only
			 * for the CQ doorbells an entry waits for. */
			if (read && !(entry && ahead > 0))
				break;
			ofi_conn_stash_cq(c);
			read = 1;
			/* The read's progress may have placed entries that go
			 * before what it found in the CQ: look at the ring again. */
			if (c->stash_len)
				continue;
			if (!ofi_ring_peek(c, &ahead))
				break;
			if (ahead != 0) {
				ofi_ring_violation(c, "an entry waits for doorbells never sent");
				break;
			}
			continue;
		}
		out[got] = *ofi_stash_pop(c);
		if (out[got].kind == WIMM_CQE_RECV_SEND_IMM ||
		    out[got].kind == WIMM_CQE_RECV_WRITE_IMM)
			c->cq_bells++;
		got++;
	}
	return got;
}

static int ofi_conn_emit(struct ofi_conn *c, struct wimm_cqe *out, int n)
{
	int got = 0;

	/* Up before anything that arrived on it. */
	if (c->up_pending && n > 0) {
		out[got++] = (struct wimm_cqe){.kind = WIMM_CQE_CONN_UP, .conn = c->core};
		c->up_pending = 0;
	}
	if (c->ring && !c->ring_broken) {
		got += ofi_conn_emit_merged(c, out + got, n - got);
	} else {
		while (got < n && c->stash_len)
			out[got++] = *ofi_stash_pop(c);
		/* Completions taken in post order that did not fit last time. */
		while (got < n && wimm_send_ring_take(&c->sq, c->core, &out[got]))
			got++;
		if (got < n && c->cq)
			got += ofi_conn_read_cq(c, out + got, n - got);
	}
	/* The connection's last word: after whatever completed before it died. */
	if (got < n && wimm_down_emit(&c->down, &out[got], c->core))
		got++;
	for (int i = 0; i < got; i++)
		if (out[i].kind == WIMM_CQE_RECV_SEND_IMM)
			wimm_recv_slots_deliver(&c->rx);
	return got;
}

/* Read the hot connections, starting where the last poll stopped. */
static int ofi_emit_hot(struct ofi_ctx *x, struct wimm_cqe *out, int n)
{
	struct ofi_conn *c = x->hot;
	uint32_t todo = x->nhot;
	int got = 0;

	while (c && todo-- && got < n) {
		struct ofi_conn *next = c->hot_next;
		int k = ofi_conn_emit(c, out + got, n - got);

		got += k;
		if (k)
			c->linger = OFI_LINGER;
		else if (c->cq_fd >= 0 && !c->stash_len && !wimm_send_ring_ready(&c->sq) &&
			 c->down.state != WIMM_DOWN_PENDING && !c->up_pending &&
			 !ofi_ring_pending(c) && --c->linger == 0)
			ofi_hot_del(c);
		c = x->hot ? next : NULL;
	}
	/* The next poll starts with the first one not served. */
	if (c && c->in_hot)
		x->hot = c;
	return got;
}

/* ------------------------------------------------------- control plane */

void ofi_check_sock(struct ofi_conn *c)
{
	int err = wimm_sidechan_alive(c->sock);

	/* EOF is an orderly close: no provider error to show. */
	if (err)
		ofi_conn_down(c, WIMM_E_DISCONNECTED, err == ECONNRESET ? 0 : err);
}

/* One epoll_wait(0) over everything that can need attention: CQs with
 * something to read (MSG), the shared CM event queue (MSG), the liveness
 * sockets (RDM). Costs one system call whatever the number of connections. */
static void ofi_scan(struct ofi_ctx *x)
{
	struct epoll_event ev[64];
	int k = epoll_wait(x->epfd, ev, 64, 0);

	for (int i = 0; i < k; i++) {
		void *p = (void *)(uintptr_t)(ev[i].data.u64 & ~(uint64_t)3);

		switch ((enum ofi_tag)(ev[i].data.u64 & 3)) {
		case OFI_TAG_CQ:
			ofi_hot_add(p);
			break;
		case OFI_TAG_SOCK:
			ofi_check_sock(p);
			break;
		case OFI_TAG_EQ:
			ofi_eq_drain(x);
			break;
		case OFI_TAG_TIMER:
			break; /* arm() resets it */
		}
	}
}

/* MSG (tcp): the hot connections, and the readiness scan. Out of line:
 * RDM's path through ofi_poll then needs no frame. */
static __attribute__((noinline)) int ofi_poll_msg(struct ofi_ctx *x, struct wimm_cqe *out, int n)
{
	int got = ofi_emit_hot(x, out, n);

	/* Idle: look for newly ready connections at once. Busy: every few
	 * polls, so a stream on one connection neither hides the others nor
	 * the control plane for long. A context without CQ wait fds keeps
	 * every connection hot: its scan finds only the control plane, so it
	 * comes every few polls, idle or not (a doorbell landing during an
	 * epoll_wait was seen one system call late: 1.23 of them per tcp
	 * round trip). */
	if ((got == 0 && x->cq_wait_fd) || ++x->polls % OFI_SCAN_EVERY == 0) {
		ofi_scan(x);
		if (got < n)
			got += ofi_emit_hot(x, out + got, n - got);
	}
	return got;
}

int ofi_poll(void *bctx, struct wimm_cqe *out, int n)
{
	struct ofi_ctx *x = bctx;

	if (x->msg)
		return ofi_poll_msg(x, out, n);
	if (x->nkick)
		ofi_kick_pending(x);
	/* The liveness sockets at most every 1 ms, busy or not; the clock
	 * itself only every 64th poll (even the coarse clock costs a few
	 * percent of a 0.3 us shm round trip). First, so that a connection
	 * the scan finds gone reports its CONN_DOWN in this poll. */
	if (++x->polls % 64 == 0 && wimm_ctl_due(&x->ctl))
		ofi_scan(x);
	return ofi_lane_poll(x, out, n);
}

int ofi_fd(void *bctx)
{
	return ((struct ofi_ctx *)bctx)->epfd;
}

static void ofi_reset_timer(struct ofi_ctx *x)
{
	uint64_t ticks;

	/* Reset the tick; the next one wakes the sleeper within 1 ms. */
	if (x->timerfd >= 0)
		while (read(x->timerfd, &ticks, sizeof(ticks)) > 0)
			;
}

int ofi_arm(void *bctx)
{
	struct ofi_ctx *x = bctx;
	size_t nf = 0;
	int ret;

	ofi_scan(x);
	if (!x->msg) {
		for (struct ofi_lane *l = x->lanes; l; l = l->next)
			if (ofi_lane_fill(l, x))
				return WIMM_E_AGAIN;
		ofi_reset_timer(x);
		return 0;
	}
	/* Cold connections were read empty and their fds were quiet at the
	 * scan: only the hot ones can hold something. */
	if (ofi_fids_reserve(x, x->nhot + 1))
		return WIMM_E_NOMEM;
	for (struct ofi_conn *c = x->hot; c && nf < x->nhot;) {
		ofi_conn_stash_cq(c);
		if (c->stash_len || wimm_send_ring_ready(&c->sq) ||
		    c->down.state == WIMM_DOWN_PENDING || c->up_pending || ofi_ring_pending(c))
			return WIMM_E_AGAIN;
		if (c->cq_fd >= 0)
			x->fids[nf++] = &c->cq->fid;
		c = c->hot_next;
		if (c == x->hot)
			break;
	}
	if (x->eq)
		x->fids[nf++] = &x->eq->fid;
	ofi_reset_timer(x);
	if (!nf)
		return 0;
	/* tcp: resets the CQ signal and checks nothing arrived meanwhile. */
	ret = fi_trywait(x->fabric, x->fids, (int)nf);
	if (ret == -FI_EAGAIN)
		return WIMM_E_AGAIN;
	if (ret)
		return ofi_err(x, ret, "fi_trywait");
	return 0;
}
