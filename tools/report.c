/* Results as a perftest-like table or as one JSON object.
 *
 * Latency statistics work on integer nanoseconds of one-way time (round
 * trip / 2, as ib_write_lat); percentiles use the nearest-rank rule on a
 * sorted copy, so every figure printed is a value that was measured.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define RULE                                                                                       \
	"---------------------------------------------------------------------------------"        \
	"---------------\n"

struct latency_stats {
	double min_us;
	double max_us;
	double median_us;
	double avg_us;
	double p99_us;
	double p999_us;
};

static int compare_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a;
	uint64_t y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* Nearest rank: the smallest sample with at least permille/1000 of all
 * samples at or below it. */
static uint64_t percentile(const uint64_t *sorted, uint32_t n, unsigned permille)
{
	uint64_t rank = ((uint64_t)n * permille + 999) / 1000;
	return sorted[rank > 0 ? rank - 1 : 0];
}

static double one_way_us(uint64_t rtt_ns)
{
	return (double)rtt_ns / 2.0 / 1000.0;
}

static void latency_stats(const struct bench_result *res, struct latency_stats *out)
{
	uint32_t n = res->count;
	uint64_t *sorted = malloc((size_t)n * sizeof(sorted[0]));
	if (sorted == NULL)
		cli_die("out of memory: use a smaller -n");
	memcpy(sorted, res->rtt_ns, (size_t)n * sizeof(sorted[0]));
	qsort(sorted, n, sizeof(sorted[0]), compare_u64);

	uint64_t sum = 0;
	for (uint32_t i = 0; i < n; i++)
		sum += sorted[i];
	out->min_us = one_way_us(sorted[0]);
	out->max_us = one_way_us(sorted[n - 1]);
	out->median_us = one_way_us(percentile(sorted, n, 500));
	out->avg_us = (double)sum / n / 2.0 / 1000.0;
	out->p99_us = one_way_us(percentile(sorted, n, 990));
	out->p999_us = one_way_us(percentile(sorted, n, 999));
	free(sorted);
}

static void json_string(const char *s)
{
	putchar('"');
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void json_number(const char *key, double value, int present)
{
	if (present)
		printf(", \"%s\": %.3f", key, value);
	else
		printf(", \"%s\": null", key);
}

static void print_json(const struct bench_opts *opts, const struct bench_result *res,
		       const struct latency_stats *lat, double msg_rate, double bw_mbps)
{
	int pingpong = opts->mode == BENCH_PINGPONG;
	printf("{\"mode\": \"%s\", \"fabric\": ", pingpong ? "pingpong" : "rate");
	json_string(res->fabric);
	printf(", \"op\": \"%s\", \"wait\": \"%s\", \"size\": %zu, \"iters\": %u, \"warmup\": %u"
	       ", \"depth\": %u, \"post\": \"%s\"",
	       bench_op_name(opts->op), bench_wait_name(opts->wait_mode), opts->size, res->count,
	       opts->warmup, res->depth, opts->post_call ? "call" : "prepared");
	json_number("elapsed_s", (double)res->elapsed_ns / 1e9, 1);
	json_number("min_us", pingpong ? lat->min_us : 0, pingpong);
	json_number("max_us", pingpong ? lat->max_us : 0, pingpong);
	json_number("median_us", pingpong ? lat->median_us : 0, pingpong);
	json_number("avg_us", pingpong ? lat->avg_us : 0, pingpong);
	json_number("p99_us", pingpong ? lat->p99_us : 0, pingpong);
	json_number("p999_us", pingpong ? lat->p999_us : 0, pingpong);
	json_number("msg_rate", msg_rate, 1);
	json_number("bw_mbps", bw_mbps, !pingpong);
	if (opts->pace_per_s > 0)
		json_number("pace_per_s", opts->pace_per_s, 1);
	if (res->rx.measured)
		printf(", \"rx_cpu_user_s\": %.6f, \"rx_cpu_sys_s\": %.6f, \"rx_doorbells\": %u",
		       res->rx.user_s, res->rx.sys_s, res->rx.doorbells);
	printf("}\n");
}

static void print_header(const struct bench_opts *opts, const struct bench_result *res)
{
	printf(RULE);
	printf(" wimm %s   fabric: %s   op: %s   wait: %s   depth: %u\n",
	       opts->mode == BENCH_PINGPONG ? "pingpong" : "rate", res->fabric,
	       bench_op_name(opts->op), bench_wait_name(opts->wait_mode), res->depth);
	if (opts->mode == BENCH_PINGPONG)
		printf(" one-way latency = round trip / 2; %u warm-up iterations not counted\n",
		       opts->warmup);
	else
		printf(" timed from the first post to the server's final acknowledgement;"
		       " %u warm-up messages\n",
		       opts->warmup);
	printf(RULE);
}

void report_result(const struct bench_opts *opts, const struct bench_result *res)
{
	double seconds = (double)res->elapsed_ns / 1e9;
	/* pingpong: round trips per second; rate: messages per second. */
	double msg_rate = seconds > 0 ? res->count / seconds : 0;
	double bw_mbps = seconds > 0 ? (double)opts->size * res->count / seconds / 1e6 : 0;
	struct latency_stats lat;
	memset(&lat, 0, sizeof(lat));
	if (opts->mode == BENCH_PINGPONG)
		latency_stats(res, &lat);

	if (opts->json) {
		print_json(opts, res, &lat, msg_rate, bw_mbps);
	} else if (opts->mode == BENCH_PINGPONG) {
		print_header(opts, res);
		printf(" %-7s %-12s %-12s %-12s %-15s %-12s %-12s %s\n", "#bytes", "#iterations",
		       "t_min[usec]", "t_max[usec]", "t_median[usec]", "t_avg[usec]", "t_p99[usec]",
		       "t_p99.9[usec]");
		printf(" %-7zu %-12u %-12.2f %-12.2f %-15.2f %-12.2f %-12.2f %.2f\n", opts->size,
		       res->count, lat.min_us, lat.max_us, lat.median_us, lat.avg_us, lat.p99_us,
		       lat.p999_us);
		printf(RULE);
		printf(" round trips per second: %.0f\n", msg_rate);
	} else {
		print_header(opts, res);
		printf(" %-7s %-12s %-12s %s\n", "#bytes", "#iterations", "BW[MB/s]",
		       "msg_rate[Mmsg/s]");
		printf(" %-7zu %-12u %-12.2f %.4f\n", opts->size, res->count, bw_mbps,
		       msg_rate / 1e6);
		printf(RULE);
	}
	fflush(stdout);
}
