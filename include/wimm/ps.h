/* wimm/ps.h: a parameter server on write-with-imm (libwimm_ps).
 *
 * The source article's third scenario as a building block. The parameters
 * (float32) are cut into shards of at most 4 MiB; a server process holds a
 * contiguous range of them [first_shard, first_shard + shards), so several
 * servers can split one model's key space. On top of libwimm's public API
 * only.
 *
 * Push. Every worker has its own receive region per shard in the server's
 * memory: the server accepts each worker with a window of its own
 * (wimm_request_accept), so a worker cannot write another worker's region.
 * A push is ONE write-with-imm of the shard's gradient into that region,
 * imm = {worker:8, shard:10, iteration:14}. The server learns from each
 * completion which worker's which shard arrived, and sums the contribution
 * (float32) at once; "all here" is a count of distinct workers, never an
 * arrival order (writes on different connections have no order).
 *
 * Synchronous mode (WIMM_PS_SYNC). A shard at iteration i takes one push
 * per worker for i. At N contributions (N - backups with backup workers,
 * TensorFlow's replicas_to_aggregate) it applies the update (the plain sum,
 * the average, or SGD: params -= learning_rate * average) and moves to
 * i + 1. Pushes for an iteration the shard has passed are stale: each
 * worker's connection has a doorbell counter (wimm_counter_new) whose key
 * is the shard and whose epoch is the iteration, moved forward as the
 * shard advances, so the library drops them before they are delivered, and
 * counts them. A worker pushing twice for one iteration is a duplicate,
 * dropped and counted the same way.
 *
 * Asynchronous mode (WIMM_PS_ASYNC, MXNet dist_async / BytePS async). Each
 * push is applied on arrival and answered to its worker alone with the
 * new parameters. With staleness > 0 (bounded staleness) a push computed
 * on parameters more than `staleness` versions old is dropped and counted,
 * and its worker gets the current parameters.
 *
 * Pull. The server writes each shard's new parameters into every worker's
 * window with one write-with-imm, imm = {kind:2, shard:10, iteration:14}:
 * the worker learns "shard s is at iteration i" from the doorbell, with no
 * round trip. The alternative, an RDMA read of a versioned region, costs a
 * worker three reads per shard (the version until it changes, the data,
 * the version again to catch a torn copy) and leaves it polling to learn
 * that a version is ready. Measured (bench/ps_pull.py, median of 100
 * interleaved rounds, from the new version to the worker holding it): 4 MiB
 * shards 1.9 ms by write-with-imm against 2.1 ms by reads on ofi:tcp, and
 * 0.9 ms against 6.8 ms on ofi:shm; 64 KiB 108 against 176 us (tcp).
 * The server never blocks on a slow worker: a write that finds
 * no credit is retried from the loop, and a parameter version is copied
 * into one of two send buffers per shard, so an update never changes bytes
 * still being written to a worker.
 *
 * Failures. A worker that dies (disconnects, or is silent for the
 * liveness bound) is reported in the log and the statistics; with backup
 * workers the iterations go on without it. Without enough live workers a
 * shard cannot complete: every stall_ms the server reports which workers
 * it waits for (Horovod's stall inspector): in the log, in the statistics
 * (`wimm ps stat`) and to every live worker (wimm_ps_worker_stats). A
 * server that dies is reported to every worker within the liveness bound
 * (its pull fails with WIMM_E_DISCONNECTED). Bad input (an imm naming a
 * shard this server does not hold, a worker that is not the connection's,
 * an iteration ahead of the shard, a push longer or shorter than the
 * shard) is refused and counted, and nothing of it is applied. A refused
 * push still counts as that worker's push for its shard and iteration (the
 * counter saw it first), so a second one for that iteration is a duplicate.
 *
 * Conventions are libwimm's: 0 on success, a negative WIMM_E_* on failure;
 * wimm_x_delete(&x) accepts NULL and clears the pointer. Each object
 * belongs to one thread at a time (it owns a wimm context).
 */
#ifndef WIMM_PS_H
#define WIMM_PS_H

#include <stddef.h>
#include <stdint.h>

#include <wimm.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(WIMM_PS_BUILDING) && defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define WIMM_PS_MAX_WORKERS 256u	  /* the imm's worker field: 8 bits */
#define WIMM_PS_MAX_SHARDS 1024u	  /* global shard ids: 10 bits */
#define WIMM_PS_MAX_SHARD_SIZE (4u << 20) /* bytes */
#define WIMM_PS_ITERATION_BITS 14u	  /* iterations wrap modulo 2^14 */
#define WIMM_PS_DEFAULT_PORT 7490

enum wimm_ps_mode {
	WIMM_PS_SYNC = 0,  /* apply at N (or N - backups) pushes per iteration */
	WIMM_PS_ASYNC = 1, /* apply every push on arrival */
};

enum wimm_ps_update {
	WIMM_PS_SUM = 0,     /* params = sum of the pushes (async: params += push) */
	WIMM_PS_AVERAGE = 1, /* params = sum / contributions (async: as SUM) */
	WIMM_PS_SGD = 2,     /* params -= learning_rate * sum / contributions */
};

/* Called by the server for every update it applies, before the update rule:
 * the shard (global id), the iteration the pushes were for, their sum
 * (nfloats values) and which workers contributed (bit w of
 * contributors[w / 64]). For monitoring and for tests that recompute sums. */
typedef void (*wimm_ps_apply_fn)(void *arg, uint32_t shard, uint32_t iteration, const float *sum,
				 size_t nfloats, const uint64_t *contributors);

struct wimm_ps_server_attr {
	const char *fabric;   /* NULL: "auto" */
	const char *addr;     /* "host:port" to listen on; NULL: "0.0.0.0:7490" */
	uint32_t shards;      /* shards held here, 1..1024 (required) */
	uint32_t first_shard; /* global id of the first; first + shards <= 1024 */
	uint32_t shard_size;  /* bytes per shard, a multiple of 4, 4..4 MiB (required) */
	uint32_t workers;     /* N, 1..256 (required) */
	uint32_t backups;     /* sync: apply at N - backups pushes (< N) */
	enum wimm_ps_mode mode;
	uint32_t staleness; /* async: drop pushes more than this many versions old; 0: never */
	enum wimm_ps_update update;
	float learning_rate; /* WIMM_PS_SGD */
	/* Initial parameters, shards * shard_size / 4 floats (copied); NULL:
	 * zeros. */
	const float *initial;
	uint32_t stall_ms;    /* stall report period; 0 = 2000 */
	uint32_t liveness_ms; /* the context's liveness bound; 0 = libwimm's 5000 */
	wimm_ps_apply_fn on_apply;
	void *apply_arg;
	/* Where the server says whom it accepted, refused, lost or waits for;
	 * NULL: silent. */
	wimm_log_fn log;
	void *log_arg;
};

struct wimm_ps_server;

/* Open a context on attr->fabric, register the regions and listen.
 * Errors: INVAL (NULL arguments, sizes or counts out of range, backups >=
 * workers), NOMEM, the errors of wimm_ctx_open and wimm_listen. */
int wimm_ps_server_new(const struct wimm_ps_server_attr *attr, struct wimm_ps_server **out);

/* Close every connection and free the server. NULL and *s == NULL are
 * fine; *s is cleared. */
int wimm_ps_server_delete(struct wimm_ps_server **s);

/* The port the server listens on (useful after port 0), or WIMM_E_INVAL. */
int wimm_ps_server_port(const struct wimm_ps_server *s);

/* One turn of the server's loop: wait up to timeout_ms (-1 forever, 0
 * poll) for events, accept and drop workers, sum and apply pushes, send
 * parameters, report stalls. Returns the number of updates applied in
 * this turn (0: none). Errors: INVAL, the errors of wimm_wait. */
int wimm_ps_server_run(struct wimm_ps_server *s, int timeout_ms);

/* What a server holds and has done, also what `wimm ps stat` prints. */
struct wimm_ps_stats {
	uint64_t shards, first_shard, shard_size, workers, backups;
	uint64_t mode, update, staleness;
	uint64_t workers_live;	    /* worker connections up now */
	uint64_t iteration_min;	    /* updates applied to the least advanced shard */
	uint64_t iteration_max;	    /* ... to the most advanced one */
	uint64_t pushes;	    /* contributions summed */
	uint64_t applied;	    /* shard updates applied */
	uint64_t stale;		    /* pushes dropped as stale (counters + async bound) */
	uint64_t duplicates;	    /* a worker's second push for one iteration */
	uint64_t bad_shard;	    /* refused: a shard this server does not hold */
	uint64_t bad_worker;	    /* refused: a worker id not the connection's */
	uint64_t bad_length;	    /* refused: a push not exactly one shard long */
	uint64_t future;	    /* refused: an iteration the shard has not reached */
	uint64_t params_sent;	    /* parameter writes to workers */
	uint64_t workers_lost;	    /* worker connections that ended (closed or died) */
	uint64_t refused;	    /* connection requests refused */
	uint64_t stalls;	    /* stall reports */
	uint64_t stalled_shard;	    /* the last report: the oldest waiting shard */
	uint64_t stalled_iteration; /* ... its iteration (modulo 2^14) */
	uint64_t stalled_ms;	    /* ... how long it had waited */
	uint64_t waiting[WIMM_PS_MAX_WORKERS / 64]; /* ... the workers it waits for */
};

/* The server's statistics. Errors: INVAL. */
int wimm_ps_server_stats(const struct wimm_ps_server *s, struct wimm_ps_stats *out);

/* Ask the server at addr ("host:port") for its statistics over its own
 * short connection (a context of its own on fabric). Errors: INVAL, the
 * errors of wimm_ctx_open and wimm_connect, PROTO (not a ps server),
 * TIMEDOUT. */
int wimm_ps_stat(const char *fabric, const char *addr, int timeout_ms, struct wimm_ps_stats *out);

/* ------------------------------------------------------------------ worker */

struct wimm_ps_worker_attr {
	const char *fabric; /* NULL: "auto"; the servers' fabric */
	/* The servers ("host:port"), in any order; together their shard
	 * ranges must cover 0..total without a gap or an overlap, with one
	 * shard size. */
	const char *const *servers;
	uint32_t nservers;
	uint32_t rank;	      /* this worker's id, < the servers' worker count */
	int timeout_ms;	      /* connecting and the first parameters; <= 0: 10000 */
	uint32_t liveness_ms; /* the context's liveness bound; 0 = 5000 */
	wimm_log_fn log;
	void *log_arg;
	unsigned flags; /* WIMM_PS_WORKER_* */
};
enum {
	/* Say hello (rank, world; the statistics queries too) in-band, by a
	 * send-with-imm once connected, instead of in the connect's private
	 * data: what every fabric without private data (verbs) does anyway;
	 * for tests of that path on the others. */
	WIMM_PS_WORKER_INBAND_HELLO = 1u << 0,
};

struct wimm_ps_worker;

/* Learn each server's shards (wimm_ps_stat), connect to every one as
 * worker `rank` with a window for its parameters, and wait for the first
 * parameters of every shard. Errors: INVAL (bad attributes, servers whose
 * shards overlap, leave a gap or differ in size), RANGE (rank not below a
 * server's worker count), BUSY (a live worker of that rank is connected),
 * NOMEM, TIMEDOUT, the errors of wimm_connect. */
int wimm_ps_worker_new(const struct wimm_ps_worker_attr *attr, struct wimm_ps_worker **out);

/* Close the connections and free the worker; *w is cleared. */
int wimm_ps_worker_delete(struct wimm_ps_worker **w);

struct wimm_ps_worker_info {
	uint32_t shards;     /* shards of the whole model (all servers) */
	uint32_t shard_size; /* bytes */
	size_t nfloats;	     /* shards * shard_size / 4 */
	uint32_t workers;    /* N of the servers */
	uint32_t backups;
	enum wimm_ps_mode mode;
	/* The parameters as the servers last wrote them (a window: servers
	 * write into it; with backups or async a newer version may land while
	 * the caller reads), and where the caller puts its gradients (read by
	 * pushes until the next pull returns). nfloats each. */
	const float *params;
	float *grads;
};
int wimm_ps_worker_info(const struct wimm_ps_worker *w, struct wimm_ps_worker_info *out);

/* Push the gradient of one shard (global id): one write-with-imm of
 * grads[shard] for the iteration of the parameters the last pull
 * returned. Errors: INVAL (no such shard), DISCONNECTED (its server is
 * gone), TIMEDOUT (no credit in time), the errors of wimm_write_imm. */
int wimm_ps_worker_push(struct wimm_ps_worker *w, uint32_t shard);

/* The iteration the next push of shard is for (that of the parameters the
 * last pull returned), counted from the server's start: updates applied to
 * that shard before. The imm carries it modulo 2^14. Errors: INVAL. */
int wimm_ps_worker_iteration(const struct wimm_ps_worker *w, uint32_t shard, uint64_t *out);

/* Wait up to timeout_ms (-1 forever) until every shard pushed since the
 * last pull has newer parameters. Errors: TIMEDOUT (the statistics say
 * whom the server waits for), DISCONNECTED (a server died or closed). */
int wimm_ps_worker_pull(struct wimm_ps_worker *w, int timeout_ms);

/* Push every shard, then pull: one training step. Errors as push, pull. */
int wimm_ps_worker_step(struct wimm_ps_worker *w, int timeout_ms);

struct wimm_ps_worker_stats {
	uint64_t pushes;	/* shards pushed */
	uint64_t pulls;		/* pulls completed */
	uint64_t params_in;	/* parameter writes received */
	uint64_t stall_reports; /* stall reports the servers sent */
	int64_t waiting_for;	/* the worker the last report named; -1: none */
	int64_t server_lost;	/* index (in attr.servers) of a dead server; -1: none */
};
int wimm_ps_worker_stats(const struct wimm_ps_worker *w, struct wimm_ps_worker_stats *out);

#if defined(WIMM_PS_BUILDING) && defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif /* WIMM_PS_H */
