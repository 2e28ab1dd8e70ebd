/* Latency: one message each way per iteration, timed on the client.
 *
 * The client stamps each iteration and keeps the round trip of each; the
 * report halves them into one-way latency, as perftest's ib_write_lat does.
 * The server echoes each message with the same strategy.
 *
 * The stamps come from the CPU's time-stamp counter where there is one, as
 * perftest's do: clock_gettime costs 25 ns on this host and about 1 us in a
 * TCG guest whose clocksource is the HPET, which would be charged to every
 * round trip. The counter is converted to nanoseconds with the wall-clock
 * time of the whole timed loop, so no calibration constant is assumed.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static uint64_t stamp(void)
{
	return __rdtsc();
}
#else
static uint64_t stamp(void)
{
	return cli_now_ns();
}
#endif

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
		cli_die("cannot allocate %u samples: use a smaller -n", ep->opts->iters);
	/* Touch every page now: a page's first store is a page fault (3-4 us
	 * measured in this project's VMs, docs/performance.md section 14),
	 * which the timed loop would otherwise take once per 512 samples. Not
	 * zero, or the compiler may make this a lazy calloc. */
	memset(res->rtt_ns, 0xff, (size_t)ep->opts->iters * sizeof(res->rtt_ns[0]));

	uint64_t start_ns = 0, start = 0, prev = 0;
	for (uint32_t seq = 0; seq < total; seq++) {
		if (seq == warmup) {
			start_ns = cli_now_ns();
			start = prev = stamp();
		}
		msg_send(ep, seq, 0);
		msg_receive(ep, seq);
		if (seq >= warmup) {
			uint64_t now = stamp();
			res->rtt_ns[seq - warmup] = now - prev;
			prev = now;
		}
	}
	res->count = ep->opts->iters;
	res->elapsed_ns = cli_now_ns() - start_ns;
	/* Counter ticks to nanoseconds, by the loop's wall-clock time. */
	double ns_per_tick = prev > start ? (double)res->elapsed_ns / (double)(prev - start) : 1.0;
	for (uint32_t i = 0; i < res->count; i++)
		res->rtt_ns[i] = (uint64_t)((double)res->rtt_ns[i] * ns_per_tick + 0.5);
}
