/* The services' tests' shared helpers (svc_test.h). */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "svc_test.h"

int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int ms)
{
	usleep((useconds_t)ms * 1000);
}

int scale(void)
{
	const char *s = getenv("WIMM_TEST_TIMEOUT_SCALE");
	int v = s ? atoi(s) : 1;
	return v > 0 ? v : 1;
}

const char *test_host(void)
{
	const char *h = getenv("WIMM_TEST_HOST");
	return h && *h ? h : "127.0.0.1";
}

void slurp(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, len - 1, f) : 0;
	buf[n] = '\0';
	if (f)
		fclose(f);
}

void remove_stale_shm(void)
{
	char cmd[] = "for f in /dev/shm/[0-9]*:*; do p=${f#/dev/shm/}; p=${p%%:*}; "
		     "[ -d /proc/$p ] || rm -f \"$f\"; done 2>/dev/null";
	if (system(cmd) < 0)
		fprintf(stderr, "note: could not clean /dev/shm\n");
}
