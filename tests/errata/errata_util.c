/* Shared helpers of the ERRATA programs. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "errata.h"

static int passed, failed;

int errata_check(int cond, const char *fmt, ...)
{
	va_list ap;

	fputs(cond ? "ok - " : "not ok - ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	if (cond)
		passed++;
	else
		failed++;
	return cond != 0;
}

void errata_diag(const char *fmt, ...)
{
	va_list ap;

	fputs("# ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

int errata_summary(void)
{
	printf("%d passed, %d failed\n", passed, failed);
	fflush(stdout);
	return failed || !passed ? 1 : 0;
}

int64_t errata_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t errata_timeout_ms(int64_t base_ms)
{
	const char *s = getenv("WIMM_TEST_TIMEOUT_SCALE");
	double f = s && *s ? strtod(s, NULL) : 1.0;

	if (!(f >= 1.0 && f <= 100.0))
		f = 1.0;
	return (int64_t)((double)base_ms * f);
}

const char *errata_host(void)
{
	const char *h = getenv("WIMM_TEST_HOST");

	return h && *h ? h : "192.0.2.1";
}

const char *errata_device(void)
{
	const char *d = getenv("WIMM_SOFTROCE_DEVICE");

	return d && *d ? d : "rxe0";
}

void errata_counters_read(const char *dev, struct hw_counters *c)
{
	hw_counters_read(dev, 1, c);
}

long long errata_counter(const struct hw_counters *c, const char *name)
{
	return hw_counter(c, name);
}

void errata_counters_diff(const struct hw_counters *a, const struct hw_counters *b)
{
	char line[1024];
	size_t off = 0;

	line[0] = '\0';
	for (int i = 0; i < b->n; i++) {
		long long before = errata_counter(a, b->name[i]);

		/* lifespan is a setting, not a count. */
		if (before == b->val[i] || !strcmp(b->name[i], "lifespan"))
			continue;
		off += (size_t)snprintf(line + off, sizeof(line) - off, " %s %lld->%lld",
					b->name[i], before, b->val[i]);
		if (off >= sizeof(line))
			break;
	}
	errata_diag("counters changed:%s", line[0] ? line : " none");
}
