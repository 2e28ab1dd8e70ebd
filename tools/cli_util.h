/* What the services' subcommands (wimm kv, wimm ps) share: the bad-usage
 * exit and the HOST[:PORT] arguments. */
#ifndef WIMM_CLI_UTIL_H
#define WIMM_CLI_UTIL_H

#include <stddef.h>
#include <stdio.h>

/* "<who>: " and fmt with arg on stderr, then usage(stderr); exit status 2. */
_Noreturn void cli_bad_usage(const char *who, void (*usage)(FILE *), const char *fmt,
			     const char *arg);
/* "host", "host:port", "[v6]", "[v6]:port" or a bare IPv6 address as
 * "host:port" (IPv6 in brackets) in out, with port when it names none. */
void cli_host_addr(const char *host, const char *port, char *out, size_t len);

#endif
