/* Latency: one message each way per iteration, timed on the client.
 *
 * The client takes one clock reading per iteration and keeps the round trip
 * of each; the report halves them into one-way latency, as perftest's
 * ib_write_lat does. The server echoes each message with the same strategy.
 */
#include <stdlib.h>

#include "cli.h"

void pingpong_server(struct endpoint *ep)
{
	uint32_t total = ep->opts->warmup + ep->opts->iters;
	for (uint32_t seq = 0; seq < total; seq++) {
		msg_receive(ep, seq);
		msg_send(ep, seq, 0);
	}
}

void pingpong_client(struct endpoint *ep, struct bench_result *res)
{
	uint32_t warmup = ep->opts->warmup;
	uint32_t total = warmup + ep->opts->iters;
	res->rtt_ns = malloc((size_t)ep->opts->iters * sizeof(res->rtt_ns[0]));
	if (res->rtt_ns == NULL)
		cli_die("cannot allocate %u samples", ep->opts->iters);

	uint64_t start = 0;
	uint64_t prev = 0;
	for (uint32_t seq = 0; seq < total; seq++) {
		if (seq == warmup)
			start = prev = cli_now_ns();
		msg_send(ep, seq, 0);
		msg_receive(ep, seq);
		if (seq >= warmup) {
			uint64_t now = cli_now_ns();
			res->rtt_ns[seq - warmup] = now - prev;
			prev = now;
		}
	}
	res->count = ep->opts->iters;
	res->elapsed_ns = prev - start;
}
