/* Shared plumbing of the examples; see common.h. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

/* The server thread publishes its port here; clients wait for it. */
static pthread_mutex_t port_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t port_cond = PTHREAD_COND_INITIALIZER;
static int port_published;
/* The first failure speaks; other threads failing meanwhile wait for exit. */
static pthread_mutex_t die_lock = PTHREAD_MUTEX_INITIALIZER;

static _Noreturn void end(void)
{
	/* _Exit: the other threads may be inside the library right now. */
	fflush(stdout);
	fflush(stderr);
	_Exit(1);
}

_Noreturn void ex_fatal(const char *fmt, ...)
{
	va_list ap;
	pthread_mutex_lock(&die_lock);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	end();
}

_Noreturn void ex_fail(struct wimm_ctx *ctx, int err, const char *fmt, ...)
{
	va_list ap;
	pthread_mutex_lock(&die_lock);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, ": %s (%s)", wimm_strerror(err), wimm_err_name(err));
	const char *text = NULL;
	int prov = ctx != NULL ? wimm_provider_error(ctx, &text) : 0;
	if (prov != 0 || (text != NULL && text[0] != '\0'))
		fprintf(stderr, "; provider: %s (%d)", text != NULL ? text : "", prov);
	fputc('\n', stderr);
	end();
}

double ex_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

const char *ex_host(void)
{
	const char *host = getenv("WIMM_EXAMPLE_HOST");
	return host != NULL && host[0] != '\0' ? host : "127.0.0.1";
}

unsigned ex_count(int argc, char **argv, unsigned def)
{
	if (argc < 3)
		return def;
	char *end_ptr;
	unsigned long v = strtoul(argv[2], &end_ptr, 10);
	if (*end_ptr != '\0' || v == 0 || v > 1000000)
		ex_fatal("%s: count '%s' must be 1..1000000", argv[0], argv[2]);
	return (unsigned)v;
}

static void format_addr(char *buf, size_t len, int port)
{
	const char *host = ex_host();
	/* An IPv6 literal needs brackets before the port. */
	if (strchr(host, ':') != NULL && host[0] != '[')
		snprintf(buf, len, "[%s]:%d", host, port);
	else
		snprintf(buf, len, "%s:%d", host, port);
}

struct wimm_ctx *ex_open(const char *fabric, const char *role)
{
	struct wimm_ctx *ctx;
	int rc = wimm_ctx_open(fabric, NULL, &ctx);
	if (rc < 0)
		ex_fail(NULL, rc, "%s: open fabric '%s'", role, fabric);
	return ctx;
}

struct wimm_listener *ex_listen(struct wimm_ctx *ctx, const struct wimm_conn_attr *attr)
{
	char addr[300];
	struct wimm_listener *l;
	format_addr(addr, sizeof(addr), 0);
	int rc = wimm_listen(ctx, addr, attr, &l);
	if (rc < 0)
		ex_fail(ctx, rc, "server: listen on %s", addr);
	pthread_mutex_lock(&port_lock);
	port_published = wimm_listener_port(l);
	pthread_cond_broadcast(&port_cond);
	pthread_mutex_unlock(&port_lock);
	return l;
}

struct wimm_conn *ex_accept(struct wimm_ctx *ctx, struct wimm_listener *l, const char *role)
{
	struct wimm_conn *c;
	int rc = wimm_accept(l, EX_TIMEOUT_MS, &c);
	if (rc < 0)
		ex_fail(ctx, rc, "%s: accept a connection", role);
	return c;
}

void ex_unlisten(struct wimm_ctx *ctx, struct wimm_listener **l)
{
	int rc = wimm_listener_delete(l);
	if (rc < 0)
		ex_fail(ctx, rc, "server: close the listener");
}

struct wimm_conn *ex_connect(struct wimm_ctx *ctx, const struct wimm_conn_attr *attr,
			     const char *role)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += EX_TIMEOUT_MS / 1000;
	pthread_mutex_lock(&port_lock);
	while (port_published <= 0)
		if (pthread_cond_timedwait(&port_cond, &port_lock, &until) != 0)
			ex_fatal("%s: the server did not start listening", role);
	int port = port_published;
	pthread_mutex_unlock(&port_lock);

	char addr[300];
	struct wimm_conn *c;
	format_addr(addr, sizeof(addr), port);
	int rc = wimm_connect(ctx, addr, attr, EX_TIMEOUT_MS, &c);
	if (rc < 0)
		ex_fail(ctx, rc, "%s: connect to %s", role, addr);
	return c;
}

static void check_events(struct wimm_ctx *ctx, const struct wimm_event *ev, int n, const char *role)
{
	for (int i = 0; i < n; i++)
		if (ev[i].type == WIMM_EV_ERROR)
			ex_fail(ctx, ev[i].status,
				"%s: operation #%llu (op %d) failed, provider code %d", role,
				(unsigned long long)ev[i].op_seq, (int)ev[i].op, ev[i].prov_err);
}

int ex_wait(struct wimm_ctx *ctx, struct wimm_event *ev, int n, const char *role, const char *what)
{
	/* Adaptive: spin briefly (cheap when the peer is fast), then sleep. */
	int got = wimm_wait(ctx, ev, n, WIMM_WAIT_ADAPTIVE, EX_TIMEOUT_MS);
	if (got < 0)
		ex_fail(ctx, got, "%s: wait for %s", role, what);
	if (got == 0)
		ex_fatal("%s: no event for %d s while waiting for %s", role, EX_TIMEOUT_MS / 1000,
			 what);
	check_events(ctx, ev, got, role);
	return got;
}

int ex_poll(struct wimm_ctx *ctx, struct wimm_event *ev, int n, const char *role)
{
	int got = wimm_poll(ctx, ev, n);
	if (got < 0)
		ex_fail(ctx, got, "%s: poll", role);
	check_events(ctx, ev, got, role);
	return got;
}

void ex_again(double *give_up, const char *role, const char *what)
{
	if (*give_up == 0)
		*give_up = ex_now() + EX_TIMEOUT_MS / 1000.0;
	else if (ex_now() > *give_up)
		ex_fatal("%s: no credit for %d s to %s (is the peer polling?)", role,
			 EX_TIMEOUT_MS / 1000, what);
}

void ex_write_imm(struct wimm_ctx *ctx, struct wimm_conn *conn, struct wimm_mr *src, size_t src_off,
		  size_t dst_off, size_t len, uint32_t imm, const char *role, const char *what)
{
	double give_up = 0;
	int rc;
	while ((rc = wimm_write_imm(conn, src, src_off, dst_off, len, imm, 0)) == WIMM_E_AGAIN) {
		ex_again(&give_up, role, what);
		/* Credit returns are plain writes the fabric lands only when
		 * driven (tcp); they raise no event, so no sleeping here. */
		rc = wimm_progress(ctx);
		if (rc < 0)
			ex_fail(ctx, rc, "%s: drive progress", role);
	}
	if (rc < 0)
		ex_fail(ctx, rc, "%s: %s", role, what);
}

void ex_wait_disconnect(struct wimm_ctx *ctx, const char *role, int conns)
{
	struct wimm_event ev[8];
	while (conns > 0) {
		int n = ex_wait(ctx, ev, 8, role, "the peers to close");
		for (int i = 0; i < n; i++)
			if (ev[i].type == WIMM_EV_DISCONNECT)
				conns--;
	}
}

void ex_close(struct wimm_ctx **ctx, struct wimm_conn **conn, struct wimm_mr **mr1,
	      struct wimm_mr **mr2, const char *role)
{
	int rc = wimm_conn_delete(conn);
	if (rc == 0)
		rc = wimm_mr_dereg(mr1);
	if (rc == 0)
		rc = wimm_mr_dereg(mr2);
	if (rc < 0)
		ex_fail(*ctx, rc, "%s: release connection and memory", role);
	rc = wimm_ctx_close(ctx);
	if (rc < 0)
		ex_fail(NULL, rc, "%s: close the context", role);
}

uint32_t ex_fnv1a(const void *p, size_t len)
{
	const unsigned char *b = p;
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 16777619u;
	return h;
}
