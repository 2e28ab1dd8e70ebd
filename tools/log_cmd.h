/* `wimm log ...`: the remote log service (include/wimm/log.h) as commands:
 * serve, append, tail, stat (log_cmd.c) and bench (log_bench.c). */
#ifndef WIMM_LOG_CMD_H
#define WIMM_LOG_CMD_H

#include <stddef.h>
#include <stdint.h>

#define LOG_CMD_DEFAULT_PORT 7480

int log_main(int argc, char **argv);
int log_bench_main(int argc, char **argv);

/* HOST or HOST:PORT (port defaulting to `port`) into "host:port". */
void log_cmd_addr(char *buf, size_t len, const char *host, int port);
/* Open a context on fabric (exits with a message on failure). */
struct wimm_ctx *log_cmd_ctx(const char *fabric);

/* The deterministic entries of `wimm log append --gen`: the size of entry
 * seq of writer id in [min, max], and its bytes ("w<id>:s<seq>:" then
 * letters), so a reader can check every entry it gets. */
static inline uint64_t log_gen_mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static inline size_t log_gen_size(uint64_t id, uint64_t seq, size_t min, size_t max)
{
	if (max <= min)
		return min;
	return min + (size_t)(log_gen_mix(id * 0x9e3779b97f4a7c15ull ^ seq) % (max - min + 1));
}

static inline void log_gen_fill(unsigned char *p, size_t len, uint64_t id, uint64_t seq)
{
	uint64_t s = log_gen_mix(id ^ (seq << 17) ^ 0x5bd1e995u);
	for (size_t i = 0; i < len; i++) {
		if ((i & 7) == 0)
			s = log_gen_mix(s + i);
		p[i] = (unsigned char)('a' + (s >> ((i & 7) * 8)) % 26);
	}
	char head[48];
	int n = snprintf(head, sizeof(head), "w%llx:s%llu:", (unsigned long long)id,
			 (unsigned long long)seq);
	for (int i = 0; i < n && (size_t)i < len; i++)
		p[i] = (unsigned char)head[i];
}

#endif
