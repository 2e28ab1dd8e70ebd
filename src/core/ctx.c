/* The context: one backend instance, its event backlog and the wait modes. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "core/event_backlog.h"
#include "core/liveness.h"

#define CQE_BATCH 32
/* Completions the CQ is first sized for when cq_budget is 0 (it grows). */
#define INITIAL_CQ_CAPACITY 1024
#define DEFAULT_SPIN_US 50
#define DEFAULT_LIVENESS_MS 5000
/* Listener readiness is looked at in poll() this often, busy or idle. */
#define LISTENER_CHECK_NS 1000000
#define STARVED_WAKE_NS 1000000LL
/* How often listeners are asked directly where their fd is not exact. */
#define PENDING_CHECK_NS 5000000LL
/* A spinning wait reads the clock once per this many empty polls. */
#define WAIT_POLLS_PER_CLOCK 8

/* epoll tags: NULL is the backend's fd, a listener is itself. */
static char timer_tag;

struct wimm_ctx {
	const struct wimm_backend_ops *ops;
	void *bctx;
	char fabric[64];
	uint32_t cq_budget; /* 0: none, grow on demand */
	uint32_t cq_capacity;
	uint32_t cq_used;
	uint32_t spin_us;
	uint32_t post_wait_ms;
	uint32_t liveness_ms;
	wimm_log_fn log;
	void *log_arg;
	struct wimm_ctx_stats st;
	/* Liveness ticks: heartbeats, silence and set-up timeouts. Its timer
	 * wakes sleepers (own epoll loops too) while there are connections. */
	struct wimm_liveness lv;
	/* Connections whose last post found no credit: credits come back as
	 * plain writes that wake no one, so a sleeper is woken every
	 * STARVED_WAKE_NS to try again while there are any. */
	uint32_t starved;
	int objects; /* regions, listeners, connections, prepared operations alive */
	int prov_err;
	char prov_text[256];
	int epfd;
	struct wimm_conn *conns;
	uint32_t nconns;
	/* Connections with slots to hand back or a credit write to retry,
	 * each at most once; room for every linked connection. */
	struct wimm_conn **rel;
	uint32_t rel_n, rel_cap;
	/* Events taken from the backend but not yet handed out. */
	struct wimm_event_backlog bl;
	int listeners;
	int64_t next_listener_check_ns;
	/* Listeners, for a backend whose listener fd is not exact. */
	struct wimm_listener **lis;
	int lis_cap;
	int64_t next_pending_check_ns;
	int64_t next_keepalive_ns;
};

void wimm_ctx_log(struct wimm_ctx *ctx, enum wimm_log_level level, const char *fmt, ...)
{
	char line[320];
	va_list ap;

	if (!ctx || !ctx->log)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	ctx->log(ctx->log_arg, level, line);
}

uint32_t wimm_ctx_liveness_ms(const struct wimm_ctx *ctx)
{
	return ctx->liveness_ms;
}

struct wimm_ctx_stats *wimm_ctx_counters(struct wimm_ctx *ctx)
{
	return &ctx->st;
}

int wimm_ctx_stats(const struct wimm_ctx *ctx, struct wimm_ctx_stats *out)
{
	if (!ctx || !out)
		return WIMM_E_INVAL;
	*out = ctx->st;
	/* The live connections' counters on top of those already deleted. */
	for (struct wimm_conn *c = ctx->conns; c; c = wimm_conn_next(c))
		wimm_conn_add_stats(c, &out->total);
	out->cq_capacity = ctx->cq_capacity;
	out->cq_reserved = ctx->cq_used;
	return 0;
}

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
	if (attr && attr->liveness_ms != 0 && attr->liveness_ms != WIMM_LIVENESS_OFF &&
	    attr->liveness_ms < 100) {
		wimm_ctx_set_provider_error(NULL, 0, "liveness_ms below 100 ms");
		return WIMM_E_INVAL;
	}
	if (strcmp(uri, "auto") == 0) {
		wimm_resolve_auto(resolved, sizeof(resolved));
		uri = resolved;
	}
	const char *colon = strchr(uri, ':');
	size_t scheme_len = colon ? (size_t)(colon - uri) : strlen(uri);
	const char *spec = colon ? colon + 1 : "";
	const struct wimm_backend_ops *ops = wimm_find_backend(uri, scheme_len);
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
	ctx->cq_budget = attr ? attr->cq_budget : 0;
	ctx->cq_capacity = ctx->cq_budget ? ctx->cq_budget : INITIAL_CQ_CAPACITY;
	ctx->spin_us = attr && attr->spin_us ? attr->spin_us : DEFAULT_SPIN_US;
	ctx->post_wait_ms = attr ? attr->post_wait_ms : 0;
	ctx->liveness_ms = attr && attr->liveness_ms ? attr->liveness_ms : DEFAULT_LIVENESS_MS;
	ctx->log = attr ? attr->log : NULL;
	ctx->log_arg = attr ? attr->log_arg : NULL;
	int lret = wimm_liveness_init(&ctx->lv, ctx->liveness_ms);
	ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event tev = {.events = EPOLLIN, .data.ptr = &timer_tag};
	if (ctx->epfd < 0 || lret || epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, ctx->lv.timerfd, &tev)) {
		wimm_ctx_set_provider_error(NULL, errno, strerror(errno));
		ret = WIMM_E_PROVIDER;
		goto err_close_fds;
	}
	/* The backend records its errors on ctx; copy them out on failure. */
	ret = ops->ctx_open(ctx, spec, ctx->cq_capacity, attr ? attr->flags : 0, &ctx->bctx);
	if (ret) {
		wimm_ctx_set_provider_error(NULL, ctx->prov_err, ctx->prov_text);
		goto err_close_fds;
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
err_close_fds:
	wimm_liveness_fini(&ctx->lv);
	if (ctx->epfd >= 0)
		close(ctx->epfd);
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
	wimm_liveness_fini(&ctx->lv);
	close(ctx->epfd);
	wimm_event_backlog_fini(&ctx->bl);
	free(ctx->rel);
	free(ctx->lis);
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
	int ret = ctx->ops->ctx_limits(ctx->bctx, out);
	if (ret)
		return ret;
	/* The backend says what its connect message carries; the handshake
	 * (with the longest transport address) takes the rest. */
	uint32_t cap = out->private_max, used = WIMM_HS_FIXED_LEN + WIMM_HS_MAX_ADDR;
	if (cap <= WIMM_HS_FIXED_LEN)
		out->private_max = 0;
	else if (cap < used + WIMM_HS_MAX_PRIVATE)
		out->private_max = cap - WIMM_HS_FIXED_LEN < WIMM_HS_MAX_PRIVATE
				       ? cap - WIMM_HS_FIXED_LEN
				       : WIMM_HS_MAX_PRIVATE;
	else
		out->private_max = WIMM_HS_MAX_PRIVATE;
	return 0;
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
	if (ctx->cq_budget && n > ctx->cq_budget - ctx->cq_used) {
		wimm_ctx_set_provider_error(ctx, 0,
					    "connection would exceed the context's cq_budget");
		wimm_ctx_log(ctx, WIMM_LOG_WARN, "connection refused: cq_budget %u exhausted",
			     ctx->cq_budget);
		return WIMM_E_AGAIN;
	}
	if (n > UINT32_MAX / 2 - ctx->cq_used)
		return WIMM_E_AGAIN;
	uint32_t need = ctx->cq_used + n;
	if (need > ctx->cq_capacity) {
		/* Grow by doubling (fewer resizes), or to exactly what is needed
		 * when the device cannot double. */
		uint32_t want = ctx->cq_capacity * 2 > need ? ctx->cq_capacity * 2 : need;
		int ret = ctx->ops->cq_resize(ctx->bctx, want);
		if (ret && want != need) {
			want = need;
			ret = ctx->ops->cq_resize(ctx->bctx, want);
		}
		if (ret) {
			wimm_ctx_log(ctx, WIMM_LOG_WARN,
				     "connection refused: the completion queue cannot grow to %u",
				     need);
			return WIMM_E_AGAIN;
		}
		ctx->cq_capacity = want;
	}
	ctx->cq_used = need;
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
		wimm_liveness_run(&ctx->lv, 1); /* while there are connections */
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
		break;
	}
	if (ctx->nconns == 0)
		wimm_liveness_run(&ctx->lv, 0);
	return 0;
}

void wimm_ctx_starved(struct wimm_ctx *ctx, int delta)
{
	ctx->starved = (uint32_t)((int64_t)ctx->starved + delta);
}

void wimm_ctx_queue_release(struct wimm_ctx *ctx, struct wimm_conn *c)
{
	/* Cannot overflow: a linked connection is queued at most once and
	 * rel_cap >= nconns; an unlinked one has nothing to release. */
	if (ctx->rel_n < ctx->rel_cap)
		ctx->rel[ctx->rel_n++] = c;
}

/* ----------------------------------------------------------- the backlog */

int wimm_ctx_push_event(struct wimm_ctx *ctx, const struct wimm_event *ev)
{
	return wimm_event_backlog_push(&ctx->bl, ev);
}

void wimm_ctx_purge_conn(struct wimm_ctx *ctx, struct wimm_conn *c)
{
	wimm_event_backlog_purge_conn(&ctx->bl, c);
}

/* The events of n completions: straight to `out` while there is room
 * there and nothing is queued before them (the common case, no copy
 * through the backlog), the rest to the backlog. Returns events stored in
 * out, or a negative error. Out of line: an empty poll does not need it,
 * and keeps a small frame without it. */
static __attribute__((noinline)) int deliver_cqes(struct wimm_ctx *ctx, const struct wimm_cqe *cqe,
						  int n, struct wimm_event *out, int room,
						  int64_t now)
{
	int stored = 0;

	if (!now)
		now = wimm_coarse_ns();
	for (int i = 0; i < n; i++) {
		struct wimm_event spare;
		/* Made in place where it will most likely go. */
		int direct = stored < room && wimm_event_backlog_count(&ctx->bl) == 0;
		struct wimm_event *ev = direct ? &out[stored] : &spare;
		if (!wimm_conn_on_cqe(cqe[i].conn, &cqe[i], ev, now))
			continue;
		/* on_cqe may have queued one before it (ESTABLISHED). */
		if (direct && wimm_event_backlog_count(&ctx->bl) == 0)
			stored++;
		else if (wimm_ctx_push_event(ctx, ev))
			return stored ? stored : WIMM_E_NOMEM;
	}
	return stored;
}

/* One pass over the backend: its completions' events into out[0..room),
 * the rest to the backlog (deliver_cqes). Inlined: an empty poll is a
 * chain of calls, and each one costs (a lot under emulation, as in a TCG
 * guest). now: the coarse clock the caller read already, or 0 (read only
 * when there are completions): one clock read per poll, not two. */
static inline __attribute__((always_inline)) int
backend_pass(struct wimm_ctx *ctx, struct wimm_event *out, int room, int64_t now)
{
	struct wimm_cqe cqe[CQE_BATCH];

	int n = wimm_event_backlog_reserve(&ctx->bl, CQE_BATCH);
	if (n)
		return n;
	n = ctx->ops->poll(ctx->bctx, cqe, CQE_BATCH);
	if (n <= 0)
		return n;
	return deliver_cqes(ctx, cqe, n, out, room, now);
}

int wimm_ctx_progress_into_backlog(struct wimm_ctx *ctx)
{
	int n = backend_pass(ctx, NULL, 0, 0);
	return n < 0 ? n : 0;
}

int wimm_progress(struct wimm_ctx *ctx)
{
	if (!ctx)
		return WIMM_E_INVAL;
	return wimm_ctx_progress_into_backlog(ctx);
}

/* Doorbells handed to the application free their slots at its next poll. */
static void account_delivered(struct wimm_ctx *ctx, struct wimm_event *ev, int n)
{
	ctx->st.events += (uint64_t)n;
	for (int i = 0; i < n; i++)
		if (ev[i].type == WIMM_EV_WRITE_IMM || ev[i].type == WIMM_EV_SEND_IMM)
			wimm_conn_on_delivered(ev[i].conn);
}

/* Only the queued connections are visited, so an idle poll costs nothing
 * however many connections the context has. */
static int release_queued(struct wimm_ctx *ctx)
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

/* Inline: most polls find none queued. */
static inline int release_slots(struct wimm_ctx *ctx)
{
	return ctx->rel_n ? release_queued(ctx) : 0;
}

void wimm_ctx_keepalive(struct wimm_ctx *ctx)
{
	int64_t now = wimm_coarse_ns();

	if (!wimm_liveness_keepalive_due(&ctx->lv, now))
		return;
	for (struct wimm_conn *c = ctx->conns; c; c = wimm_conn_next(c))
		wimm_conn_heartbeat(c, now);
}

void wimm_ctx_conn_up(struct wimm_ctx *ctx)
{
	wimm_liveness_warm(&ctx->lv);
}

void wimm_ctx_forgive(struct wimm_ctx *ctx)
{
	int64_t now = wimm_coarse_ns();

	for (struct wimm_conn *c = ctx->conns; c; c = wimm_conn_next(c))
		wimm_conn_forgive(c, now);
}

/* Passes over the backend before a peer is found silent (below). */
#define SILENCE_PASSES 16

static int any_silent(struct wimm_ctx *ctx, int64_t now)
{
	for (struct wimm_conn *c = ctx->conns; c; c = wimm_conn_next(c))
		if (wimm_conn_looks_silent(c, now))
			return 1;
	return 0;
}

/* Heartbeats, silence and set-up timeouts, every tick. A peer's
 * heartbeats may still wait in the backend: ipc applies a control write
 * when it consumes the ring entry, libfabric's providers when they are
 * driven. After a stall of our own (a slow loop, a starved process) they
 * are there unread, so the backend is drained, boundedly, before anyone
 * is declared silent; its events wait in the backlog, ahead of any drop. */
static void liveness_tick(struct wimm_ctx *ctx, int64_t now)
{
	if (!ctx->conns || !wimm_liveness_due(&ctx->lv, now))
		return;
	for (int i = 0; i < SILENCE_PASSES && any_silent(ctx, now); i++) {
		size_t before = wimm_event_backlog_count(&ctx->bl);
		if (wimm_ctx_progress_into_backlog(ctx) ||
		    wimm_event_backlog_count(&ctx->bl) == before)
			break;
	}
	/* Tick at least twice per heartbeat period any peer asked for. */
	int64_t fastest = 0;
	for (struct wimm_conn *c = ctx->conns; c; c = wimm_conn_next(c)) {
		wimm_conn_tick(c, now);
		int64_t p = wimm_conn_hb_period_ns(c);
		if (p && (!fastest || p < fastest))
			fastest = p;
	}
	wimm_liveness_follow(&ctx->lv, fastest / 2);
}

static int listener_events(struct wimm_ctx *ctx, struct wimm_event *ev, int n);

/* The clock-driven work of a poll, looked at every millisecond whether or
 * not completions keep coming: connection requests (CONNECT first, so a
 * stream on one connection cannot starve a newcomer) and liveness. */
static int control_plane(struct wimm_ctx *ctx, struct wimm_event *ev, int n, int64_t t)
{
	int got = 0;

	if (t < ctx->next_listener_check_ns)
		return 0;
	ctx->next_listener_check_ns = t + LISTENER_CHECK_NS;
	if (ctx->listeners > 0)
		got = listener_events(ctx, ev, n);
	liveness_tick(ctx, t);
	return got;
}

static int poll_once(struct wimm_ctx *ctx, struct wimm_event *ev, int n)
{
	int64_t now = wimm_coarse_ns();
	int got = control_plane(ctx, ev, n, now);

	got = wimm_event_backlog_take(&ctx->bl, ev, got, n);
	if (got < n) {
		int k = backend_pass(ctx, ev + got, n - got, now);
		if (k < 0)
			return k;
		/* backend_pass may have queued more than fitted. */
		got = wimm_event_backlog_take(&ctx->bl, ev, got + k, n);
	}
	account_delivered(ctx, ev, got);
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

int wimm_ctx_progress_until(struct wimm_ctx *ctx, int (*cond)(void *arg), void *arg,
			    int64_t deadline_ms)
{
	struct timespec nap = {0, 20000};

	for (unsigned i = 0;; i++) {
		int ret = release_slots(ctx);
		if (ret)
			return ret;
		ret = wimm_ctx_progress_into_backlog(ctx);
		if (ret)
			return ret;
		liveness_tick(ctx, wimm_coarse_ns());
		if (cond && cond(arg))
			return 0;
		if (wimm_now_ms() >= deadline_ms)
			return WIMM_E_TIMEDOUT;
		/* Spin a little, then nap: set-up takes a round trip or more. */
		if (i > 64)
			nanosleep(&nap, NULL);
	}
}

/* ------------------------------------------------------------- listeners */

int wimm_ctx_watch_listener(struct wimm_ctx *ctx, struct wimm_listener *l, int fd, int add)
{
	if (add) {
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
		if (ctx->listeners == ctx->lis_cap) {
			int cap = ctx->lis_cap ? 2 * ctx->lis_cap : 4;
			struct wimm_listener **n = realloc(ctx->lis, (size_t)cap * sizeof(*n));
			if (!n)
				return WIMM_E_NOMEM;
			ctx->lis = n;
			ctx->lis_cap = cap;
		}
		if (fd >= 0 && epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev)) {
			wimm_ctx_set_provider_error(ctx, errno, strerror(errno));
			return WIMM_E_PROVIDER;
		}
		ctx->lis[ctx->listeners++] = l;
		return 0;
	}
	if (fd >= 0)
		epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, fd, NULL);
	for (int i = 0; i < ctx->listeners; i++)
		if (ctx->lis[i] == l)
			ctx->lis[i] = ctx->lis[--ctx->listeners];
	return 0;
}

/* Level-triggered CONNECT events for listeners with a pending request. */
static int listener_events(struct wimm_ctx *ctx, struct wimm_event *ev, int n)
{
	struct epoll_event ready[8];
	int got = 0;

	int k = epoll_wait(ctx->epfd, ready, 8, 0);
	for (int i = 0; i < k && got < n; i++) {
		if (!ready[i].data.ptr || ready[i].data.ptr == &timer_tag)
			continue;
		memset(&ev[got], 0, sizeof(ev[got]));
		ev[got].type = WIMM_EV_CONNECT;
		ev[got].listener = ready[i].data.ptr;
		got++;
	}
	/* Where the fd is not exact, ask the listeners themselves now and
	 * then (those the fd already named are reported). */
	int64_t t = wimm_coarse_ns();
	if (!ctx->ops->listener_pending || got >= n || t < ctx->next_pending_check_ns)
		return got;
	ctx->next_pending_check_ns = t + PENDING_CHECK_NS;
	for (int j = 0; j < ctx->listeners && got < n; j++) {
		int named = 0;
		for (int i = 0; i < got; i++)
			named |= ev[i].listener == ctx->lis[j];
		if (named || ctx->ops->listener_pending(wimm_listener_blis(ctx->lis[j])) != 1)
			continue;
		memset(&ev[got], 0, sizeof(ev[got]));
		ev[got].type = WIMM_EV_CONNECT;
		ev[got].listener = ctx->lis[j];
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
	/* Whatever the caller polled before, what we owe the peers goes out
	 * now: slots back to the receive queues, credit returns. A sleeper
	 * whose peer waits for credit would otherwise wait for ever. */
	int ret = release_slots(ctx);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < ctx->rel_n; i++)
		if (wimm_conn_return_due(ctx->rel[i]))
			return WIMM_E_AGAIN;
	if (wimm_event_backlog_count(&ctx->bl) > 0)
		return WIMM_E_AGAIN;
	/* The tick wakes the sleeper; a tick already due is work now. */
	wimm_liveness_drain(&ctx->lv);
	int64_t t = wimm_coarse_ns();
	if (ctx->conns && t >= ctx->lv.next_tick_ns) {
		ctx->next_listener_check_ns = 0;
		return WIMM_E_AGAIN;
	}
	if (ctx->starved) /* a sender out of credit: wake soon to look at its credit word */
		wimm_liveness_wake_in(&ctx->lv, STARVED_WAKE_NS);
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
	/* A listener or the tick woke us: let the next pass look at once. */
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
			if ((ret = release_slots(ctx)))
				return ret;
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
		/* Every turn: a credit return that found the send queue full
		 * is retried, so a waiting peer is never left waiting. */
		ret = release_slots(ctx);
		if (ret)
			return ret;
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
		/* Sleep in slices so a listener request is reported promptly
		 * (short ones where the listener fd is not exact). */
		int slice = ctx->listeners && ctx->ops->listener_pending ? 5 : 1000;
		ret = ctx_block(ctx, left_ms < 0 || left_ms > slice ? slice : (int)left_ms);
		if (ret)
			return ret;
	}
}
