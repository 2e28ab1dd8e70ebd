/* The server's objects, shared by ps_server.c (life, connections, the
 * loop) and ps_shard.c (pushes, updates, parameter writes, stalls). */
#ifndef WIMM_PS_SERVER_H
#define WIMM_PS_SERVER_H

#include "ps_internal.h"

#define PS_WORDS (WIMM_PS_MAX_WORKERS / 64)
#define PS_STAT_RING 8

/* A signaled parameter write in flight: which send buffer it reads. */
struct ps_send {
	uint64_t op_seq;
	uint32_t shard, copy;
};

struct ps_peer {
	struct ps_peer *next;
	int role;	/* PS_ROLE_*; 0: its in-band hello is still due */
	int has_window; /* it exposes a worker's window (and holds a slot) */
	uint32_t rank;
	uint32_t slot;	     /* workers: which receive region is its window */
	int64_t hello_by_ms; /* in-band hello due by then */
	int refuse_why;	     /* its in-band hello refused for this reason */
	int refused;	     /* its refusal doorbell is out: close gently */
	int answered;	     /* queries: the statistics are sent */
	struct wimm_conn *conn;
	struct wimm_counter *counter; /* workers: the stale / duplicate filter */
	int up, dead;
	uint64_t ops;	      /* operations posted: the op_seq of the next */
	struct ps_send *fifo; /* signaled writes in post order */
	size_t head, len, cap;
};

struct ps_shard {
	uint32_t iter;	/* the iteration it takes pushes for, modulo 2^14 */
	uint64_t done;	/* updates applied */
	uint32_t count; /* contributions to this iteration */
	uint64_t got[PS_WORDS];
	int64_t since_ms;      /* the first contribution of this iteration (0: none) */
	uint64_t version;      /* changes of the master copy */
	uint64_t snap_version; /* the version in send buffer snap_copy */
	uint32_t snap_copy;
	int snap_valid;
	uint32_t pending[2]; /* writes in flight from each send buffer */
	uint32_t owed;	     /* workers that are owed its newest version */
};

struct wimm_ps_server {
	struct wimm_ps_server_attr a; /* fabric, addr, initial: not kept */
	uint32_t required;	      /* contributions that complete an iteration */
	size_t nfloats;		      /* per shard */
	size_t region;		      /* bytes of one worker's receive region */
	struct wimm_ctx *ctx;
	struct wimm_listener *l;
	float *recv;   /* workers x region */
	float *master; /* shards x shard_size: the parameters */
	float *sum;    /* shards x shard_size: this iteration's sums */
	float *copies; /* 2 x shards x shard_size: what workers are sent */
	struct wimm_mr *recv_mr, *copies_mr, *stat_mr;
	/* Statistics answers: a ring, so a send still in flight is never
	 * rewritten by the next query. */
	unsigned char stat_buf[PS_STAT_RING][PS_STAT_LEN];
	uint32_t stat_next;
	struct ps_shard *shard;
	struct ps_peer *worker[WIMM_PS_MAX_WORKERS]; /* live worker peers by rank */
	uint8_t slot_used[WIMM_PS_MAX_WORKERS];	     /* receive regions in use */
	uint8_t *owed;				     /* workers x shards */
	struct ps_peer *peers;
	struct wimm_ps_stats st;
	uint64_t gone_stale, gone_dups; /* from counters of ended connections */
	int64_t next_stall_ms;
	int applied_now; /* updates of this loop turn */
};

/* ps_shard.c */
void ps_push(struct wimm_ps_server *s, struct ps_peer *p, const struct wimm_event *ev);
/* Post what workers are owed (the newest version of each shard). */
void ps_flush(struct wimm_ps_server *s);
/* Every stall_ms: which workers the waiting shards wait for. */
void ps_stall_check(struct wimm_ps_server *s);
/* A worker joined: expect its pushes at each shard's iteration, owe it all. */
void ps_worker_joined(struct wimm_ps_server *s, struct ps_peer *p);
/* A SEND_DONE of p up to op_seq, or (all) every write of a dropped peer. */
void ps_sends_done(struct wimm_ps_server *s, struct ps_peer *p, uint64_t op_seq, int all);

#endif
