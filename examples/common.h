/* Shared plumbing of the examples: errors, the listening address, a port
 * handed from the server thread to its clients, and bounded waits.
 *
 * Every failure ends the whole process with status 1: an example that
 * carried on after a failed check would print a summary that lies.
 */
#ifndef WIMM_EXAMPLE_COMMON_H
#define WIMM_EXAMPLE_COMMON_H

#include <stdint.h>
#include <wimm.h>

/* No event for this long means the peer is stuck: give up loudly. */
#define EX_TIMEOUT_MS 10000

_Noreturn void ex_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* As ex_fatal, then the wimm error and the provider's own code and text. */
_Noreturn void ex_fail(struct wimm_ctx *ctx, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

double ex_now(void);
/* WIMM_EXAMPLE_HOST, or 127.0.0.1 (verbs:rxe0 in the guest needs 192.0.2.1). */
const char *ex_host(void);
/* argv[2] if given (small runs, e.g. under valgrind), else def. */
unsigned ex_count(int argc, char **argv, unsigned def);

struct wimm_ctx *ex_open(const char *fabric, const char *role);
/* Listen on ex_host() at a free port and tell ex_connect() which one. */
struct wimm_listener *ex_listen(struct wimm_ctx *ctx, const struct wimm_conn_attr *attr);
/* Stop taking connections: a live listener costs every poll a look. */
void ex_unlisten(struct wimm_ctx *ctx, struct wimm_listener **l);
struct wimm_conn *ex_accept(struct wimm_ctx *ctx, struct wimm_listener *l, const char *role);
/* Wait (bounded) for the server thread to listen, then connect to it. */
struct wimm_conn *ex_connect(struct wimm_ctx *ctx, const struct wimm_conn_attr *attr,
			     const char *role);

/* wimm_wait, giving up after EX_TIMEOUT_MS without any event. A failed
 * local operation (WIMM_EV_ERROR) is fatal; DISCONNECT is the caller's. */
int ex_wait(struct wimm_ctx *ctx, struct wimm_event *ev, int n, const char *role, const char *what);
/* As ex_wait but only polls once: for loops that retry a post. */
int ex_poll(struct wimm_ctx *ctx, struct wimm_event *ev, int n, const char *role);
/* Wait for the peer to close (the server's last step), bounded. */
void ex_wait_disconnect(struct wimm_ctx *ctx, const char *role, int conns);

/* After a post failed with WIMM_E_AGAIN (no credit or a full send queue):
 * starts the clock on the first call (*give_up == 0) and fails once
 * EX_TIMEOUT_MS passed. The caller then polls or drives progress, and
 * retries. Unlike WIMM_F_WAIT, which has no timeout of its own, this bounds
 * the wait even when both peers wait for each other. */
void ex_again(double *give_up, const char *role, const char *what);
/* wimm_write_imm (len 0 and src NULL: a pure doorbell). While out of credit
 * it only drives progress: the caller's events stay queued for its loop. */
void ex_write_imm(struct wimm_ctx *ctx, struct wimm_conn *conn, struct wimm_mr *src, size_t src_off,
		  size_t dst_off, size_t len, uint32_t imm, const char *role, const char *what);

/* Release everything a side owns; NULL pointers are skipped. */
void ex_close(struct wimm_ctx **ctx, struct wimm_conn **conn, struct wimm_mr **mr1,
	      struct wimm_mr **mr2, const char *role);

/* FNV-1a: the payload checksum of the examples. */
uint32_t ex_fnv1a(const void *p, size_t len);

#endif
