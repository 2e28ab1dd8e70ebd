/* The five ways of telling a receiver that a message has arrived.
 *
 * Every message lands at offset 0 of the peer's window (or in one of its
 * receive buffers for send_imm). The doorbell's imm carries the message
 * number, so each side checks that it sees exactly the message it expects:
 * a benchmark that miscounts would report a rate it never reached.
 */
#include "cli.h"

/* The flag byte of write_poll message `seq`: never 0 (the window starts
 * zeroed) and different for consecutive messages, so a receiver comparing
 * with the value it expects cannot take message seq-1 for seq and never has
 * to reset the byte. */
static unsigned char poll_flag(uint32_t seq)
{
	return (unsigned char)((seq & 0x7f) | 0x80);
}

/* write_poll in rate mode: every message of a round carries BULK, the last
 * one the round's own flag, which differs from BULK and from the previous
 * round's. */
#define POLL_BULK_FLAG 0x80u

static unsigned char poll_round_flag(uint32_t round)
{
	return (unsigned char)(0x81u + round % 0x7fu);
}

/* A source must stay unchanged until its operation completes, and our
 * operations are unsignaled. write_poll rewrites its flag byte per
 * message, so its messages alternate between two source slots: when
 * message seq+2 rewrites seq's slot, the peer has already answered seq
 * (pingpong) or acknowledged its round (rate), so seq's bytes have left.
 * The other strategies never rewrite the source: one slot, the footprint
 * of the peers' tools (ucx_perftest and perftest send from one buffer; a
 * second 4 MiB slot cost a 4 MiB ipc stream 34.5 against 38.5 GB/s,
 * docs/performance.md, section 7). */
static size_t source_slot(const struct endpoint *ep, uint32_t seq)
{
	return ep->opts->op == OP_WRITE_POLL ? (seq & 1u) * ep->slot_len : 0;
}

/* The operation that carries a message's bytes under each strategy (the
 * fetch-and-add of write_atomic is not prepared: its operand is its own). */
static enum wimm_op data_op(enum bench_op op)
{
	switch (op) {
	case OP_WRITE_IMM:
		return WIMM_OP_WRITE_IMM;
	case OP_SEND_IMM:
		return WIMM_OP_SEND_IMM;
	case OP_WRITE_SEND:
	case OP_WRITE_POLL:
	case OP_WRITE_ATOMIC:
		break;
	}
	return WIMM_OP_WRITE;
}

static struct wimm_prep *prepare(struct endpoint *ep, enum wimm_op op, size_t src, size_t len)
{
	struct wimm_prep *p;
	int rc = wimm_prep_new(ep->conn, op, len ? ep->source_mr : NULL, src, 0, len, &p);
	if (rc)
		cli_fail(ep->ctx, rc, "%s: prepare %s of %zu bytes", ep->role, ep_op_name(op), len);
	return p;
}

void msg_prepare(struct endpoint *ep)
{
	size_t size = ep->opts->size;
	enum bench_op op = ep->opts->op;

	/* bulk posts its chunks by its own calls (bulk.c). */
	if (ep->opts->post_call || ep->opts->mode == BENCH_BULK)
		return;
	/* write_atomic's write is its bytes: none at size 0. */
	if (op != OP_WRITE_ATOMIC || size > 0)
		ep->prep_msg[0] = prepare(ep, data_op(op), 0, size);
	if (op == OP_WRITE_POLL)
		ep->prep_msg[1] = prepare(ep, WIMM_OP_WRITE, ep->slot_len, size);
	if (op == OP_WRITE_SEND)
		ep->prep_notice = prepare(ep, WIMM_OP_SEND_IMM, 0, 0);
	ep->prep_ack = prepare(ep, WIMM_OP_WRITE_IMM, 0, 0);
}

void msg_unprepare(struct endpoint *ep)
{
	wimm_prep_delete(&ep->prep_msg[0]);
	wimm_prep_delete(&ep->prep_msg[1]);
	wimm_prep_delete(&ep->prep_notice);
	wimm_prep_delete(&ep->prep_ack);
}

void msg_send(struct endpoint *ep, uint32_t seq, unsigned flags)
{
	size_t size = ep->opts->size;
	size_t src = source_slot(ep, seq);
	struct wimm_prep *data = ep->prep_msg[src ? 1 : 0];

	switch (ep->opts->op) {
	case OP_WRITE_IMM:
		ep_post_prep(ep, data, WIMM_OP_WRITE_IMM, src, 0, size, seq, flags);
		break;
	case OP_WRITE_SEND:
		/* Two operations: the data, then the notification. In one
		 * connection the send cannot overtake the write. */
		ep_post_prep(ep, data, WIMM_OP_WRITE, src, 0, size, 0, 0);
		ep_post_prep(ep, ep->prep_notice, WIMM_OP_SEND_IMM, src, 0, 0, seq, flags);
		break;
	case OP_SEND_IMM:
		ep_post_prep(ep, data, WIMM_OP_SEND_IMM, src, 0, size, seq, flags);
		break;
	case OP_WRITE_POLL:
		ep->source[src + size - 1] = poll_flag(seq);
		ep_post_prep(ep, data, WIMM_OP_WRITE, src, 0, size, 0, flags);
		break;
	case OP_WRITE_ATOMIC:
		/* The add follows the write on the connection: once the
		 * receiver sees the count, the bytes are there. */
		if (size > 0)
			ep_post_prep(ep, data, WIMM_OP_WRITE, src, 0, size, 0, 0);
		ep_post(ep, WIMM_OP_FETCH_ADD, 0, ep->signal_off, 0, 0, flags);
		break;
	}
}

static const char *event_name(enum wimm_event_type type)
{
	switch (type) {
	case WIMM_EV_WRITE_IMM:
		return "write_imm";
	case WIMM_EV_SEND_IMM:
		return "send_imm";
	case WIMM_EV_SEND_DONE:
		return "send_done";
	case WIMM_EV_DISCONNECT:
		return "disconnect";
	case WIMM_EV_ERROR:
		return "error";
	case WIMM_EV_CONNECT:
		return "connect";
	case WIMM_EV_ESTABLISHED:
		return "established";
	case WIMM_EV_COUNT:
		return "count";
	}
	return "unknown";
}

static void expect_event(const struct endpoint *ep, const struct wimm_event *ev,
			 enum wimm_event_type type, uint32_t imm, size_t len)
{
	if (ev->type == type && ev->imm == imm && ev->len == len)
		return;
	cli_die("%s: expected a %s event with imm %u and %zu bytes, got %s with imm %u and %u"
		" bytes (same -o and -s on both ends?)",
		ep->role, event_name(type), imm, len, event_name(ev->type), ev->imm, ev->len);
}

void msg_receive(struct endpoint *ep, uint32_t seq)
{
	size_t size = ep->opts->size;
	struct wimm_event ev;

	switch (ep->opts->op) {
	case OP_WRITE_IMM:
		ep_next_event(ep, &ev);
		expect_event(ep, &ev, WIMM_EV_WRITE_IMM, seq, size);
		break;
	case OP_WRITE_SEND:
		ep_next_event(ep, &ev);
		expect_event(ep, &ev, WIMM_EV_SEND_IMM, seq, 0);
		break;
	case OP_SEND_IMM:
		ep_next_event(ep, &ev);
		expect_event(ep, &ev, WIMM_EV_SEND_IMM, seq, size);
		break;
	case OP_WRITE_POLL:
		/* No completion at all: the flag is the only sign, and the
		 * spec does not promise in-order placement of a write's bytes
		 * (docs/errata.md E8); it works on the fabrics measured here. */
		ep_wait_byte(ep, size - 1, poll_flag(seq));
		break;
	case OP_WRITE_ATOMIC:
		/* Message seq is the (seq + 1)-th add to the word. */
		ep_wait_word(ep, ep->signal_off, (uint64_t)seq + 1);
		break;
	}
}

void msg_send_ack(struct endpoint *ep, uint32_t imm, unsigned flags)
{
	ep_post_prep(ep, ep->prep_ack, WIMM_OP_WRITE_IMM, 0, 0, 0, imm, flags);
}

void msg_receive_ack(struct endpoint *ep, uint32_t imm)
{
	struct wimm_event ev;
	ep_next_event(ep, &ev);
	expect_event(ep, &ev, WIMM_EV_WRITE_IMM, imm, 0);
}

/* Message numbers stay below 2^32 - 1 (options.c), so this imm is never a
 * message's. */
#define BYE_IMM UINT32_MAX

void msg_finish_client(struct endpoint *ep)
{
	struct wimm_event ev;
	ep_post_prep(ep, ep->prep_ack, WIMM_OP_WRITE_IMM, 0, 0, 0, BYE_IMM, WIMM_F_SIGNAL);
	if (ep_last_event(ep, &ev))
		expect_event(ep, &ev, WIMM_EV_SEND_DONE, 0, 0);
}

void msg_finish_server(struct endpoint *ep)
{
	struct wimm_event ev;
	/* A client that left without its goodbye has what it needed, or
	 * reports its own failure. */
	if (ep_last_event(ep, &ev))
		expect_event(ep, &ev, WIMM_EV_WRITE_IMM, BYE_IMM, 0);
}

void msg_send_poll_bulk(struct endpoint *ep, uint32_t n)
{
	size_t size = ep->opts->size;
	/* Slot 0 always holds BULK: rewriting the same value while earlier
	 * writes from it are in flight is harmless, and once is enough. */
	ep->source[size - 1] = (unsigned char)POLL_BULK_FLAG;
	for (uint32_t k = 0; k < n; k++)
		ep_post_prep(ep, ep->prep_msg[0], WIMM_OP_WRITE, 0, 0, size, 0, 0);
}

void msg_send_poll_last(struct endpoint *ep, uint32_t round)
{
	size_t size = ep->opts->size;
	/* Slot 1 is rewritten once per round, after the previous round was
	 * acknowledged. */
	ep->source[ep->slot_len + size - 1] = poll_round_flag(round);
	ep_post_prep(ep, ep->prep_msg[1], WIMM_OP_WRITE, ep->slot_len, 0, size, 0, 0);
}

void msg_receive_poll_round(struct endpoint *ep, uint32_t round)
{
	ep_wait_byte(ep, ep->opts->size - 1, poll_round_flag(round));
}

void msg_receive_atomic_upto(struct endpoint *ep, uint32_t upto)
{
	ep_wait_word(ep, ep->signal_off, upto);
}
