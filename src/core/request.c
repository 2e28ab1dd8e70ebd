/* Connection requests: taken from a listener with their handshake read and
 * checked, looked at (who asks, with what private data), then accepted
 * with attributes of their own or rejected with a reason the connector
 * receives as its wimm_connect result. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

struct wimm_request {
	struct wimm_listener *l;
	struct wimm_request *next; /* the listener's undecided requests */
	void *breq;
	struct wimm_handshake peer;
	char peer_addr[64];
};

void wimm_request_refuse(struct wimm_ctx *ctx, void *breq, int reason)
{
	uint8_t msg[WIMM_HS_REJECT_LEN];

	wimm_hs_encode_reject(reason, msg);
	wimm_ctx_ops(ctx)->reject(breq, msg, sizeof(msg));
	wimm_ctx_counters(ctx)->rejected++;
}

int wimm_listener_request(struct wimm_listener *l, int timeout_ms, struct wimm_request **out)
{
	/* One byte more than any valid handshake: a longer message, cut to
	 * this buffer, still reads as too long to the decoder. */
	uint8_t hs[WIMM_HS_MAX_LEN + 1];
	size_t hs_len = sizeof(hs);
	void *breq = NULL;

	if (!out)
		return WIMM_E_INVAL;
	*out = NULL;
	if (!l)
		return WIMM_E_INVAL;
	struct wimm_ctx *ctx = wimm_listener_ctx(l);
	const struct wimm_backend_ops *ops = wimm_ctx_ops(ctx);
	int ret = ops->get_request(wimm_listener_blis(l), timeout_ms, &breq, hs, &hs_len);
	if (ret)
		return ret;
	struct wimm_request *r = calloc(1, sizeof(*r));
	if (!r) {
		wimm_request_refuse(ctx, breq, WIMM_E_NOMEM);
		return WIMM_E_NOMEM;
	}
	/* A bad request is refused and costs the listener nothing. */
	ret = wimm_hs_decode(hs, hs_len, &r->peer);
	if (ret) {
		wimm_ctx_log(ctx, WIMM_LOG_WARN, "connection request refused: bad handshake (%s)",
			     wimm_err_name(ret));
		wimm_request_refuse(ctx, breq, ret);
		free(r);
		return ret;
	}
	if (ops->request_peer(breq, r->peer_addr, sizeof(r->peer_addr)))
		snprintf(r->peer_addr, sizeof(r->peer_addr), "?");
	r->l = l;
	r->breq = breq;
	wimm_listener_track(l, r, 1);
	*out = r;
	return 0;
}

int wimm_request_info(const struct wimm_request *r, struct wimm_request_info *out)
{
	if (!r || !out)
		return WIMM_E_INVAL;
	memset(out, 0, sizeof(*out));
	snprintf(out->peer_addr, sizeof(out->peer_addr), "%s", r->peer_addr);
	out->private_data = r->peer.priv_len ? r->peer.priv : NULL;
	out->private_len = r->peer.priv_len;
	out->peer_rx_depth = r->peer.rx_depth;
	out->peer_window_len = (size_t)r->peer.window_len;
	return 0;
}

static int request_take(struct wimm_request **pr, struct wimm_request **r)
{
	if (!pr || !*pr)
		return WIMM_E_INVAL;
	*r = *pr;
	*pr = NULL;
	wimm_listener_track((*r)->l, *r, 0);
	return 0;
}

/* Shared by wimm_request_accept and wimm_accept. */
static int accept_with(struct wimm_request *r, const struct wimm_conn_attr *attr, int announce,
		       struct wimm_conn **out)
{
	struct wimm_ctx *ctx = wimm_listener_ctx(r->l);
	if (attr && attr->window && wimm_mr_ctx(attr->window) != ctx) {
		wimm_request_refuse(ctx, r->breq, WIMM_E_INVAL);
		free(r);
		return WIMM_E_INVAL;
	}
	int ret = wimm_conn_accept_request(r->l, r->breq, &r->peer,
					   attr ? attr : wimm_listener_attr(r->l), announce, out);
	if (ret)
		wimm_ctx_log(ctx, WIMM_LOG_WARN, "accepting %s failed: %s", r->peer_addr,
			     wimm_err_name(ret));
	free(r);
	return ret;
}

int wimm_request_accept(struct wimm_request **pr, const struct wimm_conn_attr *attr,
			struct wimm_conn **out)
{
	struct wimm_request *r;

	if (out)
		*out = NULL;
	int ret = request_take(pr, &r);
	if (ret)
		return ret;
	if (!out) {
		wimm_request_refuse(wimm_listener_ctx(r->l), r->breq, WIMM_E_INVAL);
		free(r);
		return WIMM_E_INVAL;
	}
	return accept_with(r, attr, 1, out);
}

int wimm_request_reject(struct wimm_request **pr, int reason)
{
	struct wimm_request *r;

	int ret = request_take(pr, &r);
	if (ret)
		return ret;
	if (reason >= 0 || strcmp(wimm_strerror(reason), "unknown error") == 0)
		reason = WIMM_E_REFUSED;
	wimm_ctx_log(wimm_listener_ctx(r->l), WIMM_LOG_INFO, "request from %s rejected: %s",
		     r->peer_addr, wimm_err_name(reason));
	wimm_request_refuse(wimm_listener_ctx(r->l), r->breq, reason);
	free(r);
	return 0;
}

void wimm_request_drop(struct wimm_request *r)
{
	wimm_request_refuse(wimm_listener_ctx(r->l), r->breq, WIMM_E_REFUSED);
	free(r);
}

struct wimm_request *wimm_request_next(struct wimm_request *r)
{
	return r->next;
}

void wimm_request_set_next(struct wimm_request *r, struct wimm_request *next)
{
	r->next = next;
}

/* ------------------------------------------------------------ wimm_accept */

struct settle_arg {
	struct wimm_conn *c;
};

static int conn_settled(void *arg)
{
	int failed;

	return wimm_conn_settled(((struct settle_arg *)arg)->c, &failed);
}

int wimm_accept(struct wimm_listener *l, int timeout_ms, struct wimm_conn **out)
{
	struct wimm_request *r;
	int64_t deadline = wimm_deadline_ms(timeout_ms, -1);

	if (!out)
		return WIMM_E_INVAL;
	*out = NULL;
	if (!l)
		return WIMM_E_INVAL;
	int ret = wimm_listener_request(l, timeout_ms, &r);
	if (ret)
		return ret;
	wimm_listener_track(l, r, 0);
	struct wimm_conn *c;
	ret = accept_with(r, NULL, timeout_ms == 0, &c);
	if (ret || timeout_ms == 0) {
		*out = ret ? NULL : c;
		return ret;
	}
	/* Wait, within the caller's timeout, for the transport to come up;
	 * events of other connections meanwhile are kept for the next poll. */
	struct settle_arg arg = {c};
	ret = wimm_ctx_progress_until(wimm_listener_ctx(l), conn_settled, &arg, deadline);
	int failed = 0;
	if (ret == 0 && wimm_conn_settled(c, &failed) && failed)
		ret = WIMM_E_DISCONNECTED;
	if (ret) {
		wimm_conn_delete(&c);
		return ret;
	}
	*out = c;
	return 0;
}
