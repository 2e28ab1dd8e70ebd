/* Internals of the log server, shared by its two modules: log_server.c
 * (connections, private rings, readers, the group commit) and log_shared.c
 * (the shared ring). Nothing here is exported. */
#ifndef WIMM_LOG_SERVER_INTERNAL_H
#define WIMM_LOG_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "log_internal.h"

#define DEFAULT_RING (1u << 20)
#define DEFAULT_CONNS 72u
#define DEFAULT_SEGMENT (256ull << 20)
#define RX_DEPTH 64
#define READER_STAGE_MAX (4u << 20)
#define EV_BATCH 64
/* Polls of one turn before the group commit: a bound on the latency of
 * durable under a flood. */
#define TURN_POLLS 32
/* Microseconds the loop polls before it sleeps. */
#define SPIN_US 50

struct sconn {
	struct wimm_log_server *s;
	struct wimm_conn *c;
	int slot;
	int role;
	int established;
	int have_hello; /* a hello from private data waits for ESTABLISHED */
	struct log_hello hello;
	long wi; /* writer table index */
	uint32_t epoch;
	uint64_t expect_seq;
	size_t tail;
	uint64_t sent_visible, sent_durable;
	int shared; /* accepted on the shared ring's listener */
	int grant;  /* shared, by request: 1 asked, 2 granted, not yet written */
	uint64_t grant_off, grant_len;
	int drop;	   /* close at the end of the turn */
	uint64_t accepted; /* the server's count of accepts when this one was made */
	/* reader */
	unsigned char *stage;
	struct wimm_mr *stage_mr;
	size_t stage_len;
	int reply_due;
	uint32_t reply_imm;
	size_t reply_len;
};

struct log_shared;

struct wimm_log_server {
	struct wimm_ctx *ctx;
	struct wimm_listener *l;
	unsigned char *arena, *ctl;
	struct wimm_mr *arena_mr, *ctl_mr;
	uint32_t ring_size, max_conns;
	uint64_t accepts;     /* connections accepted so far: which of two is newer */
	struct sconn **conns; /* by slot */
	struct log_store *st;
	wimm_log_fn log;
	void *log_arg;
	uint64_t duplicates, refused, writers, readers;
	int failed;	 /* the store failed: no more promises */
	uint64_t retain; /* keep at least this many entries; 0: everything */
	/* The group commit: a thread that fdatasyncs while the loop goes on
	 * taking entries, and wakes the loop through an eventfd. */
	pthread_t syncer;
	int syncer_up;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int sync_fd;	      /* to fdatasync; -1: idle */
	int sync_busy;	      /* handed over, not yet taken back */
	atomic_int sync_done; /* 1: finished, sync_err says how */
	int sync_err, quit;
	int efd, epfd;
	long spin_us;
	struct log_shared *sh; /* the shared ring; NULL: none */
};

#define say(obj, lvl, ...) log_say((obj)->log, (obj)->log_arg, lvl, __VA_ARGS__)

/* Why a client is refused (an error doorbell), then dropped at the turn's end. */
void log_server_refuse(struct sconn *k, uint32_t code, uint64_t a, uint64_t b);
/* The live connection of writer index wi, or NULL. */
struct sconn *log_server_live(struct wimm_log_server *s, size_t wi);

/* ------------------------------------------------------------ log_shared.c */

/* Allocate and register the shared ring of ring bytes (its window: the
 * control words, then the ring), listen on addr. Errors: INVAL, NOMEM and
 * those of wimm_mr_reg and wimm_listen. */
int log_shared_open(struct wimm_log_server *s, const char *addr, uint32_t ring, uint32_t hole_ms);
void log_shared_close(struct wimm_log_server *s);
int log_shared_port(const struct wimm_log_server *s);
struct wimm_listener *log_shared_listener(const struct wimm_log_server *s);
/* The window every shared connection is accepted with. */
void log_shared_window(const struct wimm_log_server *s, struct wimm_conn_attr *a);
/* A shared writer's hello was taken: what its resume says. */
void log_shared_resume(const struct wimm_log_server *s, struct log_resume *r);
/* A doorbell (imm) of a shared writer's connection k. */
void log_shared_doorbell(struct sconn *k, uint32_t imm);
/* A shared connection is going away. */
void log_shared_conn_gone(struct sconn *k);
/* Take what the head can reach, skip holes that waited long enough, grant
 * queued reservations: the entries taken. */
int log_shared_advance(struct wimm_log_server *s);
/* timeout_ms, shortened to when a waiting hole is due. */
int log_shared_timeout(const struct wimm_log_server *s, int timeout_ms);
void log_shared_stat(const struct wimm_log_server *s, struct wimm_log_stat *out);

#endif
