/* The deterministic pseudo-random gradients of `wimm ps worker`, which the
 * tests recompute (ps_cmd.h). */
#include <inttypes.h>

#include "ps_cmd.h"

float ps_test_grad(uint32_t rank, uint32_t shard, size_t j, uint32_t iter)
{
	/* splitmix64's finaliser over the four coordinates. */
	uint64_t x = (uint64_t)rank << 48 ^ (uint64_t)shard << 32 ^ (uint64_t)iter << 20 ^ j;
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	x ^= x >> 31;
	return (float)((int)(x & 127) - 64);
}

void ps_print_stats(FILE *f, const struct wimm_ps_stats *st)
{
	static const char *const mode[] = {"sync", "async"}, *const update[] = {"sum", "average",
										"sgd"};
	fprintf(
	    f,
	    "shards %" PRIu64 " (from %" PRIu64 ") of %" PRIu64 " B  workers %" PRIu64
	    " (live %" PRIu64 ", backups %" PRIu64 ")  mode %s  update %s  staleness %" PRIu64 "\n"
	    "iterations %" PRIu64 "..%" PRIu64 "  applied %" PRIu64 "  pushes %" PRIu64
	    "  params_sent %" PRIu64 "\n"
	    "stale %" PRIu64 "  duplicates %" PRIu64 "  bad_shard %" PRIu64 "  bad_worker %" PRIu64
	    "  bad_length %" PRIu64 "  future %" PRIu64 "\n"
	    "workers_lost %" PRIu64 "  refused %" PRIu64 "  stalls %" PRIu64 "\n",
	    st->shards, st->first_shard, st->shard_size, st->workers, st->workers_live, st->backups,
	    st->mode < 2 ? mode[st->mode] : "?", st->update < 3 ? update[st->update] : "?",
	    st->staleness, st->iteration_min, st->iteration_max, st->applied, st->pushes,
	    st->params_sent, st->stale, st->duplicates, st->bad_shard, st->bad_worker,
	    st->bad_length, st->future, st->workers_lost, st->refused, st->stalls);
	if (!st->stalls)
		return;
	fprintf(f,
		"last stall: shard %" PRIu64 " iteration %" PRIu64 " waited %" PRIu64
		" ms for worker(s)",
		st->stalled_shard, st->stalled_iteration, st->stalled_ms);
	for (unsigned w = 0; w < WIMM_PS_MAX_WORKERS; w++)
		if (st->waiting[w / 64] & (1ull << (w % 64)))
			fprintf(f, " %u", w);
	fputc('\n', f);
}
