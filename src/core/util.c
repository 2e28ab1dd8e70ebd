/* Small helpers shared by the core and the backends. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "backend.h"

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t wimm_now_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

int64_t wimm_now_ms(void)
{
	return wimm_now_ns() / 1000000;
}

int64_t wimm_coarse_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC_COARSE);
}

int64_t wimm_deadline_ms(int timeout_ms, int default_ms)
{
	int ms = timeout_ms < 0 ? default_ms : timeout_ms;

	/* A negative default is "no deadline" (wimm_accept(-1) waits for ever). */
	return ms < 0 ? INT64_MAX : wimm_now_ms() + ms;
}

int wimm_remaining_ms(int64_t deadline)
{
	int64_t left = deadline - wimm_now_ms();

	return left < 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int)left;
}

static int copy_part(char *dst, size_t cap, const char *src, size_t n)
{
	if (n >= cap)
		return WIMM_E_ADDR;
	memcpy(dst, src, n);
	dst[n] = '\0';
	return 0;
}

int wimm_split_hostport(const char *addr, char *host, size_t host_len, char *port, size_t port_len)
{
	const char *colon;
	const char *h = addr;
	size_t hn;

	if (!addr || !host || !port)
		return WIMM_E_INVAL;
	if (addr[0] == '[') {
		/* "[v6]:port" keeps the colons of the address out of the split. */
		const char *close = strchr(addr, ']');
		if (!close || close[1] != ':')
			return WIMM_E_ADDR;
		h = addr + 1;
		hn = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(addr, ':');
		if (!colon || memchr(addr, ':', (size_t)(colon - addr)))
			return WIMM_E_ADDR;
		hn = (size_t)(colon - addr);
	}
	const char *p = colon + 1;
	size_t pn = strlen(p);
	if (pn == 0 || pn > 5 || strspn(p, "0123456789") != pn)
		return WIMM_E_ADDR;
	unsigned long v = 0;
	for (size_t i = 0; i < pn; i++)
		v = v * 10 + (unsigned long)(p[i] - '0');
	if (v > 65535)
		return WIMM_E_ADDR;
	if (copy_part(host, host_len, h, hn) || copy_part(port, port_len, p, pn))
		return WIMM_E_ADDR;
	return 0;
}

int wimm_sockaddr_text(const struct sockaddr *sa, char *buf, size_t len)
{
	char host[INET6_ADDRSTRLEN];

	if (!sa || !buf || !len)
		return WIMM_E_INVAL;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
		return 0;
	}
	snprintf(buf, len, "?");
	return WIMM_E_ADDR;
}
