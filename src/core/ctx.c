/* The context: one backend instance, its event backlog and the wait modes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"

const struct wimm_backend_ops *const wimm_backends[] = {
#ifdef WIMM_HAVE_VERBS
    &wimm_verbs_ops,
#endif
#ifdef WIMM_HAVE_OFI
    &wimm_ofi_ops,
#endif
    NULL,
};

#define CQE_BATCH 32
#define DEFAULT_CQ_BUDGET 4096
#define DEFAULT_SPIN_US 50
/* Listener readiness is looked at in poll() at most this often. */
#define LISTENER_CHECK_NS 1000000
/* A spinning wait reads the clock once per this many empty polls. */
#define WAIT_POLLS_PER_CLOCK 8

struct wimm_ctx {
	const struct wimm_backend_ops *ops;
	void *bctx;
	char fabric[64];
	uint32_t cq_budget;
	uint32_t cq_used;
	uint32_t spin_us;
	uint32_t post_wait_ms;
	int objects; /* regions, listeners, connections still alive */
	int prov_err;
	char prov_text[256];
	int epfd;
	struct wimm_conn *conns;
	uint32_t nconns;
	/* Connections with slots to hand back or a credit write to retry,
	 * each at most once; room for every linked connection. */
	struct wimm_conn **rel;
	uint32_t rel_n, rel_cap;
	/* Events taken from the backend but not yet handed out: FIFO ring. */
	struct wimm_event *backlog;
	size_t bl_cap, bl_head, bl_count;
	int listeners;
	int64_t next_listener_check_ns;
};

/* Failures before a context exists (ctx_open) keep the provider's error
 * here, per thread; wimm_provider_error(NULL, ...) reads it. */
static _Thread_local int tls_prov_err;
static _Thread_local char tls_prov_text[256];

void wimm_ctx_set_provider_error(struct wimm_ctx *ctx, int prov_err, const char *text)
{
	int *err = ctx ? &ctx->prov_err : &tls_prov_err;
	char *buf = ctx ? ctx->prov_text : tls_prov_text;

	*err = prov_err;
	snprintf(buf, sizeof(tls_prov_text), "%s", text ? text : "");
}

int wimm_provider_error(const struct wimm_ctx *ctx, const char **text)
{
	if (text)
		*text = ctx ? ctx->prov_text : tls_prov_text;
	return ctx ? ctx->prov_err : tls_prov_err;
}

static const struct wimm_backend_ops *find_backend(const char *scheme, size_t n)
{
	for (int i = 0; wimm_backends[i]; i++)
		if (strlen(wimm_backends[i]->scheme) == n &&
		    strncmp(wimm_backends[i]->scheme, scheme, n) == 0)
			return wimm_backends[i];
	return NULL;
}

/* "auto": the first backend that finds a usable device, else ofi:tcp. */
static int resolve_auto(char *uri, size_t cap)
{
	char spec[64];

	for (int i = 0; wimm_backends[i]; i++) {
		const struct wimm_backend_ops *ops = wimm_backends[i];
		if (ops->auto_probe && ops->auto_probe(spec, sizeof(spec)) == 1) {
			snprintf(uri, cap, "%s:%s", ops->scheme, spec);
			return 0;
		}
	}
	snprintf(uri, cap, "ofi:tcp");
	return 0;
}

int wimm_ctx_open(const char *uri, const struct wimm_ctx_attr *attr, struct wimm_ctx **out)
{
	char resolved[128];
	struct wimm_ctx *ctx;
	int ret;

	if (!out)
		return WIMM_E_INVAL;
	*out = NULL;
	if (!uri || (attr && (attr->flags & ~WIMM_CTX_POLLING)))
		return WIMM_E_INVAL;
	if (strcmp(uri, "auto") == 0) {
		resolve_auto(resolved, sizeof(resolved));
		uri = resolved;
	}
	const char *colon = strchr(uri, ':');
	size_t scheme_len = colon ? (size_t)(colon - uri) : strlen(uri);
	const char *spec = colon ? colon + 1 : "";
	const struct wimm_backend_ops *ops = find_backend(uri, scheme_len);
	if (!ops) {
		int known = (scheme_len == 5 && strncmp(uri, "verbs", 5) == 0) ||
			    (scheme_len == 3 && strncmp(uri, "ofi", 3) == 0);
		wimm_ctx_set_provider_error(NULL, 0,
					    known ? "backend not built into this libwimm"
						  : "unknown fabric scheme");
		return WIMM_E_NOFABRIC;
	}

	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return WIMM_E_NOMEM;
	ctx->ops = ops;
	ctx->cq_budget = attr && attr->cq_budget ? attr->cq_budget : DEFAULT_CQ_BUDGET;
	ctx->spin_us = attr && attr->spin_us ? attr->spin_us : DEFAULT_SPIN_US;
	ctx->post_wait_ms = attr ? attr->post_wait_ms : 0;
	ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (ctx->epfd < 0) {
		wimm_ctx_set_provider_error(NULL, errno, strerror(errno));
		ret = WIMM_E_PROVIDER;
		goto err_free_ctx;
	}
	/* The backend records its errors on ctx; copy them out on failure. */
	ret = ops->ctx_open(ctx, spec, ctx->cq_budget, attr ? attr->flags : 0, &ctx->bctx);
	if (ret) {
		wimm_ctx_set_provider_error(NULL, ctx->prov_err, ctx->prov_text);
		goto err_close_epoll;
	}
	int bfd = ops->fd(ctx->bctx);
	if (bfd >= 0) {
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
		if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, bfd, &ev)) {
			wimm_ctx_set_provider_error(NULL, errno, strerror(errno));
			ret = WIMM_E_PROVIDER;
			goto err_close_backend;
		}
	}
	snprintf(ctx->fabric, sizeof(ctx->fabric), "%s", ops->ctx_fabric(ctx->bctx));
	*out = ctx;
	return 0;

err_close_backend:
	ops->ctx_close(ctx->bctx);
err_close_epoll:
	close(ctx->epfd);
err_free_ctx:
	free(ctx);
	return ret;
}

int wimm_ctx_close(struct wimm_ctx **pctx)
{
	if (!pctx || !*pctx)
		return 0;
	struct wimm_ctx *ctx = *pctx;
	if (ctx->objects > 0)
		return WIMM_E_BUSY;
	ctx->ops->ctx_close(ctx->bctx);
	close(ctx->epfd);
	free(ctx->backlog);
	free(ctx->rel);
	free(ctx);
	*pctx = NULL;
	return 0;
}

const char *wimm_ctx_fabric(const struct wimm_ctx *ctx)
{
	return ctx ? ctx->fabric : "";
}

int wimm_ctx_limits(const struct wimm_ctx *ctx, struct wimm_fabric_limits *out)
{
	if (!ctx || !out)
		return WIMM_E_INVAL;
	return ctx->ops->ctx_limits(ctx->bctx, out);
}

const struct wimm_backend_ops *wimm_ctx_ops(const struct wimm_ctx *ctx)
{
	return ctx->ops;
}

void *wimm_ctx_bctx(const struct wimm_ctx *ctx)
{
	return ctx->bctx;
}

uint32_t wimm_ctx_spin_us(const struct wimm_ctx *ctx)
{
	return ctx->spin_us;
}

uint32_t wimm_ctx_post_wait_ms(const struct wimm_ctx *ctx)
{
	return ctx->post_wait_ms;
}

void wimm_ctx_count_object(struct wimm_ctx *ctx, int delta)
{
	ctx->objects += delta;
}

int wimm_ctx_cq_reserve(struct wimm_ctx *ctx, uint32_t n)
{
	if (n > ctx->cq_budget - ctx->cq_used) {
		wimm_ctx_set_provider_error(ctx, 0,
					    "connection would exceed the context's cq_budget");
		return WIMM_E_AGAIN;
	}
	ctx->cq_used += n;
	return 0;
}

void wimm_ctx_cq_unreserve(struct wimm_ctx *ctx, uint32_t n)
{
	ctx->cq_used -= n;
}

int wimm_ctx_link_conn(struct wimm_ctx *ctx, struct wimm_conn *c, int add)
{
	if (add) {
		/* The release queue never has to grow while polling. */
		if (ctx->nconns == ctx->rel_cap) {
			uint32_t cap = ctx->rel_cap ? ctx->rel_cap * 2 : 8;
			struct wimm_conn **n = realloc(ctx->rel, cap * sizeof(*n));
			if (!n)
				return WIMM_E_NOMEM;
			ctx->rel = n;
			ctx->rel_cap = cap;
		}
		wimm_conn_set_next(c, ctx->conns);
		ctx->conns = c;
		ctx->nconns++;
		return 0;
	}
	for (uint32_t i = 0; i < ctx->rel_n; i++) {
		if (ctx->rel[i] == c) {
			ctx->rel[i] = ctx->rel[--ctx->rel_n];
			break;
		}
	}
	struct wimm_conn *prev = NULL;
	for (struct wimm_conn *it = ctx->conns; it; prev = it, it = wimm_conn_next(it)) {
		if (it != c)
			continue;
		if (prev)
			wimm_conn_set_next(prev, wimm_conn_next(it));
		else
			ctx->conns = wimm_conn_next(it);
		ctx->nconns--;
		return 0;
	}
	return 0;
}

void wimm_ctx_queue_release(struct wimm_ctx *ctx, struct wimm_conn *c)
{
	/* Cannot overflow: a linked connection is queued at most once and
	 * rel_cap >= nconns; an unlinked one has nothing to release. */
	if (ctx->rel_n < ctx->rel_cap)
		ctx->rel[ctx->rel_n++] = c;
}

/* ----------------------------------------------------------- the backlog */

/* Room for `more` events, made before the backend is polled: completions
 * taken from a CQ cannot be put back, so running out of memory must happen
 * before any is taken, never halfway through a batch. */
static int backlog_reserve(struct wimm_ctx *ctx, size_t more)
{
	if (ctx->bl_cap - ctx->bl_count >= more)
		return 0;
	size_t cap = ctx->bl_cap ? ctx->bl_cap : 64;
	while (cap - ctx->bl_count < more)
		cap *= 2;
	struct wimm_event *n = malloc(cap * sizeof(*n));
	if (!n)
		return WIMM_E_NOMEM;
	/* Unwrap the ring into the new array. */
	for (size_t i = 0; i < ctx->bl_count; i++)
		n[i] = ctx->backlog[(ctx->bl_head + i) % ctx->bl_cap];
	free(ctx->backlog);
	ctx->backlog = n;
	ctx->bl_cap = cap;
	ctx->bl_head = 0;
	return 0;
}

static void backlog_push(struct wimm_ctx *ctx, const struct wimm_event *ev)
{
	ctx->backlog[(ctx->bl_head + ctx->bl_count) % ctx->bl_cap] = *ev;
	ctx->bl_count++;
}

/* Move queued events into ev[got..n); returns the new count. */
static int backlog_take(struct wimm_ctx *ctx, struct wimm_event *ev, int got, int n)
{
	while (got < n && ctx->bl_count > 0) {
		ev[got++] = ctx->backlog[ctx->bl_head];
		ctx->bl_head = (ctx->bl_head + 1) % ctx->bl_cap;
		ctx->bl_count--;
	}
	return got;
}

void wimm_ctx_purge_conn(struct wimm_ctx *ctx, struct wimm_conn *c)
{
	size_t kept = 0;

	for (size_t i = 0; i < ctx->bl_count; i++) {
		struct wimm_event ev = ctx->backlog[(ctx->bl_head + i) % ctx->bl_cap];
		if (ev.conn == c)
			continue;
		ctx->backlog[(ctx->bl_head + kept) % ctx->bl_cap] = ev;
		kept++;
	}
	ctx->bl_count = kept;
}

/* Turn one backend completion into an event; returns 1 if it made one. */
static int cqe_to_event(const struct wimm_cqe *q, struct wimm_event *ev)
{
	memset(ev, 0, sizeof(*ev));
	ev->conn = q->conn;
	ev->user = wimm_conn_user(q->conn);
	ev->imm = q->imm;
	ev->len = q->len;
	ev->op = q->op;
	ev->op_seq = q->op_seq;
	ev->status = q->status;
	ev->prov_err = q->prov_err;
	switch (q->kind) {
	case WIMM_CQE_RECV_WRITE_IMM:
		ev->type = WIMM_EV_WRITE_IMM;
		return 1;
	case WIMM_CQE_RECV_SEND_IMM:
		ev->type = WIMM_EV_SEND_IMM;
		ev->data = q->data;
		return 1;
	case WIMM_CQE_SEND_DONE:
		ev->type = WIMM_EV_SEND_DONE;
		return 1;
	case WIMM_CQE_SEND_ERROR:
		/* A failed credit write is the connection's failure, which
		 * comes as its own CONN_DOWN; it is no operation of the user's. */
		if (q->internal)
			return 0;
		ev->type = WIMM_EV_ERROR;
		return 1;
	case WIMM_CQE_CONN_DOWN:
		if (wimm_conn_is_down_reported(q->conn))
			return 0;
		wimm_conn_on_down(q->conn);
		ev->type = WIMM_EV_DISCONNECT;
		ev->status = q->status ? q->status : WIMM_E_DISCONNECTED;
		return 1;
	}
	return 0;
}

/* One pass over the backend; completions go straight to `out` while there
 * is room there (the common case, no copy through the backlog), the rest to
 * the backlog. Returns events stored in out, or a negative error. Inlined:
 * an empty poll is a chain of calls, and each one costs (a lot under
 * emulation, as in a TCG guest). */
static inline __attribute__((always_inline)) int backend_pass(struct wimm_ctx *ctx,
							      struct wimm_event *out, int room)
{
	struct wimm_cqe cqe[CQE_BATCH];
	int stored = 0;

	int n = backlog_reserve(ctx, CQE_BATCH);
	if (n)
		return n;
	n = ctx->ops->poll(ctx->bctx, cqe, CQE_BATCH);
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		struct wimm_event ev;
		if (!cqe_to_event(&cqe[i], &ev))
			continue;
		if (stored < room && ctx->bl_count == 0)
			out[stored++] = ev;
		else
			backlog_push(ctx, &ev);
	}
	return stored;
}

int wimm_ctx_progress_into_backlog(struct wimm_ctx *ctx)
{
	int n = backend_pass(ctx, NULL, 0);
	return n < 0 ? n : 0;
}

int wimm_progress(struct wimm_ctx *ctx)
{
	if (!ctx)
		return WIMM_E_INVAL;
	return wimm_ctx_progress_into_backlog(ctx);
}

/* Doorbells handed to the application free their slots at its next poll. */
static void account_delivered(struct wimm_event *ev, int n)
{
	for (int i = 0; i < n; i++)
		if (ev[i].type == WIMM_EV_WRITE_IMM || ev[i].type == WIMM_EV_SEND_IMM)
			wimm_conn_on_delivered(ev[i].conn);
}

/* Only the queued connections are visited, so an idle poll costs nothing
 * however many connections the context has. */
static int release_slots(struct wimm_ctx *ctx)
{
	uint32_t i = 0;

	while (i < ctx->rel_n) {
		struct wimm_conn *c = ctx->rel[i];
		int ret = wimm_conn_release(c);
		if (ret)
			return ret;
		if (wimm_conn_keep_queued(c))
			i++;
		else
			ctx->rel[i] = ctx->rel[--ctx->rel_n];
	}
	return 0;
}

static int listener_events(struct wimm_ctx *ctx, struct wimm_event *ev, int n, int force);

static int poll_once(struct wimm_ctx *ctx, struct wimm_event *ev, int n)
{
	int got = backlog_take(ctx, ev, 0, n);

	if (got < n) {
		int k = backend_pass(ctx, ev + got, n - got);
		if (k < 0)
			return k;
		/* backend_pass may have queued more than fitted. */
		got = backlog_take(ctx, ev, got + k, n);
	}
	if (got == 0 && ctx->listeners > 0)
		got = listener_events(ctx, ev, n, 0);
	account_delivered(ev, got);
	return got;
}

int wimm_poll(struct wimm_ctx *ctx, struct wimm_event *ev, int n)
{
	if (!ctx || !ev || n <= 0)
		return WIMM_E_INVAL;
	int ret = release_slots(ctx);
	if (ret)
		return ret;
	return poll_once(ctx, ev, n);
}

/* ------------------------------------------------------------- listeners */

int wimm_ctx_watch_listener(struct wimm_ctx *ctx, struct wimm_listener *l, int fd, int add)
{
	if (add) {
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
		if (fd >= 0 && epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev)) {
			wimm_ctx_set_provider_error(ctx, errno, strerror(errno));
			return WIMM_E_PROVIDER;
		}
		ctx->listeners++;
		return 0;
	}
	if (fd >= 0)
		epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, fd, NULL);
	ctx->listeners--;
	return 0;
}

/* Level-triggered CONNECT events for listeners with a pending request,
 * looked at no more than once per LISTENER_CHECK_NS unless forced. */
static int listener_events(struct wimm_ctx *ctx, struct wimm_event *ev, int n, int force)
{
	struct epoll_event ready[8];
	int got = 0;

	int64_t t = wimm_coarse_ns();
	if (!force && t < ctx->next_listener_check_ns)
		return 0;
	ctx->next_listener_check_ns = t + LISTENER_CHECK_NS;
	int k = epoll_wait(ctx->epfd, ready, 8, 0);
	for (int i = 0; i < k && got < n; i++) {
		if (!ready[i].data.ptr)
			continue;
		memset(&ev[got], 0, sizeof(ev[got]));
		ev[got].type = WIMM_EV_CONNECT;
		ev[got].listener = ready[i].data.ptr;
		got++;
	}
	return got;
}

/* ------------------------------------------------------------------ wait */

int wimm_ctx_fd(struct wimm_ctx *ctx, int *fd)
{
	if (!ctx || !fd)
		return WIMM_E_INVAL;
	*fd = ctx->epfd;
	return 0;
}

int wimm_ctx_arm(struct wimm_ctx *ctx)
{
	if (!ctx)
		return WIMM_E_INVAL;
	if (ctx->bl_count > 0)
		return WIMM_E_AGAIN;
	return ctx->ops->arm(ctx->bctx);
}

/* Sleep until the fd is readable or timeout_ms passes, arming first. */
static int ctx_block(struct wimm_ctx *ctx, int timeout_ms)
{
	struct epoll_event ready[8];

	/* Arm, then sleep only if the re-check found nothing: an event that
	 * arrived before arming raises no wake-up (docs/errata.md E6). */
	int ret = wimm_ctx_arm(ctx);
	if (ret == WIMM_E_AGAIN)
		return 0;
	if (ret)
		return ret;
	int k = epoll_wait(ctx->epfd, ready, 8, timeout_ms);
	if (k < 0 && errno != EINTR) {
		wimm_ctx_set_provider_error(ctx, errno, strerror(errno));
		return WIMM_E_PROVIDER;
	}
	/* A listener woke us: let the next pass report it at once. */
	for (int i = 0; i < k; i++)
		if (ready[i].data.ptr)
			ctx->next_listener_check_ns = 0;
	return 0;
}

int wimm_wait(struct wimm_ctx *ctx, struct wimm_event *ev, int n, enum wimm_wait_mode mode,
	      int timeout_ms)
{
	if (!ctx || !ev || n <= 0 || mode < WIMM_WAIT_SPIN || mode > WIMM_WAIT_ADAPTIVE)
		return WIMM_E_INVAL;
	int ret = release_slots(ctx);
	if (ret)
		return ret;

	/* A spin without a deadline needs no clock at all. */
	if (mode == WIMM_WAIT_SPIN && timeout_ms < 0) {
		int got;
		while ((got = poll_once(ctx, ev, n)) == 0)
			;
		return got;
	}
	int64_t start = wimm_now_ns();
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : start + (int64_t)timeout_ms * 1000000;
	int64_t spin_until = mode == WIMM_WAIT_BLOCK  ? start
			     : mode == WIMM_WAIT_SPIN ? INT64_MAX
						      : start + (int64_t)ctx->spin_us * 1000;
	int spinning = mode != WIMM_WAIT_BLOCK;
	for (unsigned empty = 1;; empty++) {
		int got = poll_once(ctx, ev, n);
		/* Timeout 0 is documented as one look, not a short spin. */
		if (got != 0 || timeout_ms == 0)
			return got;
		/* An empty poll is cheap, a precise clock need not be (a
		 * system call on some clocksources): look at it now and then. */
		if (spinning && empty % WAIT_POLLS_PER_CLOCK != 0)
			continue;
		int64_t t = wimm_now_ns();
		if (t >= deadline)
			return 0;
		if (t < spin_until)
			continue;
		spinning = 0;
		int64_t left_ms = deadline == INT64_MAX ? -1 : (deadline - t + 999999) / 1000000;
		/* Sleep in slices so a listener request is reported promptly. */
		ret = ctx_block(ctx, left_ms < 0 || left_ms > 1000 ? 1000 : (int)left_ms);
		if (ret)
			return ret;
		if (ctx->listeners > 0) {
			got = listener_events(ctx, ev, n, 1);
			if (got)
				return got;
		}
	}
}

/* --------------------------------------------------------------- discovery */

int wimm_describe_fabrics(void *file, int json)
{
	FILE *f = file ? file : stdout;
	int first = 1;

	if (json)
		fprintf(f, "{\"fabrics\":[");
	for (int i = 0; wimm_backends[i]; i++) {
		int ret = wimm_backends[i]->describe(f, json, &first);
		if (ret)
			return ret;
	}
	if (json) {
		char uri[128];
		resolve_auto(uri, sizeof(uri));
		fprintf(f, "],\"auto\":\"%s\"}\n", uri);
	}
	return 0;
}
