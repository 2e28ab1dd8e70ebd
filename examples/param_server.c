/* param_server: the parameter server's building block (include/wimm/ps.h).
 *
 * One server holds NSHARDS shards of SHARD_BYTES of float parameters; a
 * thread runs its loop (wimm_ps_server_run). NWORKERS workers, each a
 * thread with its own wimm_ps_worker (its own context and connection),
 * train for ITERATIONS steps: a step pushes every shard's gradient, one
 * write-with-imm each (imm = {worker:8, shard:10, iteration:14}), and pulls
 * the new parameters, which the server writes into the worker's window
 * with one write-with-imm per shard (imm = {kind, shard, iteration}).
 *
 * The server sums a shard's pushes as they complete and applies the update
 * once all NWORKERS have pushed it: "all here" is a count of distinct
 * workers, never an arrival order (docs/errata.md E7: writes on different
 * connections have no order). Here the update is the plain sum and the
 * gradients are small integers, so every worker checks that each pulled
 * shard is exactly the sum of all workers' pushes.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <wimm/ps.h>

#include "common.h"

#define NWORKERS 3
#define NSHARDS 8
#define SHARD_BYTES 4096

static const char *fabric;
static char server_addr[96];
static unsigned iterations;
static volatile int workers_done;

static float grad(uint32_t worker, size_t j, uint64_t iter)
{
	return (float)((worker * 31 + j + iter * 3) % 64);
}

static void *server_main(void *arg)
{
	struct wimm_ps_server *s = arg;
	while (__atomic_load_n(&workers_done, __ATOMIC_ACQUIRE) < NWORKERS) {
		int rc = wimm_ps_server_run(s, 10);
		if (rc < 0)
			ex_fail(NULL, rc, "server loop");
	}
	return NULL;
}

static void *worker_main(void *arg)
{
	uint32_t rank = (uint32_t)(uintptr_t)arg;
	const char *servers[] = {server_addr};
	struct wimm_ps_worker_attr a = {
	    .fabric = fabric, .servers = servers, .nservers = 1, .rank = rank};
	struct wimm_ps_worker *w = NULL;
	struct wimm_ps_worker_info in;
	int rc = wimm_ps_worker_new(&a, &w);
	if (rc < 0)
		ex_fail(NULL, rc, "worker %u: join %s", rank, server_addr);
	wimm_ps_worker_info(w, &in);
	for (unsigned step = 0; step < iterations; step++) {
		uint64_t iter;
		wimm_ps_worker_iteration(w, 0, &iter);
		for (size_t j = 0; j < in.nfloats; j++)
			in.grads[j] = grad(rank, j, iter);
		/* Push every shard, wait for every shard's new parameters. */
		rc = wimm_ps_worker_step(w, EX_TIMEOUT_MS);
		if (rc < 0)
			ex_fail(NULL, rc, "worker %u: step %u", rank, step);
		for (size_t j = 0; j < in.nfloats; j++) {
			float want = 0;
			for (uint32_t k = 0; k < NWORKERS; k++)
				want += grad(k, j, iter);
			if (in.params[j] != want)
				ex_fatal("worker %u: iteration %llu [%zu]: %g, want %g", rank,
					 (unsigned long long)iter, j, in.params[j], want);
		}
	}
	wimm_ps_worker_delete(&w);
	__atomic_add_fetch(&workers_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s FABRIC [ITERATIONS]   e.g. %s ofi:tcp\n", argv[0],
			argv[0]);
		return 2;
	}
	fabric = argv[1];
	iterations = ex_count(argc, argv, 50);
	char listen[96];
	snprintf(listen, sizeof(listen), "%s:0", ex_host());
	struct wimm_ps_server_attr sa = {.fabric = fabric,
					 .addr = listen,
					 .shards = NSHARDS,
					 .shard_size = SHARD_BYTES,
					 .workers = NWORKERS,
					 .update = WIMM_PS_SUM};
	struct wimm_ps_server *s = NULL;
	int rc = wimm_ps_server_new(&sa, &s);
	if (rc < 0)
		ex_fail(NULL, rc, "server on %s", listen);
	snprintf(server_addr, sizeof(server_addr), "%s:%d", ex_host(), wimm_ps_server_port(s));

	double start = ex_now();
	pthread_t server, thread[NWORKERS];
	if (pthread_create(&server, NULL, server_main, s) != 0)
		ex_fatal("cannot start the server thread");
	for (uintptr_t w = 0; w < NWORKERS; w++)
		if (pthread_create(&thread[w], NULL, worker_main, (void *)w) != 0)
			ex_fatal("cannot start worker %u", (unsigned)w);
	for (int w = 0; w < NWORKERS; w++)
		pthread_join(thread[w], NULL);
	pthread_join(server, NULL);
	double secs = ex_now() - start;

	struct wimm_ps_stats st;
	wimm_ps_server_stats(s, &st);
	wimm_ps_server_delete(&s);
	if (st.iteration_min != iterations ||
	    st.pushes != (uint64_t)iterations * NWORKERS * NSHARDS)
		ex_fatal("param_server: %llu iterations, %llu pushes",
			 (unsigned long long)st.iteration_min, (unsigned long long)st.pushes);
	printf("param_server: %s: %u iterations x %d workers x %d shards of %d B in %.3f s "
	       "(%.2f ms per step); every pulled shard was the exact sum\n",
	       fabric, iterations, NWORKERS, NSHARDS, SHARD_BYTES, secs, secs * 1e3 / iterations);
	return 0;
}
