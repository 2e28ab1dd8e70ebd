/* `wimm log bench`'s parts: the latency table (log_bench.c) and the
 * throughput of many writer processes (log_bench_tput.c). */
#ifndef WIMM_LOG_BENCH_H
#define WIMM_LOG_BENCH_H

/* The throughput's contexts drop a peer only after this much silence: 64
 * writer processes on a loaded 2-core host can each be off the CPU for
 * longer than the default 5 s, and this measures appends, not liveness. */
#define LOG_BENCH_LIVENESS_MS 60000

/* Bytes of the benchmark servers' shared ring. */
#define LOG_BENCH_SHARED_RING (1u << 20)

/* Where the throughput's writers go: one server (its rings per writer, or
 * its shared ring), and three for a ledger. */
struct log_bench_servers {
	const char *fabric;
	const char *single, *shared;
	const char *ensemble[3];
};

/* Runs of 1, 8 and 64 writer processes (a ring each, the shared ring, a
 * ledger), `total` 1200-byte entries each run,
 * rounds interleaved; prints the table. Call it while this process has
 * opened no context: the writers are forked. */
void log_bench_tput(const struct log_bench_servers *sv, unsigned total, unsigned rounds);

#endif
