/* `wimm kv`: the key-value slot pool service and its benchmark. */
#ifndef WIMM_KV_CMD_H
#define WIMM_KV_CMD_H

#include <stddef.h>
#include <stdio.h>

#include <wimm/kv.h>

#define KV_DEFAULT_PORT 7480

/* `wimm kv ...` (argv[0] is "kv"); returns the exit status. */
int kv_main(int argc, char **argv);
/* `wimm kv bench ...` (argv[0] is "bench"), kv_bench.c. */
int kv_bench(int argc, char **argv);

/* A byte count with an optional K/M/G suffix; -1 if malformed. */
int kv_parse_size(const char *text, unsigned long long *out);
/* "host" -> "host:7480"; "host:port" and "[v6]:port" as given. */
void kv_host_addr(const char *host, char *out, size_t len);
void kv_print_stats(FILE *f, const struct wimm_kv_stats *st);

#endif
