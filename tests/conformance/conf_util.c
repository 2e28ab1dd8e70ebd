/* Shared helpers of the conformance suite: failure recording, timing, the
 * PRNG, connected pairs and bounded event waits. */
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"

const char *conf_self;

static pthread_mutex_t result_lock = PTHREAD_MUTEX_INITIALIZER;
static int result_status; /* 0 pass, 1 fail, 2 skip */
static int result_extra;  /* failures after the first */
static char result_reason[400];

void conf_reset(void)
{
	result_status = 0;
	result_extra = 0;
	result_reason[0] = '\0';
}

int conf_result(char *reason, size_t len)
{
	pthread_mutex_lock(&result_lock);
	if (result_extra)
		snprintf(reason, len, "%s (+%d more)", result_reason, result_extra);
	else
		snprintf(reason, len, "%s", result_reason);
	int st = result_status;
	pthread_mutex_unlock(&result_lock);
	return st;
}

void conf_fail(const char *file, int line, const char *fmt, ...)
{
	char msg[300];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&result_lock);
	/* The first failure is the cause; later ones are often its echo. */
	if (result_status != 1) {
		const char *base = strrchr(file, '/');

		snprintf(result_reason, sizeof(result_reason), "%s:%d: %s", base ? base + 1 : file,
			 line, msg);
		result_status = 1;
	} else {
		result_extra++;
	}
	pthread_mutex_unlock(&result_lock);
	fprintf(stderr, "# FAIL %s:%d: %s\n", file, line, msg);
}

void conf_skip(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&result_lock);
	if (result_status == 0) {
		va_start(ap, fmt);
		vsnprintf(result_reason, sizeof(result_reason), fmt, ap);
		va_end(ap);
		result_status = 2;
	}
	pthread_mutex_unlock(&result_lock);
}

int conf_failed(void)
{
	pthread_mutex_lock(&result_lock);
	int f = result_status == 1;
	pthread_mutex_unlock(&result_lock);
	return f;
}

void conf_diag(const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	printf("# %s\n", msg);
	fflush(stdout);
}

const char *conf_host(void)
{
	const char *h = getenv("WIMM_TEST_HOST");

	return h && *h ? h : "127.0.0.1";
}

int conf_quick(void)
{
	const char *q = getenv("WIMM_TEST_QUICK");

	return q && atoi(q) > 0;
}

double conf_scale(void)
{
	const char *s = getenv("WIMM_TEST_TIMEOUT_SCALE");
	double v = s ? atof(s) : 1.0;

	return v >= 1.0 ? v : 1.0;
}

int64_t conf_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t conf_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void conf_sleep_us(unsigned us)
{
	struct timespec ts = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000};

	while (nanosleep(&ts, &ts) != 0)
		;
}

uint64_t conf_rand(uint64_t *state)
{
	uint64_t x = *state ? *state : 0x9E3779B97F4A7C15ull;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1Dull;
}

void conf_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *p = buf;
	uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t v = conf_rand(&st);

		memcpy(p + i, &v, 8);
	}
	if (i < len) {
		uint64_t v = conf_rand(&st);

		memcpy(p + i, &v, len - i);
	}
}

size_t conf_verify(const void *buf, size_t len, uint64_t seed)
{
	const uint8_t *p = buf;
	uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;

	for (size_t i = 0; i < len; i += 8) {
		uint64_t v = conf_rand(&st);
		size_t n = len - i < 8 ? len - i : 8;
		uint8_t want[8];

		memcpy(want, &v, 8);
		for (size_t k = 0; k < n; k++)
			if (p[i + k] != want[k])
				return i + k + 1;
	}
	return 0;
}

const char *conf_ev_name(enum wimm_event_type t)
{
	switch (t) {
	case WIMM_EV_WRITE_IMM:
		return "WRITE_IMM";
	case WIMM_EV_SEND_IMM:
		return "SEND_IMM";
	case WIMM_EV_SEND_DONE:
		return "SEND_DONE";
	case WIMM_EV_DISCONNECT:
		return "DISCONNECT";
	case WIMM_EV_ERROR:
		return "ERROR";
	case WIMM_EV_CONNECT:
		return "CONNECT";
	case WIMM_EV_ESTABLISHED:
		return "ESTABLISHED";
	case WIMM_EV_COUNT:
		return "COUNT";
	}
	return "?";
}

/* ---------------------------------------------------------------- pairs */

/* WIMM_TEST_POLLING=1 runs the pairs' contexts with WIMM_CTX_POLLING, so
 * the suite also proves that its blocking waits and fd still wake up. */
static int open_ctx(const char *uri, const struct wimm_ctx_attr *given, struct wimm_ctx **ctx)
{
	const char *polling = getenv("WIMM_TEST_POLLING");
	struct wimm_ctx_attr attr = {0};
	if (given)
		attr = *given;
	if (polling && strcmp(polling, "1") == 0)
		attr.flags |= WIMM_CTX_POLLING;
	int rc = wimm_ctx_open(uri, &attr, ctx);

	if (rc == WIMM_E_NOFABRIC || rc == WIMM_E_NODEV) {
		conf_skip("fabric %s not available here (%s)", uri, wimm_err_name(rc));
		return rc;
	}
	if (rc) {
		conf_fail(__FILE__, __LINE__, "wimm_ctx_open(%s): %s", uri, wimm_err_name(rc));
		return rc;
	}
	return 0;
}

/* Sets (value) or leaves (NULL) the environment variable name (NULL: none)
 * around one open_ctx, then restores it. */
static int open_ctx_env(const char *uri, const struct wimm_ctx_attr *attr, const char *name,
			const char *value, struct wimm_ctx **out)
{
	if (!name || !value)
		return open_ctx(uri, attr, out);
	const char *was = getenv(name);
	char *old = was ? strdup(was) : NULL;
	int rc;

	setenv(name, value, 1);
	rc = open_ctx(uri, attr, out);
	if (old)
		setenv(name, old, 1);
	else
		unsetenv(name);
	free(old);
	return rc;
}

static int pair_open_sides(struct pair *p, const char *uri, const struct wimm_ctx_attr *sattr,
			   const struct wimm_ctx_attr *cattr, const char *name, const char *sval,
			   const char *cval)
{
	memset(p, 0, sizeof(*p));
	int rc = open_ctx_env(uri, sattr, name, sval, &p->sctx);

	if (rc)
		return rc;
	return open_ctx_env(uri, cattr, name, cval, &p->cctx);
}

int pair_open_attr(struct pair *p, const char *uri, const struct wimm_ctx_attr *sattr,
		   const struct wimm_ctx_attr *cattr)
{
	return pair_open_sides(p, uri, sattr, cattr, NULL, NULL, NULL);
}

int pair_open(struct pair *p, const char *uri)
{
	return pair_open_attr(p, uri, NULL, NULL);
}

int pair_open_env(struct pair *p, const char *uri, const char *name, const char *sval,
		  const char *cval)
{
	return pair_open_sides(p, uri, NULL, NULL, name, sval, cval);
}

/* A region of len bytes on ctx, registered (allocated: by wimm_mr_alloc). */
static struct region *region_add(struct pair *p, struct wimm_ctx *ctx, size_t len, unsigned access,
				 int allocated)
{
	const char *text = "";
	struct region *r;
	int rc;

	if (p->nreg == PAIR_MAX_REGIONS) {
		conf_fail(__FILE__, __LINE__, "too many regions in one pair");
		return NULL;
	}
	r = &p->reg[p->nreg];
	memset(r, 0, sizeof(*r));
	r->ctx = ctx;
	r->len = len;
	r->allocated = allocated;
	if (allocated) {
		rc = wimm_mr_alloc(ctx, len, access, &r->mr);
		r->buf = wimm_mr_addr(r->mr);
	} else if (posix_memalign(&r->buf, 4096, len ? len : 1)) {
		/* Page alignment, and never a zero-size allocation. */
		conf_fail(__FILE__, __LINE__, "out of memory for %zu bytes", len);
		return NULL;
	} else {
		memset(r->buf, 0, len ? len : 1);
		rc = wimm_mr_reg(ctx, r->buf, len, access, &r->mr);
	}
	if (rc) {
		wimm_provider_error(ctx, &text);
		conf_fail(__FILE__, __LINE__, "%s(%zu bytes): %s (%s)",
			  allocated ? "wimm_mr_alloc" : "wimm_mr_reg", len, wimm_err_name(rc),
			  text ? text : "");
		if (!allocated)
			free(r->buf);
		r->buf = NULL;
		return NULL;
	}
	p->nreg++;
	return r;
}

struct region *pair_region_alloc(struct pair *p, struct wimm_ctx *ctx, size_t len, unsigned access)
{
	return region_add(p, ctx, len, access, 1);
}

struct region *pair_region(struct pair *p, struct wimm_ctx *ctx, size_t len, unsigned access)
{
	return region_add(p, ctx, len, access, 0);
}

int conf_listen(struct wimm_ctx *ctx, const struct wimm_conn_attr *attr, struct wimm_listener **l,
		char *addr, size_t addr_len)
{
	const char *host = conf_host();
	int v6 = strchr(host, ':') != NULL;
	char spec[300];
	int rc;

	snprintf(spec, sizeof(spec), v6 ? "[%s]:0" : "%s:0", host);
	rc = wimm_listen(ctx, spec, attr, l);
	if (rc) {
		const char *text = "";

		wimm_provider_error(ctx, &text);
		conf_fail(__FILE__, __LINE__, "wimm_listen(%s): %s (%s)", spec, wimm_err_name(rc),
			  text ? text : "");
		return rc;
	}
	int port = wimm_listener_port(*l);

	if (port <= 0 || port > 65535) {
		conf_fail(__FILE__, __LINE__, "wimm_listener_port gave %d", port);
		return WIMM_E_INVAL;
	}
	snprintf(addr, addr_len, v6 ? "[%s]:%d" : "%s:%d", host, port);
	return 0;
}

struct accept_arg {
	struct wimm_listener *l;
	struct wimm_conn *conn;
	int rc;
};

static void *accept_thread(void *arg)
{
	struct accept_arg *a = arg;

	a->rc = wimm_accept(a->l, CONNECT_TIMEOUT_MS, &a->conn);
	return NULL;
}

int pair_connect_on(struct pair *p, const char *addr, const struct wimm_conn_attr *cattr)
{
	struct accept_arg a = {0};
	pthread_t th;
	int rc;

	a.l = p->l;
	/* connect and accept both block until the other side answers. */
	if (pthread_create(&th, NULL, accept_thread, &a)) {
		conf_fail(__FILE__, __LINE__, "pthread_create failed");
		return WIMM_E_NOMEM;
	}
	rc = wimm_connect(p->cctx, addr, cattr, CONNECT_TIMEOUT_MS, &p->c);
	pthread_join(th, NULL);
	p->s = a.conn;
	if (rc || a.rc) {
		const char *ct = "", *st = "";

		wimm_provider_error(p->cctx, &ct);
		wimm_provider_error(p->sctx, &st);
		conf_fail(__FILE__, __LINE__, "connecting to %s: connect %s (%s), accept %s (%s)",
			  addr, wimm_err_name(rc), ct ? ct : "", wimm_err_name(a.rc), st ? st : "");
		return rc ? rc : a.rc;
	}
	if (!p->s || !p->c) {
		conf_fail(__FILE__, __LINE__, "connect/accept returned 0 without a connection");
		return WIMM_E_INVAL;
	}
	return 0;
}

int pair_still_accepts(struct pair *p, const char *addr, uint32_t imm)
{
	struct wimm_event ev;

	if (pair_connect_on(p, addr, NULL))
		return -1;
	int rc = wimm_write_imm(p->c, NULL, 0, 0, 0, imm, 0);
	int got = rc ? 0 : next_event(p->sctx, p->cctx, &ev, 5000);
	if (rc || got != 1 || ev.type != WIMM_EV_WRITE_IMM || ev.imm != imm) {
		conf_fail(__FILE__, __LINE__, "the listener's new connection: write %s, %d events",
			  wimm_err_name(rc), got);
		return -1;
	}
	return 0;
}

int pair_connect(struct pair *p, const struct wimm_conn_attr *sattr,
		 const struct wimm_conn_attr *cattr)
{
	char addr[300];
	int rc;

	rc = conf_listen(p->sctx, sattr, &p->l, addr, sizeof(addr));
	if (rc)
		return rc;
	return pair_connect_on(p, addr, cattr);
}

void pair_close(struct pair *p)
{
	wimm_conn_delete(&p->c);
	wimm_conn_delete(&p->s);
	wimm_listener_delete(&p->l);
	for (int i = p->nreg - 1; i >= 0; i--) {
		wimm_mr_dereg(&p->reg[i].mr);
		if (!p->reg[i].allocated)
			free(p->reg[i].buf);
	}
	p->nreg = 0;
	if (p->sctx) {
		int rc = wimm_ctx_close(&p->sctx);

		if (rc)
			conf_fail(__FILE__, __LINE__, "wimm_ctx_close(server): %s",
				  wimm_err_name(rc));
	}
	if (p->cctx) {
		int rc = wimm_ctx_close(&p->cctx);

		if (rc)
			conf_fail(__FILE__, __LINE__, "wimm_ctx_close(client): %s",
				  wimm_err_name(rc));
	}
}

/* ---------------------------------------------------------------- events */

int next_event(struct wimm_ctx *ctx, struct wimm_ctx *other, struct wimm_event *ev, int timeout_ms)
{
	int64_t deadline = conf_now_ms() + timeout_ms;
	unsigned spins = 0;

	for (;;) {
		int n = wimm_poll(ctx, ev, 1);

		if (n != 0)
			return n;
		if (other)
			wimm_progress(other);
		if (conf_now_ms() > deadline)
			return 0;
		/* Spin a little, then stop hogging a shared CPU. */
		if (++spins > 2000)
			conf_sleep_us(50);
	}
}

int wait_event(struct wimm_ctx *ctx, struct wimm_ctx *other, enum wimm_event_type type,
	       struct wimm_conn *conn, struct wimm_event *ev, int timeout_ms, int *skipped)
{
	int64_t deadline = conf_now_ms() + timeout_ms;

	for (;;) {
		int64_t left = deadline - conf_now_ms();
		int n = next_event(ctx, other, ev, left > 0 ? (int)left : 0);

		if (n <= 0)
			return n;
		if (ev->type == type && (!conn || ev->conn == conn))
			return 1;
		if (skipped)
			(*skipped)++;
	}
}

int drain_events(struct wimm_ctx *ctx, struct wimm_ctx *other, int ms)
{
	int64_t deadline = conf_now_ms() + ms;
	struct wimm_event ev;
	int count = 0;

	while (conf_now_ms() < deadline) {
		int n = next_event(ctx, other, &ev, (int)(deadline - conf_now_ms()));

		if (n < 0)
			return n;
		count += n;
	}
	return count;
}
