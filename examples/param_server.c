/* param_server: workers push gradient shards, the server sums each iteration.
 *
 * Each of NWORKERS workers (a thread with its own context and connection)
 * writes NSHARDS shards of SHARD_FLOATS floats per iteration into its own
 * region of the server's window (disjoint per worker and shard), each with a
 * write-with-imm, imm = {worker:4, shard:8, iter:20}. The server counts the
 * arrivals of the iteration; when all NWORKERS x NSHARDS are in, it sums the
 * workers' shards, checks the sums (workers send known values) and releases
 * every worker with a zero-length doorbell whose imm is the iteration.
 *
 * Ordering (docs/errata.md E7): a connection delivers its own events in post order,
 * and a doorbell announces only data written on that connection before it.
 * Across connections nothing is ordered: worker 2 may finish before worker 0
 * starts. So the server counts shards per iteration across connections and
 * never infers "complete" from who spoke last; and each worker's data and
 * its doorbell share one connection (a separate notify connection would
 * announce nothing).
 *
 * Write-with-imm fits: the shard lands where the reduction reads it, and the
 * imm says which shard it is. The release is a pure doorbell.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define NWORKERS 3
#define NSHARDS 8
#define SHARD_FLOATS 1024
#define SHARD_BYTES (SHARD_FLOATS * sizeof(float))
#define ITER_MASK 0xfffffu

enum { F_WORKER, F_SHARD, F_ITER };
static const struct wimm_imm_field ps_fields[] = {{"worker", 4}, {"shard", 8}, {"iter", 20}};
static struct wimm_imm_layout ps_layout;

struct ps_run {
	const char *fabric;
	unsigned iters;
	unsigned reduced;
	double secs;
};

struct worker {
	struct ps_run *run;
	uint32_t id;
};

/* Small integers: float sums of them are exact, so the check can be ==. */
static float grad(uint32_t w, uint32_t s, uint32_t j, uint32_t iter)
{
	return (float)((w * 31 + s * 7 + j + iter * 3) % 64);
}

static size_t region(uint32_t w, uint32_t s)
{
	return ((size_t)w * NSHARDS + s) * SHARD_BYTES;
}

static void reduce_and_check(const float *win, uint32_t iter)
{
	for (uint32_t s = 0; s < NSHARDS; s++)
		for (uint32_t j = 0; j < SHARD_FLOATS; j++) {
			float sum = 0, want = 0;
			for (uint32_t w = 0; w < NWORKERS; w++) {
				sum += win[region(w, s) / sizeof(float) + j];
				want += grad(w, s, j, iter);
			}
			if (sum != want)
				ex_fatal("server: iteration %u shard %u [%u]: sum %g, want %g",
					 iter, s, j, sum, want);
		}
}

static void *server_main(void *arg)
{
	struct ps_run *run = arg;
	struct wimm_ctx *ctx = ex_open(run->fabric, "server");
	size_t win_len = region(NWORKERS, 0);
	float *win = calloc(1, win_len);
	struct wimm_mr *win_mr;
	if (win == NULL)
		ex_fatal("server: out of memory");
	int rc = wimm_mr_reg(ctx, win, win_len, WIMM_REMOTE_WRITE, &win_mr);
	if (rc < 0)
		ex_fail(ctx, rc, "server: register the gradient window");
	struct wimm_conn_attr attr = {.window = win_mr, .rx_depth = 2 * NSHARDS};
	struct wimm_listener *l = ex_listen(ctx, &attr);
	struct wimm_conn *conn[NWORKERS];
	for (int k = 0; k < NWORKERS; k++)
		conn[k] = ex_accept(ctx, l, "server");
	ex_unlisten(ctx, &l);

	double start = ex_now();
	/* Which connection each worker uses, learnt from its first shard. */
	struct wimm_conn *worker_conn[NWORKERS] = {NULL};
	struct wimm_event ev[32];
	for (uint32_t iter = 0; iter < run->iters; iter++) {
		unsigned char arrived[NWORKERS][NSHARDS] = {{0}};
		unsigned count = 0;
		while (count < NWORKERS * NSHARDS) {
			int n = ex_wait(ctx, ev, 32, "server", "gradient shards");
			for (int i = 0; i < n; i++) {
				if (ev[i].type == WIMM_EV_DISCONNECT)
					ex_fatal("server: a worker left in iteration %u", iter);
				if (ev[i].type != WIMM_EV_WRITE_IMM)
					continue;
				uint32_t f[3];
				wimm_imm_unpack(&ps_layout, ev[i].imm, f);
				uint32_t w = f[F_WORKER], s = f[F_SHARD];
				if (w >= NWORKERS || s >= NSHARDS ||
				    f[F_ITER] != (iter & ITER_MASK))
					ex_fatal(
					    "server: unexpected shard w%u s%u i%u in iteration %u",
					    w, s, f[F_ITER], iter);
				if (worker_conn[w] == NULL)
					worker_conn[w] = ev[i].conn;
				if (worker_conn[w] != ev[i].conn || arrived[w][s] ||
				    (ev[i].len != 0 && ev[i].len != SHARD_BYTES))
					ex_fatal("server: iteration %u: worker %u shard %u: wrong"
						 " connection, repeated or %u bytes",
						 iter, w, s, ev[i].len);
				arrived[w][s] = 1;
				count++;
			}
		}
		reduce_and_check(win, iter);
		run->reduced++;
		/* The window is free again: let every worker go on. */
		for (int k = 0; k < NWORKERS; k++)
			ex_write_imm(ctx, conn[k], NULL, 0, 0, 0, iter, "server",
				     "release a worker");
	}
	run->secs = ex_now() - start;
	ex_wait_disconnect(ctx, "server", NWORKERS);
	for (int k = 0; k < NWORKERS; k++) {
		rc = wimm_conn_delete(&conn[k]);
		if (rc < 0)
			ex_fail(ctx, rc, "server: close worker connection %d", k);
	}
	ex_close(&ctx, NULL, &win_mr, NULL, "server");
	free(win);
	return NULL;
}

static void *worker_main(void *arg)
{
	const struct worker *me = arg;
	char role[32];
	snprintf(role, sizeof(role), "worker %u", me->id);
	struct wimm_ctx *ctx = ex_open(me->run->fabric, role);
	float *src = calloc(NSHARDS, SHARD_BYTES);
	struct wimm_mr *src_mr;
	if (src == NULL)
		ex_fatal("%s: out of memory", role);
	int rc = wimm_mr_reg(ctx, src, NSHARDS * SHARD_BYTES, WIMM_LOCAL, &src_mr);
	if (rc < 0)
		ex_fail(ctx, rc, "%s: register the gradients", role);
	struct wimm_conn_attr attr = {.rx_depth = 4};
	struct wimm_conn *conn = ex_connect(ctx, &attr, role);

	struct wimm_event ev[4];
	for (uint32_t iter = 0; iter < me->run->iters; iter++) {
		/* Rewriting the source is safe: the last release means the
		 * server consumed every shard of the previous iteration. */
		for (uint32_t s = 0; s < NSHARDS; s++)
			for (uint32_t j = 0; j < SHARD_FLOATS; j++)
				src[s * SHARD_FLOATS + j] = grad(me->id, s, j, iter);
		for (uint32_t s = 0; s < NSHARDS; s++) {
			uint32_t imm;
			rc = wimm_imm_pack(&ps_layout, (uint32_t[]){me->id, s, iter & ITER_MASK},
					   &imm);
			if (rc < 0)
				ex_fail(ctx, rc, "%s: pack the imm of shard %u", role, s);
			/* Out of credit it drives progress, never takes events:
			 * none but the release may come, and only later. */
			ex_write_imm(ctx, conn, src_mr, s * SHARD_BYTES, region(me->id, s),
				     SHARD_BYTES, imm, role, "write a shard");
		}
		for (int released = 0; !released;) {
			int n = ex_wait(ctx, ev, 4, role, "the release");
			for (int i = 0; i < n; i++) {
				if (ev[i].type == WIMM_EV_DISCONNECT)
					ex_fatal("%s: the server left", role);
				if (ev[i].type != WIMM_EV_WRITE_IMM)
					continue;
				if (ev[i].imm != iter)
					ex_fatal("%s: released for %u in %u", role, ev[i].imm,
						 iter);
				released = 1;
			}
		}
	}
	ex_close(&ctx, &conn, &src_mr, NULL, role);
	free(src);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s FABRIC [ITERATIONS]   e.g. %s ofi:tcp\n", argv[0],
			argv[0]);
		return 2;
	}
	int rc = wimm_imm_layout_init(&ps_layout, ps_fields, 3);
	if (rc < 0)
		ex_fail(NULL, rc, "imm layout");
	struct ps_run run = {.fabric = argv[1], .iters = ex_count(argc, argv, 50)};
	struct worker workers[NWORKERS];
	pthread_t server, thread[NWORKERS];
	if (pthread_create(&server, NULL, server_main, &run) != 0)
		ex_fatal("cannot start the server thread");
	for (uint32_t w = 0; w < NWORKERS; w++) {
		workers[w] = (struct worker){&run, w};
		if (pthread_create(&thread[w], NULL, worker_main, &workers[w]) != 0)
			ex_fatal("cannot start worker %u", w);
	}
	for (int w = 0; w < NWORKERS; w++)
		pthread_join(thread[w], NULL);
	pthread_join(server, NULL);

	if (run.reduced != run.iters)
		ex_fatal("param_server: %u of %u iterations reduced", run.reduced, run.iters);
	double shards = (double)run.iters * NWORKERS * NSHARDS;
	printf("param_server: %s: %u iterations x %d workers x %d shards of %zu B in %.3f s:"
	       " %.0f iterations/s, %.0f shards/s, %.1f MB/s; every sum OK\n",
	       run.fabric, run.iters, NWORKERS, NSHARDS, SHARD_BYTES, run.secs,
	       run.iters / run.secs, shards / run.secs, shards * SHARD_BYTES / run.secs / 1e6);
	return 0;
}
