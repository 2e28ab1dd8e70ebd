/* ipc backend: completions. poll() consumes the peers' rings of the
 * connections whose bit is set in our wake page (the receiver copies each
 * payload into its own memory after checking the key, the range and the
 * access against its own registrations: enforcement by construction),
 * retires our own consumed entries (signaled ones and reads complete when
 * the peer has consumed them), and looks at the connection sockets for
 * liveness every millisecond of a busy loop. Idle connections cost
 * nothing: only the ready list is visited. */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ipc/ipc_internal.h"

void ipc_conn_down(struct ipc_conn *c, int status, int prov_err)
{
	if (!wimm_down_mark(&c->down, status, prov_err))
		return;
	/* What the peer had published by now still lands before the
	 * CONN_DOWN; nothing after it. */
	c->down_left = c->rx.n;
	if (c->in_epoll) {
		epoll_ctl(c->ctx->epfd, EPOLL_CTL_DEL, c->sock, NULL);
		c->in_epoll = 0;
	}
	ipc_evq_add(c);
}

/* Does a peer's access of [raddr, raddr+len) stay inside [addr, addr+len)? */
static int ipc_inside(const void *addr, size_t len, const struct ipc_entry *e)
{
	uint64_t base = (uint64_t)(uintptr_t)addr;

	return e->raddr >= base && e->raddr - base <= len && e->len <= len - (e->raddr - base);
}

/* Where a peer's access of [raddr, raddr+len) lands in our memory. */
static int ipc_target(const struct ipc_ctx *x, const struct ipc_entry *e, unsigned access,
		      char **at)
{
	const struct ipc_mr *m = ipc_mr_find(x, e->rkey);

	if (!m || !(m->access & access))
		return WIMM_E_PERM;
	if (!ipc_inside(m->addr, m->len, e))
		return WIMM_E_BOUNDS;
	*at = m->addr + (e->raddr - (uint64_t)(uintptr_t)m->addr);
	return 0;
}

/* The payload of an entry (our copy): inline, or in the data area. */
static const uint8_t *ipc_payload(const struct ipc_rxq *q, const struct ipc_entry *e)
{
	if (e->len <= IPC_INLINE)
		return e->u.inl;
	if (e->u.doff > q->data_bytes || e->len > q->data_bytes - e->u.doff)
		return NULL;
	return q->data + e->u.doff;
}

/* An entry's payload into dst (already checked to be ours to write): from
 * the data area (src), or with IPC_F_DIRECT from the producer's memory.
 * DISCONNECTED: the producer is gone, and what it left in place with it. */
static int ipc_copy_in(const struct ipc_conn *c, const struct ipc_entry *e, const uint8_t *src,
		       void *dst)
{
	if (!(e->flags & IPC_F_DIRECT)) {
		memcpy(dst, src, e->len);
		return 0;
	}
	struct iovec to = {.iov_base = dst, .iov_len = e->len};
	struct iovec from = {.iov_base = (void *)(uintptr_t)e->u.doff, .iov_len = e->len};
	ssize_t n = process_vm_readv(c->rx.pid, &to, 1, &from, 1, 0);

	if (n == (ssize_t)e->len)
		return 0;
	/* Otherwise the address is not the producer's to give (EFAULT, or
	 * a part of it): refused like any lying entry. */
	return n < 0 && errno == ESRCH ? WIMM_E_DISCONNECTED : WIMM_E_PROTO;
}

/* An atomic on a word of ours: the old value goes back in the entry. The
 * word may be shared with other processes and threads: a CPU atomic. */
static int ipc_atomic(struct ipc_conn *c, const struct ipc_entry *e, struct ipc_entry *shared)
{
	uint64_t operand, compare, old;
	char *at = NULL;

	if (e->len != 8 || e->raddr % 8)
		return WIMM_E_PROTO;
	int st = ipc_target(c->ctx, e, WIMM_REMOTE_ATOMIC, &at);
	if (st)
		return st;
	memcpy(&operand, e->u.inl + IPC_ATOMIC_OPERAND, 8);
	memcpy(&compare, e->u.inl + IPC_ATOMIC_COMPARE, 8);
	uint64_t *word = (uint64_t *)(void *)at;
	if (e->op == IPC_OP_FETCH_ADD) {
		old = __atomic_fetch_add(word, operand, __ATOMIC_SEQ_CST);
	} else {
		old = compare;
		__atomic_compare_exchange_n(word, &old, operand, 0, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST);
	}
	memcpy(shared->u.inl + IPC_ATOMIC_RESULT, &old, 8);
	return 0;
}

/* One entry of the peer's ring: 1 with a cqe, 0 without, or a negative
 * status (the entry is refused, the connection goes). */
static int ipc_consume(struct ipc_conn *c, const struct ipc_entry *e, struct ipc_entry *shared,
		       struct wimm_cqe *out)
{
	const uint8_t *src = NULL;
	char *at = NULL;
	int st;

	if (e->len > IPC_MAX_MSG)
		return WIMM_E_TOOBIG;
	if (e->op == IPC_OP_FETCH_ADD || e->op == IPC_OP_CMP_SWAP)
		return ipc_atomic(c, e, shared);
	if (e->flags & IPC_F_MAPPED) {
		/* Only writes into the window we mapped into this peer: its
		 * bytes can have landed nowhere else. */
		if (!c->win_offered || (e->op != IPC_OP_WRITE && e->op != IPC_OP_WRITE_IMM) ||
		    !e->len || (e->flags & IPC_F_DIRECT) || e->rkey != c->win->key)
			return WIMM_E_PROTO;
		/* That window, writable (or it had not been offered), and
		 * registered while c lives: its range is the whole check. */
		if (!ipc_inside(c->win->addr, c->win->len, e))
			return WIMM_E_BOUNDS;
	} else if (e->flags & IPC_F_DIRECT) {
		/* Only what we offered, and only for what carries a payload. */
		if (c->rx.pid <= 0 || e->op == IPC_OP_READ || e->len <= IPC_INLINE)
			return WIMM_E_PROTO;
	} else if (e->op != IPC_OP_READ && e->len && !(src = ipc_payload(&c->rx, e))) {
		return WIMM_E_PROTO;
	}
	switch (e->op) {
	case IPC_OP_WRITE:
	case IPC_OP_WRITE_IMM:
		if (e->len && !(e->flags & IPC_F_MAPPED) &&
		    ((st = ipc_target(c->ctx, e, WIMM_REMOTE_WRITE, &at)) ||
		     (st = ipc_copy_in(c, e, src, at))))
			return st;
		if (e->op == IPC_OP_WRITE)
			return 0;
		wimm_recv_slots_deliver(&c->rx_slots);
		*out = (struct wimm_cqe){
		    .kind = WIMM_CQE_RECV_WRITE_IMM, .conn = c->core, .imm = e->imm, .len = e->len};
		return 1;
	case IPC_OP_SEND_IMM:
		if (!c->recv_size)
			return WIMM_E_NORECV;
		if (e->len > c->recv_size)
			return WIMM_E_TRUNC;
		/* Every slot is still the application's: a peer beyond its
		 * credits (the core would drop it too, but only after this
		 * slot were overwritten). */
		if (wimm_recv_slots_full(&c->rx_slots))
			return WIMM_E_OVERDRAFT;
		uint8_t *slot =
		    c->slots + (size_t)wimm_recv_slots_next(&c->rx_slots) * c->recv_size;
		if (e->len && (st = ipc_copy_in(c, e, src, slot)))
			return st;
		wimm_recv_slots_deliver(&c->rx_slots);
		*out = (struct wimm_cqe){.kind = WIMM_CQE_RECV_SEND_IMM,
					 .conn = c->core,
					 .imm = e->imm,
					 .len = e->len,
					 .data = slot};
		return 1;
	case IPC_OP_READ:
		if (!e->len)
			return 0;
		if ((st = ipc_target(c->ctx, e, WIMM_REMOTE_READ, &at)))
			return st;
		if (e->len <= IPC_INLINE) {
			memcpy(shared->u.inl, at, e->len);
		} else {
			if (e->u.doff > c->rx.data_bytes || e->len > c->rx.data_bytes - e->u.doff)
				return WIMM_E_PROTO;
			memcpy((uint8_t *)c->rx.data + e->u.doff, at, e->len);
		}
		return 0;
	default:
		return WIMM_E_PROTO;
	}
}

/* What we consumed, told to the producer (ipc_wire.h: cons). */
static void ipc_publish(struct ipc_conn *c)
{
	struct ipc_rxq *q = &c->rx;

	if (q->published == q->cons)
		return;
	__atomic_store_n(&q->hdr->cons, q->cons, __ATOMIC_RELEASE);
	q->published = q->cons;
}

/* Consume what the peer published, up to room cqes; *more when some is
 * left. A refused entry gets its status, ends the connection (as a
 * remote access error does on RDMA) and nothing after it lands. */
static int ipc_drain(struct ipc_conn *c, struct wimm_cqe *out, int room, int *more)
{
	struct ipc_rxq *q = &c->rx;
	int got = 0, notify = 0, publish = 0, down = c->down.state != WIMM_DOWN_ALIVE;

	for (;;) {
		struct ipc_entry *shared = &q->ent[q->cons & q->mask];
		/* Published entries only; a seq the peer scribbled is none. */
		if (__atomic_load_n(&shared->seq, __ATOMIC_ACQUIRE) != (uint32_t)(q->cons + 1))
			break;
		/* A peer that went may land one ring more, no more. */
		if (down && c->down_left-- == 0)
			break;
		if (got == room) {
			*more = 1;
			break;
		}
		struct ipc_entry e;
		memcpy(&e, shared, sizeof(e));
		int r = ipc_consume(c, &e, shared, out + got);
		if (r == WIMM_E_DISCONNECTED) {
			/* The producer died with this payload in its memory: it
			 * and what came after it are lost, as on a dead link. */
			ipc_conn_down(c, WIMM_E_DISCONNECTED, ESRCH);
			c->cut = 1;
			break;
		}
		if (r < 0) {
			__atomic_store_n(&shared->status, r, __ATOMIC_RELAXED);
			q->cons++;
			notify = 1;
			wimm_ctx_set_provider_error(c->ctx->core, 0,
						    "ipc: refused a peer's operation "
						    "(outside its window, malformed, or its "
						    "payload unreadable)");
			ipc_conn_down(c, r, 0);
			/* Nothing of this peer lands any more. */
			c->cut = 1;
			if (c->sock >= 0)
				shutdown(c->sock, SHUT_RDWR);
			break;
		}
		got += r;
		notify |= e.flags & IPC_F_NOTIFY;
		publish |= e.flags & IPC_F_PUBLISH;
		q->cons++;
	}
	if (notify || publish)
		ipc_publish(c);
	/* The producer waits for its signaled operations and reads. */
	if (notify)
		ipc_notify(c->peer_page, &c->tx.hdr->watch, c->peer_efd, c->peer_idx);
	return got;
}

static int ipc_status(int32_t st)
{
	/* The peer wrote it: only a WIMM_E_* code is taken as one. */
	return st <= WIMM_E_INVAL && st >= WIMM_E_OVERDRAFT ? st : WIMM_E_PROVIDER;
}

int ipc_tx_retire(struct ipc_conn *c, struct wimm_cqe *out, int room)
{
	struct ipc_txq *q = &c->tx;
	uint64_t cons = __atomic_load_n(&q->hdr->cons, __ATOMIC_ACQUIRE);
	uint64_t tail = wimm_send_ring_tail(&q->ops);
	int got = 0;

	if (cons - tail > wimm_send_ring_outstanding(&q->ops)) {
		wimm_ctx_set_provider_error(c->ctx->core, 0, "the peer consumed beyond our ring");
		ipc_conn_down(c, WIMM_E_PROTO, 0);
		return -1;
	}
	/* Each entry the peer consumed completes on its own (no unsignaled
	 * runs here): reads and atomics bring their bytes back in it. */
	for (; tail != cons; tail++) {
		const struct wimm_send_slot *s = wimm_send_ring_slot(&q->ops, tail);
		const struct ipc_tx *rec = &q->rec[tail & q->mask];
		const struct ipc_entry *e = &q->ent[tail & q->mask];
		int32_t st = __atomic_load_n(&e->status, __ATOMIC_RELAXED);
		int fetch = s->op == WIMM_OP_READ || s->op == WIMM_OP_FETCH_ADD ||
			    s->op == WIMM_OP_CMP_SWAP;

		if ((s->report || st) && got >= room)
			break;
		if (s->op == WIMM_OP_READ && !st && s->len)
			memcpy(rec->local, s->len <= IPC_INLINE ? e->u.inl : q->data + rec->doff,
			       s->len);
		else if (fetch && !st && s->len)
			memcpy(rec->local, e->u.inl + IPC_ATOMIC_RESULT, 8);
		/* Inline entries carry the position of their post: an area that
		 * started over since is not given back twice. */
		if (rec->data_end > q->data_tail)
			q->data_tail = rec->data_end;
		got += wimm_send_ring_complete(&q->ops, tail, st ? ipc_status(st) : 0, 0, c->core,
					       &out[got]);
	}
	return got;
}

/* Liveness: a connection socket that reads EOF or fails is a dead peer. */
static void ipc_ctrl(struct ipc_ctx *x)
{
	struct epoll_event ev[16];
	int k = epoll_wait(x->epfd, ev, 16, 0);

	for (int i = 0; i < k; i++) {
		struct ipc_conn *c = ev[i].data.ptr;
		if (!c)
			continue; /* the eventfd */
		int err = wimm_sidechan_alive(c->sock);
		if (err)
			ipc_conn_down(c, WIMM_E_DISCONNECTED, err);
	}
}

static void ipc_collect_bits(struct ipc_ctx *x)
{
	if (!__atomic_load_n(&x->page->summary, __ATOMIC_RELAXED))
		return;
	uint64_t s = __atomic_exchange_n(&x->page->summary, 0, __ATOMIC_ACQ_REL);
	while (s) {
		unsigned i = (unsigned)__builtin_ctzll(s);
		s &= s - 1;
		uint64_t w = __atomic_exchange_n(&x->page->bits[i], 0, __ATOMIC_ACQ_REL);
		while (w) {
			unsigned b = (unsigned)__builtin_ctzll(w);
			w &= w - 1;
			struct ipc_conn *c = x->tab[i * 64 + b];
			/* A bit of a gone or not yet mapped connection: nothing. */
			if (c && c->mapped)
				ipc_ready_add(c);
		}
	}
}

/* Anything of c's that a poll would find: a published entry of the
 * peer's, or our own entries consumed and not retired. */
static int ipc_has_work(const struct ipc_conn *c)
{
	const struct ipc_entry *e = &c->rx.ent[c->rx.cons & c->rx.mask];

	return __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE) == (uint32_t)(c->rx.cons + 1) ||
	       __atomic_load_n(&c->tx.hdr->cons, __ATOMIC_ACQUIRE) !=
		   wimm_send_ring_tail(&c->tx.ops);
}

/* Stop watching c (its producer sets our bits again): 1 when something
 * arrived meanwhile, and c stays watched. */
static int ipc_unwatch(struct ipc_conn *c)
{
	/* An idle ring owes its producer nothing: what it asked for nothing
	 * of is told now, before we look away. */
	ipc_publish(c);
	__atomic_store_n(&c->rx.hdr->watch, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (ipc_has_work(c)) {
		__atomic_store_n(&c->rx.hdr->watch, 1, __ATOMIC_RELAXED);
		return 1;
	}
	c->watching = 0;
	return 0;
}

/* Consume and retire for c: cqes made; *more when c has work left. */
static int ipc_service(struct ipc_conn *c, struct wimm_cqe *out, int room, int *more)
{
	int got = 0;

	*more = 0;
	if (!c->mapped)
		return 0;
	if (!c->cut)
		got = ipc_drain(c, out, room, more);
	/* The peer gives its index back rarely (IPC_F_PUBLISH): most polls
	 * have nothing to retire and skip the call. */
	if (__atomic_load_n(&c->tx.hdr->cons, __ATOMIC_RELAXED) == wimm_send_ring_tail(&c->tx.ops))
		return got;
	int r = ipc_tx_retire(c, out + got, room - got);
	if (r > 0)
		got += r;
	if (r >= 0 &&
	    __atomic_load_n(&c->tx.hdr->cons, __ATOMIC_RELAXED) != wimm_send_ring_tail(&c->tx.ops))
		*more = 1;
	return got;
}

/* CONN_UP of accepted connections, CONN_DOWN after what came before it. */
static int ipc_events(struct ipc_ctx *x, struct wimm_cqe *out, int room)
{
	int got = 0;

	for (struct ipc_conn **pp = &x->evq; *pp && got < room;) {
		struct ipc_conn *c = *pp;
		int more = 0;

		if (c->up_pending) {
			c->up_pending = 0;
			out[got++] = (struct wimm_cqe){.kind = WIMM_CQE_CONN_UP, .conn = c->core};
		}
		if (c->down.state == WIMM_DOWN_PENDING && got < room) {
			got += ipc_service(c, out + got, room - got, &more);
			if (!more && got < room)
				got += wimm_down_emit(&c->down, &out[got], c->core);
		}
		if (c->up_pending || c->down.state == WIMM_DOWN_PENDING) {
			pp = &c->evq_next;
			continue;
		}
		*pp = c->evq_next;
		c->in_evq = 0;
	}
	return got;
}

int ipc_poll(void *bctx, struct wimm_cqe *out, int n)
{
	struct ipc_ctx *x = bctx;
	int got = 0;

	/* Awake: writers need not signal the eventfd any more. */
	if (__atomic_load_n(&x->page->armed, __ATOMIC_RELAXED))
		__atomic_store_n(&x->page->armed, 0, __ATOMIC_RELAXED);
	if (wimm_ctl_due(&x->ctl))
		ipc_ctrl(x);
	ipc_collect_bits(x);
	for (struct ipc_conn **pp = &x->ready; *pp && got < n;) {
		struct ipc_conn *c = *pp;
		int more;

		int k = ipc_service(c, out + got, n - got, &more);
		got += k;
		if (k || more)
			c->linger = IPC_LINGER;
		if ((k || more || --c->linger > 0) && !c->cut) {
			pp = &c->ready_next;
			continue;
		}
		if (!c->cut && ipc_unwatch(c)) {
			c->linger = IPC_LINGER;
			pp = &c->ready_next;
			continue;
		}
		*pp = c->ready_next;
		c->in_ready = 0;
	}
	if (x->evq && got < n)
		got += ipc_events(x, out + got, n - got);
	return got;
}

int ipc_arm(void *bctx)
{
	struct ipc_ctx *x = bctx;
	uint64_t v;

	/* Acknowledge the wake-ups consumed so far, in one read. */
	while (read(x->efd, &v, sizeof(v)) > 0)
		;
	/* Whatever woke us next, the sockets are looked at first. */
	wimm_ctl_soon(&x->ctl);
	__atomic_store_n(&x->page->armed, 1, __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	int busy = __atomic_load_n(&x->page->summary, __ATOMIC_RELAXED) || x->evq;
	/* Watched connections stay watched while we sleep: their producers
	 * look at armed only. */
	for (struct ipc_conn *c = x->ready; c && !busy; c = c->ready_next)
		busy = c->mapped && !c->cut && ipc_has_work(c);
	if (busy) {
		__atomic_store_n(&x->page->armed, 0, __ATOMIC_RELAXED);
		return WIMM_E_AGAIN;
	}
	return 0;
}
