/* Listeners: a passive endpoint plus the attributes of the connections it
 * accepts. */
#include <stdlib.h>

#include "core/core.h"

struct wimm_listener {
	struct wimm_ctx *ctx;
	void *blis;
	struct wimm_conn_attr attr;
	int port;
	int fd;
	struct wimm_request *requests; /* taken, not yet decided */
};

int wimm_listen(struct wimm_ctx *ctx, const char *addr, const struct wimm_conn_attr *attr,
		struct wimm_listener **out)
{
	char host[256], port[8];
	struct wimm_listener *l;
	int ret;

	if (!out)
		return WIMM_E_INVAL;
	*out = NULL;
	if (!ctx || !addr)
		return WIMM_E_INVAL;
	ret = wimm_split_hostport(addr, host, sizeof(host), port, sizeof(port));
	if (ret)
		return ret;
	if (attr && attr->window && wimm_mr_ctx(attr->window) != ctx)
		return WIMM_E_INVAL;
	if (attr && attr->counter && wimm_counter_ctx(attr->counter) != ctx)
		return WIMM_E_INVAL;
	l = calloc(1, sizeof(*l));
	if (!l)
		return WIMM_E_NOMEM;
	l->ctx = ctx;
	if (attr)
		l->attr = *attr;
	const struct wimm_backend_ops *ops = wimm_ctx_ops(ctx);
	ret = ops->listen(wimm_ctx_bctx(ctx), host, port, &l->blis, &l->port);
	if (ret)
		goto err_free_listener;
	l->fd = ops->listener_fd(l->blis);
	ret = wimm_ctx_watch_listener(ctx, l, l->fd, 1);
	if (ret)
		goto err_close_listener;
	if (l->attr.window)
		wimm_mr_expose(l->attr.window, 1);
	if (l->attr.counter)
		wimm_counter_attach(l->attr.counter, 1, NULL);
	wimm_ctx_count_object(ctx, 1);
	*out = l;
	return 0;

err_close_listener:
	ops->listener_close(l->blis);
err_free_listener:
	free(l);
	return ret;
}

int wimm_listener_delete(struct wimm_listener **pl)
{
	if (!pl || !*pl)
		return 0;
	struct wimm_listener *l = *pl;
	while (l->requests) {
		struct wimm_request *r = l->requests;
		l->requests = wimm_request_next(r);
		wimm_request_drop(r);
	}
	wimm_ctx_watch_listener(l->ctx, l, l->fd, 0);
	wimm_ctx_ops(l->ctx)->listener_close(l->blis);
	if (l->attr.window)
		wimm_mr_expose(l->attr.window, -1);
	if (l->attr.counter)
		wimm_counter_attach(l->attr.counter, 0, NULL);
	wimm_ctx_count_object(l->ctx, -1);
	free(l);
	*pl = NULL;
	return 0;
}

int wimm_listener_port(const struct wimm_listener *l)
{
	return l ? l->port : WIMM_E_INVAL;
}

int wimm_listener_fd(const struct wimm_listener *l)
{
	return l ? l->fd : WIMM_E_INVAL;
}

const struct wimm_conn_attr *wimm_listener_attr(const struct wimm_listener *l)
{
	return &l->attr;
}

struct wimm_ctx *wimm_listener_ctx(const struct wimm_listener *l)
{
	return l->ctx;
}

void *wimm_listener_blis(const struct wimm_listener *l)
{
	return l->blis;
}

void wimm_listener_track(struct wimm_listener *l, struct wimm_request *r, int add)
{
	if (add) {
		wimm_request_set_next(r, l->requests);
		l->requests = r;
		return;
	}
	struct wimm_request *prev = NULL;
	for (struct wimm_request *it = l->requests; it; prev = it, it = wimm_request_next(it)) {
		if (it != r)
			continue;
		if (prev)
			wimm_request_set_next(prev, wimm_request_next(it));
		else
			l->requests = wimm_request_next(it);
		wimm_request_set_next(r, NULL);
		return;
	}
}
