/* `wimm log ...`: the remote log service (include/wimm/log.h) as commands:
 * serve, append, tail, stat (log_cmd.c) and bench (log_bench.c). */
#ifndef WIMM_LOG_CMD_H
#define WIMM_LOG_CMD_H

#include <stddef.h>
#include <stdint.h>

#define LOG_CMD_DEFAULT_PORT 7480
/* append's --timeout: how long the writer waits for the server (connect,
 * ring space, an acknowledgement) before it gives up; the final wait for
 * every acknowledgement gets at least LOG_CMD_FINAL_WAIT_MS. */
#define LOG_CMD_DEFAULT_TIMEOUT_MS 15000
#define LOG_CMD_FINAL_WAIT_MS 30000

int log_main(int argc, char **argv);
int log_bench_main(int argc, char **argv);

#include <wimm/log.h>

#define LOG_CMD_MAX_HOSTS 16

struct append_opts {
	uint64_t id, first_seq, gen;
	size_t min, max;
	int visible, reconnect, inband, recover, shared;
	unsigned ack_quorum;
	uint64_t progress;
	int timeout_ms; /* --timeout */
};
/* The final wait for every acknowledgement: --timeout, but at least
 * LOG_CMD_FINAL_WAIT_MS. */
static inline int log_cmd_final_wait_ms(const struct append_opts *o)
{
	return o->timeout_ms > LOG_CMD_FINAL_WAIT_MS ? o->timeout_ms : LOG_CMD_FINAL_WAIT_MS;
}

/* The HOST arguments as "host:port" addresses. */
struct log_hosts {
	char addr[LOG_CMD_MAX_HOSTS][160];
	const char *ptr[LOG_CMD_MAX_HOSTS];
	unsigned n;
};
/* Add "H1,H2,..." (exits with a message past LOG_CMD_MAX_HOSTS). */
void log_hosts_add(struct log_hosts *h, const char *arg, int port);

/* stdin lines, read with read(2) so that idle(arg) is called (a writer's
 * heartbeats, its acks) while no line comes: 1 and the line, 0 at the end. */
struct log_lines {
	unsigned char *buf;
	size_t len, cap, start;
	int eof;
};
int log_next_line(struct log_lines *l, void (*idle)(void *), void *arg, const unsigned char **line,
		  size_t *len);

/* `tail`'s line per entry (by_seq: the sequence number first, not the
 * position); stops after count (0: never). */
struct log_tail_state {
	uint64_t printed, count;
	int by_seq;
};
int log_cmd_print_entry(void *arg, const struct wimm_log_entry *e);

/* A library log line to stderr, arg naming the command. */
void log_cmd_say(void *arg, enum wimm_log_level lvl, const char *msg);
/* SIGKILL ourselves here when SIGUSR1 asked for it (WIMM_LOG_CRASH_ON_USR1). */
void log_cmd_crash_point(void);
/* A usage error: the message (fmt with arg), the usage, exit 2. */
_Noreturn void log_bad(const char *fmt, const char *arg);

/* The replicated ledger's commands (log_ledger_cmd.c). */
int log_cmd_ledger_append(const char *fabric, const struct log_hosts *h, struct append_opts *o);
int log_cmd_recover(const char *fabric, const struct log_hosts *h, const struct append_opts *o);
int log_cmd_ledger_tail(const char *fabric, const struct log_hosts *h, uint64_t id, uint64_t from,
			uint64_t count);

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
