/* The serving loop the services' servers share, on libwimm's public API
 * only: one wait's events handed out in order, and a listener's waiting
 * connection requests taken one by one. */
#ifndef WIMM_SVC_LOOP_H
#define WIMM_SVC_LOOP_H

#include <wimm.h>

/* The most events one svc_dispatch takes from the context. */
#define SVC_EVENTS 64

typedef void (*svc_event_fn)(void *arg, const struct wimm_event *ev);
/* Accepts or rejects r (it owns the request). */
typedef void (*svc_request_fn)(void *arg, struct wimm_request *r);
typedef void (*svc_error_fn)(void *arg, int err);

/* Wait up to timeout_ms in mode for the context's events, each handed to
 * handle(arg, ev) in order: how many, or wimm_wait's negative WIMM_E_*. */
int svc_dispatch(struct wimm_ctx *ctx, enum wimm_wait_mode mode, int timeout_ms,
		 svc_event_fn handle, void *arg);
/* Every request waiting on l to take(arg, r); a look that fails otherwise
 * than with nothing waiting goes to failed(arg, err) (may be NULL), and
 * the next is taken. */
void svc_take_requests(struct wimm_listener *l, svc_request_fn take, svc_error_fn failed,
		       void *arg);

#endif
