/* `wimm log bench`: append throughput of 1, 8 and 64 writer processes to one
 * server and to a ledger (log_bench_tput.c), then append latency of the log
 * service, visible and durable, at 64 B, 1200 B and 16 KiB, against the same
 * appends announced by a plain write + a separate send (the source
 * article's baseline), interleaved in the same run. The servers run in
 * child processes on fresh directories. */
#include <dirent.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <wimm/log.h>

#include "cli.h"
#include "log_bench.h"
#include "log_cmd.h"

#define NSIZES 3
static pid_t server_pid;
static const size_t sizes[NSIZES] = {64, 1200, 16384};

struct samples {
	uint64_t *v;
	size_t n, cap;
};

static void push(struct samples *s, uint64_t x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 1024;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		if (!s->v)
			cli_die("out of memory");
	}
	s->v[s->n++] = x;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static double pct(struct samples *s, double p)
{
	if (!s->n)
		return 0;
	size_t i = (size_t)(p * (double)(s->n - 1) + 0.5);
	return (double)s->v[i] / 1000.0;
}

static void rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[512];
	while (d && (e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

static struct wimm_ctx *bench_ctx(const char *fabric, int spin, uint32_t liveness_ms)
{
	struct wimm_ctx *ctx;
	struct wimm_ctx_attr a = {.spin_us = spin ? 1000000 : 0,
				  .flags = spin ? WIMM_CTX_POLLING : 0,
				  .liveness_ms = liveness_ms};
	int rc = wimm_ctx_open(fabric, &a, &ctx);
	if (rc)
		cli_fail(NULL, rc, "log bench: open fabric %s", fabric);
	return ctx;
}

static void say_server(void *arg, enum wimm_log_level lvl, const char *msg)
{
	(void)arg;
	if (lvl <= WIMM_LOG_WARN)
		fprintf(stderr, "wimm: log bench: server: %s\n", msg);
}

static _Noreturn void serve_child(const char *fabric, const char *dir, int wfd, int spin,
				  uint32_t ring)
{
	struct wimm_ctx *ctx = bench_ctx(fabric, spin, ring ? LOG_BENCH_LIVENESS_MS : 0);
	struct wimm_log_server *s;
	/* Throughput (a ring given): 64 ledger writers connect at once, each
	 * with a probe reader too. */
	struct wimm_log_server_attr a = {.dir = dir,
					 .ring_size = ring,
					 .max_conns = ring ? 160 : 0,
					 .spin_us = spin ? 1000000 : 0,
					 .log = say_server,
					 .shared_ring = LOG_BENCH_SHARED_RING};
	int rc = wimm_log_server_open(ctx, "127.0.0.1:0", &a, &s);
	if (rc)
		cli_fail(ctx, rc, "log bench: server");
	dprintf(wfd, "%d %d\n", wimm_log_server_port(s), wimm_log_server_shared_port(s));
	close(wfd);
	for (;;) {
		rc = wimm_log_server_run(s, 100);
		if (rc < 0)
			cli_fail(ctx, rc, "log bench: server loop");
		if (getppid() == 1)
			break;
	}
	wimm_log_server_close(&s);
	wimm_ctx_close(&ctx);
	_exit(0);
}

/* A server in a child process on a fresh directory: its pid, its address
 * in addr (exits when it does not start). */
struct bench_server {
	pid_t pid;
	char dir[256], addr[64], shared_addr[64];
};

static void server_up(struct bench_server *b, const char *fabric, int spin, uint32_t ring)
{
	int pfd[2];
	/* mkdtemp's template (its X's are replaced), under $TMPDIR if set. */
	const char *tmp = getenv("TMPDIR");
	snprintf(b->dir, sizeof(b->dir), "%s/wimm-log-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(b->dir) || pipe(pfd))
		cli_die("log bench: cannot make a directory or a pipe");
	fflush(stdout);
	b->pid = fork();
	if (b->pid == 0) {
		close(pfd[0]);
		serve_child(fabric, b->dir, pfd[1], spin, ring);
	}
	close(pfd[1]);
	char line[32] = "";
	ssize_t got = read(pfd[0], line, sizeof(line) - 1);
	close(pfd[0]);
	int port = 0, shared = 0;
	if (got <= 0 || sscanf(line, "%d %d", &port, &shared) != 2)
		port = 0;
	if (b->pid < 0 || port <= 0 || shared <= 0) {
		rm_dir(b->dir);
		cli_die("log bench: the server did not start");
	}
	snprintf(b->addr, sizeof(b->addr), "127.0.0.1:%d", port);
	snprintf(b->shared_addr, sizeof(b->shared_addr), "127.0.0.1:%d", shared);
}

static void server_down(struct bench_server *b)
{
	kill(b->pid, SIGKILL);
	waitpid(b->pid, NULL, 0);
	rm_dir(b->dir);
}

/* The latency's writers: a ring of its own, write + send, the shared ring. */
#define NMETHODS 3

static void poll_others(struct wimm_log_writer *const *w, int m)
{
	for (int i = 0; i < NMETHODS; i++)
		if (i != m)
			wimm_log_writer_poll(w[i]);
}

static void one(struct wimm_log_writer *w, const unsigned char *buf, size_t len,
		enum wimm_log_ack lvl, struct samples *out)
{
	uint64_t seq, t0 = cli_now_ns();
	int rc = wimm_log_append(w, buf, len, WIMM_LOG_WAIT, &seq);
	if (!rc)
		rc = wimm_log_wait(w, seq, lvl, 10000);
	if (rc) {
		int st;
		if (server_pid > 0 && waitpid(server_pid, &st, WNOHANG) == server_pid)
			fprintf(stderr, "wimm: log bench: the server ended: %s %d\n",
				WIFSIGNALED(st) ? "signal" : "status",
				WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
		cli_fail(NULL, rc, "log bench: append %zu bytes (%s)", len,
			 wimm_log_writer_error(w));
	}
	if (out)
		push(out, cli_now_ns() - t0);
}

int log_bench_main(int argc, char **argv)
{
	const char *fabric = "auto";
	unsigned iters = 2000, rounds = 5, dur_iters = 40, tput_entries = 6400, tput_rounds = 3;
	int spin = 0;
	static const struct option opts[] = {{"rounds", 1, NULL, 'r'},
					     {"spin", 0, NULL, 's'},
					     {"durable-iters", 1, NULL, 'd'},
					     {"tput-entries", 1, NULL, 't'},
					     {"tput-rounds", 1, NULL, 'T'},
					     {"help", 0, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "f:n:h", opts, NULL)) != -1) {
		if (c == 'f')
			fabric = optarg;
		else if (c == 'n')
			iters = (unsigned)strtoul(optarg, NULL, 0);
		else if (c == 'r')
			rounds = (unsigned)strtoul(optarg, NULL, 0);
		else if (c == 'd')
			dur_iters = (unsigned)strtoul(optarg, NULL, 0);
		else if (c == 's')
			spin = 1;
		else if (c == 't')
			tput_entries = (unsigned)strtoul(optarg, NULL, 0);
		else if (c == 'T')
			tput_rounds = (unsigned)strtoul(optarg, NULL, 0);
		else {
			fputs("usage: wimm log bench [-f FABRIC] [-n ITERS] [--rounds R]"
			      " [--durable-iters N] [--tput-entries N] [--tput-rounds R] [--spin]\n"
			      "  --spin  the latency run's server and writers poll instead of "
			      "sleeping\n"
			      "  --tput-entries  entries of each throughput run (default 6400)\n",
			      c == 'h' ? stdout : stderr);
			return c == 'h' ? 0 : 2;
		}
	}
	if (!iters || !rounds || !dur_iters || !tput_entries || !tput_rounds) {
		fputs("wimm: log bench: -n, --rounds, --durable-iters and --tput-* must be "
		      "positive\n",
		      stderr);
		return 2;
	}
	/* Throughput first: its writers are forked while this process has no
	 * context. Its servers sleep when idle (64 writers share 2 cores). */
	struct bench_server tp[4];
	for (int i = 0; i < 4; i++)
		server_up(&tp[i], fabric, 0, 256u << 10);
	struct log_bench_servers sv = {.fabric = fabric,
				       .single = tp[0].addr,
				       .shared = tp[0].shared_addr,
				       .ensemble = {tp[1].addr, tp[2].addr, tp[3].addr}};
	log_bench_tput(&sv, tput_entries, tput_rounds);
	for (int i = 0; i < 4; i++)
		server_down(&tp[i]);
	struct bench_server lat;
	server_up(&lat, fabric, spin, 0);
	server_pid = lat.pid;
	const char *addr = lat.addr;
	/* Three writers, each a context of its own: one write-with-imm per
	 * append into a ring of its own, the baseline of write + separate send,
	 * and the shared ring (a fetch-and-add for the place, then the
	 * write-with-imm). */
	struct wimm_ctx *ctx[NMETHODS];
	struct wimm_log_writer *w[NMETHODS];
	static const unsigned method_flags[NMETHODS] = {0, WIMM_LOG_WRITER_SEND_NOTICE,
							WIMM_LOG_WRITER_SHARED};
	for (int m = 0; m < NMETHODS; m++) {
		ctx[m] = bench_ctx(fabric, spin, 0);
		struct wimm_log_writer_attr a = {.id = 0xbe0c0 + (uint64_t)m,
						 .flags = method_flags[m]};
		int rc = wimm_log_writer_open(ctx[m], m == 2 ? lat.shared_addr : addr, &a, &w[m]);
		if (rc)
			cli_fail(ctx[m], rc, "log bench: writer");
	}
	unsigned char *buf = malloc(sizes[NSIZES - 1]);
	if (!buf)
		cli_die("out of memory");
	log_gen_fill(buf, sizes[NSIZES - 1], 1, 1);
	struct samples s[NSIZES][2][NMETHODS] = {0}; /* size, level, method */
	for (unsigned r = 0; r < rounds; r++)
		for (int z = 0; z < NSIZES; z++)
			for (int m = 0; m < NMETHODS; m++) {
				/* The other writers are polled between appends (outside
				 * the timing), so their heartbeats keep them alive. */
				for (unsigned i = 0; i < iters / 10; i++) { /* warm-up */
					one(w[m], buf, sizes[z], WIMM_LOG_VISIBLE, NULL);
					poll_others(w, m);
				}
				for (unsigned i = 0; i < iters; i++) {
					one(w[m], buf, sizes[z], WIMM_LOG_VISIBLE, &s[z][0][m]);
					poll_others(w, m);
				}
				for (unsigned i = 0; i < dur_iters; i++) {
					one(w[m], buf, sizes[z], WIMM_LOG_DURABLE, &s[z][1][m]);
					poll_others(w, m);
				}
			}
	printf("\nwimm log bench: %s, %s, %u rounds interleaved, %u visible + %u durable appends "
	       "per round, size and method; latency of append + wait, us\n",
	       wimm_ctx_fabric(ctx[0]), spin ? "spinning" : "adaptive waits", rounds, iters,
	       dur_iters);
	printf("| size | ack | write_imm p50 | p99 | p99.9 | write+send p50 | p99 | p99.9 |"
	       " ratio p50 | shared ring p50 | p99 | p99.9 | ratio p50 |\n"
	       "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	for (int z = 0; z < NSIZES; z++)
		for (int l = 0; l < 2; l++) {
			struct samples *a = &s[z][l][0], *b = &s[z][l][1], *sh = &s[z][l][2];
			for (int m = 0; m < NMETHODS; m++)
				qsort(s[z][l][m].v, s[z][l][m].n, sizeof(uint64_t), cmp_u64);
			printf("| %zu | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2fx "
			       "| %.2f | %.2f | %.2f | %.2fx |\n",
			       sizes[z], l ? "durable" : "visible", pct(a, .5), pct(a, .99),
			       pct(a, .999), pct(b, .5), pct(b, .99), pct(b, .999),
			       pct(b, .5) / pct(a, .5), pct(sh, .5), pct(sh, .99), pct(sh, .999),
			       pct(sh, .5) / pct(a, .5));
			for (int m = 0; m < NMETHODS; m++)
				free(s[z][l][m].v);
		}
	for (int m = 0; m < NMETHODS; m++) {
		wimm_log_writer_close(&w[m], 5000);
		wimm_ctx_close(&ctx[m]);
	}
	free(buf);
	server_down(&lat);
	return 0;
}
