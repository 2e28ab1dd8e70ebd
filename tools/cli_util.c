/* The services' subcommands' shared helpers (cli_util.h). */
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"

_Noreturn void cli_bad_usage(const char *who, void (*usage)(FILE *), const char *fmt,
			     const char *arg)
{
	fprintf(stderr, "%s: ", who);
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	usage(stderr);
	exit(2);
}

void cli_host_addr(const char *host, const char *port, char *out, size_t len)
{
	const char *bracket = strchr(host, ']'), *last = strrchr(host, ':');
	int colons = 0;
	for (const char *c = host; *c; c++)
		colons += *c == ':';
	if (bracket ? last > bracket : colons == 1)
		snprintf(out, len, "%s", host);
	else
		snprintf(out, len, bracket || !colons ? "%s:%s" : "[%s]:%s", host, port);
}
