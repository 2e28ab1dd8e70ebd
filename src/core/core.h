/* Internal interfaces between the core's modules (ctx, mr, listener, conn).
 * Each struct stays private to its own .c; these are the calls between them. */
#ifndef WIMM_CORE_H
#define WIMM_CORE_H

#include "backend.h"
#include "core/handshake.h"

/* ctx.c */
const struct wimm_backend_ops *wimm_ctx_ops(const struct wimm_ctx *ctx);
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
/* c has slots to hand back (or a credit write to retry) at the next poll;
 * called once until wimm_conn_keep_queued() says it is done. */
void wimm_ctx_queue_release(struct wimm_ctx *ctx, struct wimm_conn *c);

/* mr.c */
const struct wimm_bmr *wimm_mr_bmr(const struct wimm_mr *mr);
struct wimm_ctx *wimm_mr_ctx(const struct wimm_mr *mr);
void wimm_mr_expose(struct wimm_mr *mr, int delta);

/* conn.c: called by the ctx while it turns completions into events. */
struct wimm_conn *wimm_conn_next(struct wimm_conn *c);
void wimm_conn_set_next(struct wimm_conn *c, struct wimm_conn *next);
void wimm_conn_on_down(struct wimm_conn *c);
/* The application saw a doorbell of c. */
void wimm_conn_on_delivered(struct wimm_conn *c);
/* Hand back slots of doorbells the application has seen and return credits
 * when a batch is due. */
int wimm_conn_release(struct wimm_conn *c);
/* After wimm_conn_release(): 1 if c still has work and stays queued. */
int wimm_conn_keep_queued(struct wimm_conn *c);
int wimm_conn_is_down_reported(struct wimm_conn *c);

/* listener.c */
const struct wimm_conn_attr *wimm_listener_attr(const struct wimm_listener *l);
struct wimm_ctx *wimm_listener_ctx(const struct wimm_listener *l);
void *wimm_listener_blis(const struct wimm_listener *l);

/* conn.c: accept path used by listener.c */
int wimm_conn_accept_request(struct wimm_listener *l, void *breq, const uint8_t *hs, size_t hs_len,
			     int timeout_ms, struct wimm_conn **out);

#endif
