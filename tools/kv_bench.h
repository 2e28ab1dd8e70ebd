/* `wimm kv bench` internals: the workload, its key sequence, and the
 * stores a client process drives (wimm's two put designs and Redis). */
#ifndef WIMM_KV_BENCH_H
#define WIMM_KV_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct kvb_workload {
	const char *fabric; /* of the wimm stores */
	size_t size;	    /* value bytes */
	int clients;	    /* client processes */
	uint32_t ops;	    /* operations per client and phase */
	uint32_t keys;	    /* key space shared by all clients */
	int zipf;	    /* 0: uniform keys, 1: zipfian (theta 0.99) */
	unsigned flags;	    /* wimm_ctx_attr.flags of the wimm clients */
};

/* A key sequence over ranks 0..n-1 (uniform or zipfian), seeded by the
 * client: the same for every store, so each store gets exactly the same
 * operations. Puts go to the client's own keys (every clients-th key: a
 * slot pool's arena is its writer's), gets to the whole key space. */
struct kvb_keys {
	uint32_t n;
	double *cdf; /* zipfian: cumulative probabilities of ranks 0..n-1 */
	uint64_t rng;
};
int kvb_keys_init(struct kvb_keys *k, uint32_t n, int zipf, uint64_t seed);
uint32_t kvb_keys_next(struct kvb_keys *k);
void kvb_keys_fini(struct kvb_keys *k);

/* A store as a client process sees it. get: 0 or 1 for a miss. */
struct kvb_store {
	const char *name;
	int (*open)(void **h, const char *addr, const struct kvb_workload *w);
	int (*put)(void *h, const char *key, size_t klen, const void *v, size_t len);
	int (*get)(void *h, const char *key, size_t klen, void *buf, size_t cap);
	/* Keep an idle connection alive (NULL: nothing to do). */
	int (*idle)(void *h);
	void (*close)(void *h);
	const char *(*error)(int rc);
};
extern const struct kvb_store kvb_redis_store; /* kv_bench_redis.c */

/* Redis on this host: a server without persistence on a free port; and one
 * redis-benchmark run (uniform keys only: it has no other distribution). */
int kvb_free_port(void);
pid_t kvb_start_redis(int port);
struct kvb_phase_stats {
	double p50, p99, p999, rate; /* us, us, us, ops/s */
	double srv_cpu;		     /* the server's CPU per operation, us (NAN: unknown) */
};
int kvb_redis_benchmark(int port, const struct kvb_workload *w, struct kvb_phase_stats out[2]);

#endif
