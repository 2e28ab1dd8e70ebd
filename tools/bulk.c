/* Bulk transfer: -s bytes in --chunk writes, and how the receiver learns.
 *
 * The article's claim (b): for bulk data a doorbell per chunk costs more
 * than plain writes and one final notice. --notify each sends every chunk
 * as a write-with-imm and the receiver waits for each doorbell; --notify
 * last sends plain writes and one write-with-imm with the last chunk (in
 * one connection the writes land before it). Either way the receiver
 * answers a transfer with one zero-length write-with-imm.
 *
 * The client times each transfer from its first post to that answer; the
 * receiver measures its CPU time (getrusage) over the timed transfers.
 * Chunk i goes to offset i * chunk of the window, from the same offset of
 * the source, which never changes: nothing waits for a write to complete.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static uint32_t chunk_count(const struct bench_opts *opts)
{
	return (uint32_t)((opts->size + opts->chunk - 1) / opts->chunk);
}

static size_t chunk_len(const struct bench_opts *opts, uint32_t i)
{
	size_t off = (size_t)i * opts->chunk;
	size_t left = opts->size - off;
	return left < opts->chunk ? left : opts->chunk;
}

static void client_transfer(struct endpoint *ep, uint32_t transfer)
{
	const struct bench_opts *opts = ep->opts;
	uint32_t n = chunk_count(opts);
	for (uint32_t i = 0; i < n; i++) {
		size_t off = (size_t)i * opts->chunk;
		if (opts->notify_each || i + 1 == n)
			ep_post(ep, WIMM_OP_WRITE_IMM, off, off, chunk_len(opts, i), i, 0);
		else
			ep_post(ep, WIMM_OP_WRITE, off, off, chunk_len(opts, i), 0, 0);
	}
	msg_receive_ack(ep, transfer);
}

/* The doorbell of chunk i: its number in the imm, its length. */
static void expect_chunk(struct endpoint *ep, uint32_t i)
{
	struct wimm_event ev;
	ep_next_event(ep, &ev);
	size_t len = chunk_len(ep->opts, i);
	if (ev.type != WIMM_EV_WRITE_IMM || ev.imm != i || ev.len != len)
		cli_die("%s: expected the doorbell of chunk %u (%zu bytes), got event %d with imm"
			" %u and %u bytes (same -s, --chunk and --notify on both ends?)",
			ep->role, i, len, (int)ev.type, ev.imm, ev.len);
}

/* Returns the number of doorbells it waited for. */
static uint32_t server_transfer(struct endpoint *ep, uint32_t transfer)
{
	uint32_t n = chunk_count(ep->opts);
	uint32_t first = ep->opts->notify_each ? 0 : n - 1;
	for (uint32_t i = first; i < n; i++)
		expect_chunk(ep, i);
	msg_send_ack(ep, transfer, 0);
	return n - first;
}

void bulk_server(struct endpoint *ep)
{
	const struct bench_opts *opts = ep->opts;
	uint32_t t = 0;
	for (; t < opts->warmup; t++)
		server_transfer(ep, t);
	struct rx_cpu mark;
	uint32_t doorbells = 0;
	rx_cpu_start(ep, &mark);
	for (; t < opts->warmup + opts->iters; t++)
		doorbells += server_transfer(ep, t);
	rx_cpu_stop(ep, &mark, doorbells);
}

void bulk_client(struct endpoint *ep, struct bench_result *res)
{
	const struct bench_opts *opts = ep->opts;
	res->rtt_ns = malloc((size_t)opts->iters * sizeof(res->rtt_ns[0]));
	if (res->rtt_ns == NULL)
		cli_die("cannot allocate %u samples: use a smaller -n", opts->iters);
	uint32_t t = 0;
	for (; t < opts->warmup; t++)
		client_transfer(ep, t);
	uint64_t start = cli_now_ns();
	for (uint32_t k = 0; k < opts->iters; k++, t++) {
		uint64_t begin = cli_now_ns();
		client_transfer(ep, t);
		res->rtt_ns[k] = cli_now_ns() - begin;
	}
	res->elapsed_ns = cli_now_ns() - start;
	res->count = opts->iters;
}

static int compare_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a;
	uint64_t y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

void bulk_report(const struct bench_opts *opts, const struct bench_result *res)
{
	uint64_t *sorted = malloc((size_t)res->count * sizeof(sorted[0]));
	if (sorted == NULL)
		cli_die("out of memory: use a smaller -n");
	memcpy(sorted, res->rtt_ns, (size_t)res->count * sizeof(sorted[0]));
	qsort(sorted, res->count, sizeof(sorted[0]), compare_u64);
	/* The lower median: a transfer that was measured. */
	double median_ms = (double)sorted[(res->count - 1) / 2] / 1e6;
	double avg_ms = (double)res->elapsed_ns / res->count / 1e6;
	double bw_mbps = res->elapsed_ns > 0 ? (double)opts->size * res->count /
						   ((double)res->elapsed_ns / 1e9) / 1e6
					     : 0;
	free(sorted);
	const char *notify = opts->notify_each ? "each" : "last";
	if (opts->json) {
		printf("{\"mode\": \"bulk\", \"fabric\": \"%s\", \"notify\": \"%s\", \"wait\": "
		       "\"%s\", \"size\": %zu, \"chunk\": %zu, \"chunks\": %u, \"iters\": %u, "
		       "\"warmup\": %u, \"depth\": %u, \"elapsed_s\": %.6f, \"median_ms\": %.4f, "
		       "\"avg_ms\": %.4f, \"bw_mbps\": %.3f",
		       res->fabric, notify, bench_wait_name(opts->wait_mode), opts->size,
		       opts->chunk, chunk_count(opts), res->count, opts->warmup, res->depth,
		       (double)res->elapsed_ns / 1e9, median_ms, avg_ms, bw_mbps);
		if (res->rx.measured)
			printf(", \"rx_cpu_user_s\": %.6f, \"rx_cpu_sys_s\": %.6f, "
			       "\"rx_doorbells\": %u",
			       res->rx.user_s, res->rx.sys_s, res->rx.doorbells);
		printf("}\n");
	} else {
		printf(" wimm bulk   fabric: %s   notify: %s   wait: %s\n", res->fabric, notify,
		       bench_wait_name(opts->wait_mode));
		printf(" %zu bytes in %u chunks of %zu, %u transfers (+ %u warm-up)\n", opts->size,
		       chunk_count(opts), opts->chunk, res->count, opts->warmup);
		printf(" transfer median %.3f ms, average %.3f ms, %.1f MB/s\n", median_ms, avg_ms,
		       bw_mbps);
		if (res->rx.measured)
			printf(" receiver CPU %.3f ms per transfer\n",
			       (res->rx.user_s + res->rx.sys_s) * 1e3 / res->count);
	}
	fflush(stdout);
}
