/* Message rate: the client streams messages as fast as credits allow, the
 * server counts them and answers the last one with a single doorbell.
 *
 * The client's clock runs from its first post to the arrival of that
 * doorbell, so every message counted has reached the server. A warm-up
 * round (same protocol, untimed) comes first.
 *
 * Per op: write_imm and send_imm use one credit per message, write_send one
 * per notification (its write needs none), so the receive window (-d) bounds
 * how far the client runs ahead. write_poll writes need no credit, only send
 * queue room; the server sees no completion for them and instead polls for
 * the flag of the round's last write (all writes land at the same offset, in
 * order on one connection), then acknowledges. write_atomic likewise needs
 * no credit; the server polls the signal word until it counts every
 * message so far.
 * The acknowledgement is always a zero-length write_imm: one doorbell per
 * round, too rare to matter for the rate.
 */
#include "cli.h"

static void client_round(struct endpoint *ep, uint32_t first_seq, uint32_t count, uint32_t round)
{
	int polled = ep->opts->op == OP_WRITE_POLL;
	for (uint32_t k = 0; k < count; k++) {
		if (polled)
			msg_send_poll_round(ep, round, k + 1 == count);
		else
			msg_send(ep, first_seq + k, 0);
	}
	msg_receive_ack(ep, first_seq + count);
}

static void server_round(struct endpoint *ep, uint32_t first_seq, uint32_t count, uint32_t round)
{
	if (ep->opts->op == OP_WRITE_POLL) {
		msg_receive_poll_round(ep, round);
	} else if (ep->opts->op == OP_WRITE_ATOMIC) {
		msg_receive_atomic_upto(ep, first_seq + count);
	} else {
		for (uint32_t k = 0; k < count; k++)
			msg_receive(ep, first_seq + k);
	}
	msg_send_ack(ep, first_seq + count, 0);
}

void rate_server(struct endpoint *ep)
{
	uint32_t warmup = ep->opts->warmup;
	if (warmup > 0)
		server_round(ep, 0, warmup, 0);
	server_round(ep, warmup, ep->opts->iters, 1);
}

void rate_client(struct endpoint *ep, struct bench_result *res)
{
	uint32_t warmup = ep->opts->warmup;
	if (warmup > 0)
		client_round(ep, 0, warmup, 0);
	uint64_t start = cli_now_ns();
	client_round(ep, warmup, ep->opts->iters, 1);
	res->elapsed_ns = cli_now_ns() - start;
	res->count = ep->opts->iters;
}
