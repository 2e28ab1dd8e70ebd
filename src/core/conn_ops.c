/* Connections: the operations (four data moves and two atomics) with their
 * bounds and credit checks, and the sender's wait for credit or send slots
 * (WIMM_F_WAIT). */
#include <string.h>
#include <time.h>

#include "core/conn_internal.h"

static const struct wimm_backend_ops *ops_of(const struct wimm_conn *c)
{
	return wimm_ctx_ops(c->ctx);
}

static uint64_t peer_released(const struct wimm_conn *c)
{
	return __atomic_load_n(&c->ctl_in[CTL_CREDIT], __ATOMIC_ACQUIRE);
}

void conn_pending_push(struct wimm_conn *c, uint64_t op_seq, enum wimm_op op)
{
	/* Cannot overflow: signaled operations outstanding are bounded by the
	 * send depth, which is the ring's size. */
	if (c->pend_n == c->pend_cap)
		return;
	c->pend[(c->pend_head + c->pend_n) % c->pend_cap] = (struct pending_op){op_seq, op};
	c->pend_n++;
}

/* Checks shared by every operation; nothing is posted when one fails. */
static int check_local(const struct wimm_conn *c, const struct wimm_mr *mr, size_t off, size_t len)
{
	if (len > c->limits.max_msg || len > UINT32_MAX)
		return WIMM_E_TOOBIG;
	if (len == 0)
		return 0;
	if (!mr || wimm_mr_ctx(mr) != c->ctx)
		return WIMM_E_INVAL;
	size_t mlen = wimm_mr_bmr(mr)->len;
	if (off > mlen || len > mlen - off)
		return WIMM_E_LOCAL_BOUNDS;
	return 0;
}

static int check_remote(const struct wimm_conn *c, size_t off, size_t len, unsigned need)
{
	if (c->peer.window_len == 0)
		return WIMM_E_NOWINDOW;
	if (!(c->peer.flags & need))
		return WIMM_E_PERM;
	if (off > c->peer.window_len || len > c->peer.window_len - off)
		return WIMM_E_BOUNDS;
	return 0;
}

/* WIMM_F_WAIT: the pause between two tries of a credit or a send slot.
 * Credits come back as a plain RDMA write, which raises no completion and so
 * no wake-up on any fabric, and send slots come back with completions the
 * application may never ask for: so the wait drives progress itself,
 * spinning first, then napping so a stalled receiver does not cost a whole
 * core. A nap is an eighth of the time waited so far (10 us to 1 ms): a
 * nap can overshoot the credit's return by little more than that eighth,
 * where doubling naps would overshoot by up to the whole wait. */
#define WAIT_NAP_MIN_NS 10000
#define WAIT_NAP_MAX_NS 1000000
/* While spinning the clock is read once per this many steps. */
#define WAIT_STEPS_PER_CLOCK 8

struct backoff {
	int64_t start_ns;
	unsigned steps;
};

static int wait_step(struct wimm_conn *c, struct backoff *b)
{
	int ret = wimm_ctx_progress_into_backlog(c->ctx);
	if (ret)
		return ret;
	if (c->state == CONN_DOWN)
		return WIMM_E_DISCONNECTED;
	/* Slots of events the application already saw go back too, or two
	 * peers waiting on each other would never move. */
	ret = wimm_conn_release(c);
	if (ret)
		return ret;
	if (b->steps++ % WAIT_STEPS_PER_CLOCK != 0)
		return 0;
	int64_t t = wimm_now_ns();
	if (b->start_ns == 0)
		b->start_ns = t;
	int64_t waited = t - b->start_ns;
	uint32_t limit_ms = wimm_ctx_post_wait_ms(c->ctx);
	if (limit_ms && waited >= (int64_t)limit_ms * 1000000)
		return WIMM_E_TIMEDOUT;
	int64_t spin_ns = (int64_t)wimm_ctx_spin_us(c->ctx) * 1000;
	if (waited < spin_ns)
		return 0;
	int64_t nap_ns = waited / 8;
	if (nap_ns < WAIT_NAP_MIN_NS)
		nap_ns = WAIT_NAP_MIN_NS;
	if (nap_ns > WAIT_NAP_MAX_NS)
		nap_ns = WAIT_NAP_MAX_NS;
	struct timespec nap = {0, (long)nap_ns};
	nanosleep(&nap, NULL);
	/* Look at the clock again after the next step. */
	b->steps = 0;
	return 0;
}

static void set_starved(struct wimm_conn *c, int starved)
{
	if (c->starved == starved)
		return;
	c->starved = starved;
	wimm_ctx_starved(c->ctx, starved ? 1 : -1);
}

/* take_credit's way when the credit is not simply there (or was not at
 * the last try): progress, the stall's accounting, WIMM_F_WAIT. */
static __attribute__((noinline)) int take_credit_slow(struct wimm_conn *c, unsigned flags)
{
	struct backoff b = {0, 0};

	if (wimm_credit_tx_take(&c->tx, peer_released(c)) == 0) {
		set_starved(c, 0);
		return 0;
	}
	/* The credit word may be waiting for progress (manual-progress
	 * providers land remote writes only when called). */
	int ret = wimm_ctx_progress_into_backlog(c->ctx);
	if (ret)
		return ret;
	if (wimm_credit_tx_take(&c->tx, peer_released(c)) == 0) {
		set_starved(c, 0);
		return 0;
	}
	c->st.credit_stalls++;
	if (!(flags & WIMM_F_WAIT)) {
		set_starved(c, 1);
		return WIMM_E_AGAIN;
	}
	int64_t t0 = wimm_now_ns();
	while (wimm_credit_tx_take(&c->tx, peer_released(c)) != 0) {
		ret = wait_step(c, &b);
		if (ret)
			break;
	}
	c->st.credit_stall_ns += (uint64_t)(wimm_now_ns() - t0);
	if (ret == 0)
		set_starved(c, 0);
	return ret;
}

/* One credit for a doorbell. Inline: it is there nearly always, and the
 * doorbell's turnaround then pays no call for it. */
static inline __attribute__((always_inline)) int take_credit(struct wimm_conn *c, unsigned flags)
{
	if (!c->starved && wimm_credit_tx_take(&c->tx, peer_released(c)) == 0)
		return 0;
	return take_credit_slow(c, flags);
}

/* An accepted connection whose transport is not up yet: AGAIN, or with
 * WIMM_F_WAIT its set-up is waited for like a credit. */
static int wait_up(struct wimm_conn *c, unsigned flags)
{
	struct backoff b = {0, 0};

	while (c->state == CONN_ESTABLISHING) {
		if (!(flags & WIMM_F_WAIT)) {
			int ret = wimm_ctx_progress_into_backlog(c->ctx);
			if (ret)
				return ret;
			return c->state == CONN_UP ? 0 : WIMM_E_AGAIN;
		}
		int ret = wait_step(c, &b);
		if (ret)
			return ret;
	}
	return c->state == CONN_UP ? 0 : WIMM_E_DISCONNECTED;
}

static int is_atomic(enum wimm_op op)
{
	return op == WIMM_OP_FETCH_ADD || op == WIMM_OP_CMP_SWAP;
}

/* An operation the fabric took: numbered and counted. */
static void count_out(struct wimm_conn *c, size_t len, int doorbell)
{
	c->op_seq++;
	c->st.ops_out++;
	c->st.bytes_out += len;
	c->st.doorbells_out += doorbell ? 1u : 0u;
}

/* Inlined into each operation: the operation and whether it rings are
 * then constants, and a write-with-imm makes one call into the backend.
 * bprep: the backend's prepared request for wr (prepared.c), posted with
 * prep_post instead of building one from wr; NULL for the others. */
static inline __attribute__((always_inline)) int
post_via(struct wimm_conn *c, void *bprep, struct wimm_wr *wr, int doorbell, unsigned flags)
{
	struct backoff b = {0, 0};
	int (*post_fn)(void *, const struct wimm_wr *) =
	    is_atomic(wr->op) ? ops_of(c)->post_atomic : ops_of(c)->post;
	int ret;

	if (c->state != CONN_UP) {
		ret = wait_up(c, flags);
		if (ret)
			return ret;
	}
	if (doorbell) {
		ret = take_credit(c, flags);
		if (ret)
			return ret;
	}
	wr->op_seq = c->op_seq;
	/* A full send queue is AGAIN too; with WIMM_F_WAIT, wait it out. */
	while ((ret = bprep ? ops_of(c)->prep_post(c->bconn, bprep, wr) : post_fn(c->bconn, wr)) ==
		   WIMM_E_AGAIN &&
	       (flags & WIMM_F_WAIT)) {
		ret = wait_step(c, &b);
		if (ret)
			break;
	}
	if (ret) {
		if (doorbell)
			c->tx.sent--; /* nothing went out: the credit is still ours */
		/* The transport knows the peer is gone: take its CONN_DOWN now,
		 * so wimm_conn_info says so at once and the event is queued. */
		if (ret == WIMM_E_DISCONNECTED)
			wimm_ctx_progress_into_backlog(c->ctx);
		return ret;
	}
	if (wr->signal)
		conn_pending_push(c, c->op_seq, wr->op);
	count_out(c, wr->len, doorbell);
	return 0;
}

static inline __attribute__((always_inline)) int post(struct wimm_conn *c, struct wimm_wr *wr,
						      int doorbell, unsigned flags)
{
	return post_via(c, NULL, wr, doorbell, flags);
}

static int check_conn(const struct wimm_conn *c, unsigned flags)
{
	if (!c || (flags & ~WIMM_POST_FLAGS))
		return WIMM_E_INVAL;
	if (c->state == CONN_DOWN)
		return WIMM_E_DISCONNECTED;
	return 0;
}

/* The checks every operation starts with: the connection, then the local
 * range (src for writes and sends, dst for reads). */
static int check_start(const struct wimm_conn *c, const struct wimm_mr *mr, size_t off, size_t len,
		       unsigned flags)
{
	int ret = check_conn(c, flags);
	return ret ? ret : check_local(c, mr, off, len);
}

static void fill_local(struct wimm_wr *wr, struct wimm_mr *mr, size_t off, size_t len)
{
	wr->len = len;
	if (len > 0) {
		wr->lmr = wimm_mr_bmr(mr);
		wr->local = (char *)wr->lmr->addr + off;
	}
}

/* A checked, unsignaled plain write that the backend completes by storing
 * it (backend.h): no request, no completion, nothing to wait for (so
 * WIMM_F_WAIT is moot). NOTSUP when the backend cannot store this one. */
static int store_write(struct wimm_conn *c, uint64_t raddr, const void *src, size_t len)
{
	int ret = ops_of(c)->store(c->bconn, raddr, c->peer.window_key, src, len);
	if (ret == 0)
		count_out(c, len, 0);
	else if (ret == WIMM_E_DISCONNECTED)
		wimm_ctx_progress_into_backlog(c->ctx); /* as post() */
	return ret;
}

/* A write (with or without imm) into the peer's window through post(). */
static inline __attribute__((always_inline)) int
post_to_window(struct wimm_conn *c, enum wimm_op op, struct wimm_mr *src, size_t src_off,
	       size_t dst_off, size_t len, uint32_t imm, unsigned flags)
{
	struct wimm_wr wr = {
	    .op = op,
	    .raddr = c->peer.window_addr + dst_off,
	    .rkey = c->peer.window_key,
	    .imm = imm,
	    .signal = !!(flags & WIMM_F_SIGNAL),
	};
	fill_local(&wr, src, src_off, len);
	return post(c, &wr, op == WIMM_OP_WRITE_IMM, flags);
}

/* A plain write through post(): out of line, so that the store ipc takes
 * instead runs in a small frame (post()'s loop and its failure paths made
 * wimm_write save six registers and clear a request on every store;
 * docs/performance.md, section 16). */
static __attribute__((noinline)) int write_posted(struct wimm_conn *c, struct wimm_mr *src,
						  size_t src_off, size_t dst_off, size_t len,
						  unsigned flags)
{
	return post_to_window(c, WIMM_OP_WRITE, src, src_off, dst_off, len, 0, flags);
}

static inline __attribute__((always_inline)) int write_common(struct wimm_conn *c, enum wimm_op op,
							      struct wimm_mr *src, size_t src_off,
							      size_t dst_off, size_t len,
							      uint32_t imm, unsigned flags)
{
	int ret = check_start(c, src, src_off, len, flags);
	if (ret)
		return ret;
	/* A zero-length doorbell touches no memory and needs no window. */
	if (len > 0 || op == WIMM_OP_WRITE || dst_off != 0) {
		ret = check_remote(c, dst_off, len, WIMM_HS_F_WINDOW_WRITE);
		if (ret)
			return ret;
	}
	if (op == WIMM_OP_WRITE) {
		if (!(flags & WIMM_F_SIGNAL) && len > 0 && c->state == CONN_UP &&
		    ops_of(c)->store) {
			ret = store_write(c, c->peer.window_addr + dst_off,
					  (const char *)wimm_mr_bmr(src)->addr + src_off, len);
			if (ret != WIMM_E_NOTSUP)
				return ret;
		}
		return write_posted(c, src, src_off, dst_off, len, flags);
	}
	return post_to_window(c, op, src, src_off, dst_off, len, imm, flags);
}

int wimm_write_imm(struct wimm_conn *c, struct wimm_mr *src, size_t src_off, size_t dst_off,
		   size_t len, uint32_t imm, unsigned flags)
{
	return write_common(c, WIMM_OP_WRITE_IMM, src, src_off, dst_off, len, imm, flags);
}

int wimm_write(struct wimm_conn *c, struct wimm_mr *src, size_t src_off, size_t dst_off, size_t len,
	       unsigned flags)
{
	return write_common(c, WIMM_OP_WRITE, src, src_off, dst_off, len, 0, flags);
}

int wimm_send_imm(struct wimm_conn *c, struct wimm_mr *src, size_t src_off, size_t len,
		  uint32_t imm, unsigned flags)
{
	int ret = check_start(c, src, src_off, len, flags);
	if (ret)
		return ret;
	if (c->peer.recv_size == 0)
		return WIMM_E_NORECV;
	if (len > c->peer.recv_size)
		return WIMM_E_TRUNC;
	struct wimm_wr wr = {
	    .op = WIMM_OP_SEND_IMM, .imm = imm, .signal = !!(flags & WIMM_F_SIGNAL)};
	fill_local(&wr, src, src_off, len);
	return post(c, &wr, 1, flags);
}

/* ------------------------------------------------- prepared operations */

/* wimm_prep_new's checks: the op and a send's dst_off, then those of the
 * operation's own call, in its order; *wr gets the request, imm and signal
 * left for each post. */
int wimm_conn_prep_check(struct wimm_conn *c, enum wimm_op op, struct wimm_mr *src, size_t src_off,
			 size_t dst_off, size_t len, struct wimm_wr *wr)
{
	/* What no call could be first: reads and atomics are not prepared,
	 * a send has no destination offset. */
	if ((op != WIMM_OP_WRITE_IMM && op != WIMM_OP_WRITE && op != WIMM_OP_SEND_IMM) ||
	    (op == WIMM_OP_SEND_IMM && dst_off != 0))
		return WIMM_E_INVAL;
	int ret = check_start(c, src, src_off, len, 0);
	if (ret)
		return ret;
	memset(wr, 0, sizeof(*wr));
	wr->op = op;
	switch (op) {
	case WIMM_OP_WRITE_IMM:
	case WIMM_OP_WRITE:
		if (len > 0 || op == WIMM_OP_WRITE || dst_off != 0) {
			ret = check_remote(c, dst_off, len, WIMM_HS_F_WINDOW_WRITE);
			if (ret)
				return ret;
		}
		wr->raddr = c->peer.window_addr + dst_off;
		wr->rkey = c->peer.window_key;
		break;
	case WIMM_OP_SEND_IMM:
		if (c->peer.recv_size == 0)
			return WIMM_E_NORECV;
		if (len > c->peer.recv_size)
			return WIMM_E_TRUNC;
		break;
	default:
		return WIMM_E_INVAL; /* not reached: checked above */
	}
	fill_local(wr, src, src_off, len);
	return 0;
}

/* Post a prepared request: the operation's own path from its post on,
 * through the backend's prepared request where it built one. */
int wimm_conn_prep_post(struct wimm_conn *c, void *bprep, struct wimm_wr *wr, uint32_t imm,
			unsigned flags)
{
	int ret = check_conn(c, flags);
	if (ret)
		return ret;
	wr->imm = imm;
	wr->signal = !!(flags & WIMM_F_SIGNAL);
	if (wr->op == WIMM_OP_WRITE) {
		if (!wr->signal && wr->len > 0 && c->state == CONN_UP && ops_of(c)->store) {
			ret = store_write(c, wr->raddr, wr->local, wr->len);
			if (ret != WIMM_E_NOTSUP)
				return ret;
		}
		return post_via(c, bprep, wr, 0, flags);
	}
	return post_via(c, bprep, wr, 1, flags);
}

/* Operations that bring something back (reads, atomics): the local range
 * they fill, the peer's range they act on, and a signaled request aimed at
 * it. */
static int check_fetch(const struct wimm_conn *c, struct wimm_mr *mr, size_t off, size_t len,
		       size_t remote_off, unsigned need, unsigned flags)
{
	int ret = check_start(c, mr, off, len, flags);
	return ret ? ret : check_remote(c, remote_off, len, need);
}

static struct wimm_wr fetch_wr(const struct wimm_conn *c, enum wimm_op op, struct wimm_mr *mr,
			       size_t off, size_t len, size_t remote_off)
{
	/* Only useful with its completion: always signaled. */
	struct wimm_wr wr = {
	    .op = op,
	    .raddr = c->peer.window_addr + remote_off,
	    .rkey = c->peer.window_key,
	    .signal = 1,
	};
	fill_local(&wr, mr, off, len);
	return wr;
}

int wimm_read(struct wimm_conn *c, struct wimm_mr *dst, size_t dst_off, size_t src_off, size_t len,
	      unsigned flags)
{
	int ret = check_fetch(c, dst, dst_off, len, src_off, WIMM_HS_F_WINDOW_READ, flags);
	if (ret)
		return ret;
	struct wimm_wr wr = fetch_wr(c, WIMM_OP_READ, dst, dst_off, len, src_off);
	return post(c, &wr, 0, flags);
}

/* ----------------------------------------------------------------- atomics */

#define ATOMIC_WORD 8u

static int atomic_common(struct wimm_conn *c, enum wimm_op op, struct wimm_mr *result,
			 size_t result_off, size_t dst_off, uint64_t operand, uint64_t compare,
			 unsigned flags)
{
	int ret = check_fetch(c, result, result_off, ATOMIC_WORD, dst_off, WIMM_HS_F_WINDOW_ATOMIC,
			      flags);
	if (ret)
		return ret;
	struct wimm_wr wr = fetch_wr(c, op, result, result_off, ATOMIC_WORD, dst_off);
	wr.operand = operand;
	wr.compare = compare;
	/* Every fabric's atomics work on naturally aligned words only. */
	if ((wr.raddr | (uintptr_t)wr.local) % ATOMIC_WORD) {
		wimm_ctx_set_provider_error(
		    c->ctx, 0,
		    wr.raddr % ATOMIC_WORD ? "atomic target not 8-byte aligned in the peer's memory"
					   : "atomic result not 8-byte aligned");
		return WIMM_E_INVAL;
	}
	if (!ops_of(c)->post_atomic) {
		wimm_ctx_set_provider_error(c->ctx, 0, "this fabric's backend has no atomics");
		ret = WIMM_E_NOTSUP;
	} else {
		ret = post(c, &wr, 0, flags);
	}
	if (ret == WIMM_E_NOTSUP) {
		const char *why = "";
		wimm_provider_error(c->ctx, &why);
		wimm_ctx_log(c->ctx, WIMM_LOG_WARN, "%s: atomics not supported: %s",
			     wimm_ctx_fabric(c->ctx), why);
	}
	return ret;
}

int wimm_fetch_add(struct wimm_conn *c, struct wimm_mr *result, size_t result_off, size_t dst_off,
		   uint64_t add, unsigned flags)
{
	return atomic_common(c, WIMM_OP_FETCH_ADD, result, result_off, dst_off, add, 0, flags);
}

int wimm_cmp_swap(struct wimm_conn *c, struct wimm_mr *result, size_t result_off, size_t dst_off,
		  uint64_t compare, uint64_t swap, unsigned flags)
{
	return atomic_common(c, WIMM_OP_CMP_SWAP, result, result_off, dst_off, swap, compare,
			     flags);
}
