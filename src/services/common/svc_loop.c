/* The services' serving loop (svc_loop.h). */
#include "svc_loop.h"

int svc_dispatch(struct wimm_ctx *ctx, enum wimm_wait_mode mode, int timeout_ms,
		 svc_event_fn handle, void *arg)
{
	struct wimm_event ev[SVC_EVENTS];
	int n = wimm_wait(ctx, ev, SVC_EVENTS, mode, timeout_ms);

	for (int i = 0; i < n; i++)
		handle(arg, &ev[i]);
	return n;
}

void svc_take_requests(struct wimm_listener *l, svc_request_fn take, svc_error_fn failed, void *arg)
{
	for (;;) {
		struct wimm_request *r = NULL;
		int rc = wimm_listener_request(l, 0, &r);
		if (rc == WIMM_E_AGAIN || rc == WIMM_E_TIMEDOUT)
			return;
		if (rc < 0) {
			if (failed)
				failed(arg, rc);
			continue;
		}
		take(arg, r);
	}
}
