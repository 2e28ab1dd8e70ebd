/* Helpers shared by the load programs: tests/scale/server_load.c and
 * bench/scale.c. Both run a server context against client processes that
 * are this same binary again, exec'd. */
#ifndef WIMM_LOAD_UTIL_H
#define WIMM_LOAD_UTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "wimm.h"

static inline double load_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Exit 2 with what failed, the code and the provider's text. */
static inline void load_die(const char *what, int ret, struct wimm_ctx *ctx)
{
	const char *text = "";

	if (ctx)
		wimm_provider_error(ctx, &text);
	fprintf(stderr, "%s[%d]: %s: %d %s\n", program_invocation_short_name, (int)getpid(), what,
		ret, text);
	exit(2);
}

/* The application's choice, not the library's: many connections need more
 * descriptors than the usual soft limit of 1024 (ofi:tcp takes 4 a
 * connection, ofi:shm 1). */
static inline void load_raise_nofile(void)
{
	struct rlimit r;

	if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
		r.rlim_cur = r.rlim_max;
		setrlimit(RLIMIT_NOFILE, &r);
	}
}

/* This program's own path, for exec'ing its clients. */
static inline void load_self(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);

	if (n <= 0)
		load_die("readlink /proc/self/exe", -errno, NULL);
	buf[n] = '\0';
}

/* A client's context and the 8-byte region its doorbells name. */
static inline struct wimm_ctx *load_client_open(const char *fabric, struct wimm_mr **mr)
{
	static uint64_t word;
	struct wimm_ctx *ctx;
	int ret;

	load_raise_nofile();
	ret = wimm_ctx_open(fabric, NULL, &ctx);
	if (ret)
		load_die("client ctx_open", ret, NULL);
	ret = wimm_mr_reg(ctx, &word, sizeof(word), WIMM_LOCAL, mr);
	if (ret)
		load_die("client mr_reg", ret, ctx);
	return ctx;
}

#endif
