/* Internal interfaces between the core's modules (ctx, mr, listener, conn).
 * Each struct stays private to its own .c; these are the calls between them. */
#ifndef WIMM_CORE_H
#define WIMM_CORE_H

#include "backend.h"
#include "core/handshake.h"

/* fabric.c */
const struct wimm_backend_ops *wimm_find_backend(const char *scheme, size_t n);
/* "auto": the first backend that finds a usable device, else ofi:tcp. */
int wimm_resolve_auto(char *uri, size_t cap);

/* ctx.c */
const struct wimm_backend_ops *wimm_ctx_ops(const struct wimm_ctx *ctx);
/* Say why through the context's log hook (no-op without one). */
void wimm_ctx_log(struct wimm_ctx *ctx, enum wimm_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Queue an event behind those already queued (NOMEM when it cannot grow). */
int wimm_ctx_push_event(struct wimm_ctx *ctx, const struct wimm_event *ev);
uint32_t wimm_ctx_liveness_ms(const struct wimm_ctx *ctx);
/* The context's counters, for the modules that count. */
struct wimm_ctx_stats *wimm_ctx_counters(struct wimm_ctx *ctx);
/* A connection came up: the liveness clock warms up. */
void wimm_ctx_conn_up(struct wimm_ctx *ctx);
/* After a blocking wait in which no connection was polled: give every
 * connection a fresh silence bound (its heartbeats may wait unread). */
void wimm_ctx_forgive(struct wimm_ctx *ctx);
/* Drive the backend until cond(arg) holds, the deadline passes (then
 * TIMEDOUT) or an error; events found meanwhile are kept. */
int wimm_ctx_progress_until(struct wimm_ctx *ctx, int (*cond)(void *arg), void *arg,
			    int64_t deadline_ms);
void *wimm_ctx_bctx(const struct wimm_ctx *ctx);
void wimm_ctx_count_object(struct wimm_ctx *ctx, int delta);
/* Reserve / give back completion-queue room for a connection. */
int wimm_ctx_cq_reserve(struct wimm_ctx *ctx, uint32_t n);
void wimm_ctx_cq_unreserve(struct wimm_ctx *ctx, uint32_t n);
/* Drive the backend once, queueing what it returns (no slot release). */
int wimm_ctx_progress_into_backlog(struct wimm_ctx *ctx);
uint32_t wimm_ctx_spin_us(const struct wimm_ctx *ctx);
uint32_t wimm_ctx_post_wait_ms(const struct wimm_ctx *ctx);
/* Listener fds join the context's epoll set so waits see requests. */
int wimm_ctx_watch_listener(struct wimm_ctx *ctx, struct wimm_listener *l, int fd, int add);
/* Forget every queued event of a connection being deleted. */
void wimm_ctx_purge_conn(struct wimm_ctx *ctx, struct wimm_conn *c);
/* Link (add: can fail with NOMEM) or unlink a connection. */
int wimm_ctx_link_conn(struct wimm_ctx *ctx, struct wimm_conn *c, int add);
/* A connection starts (+1) or stops (-1) being out of credit. */
void wimm_ctx_starved(struct wimm_ctx *ctx, int delta);
/* c has slots to hand back (or a credit write to retry) at the next poll;
 * called once until wimm_conn_keep_queued() says it is done. */
void wimm_ctx_queue_release(struct wimm_ctx *ctx, struct wimm_conn *c);

/* mr.c */
const struct wimm_bmr *wimm_mr_bmr(const struct wimm_mr *mr);
struct wimm_ctx *wimm_mr_ctx(const struct wimm_mr *mr);
void wimm_mr_expose(struct wimm_mr *mr, int delta);
/* mr, registered at `off` of region, lies in region's memfd (if it has
 * one) and says so to the backend; the fd stays region's. */
void wimm_mr_share_memfd(struct wimm_mr *mr, const struct wimm_mr *region, size_t off);

/* The flags an operation's post takes (the others are INVAL). */
#define WIMM_POST_FLAGS (WIMM_F_SIGNAL | WIMM_F_WAIT)
/* conn_ops.c, for prepared.c: a prepared operation's checks (those of its
 * own call; *wr gets the request) and its post. */
int wimm_conn_prep_check(struct wimm_conn *c, enum wimm_op op, struct wimm_mr *src, size_t src_off,
			 size_t dst_off, size_t len, struct wimm_wr *wr);
int wimm_conn_prep_post(struct wimm_conn *c, void *bprep, struct wimm_wr *wr, uint32_t imm,
			unsigned flags);
/* conn.c, for prepared.c: the connection's backend handle, its context and
 * the head of its list of prepared operations. */
void *wimm_conn_bconn(const struct wimm_conn *c);
struct wimm_ctx *wimm_conn_ctx(const struct wimm_conn *c);
struct wimm_prep **wimm_conn_preps(struct wimm_conn *c);
/* prepared.c: a connection about to be freed leaves its prepared
 * operations without it (their posts say DISCONNECTED) and frees their
 * backend requests. */
void wimm_prep_orphan_all(struct wimm_prep *head);

/* conn.c: called by the ctx while it turns completions into events. */
struct wimm_conn *wimm_conn_next(struct wimm_conn *c);
void wimm_conn_set_next(struct wimm_conn *c, struct wimm_conn *next);
/* Turn one completion of c into events: returns 1 with *ev to deliver
 * (after whatever it queued itself with wimm_ctx_push_event), 0 if none,
 * or NOMEM. now_ns: the coarse clock of this pass. */
int wimm_conn_on_cqe(struct wimm_conn *c, const struct wimm_cqe *q, struct wimm_event *ev,
		     int64_t now_ns);
/* Heartbeats and the silence check; called every liveness_ms / 8. */
void wimm_conn_tick(struct wimm_conn *c, int64_t now_ns);
/* 1 when c is up and nothing has been heard from its peer within its
 * liveness bound, as far as our control words show now (what the peer
 * wrote there meanwhile is taken note of, as wimm_conn_tick does). */
int wimm_conn_looks_silent(struct wimm_conn *c, int64_t now_ns);
/* The heartbeat alone, when due (wimm_ctx_keepalive). */
void wimm_conn_heartbeat(struct wimm_conn *c, int64_t now_ns);
/* The heartbeat period this connection needs now (ns; 0: none). */
int64_t wimm_conn_hb_period_ns(const struct wimm_conn *c);
/* We were not looking (a blocking connect): the silence starts now. */
void wimm_conn_forgive(struct wimm_conn *c, int64_t now_ns);
/* The application saw a doorbell of c. */
void wimm_conn_on_delivered(struct wimm_conn *c);
/* Fold c's counters into the context's (when c is deleted). */
void wimm_conn_add_stats(const struct wimm_conn *c, struct wimm_conn_stats *sum);
/* Hand back slots of doorbells the application has seen and return credits
 * when a batch is due. */
int wimm_conn_release(struct wimm_conn *c);
/* After wimm_conn_release(): 1 if c still has work and stays queued. */
int wimm_conn_keep_queued(struct wimm_conn *c);
/* 1 while a credit return could not be posted yet (arm must not sleep). */
int wimm_conn_return_due(const struct wimm_conn *c);

/* counter.c */
struct wimm_ctx *wimm_counter_ctx(const struct wimm_counter *k);
/* A connection (source != NULL: it gets a source number when no imm field
 * names the source) or a listener starts (add) or stops using k. AGAIN:
 * no source number left. */
int wimm_counter_attach(struct wimm_counter *k, int add, uint32_t *source);
/* Count a doorbell: a WIMM_COUNT_* verdict (counter_table.h) or NOMEM;
 * with WIMM_COUNT_REACHED, *count_ev is the event to raise after it. */
int wimm_counter_doorbell(struct wimm_counter *k, uint32_t imm, uint32_t conn_source,
			  struct wimm_event *count_ev);

/* listener.c */
const struct wimm_conn_attr *wimm_listener_attr(const struct wimm_listener *l);
struct wimm_ctx *wimm_listener_ctx(const struct wimm_listener *l);
void *wimm_listener_blis(const struct wimm_listener *l);
/* Requests taken and not decided, rejected when the listener goes. */
void wimm_listener_track(struct wimm_listener *l, struct wimm_request *r, int add);

/* request.c */
/* Reject a backend request with the core's reject message. */
void wimm_request_refuse(struct wimm_ctx *ctx, void *breq, int reason);
/* Reject and free a request the listener still tracks (listener delete). */
void wimm_request_drop(struct wimm_request *r);
struct wimm_request *wimm_request_next(struct wimm_request *r);
void wimm_request_set_next(struct wimm_request *r, struct wimm_request *next);

/* conn.c: the accepting side. The peer's handshake is decoded; the
 * connection is answered and comes up asynchronously (announce: raise
 * WIMM_EV_ESTABLISHED when it does). On failure the request is rejected. */
int wimm_conn_accept_request(struct wimm_listener *l, void *breq, const struct wimm_handshake *peer,
			     const struct wimm_conn_attr *attr, int announce,
			     struct wimm_conn **out);
/* 1 once c is up, also when it failed (then *failed set). */
int wimm_conn_settled(const struct wimm_conn *c, int *failed);
void wimm_conn_set_announce(struct wimm_conn *c, int announce);

#endif
