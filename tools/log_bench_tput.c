/* `wimm log bench`'s throughput: 1, 8 and 64 writers, each a separate
 * process, appending 1200-byte entries to one server (a ring of its own
 * each, or all into its shared ring, places reserved by fetch-and-add) and
 * to a ledger of E = 3 servers at Qa = 2 on this host. Every writer connects, says it is
 * ready, and starts on one signal; a run lasts from that signal to the
 * last writer's last entry durable (committed, for the ledger). Rounds are
 * interleaved over the six shapes and every round is printed. */
#include <poll.h>
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

#define ENTRY 1200
#define MAX_ROUNDS 32

static const unsigned writer_counts[] = {1, 8, 64};
#define NCOUNTS (sizeof(writer_counts) / sizeof(writer_counts[0]))

struct child_result {
	uint64_t end_ns;
	int rc;
};

/* A writer is connected: wait for the start signal. */
static const struct wimm_ctx_attr tput_ctx_attr = {.liveness_ms = LOG_BENCH_LIVENESS_MS};

static int log_bench_ready(void);
/* A writer's last entry is durable (or it failed): when. */
static void log_bench_done(int rc);

/* One writer process's appends: n entries, then the last one durable. */
static int child_appends(const char *fabric, const char *addr, unsigned flags, uint64_t id,
			 unsigned n)
{
	struct wimm_ctx *ctx;
	struct wimm_log_writer *w = NULL;
	unsigned char buf[ENTRY];
	uint64_t seq = 0;
	log_gen_fill(buf, sizeof(buf), id, 1);
	int rc = wimm_ctx_open(fabric, &tput_ctx_attr, &ctx);
	if (rc)
		return rc;
	struct wimm_log_writer_attr a = {.id = id, .timeout_ms = 60000, .flags = flags};
	rc = wimm_log_writer_open(ctx, addr, &a, &w);
	/* Ready even when it failed: the parent counts every writer in. */
	if (log_bench_ready() == 0)
		for (unsigned i = 0; i < n && !rc; i++)
			rc = wimm_log_append(w, buf, sizeof(buf), WIMM_LOG_WAIT, &seq);
	if (!rc)
		rc = wimm_log_wait(w, seq, WIMM_LOG_DURABLE, 60000);
	log_bench_done(rc);
	wimm_log_writer_close(&w, 1000);
	wimm_ctx_close(&ctx);
	return rc;
}

/* The same through a ledger on the three servers, committed at Qa = 2. */
static int child_ledger(const char *fabric, const char *const *addrs, uint64_t id, unsigned n)
{
	struct wimm_ctx *ctx[3] = {0};
	struct wimm_log_ledger *l = NULL;
	unsigned char buf[ENTRY];
	uint64_t seq = 0;
	int rc = 0;
	log_gen_fill(buf, sizeof(buf), id, 1);
	for (int i = 0; i < 3 && !rc; i++)
		rc = wimm_ctx_open(fabric, &tput_ctx_attr, &ctx[i]);
	struct wimm_log_ledger_attr a = {.id = id, .ack_quorum = 2, .timeout_ms = 60000};
	if (!rc)
		rc = wimm_log_ledger_open(ctx, addrs, 3, &a, &l);
	if (log_bench_ready() == 0)
		for (unsigned i = 0; i < n && !rc; i++)
			rc = wimm_log_ledger_append(l, buf, sizeof(buf), &seq);
	if (!rc)
		rc = wimm_log_ledger_wait(l, seq, 60000);
	log_bench_done(rc);
	wimm_log_ledger_close(&l, 1000);
	for (int i = 0; i < 3; i++)
		wimm_ctx_close(&ctx[i]);
	return rc;
}

/* Pipes shared by the parent and the writers of one run. */
static int ready_fd[2], go_fd[2], result_fd[2];

/* A writer is connected: wait for the start signal. */
static int log_bench_ready(void)
{
	char c = 'r';
	if (write(ready_fd[1], &c, 1) != 1 || read(go_fd[0], &c, 1) != 1)
		return -1;
	return 0;
}

/* A writer's last entry is durable (or it failed): when. */
static void log_bench_done(int rc)
{
	struct child_result r = {.end_ns = cli_now_ns(), .rc = rc};
	if (write(result_fd[1], &r, sizeof(r)) != (ssize_t)sizeof(r))
		_exit(3);
}

/* read(2) of len bytes that gives up after 120 s (a writer that hangs). */
static int read_within(int fd, void *buf, size_t len)
{
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	return poll(&pf, 1, 120000) == 1 && read(fd, buf, len) == (ssize_t)len;
}

/* One run: w writer processes, n entries each; entries per second, or -1. */
enum target { ONE_SERVER, SHARED_RING, LEDGER, NTARGETS };
static const char *const target_name[NTARGETS] = {"one server", "shared ring", "ledger E=3 Qa=2"};

static double run_once(const struct log_bench_servers *sv, enum target t, unsigned w, unsigned n,
		       uint64_t id_base)
{
	pid_t pids[64];
	if (pipe(ready_fd) || pipe(go_fd) || pipe(result_fd))
		cli_die("log bench: pipe");
	fflush(stdout);
	for (unsigned i = 0; i < w; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			uint64_t id = id_base + i;
			int rc = t == LEDGER ? child_ledger(sv->fabric, sv->ensemble, id, n)
				 : t == SHARED_RING
				     ? child_appends(sv->fabric, sv->shared, WIMM_LOG_WRITER_SHARED,
						     id, n)
				     : child_appends(sv->fabric, sv->single, 0, id, n);
			_exit(rc ? 1 : 0);
		}
	}
	int ok = 1;
	char c;
	for (unsigned i = 0; i < w && ok; i++)
		ok = read_within(ready_fd[0], &c, 1);
	uint64_t t0 = cli_now_ns(), end = t0;
	for (unsigned i = 0; i < w && ok; i++)
		ok = write(go_fd[1], "g", 1) == 1;
	for (unsigned i = 0; i < w && ok; i++) {
		struct child_result r = {.rc = WIMM_E_TIMEDOUT};
		ok = read_within(result_fd[0], &r, sizeof(r)) && r.rc == 0;
		if (!ok)
			fprintf(stderr, "wimm: log bench: a writer failed: %s\n",
				wimm_strerror(r.rc));
		if (r.end_ns > end)
			end = r.end_ns;
	}
	for (int i = 0; i < 6; i++)
		close(i < 2 ? ready_fd[i] : i < 4 ? go_fd[i - 2] : result_fd[i - 4]);
	for (unsigned i = 0; i < w; i++) {
		int st;
		if (!ok)
			kill(pids[i], SIGKILL);
		waitpid(pids[i], &st, 0);
		ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
	}
	return ok && end > t0 ? (double)w * n / ((double)(end - t0) / 1e9) : -1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

void log_bench_tput(const struct log_bench_servers *sv, unsigned total, unsigned rounds)
{
	double r[NTARGETS][NCOUNTS][MAX_ROUNDS];
	if (rounds > MAX_ROUNDS)
		rounds = MAX_ROUNDS;
	for (unsigned k = 0; k < rounds; k++)
		for (int t = 0; t < NTARGETS; t++)
			for (size_t c = 0; c < NCOUNTS; c++) {
				unsigned w = writer_counts[c], n = total / w ? total / w : 1;
				uint64_t id = 0x70000000ull + ((uint64_t)k << 16) +
					      ((uint64_t)t << 12) + ((uint64_t)c << 8);
				r[t][c][k] = run_once(sv, (enum target)t, w, n, id);
			}
	printf("\nthroughput: %u entries of %d B per run split over the writers (separate "
	       "processes), from the start signal to the last entry durable (ledger: "
	       "committed at Qa=2 of E=3); %u rounds interleaved, entries/s\n",
	       total, ENTRY, rounds);
	printf("| target | writers | median | MB/s | every round |\n|---|---:|---:|---:|---|\n");
	for (int t = 0; t < NTARGETS; t++)
		for (size_t c = 0; c < NCOUNTS; c++) {
			/* The median of the rounds that completed; every round shown,
			 * a failed one as such. */
			double s[MAX_ROUNDS];
			char all[MAX_ROUNDS * 12] = "";
			unsigned ok = 0;
			for (unsigned k = 0; k < rounds; k++) {
				size_t used = strlen(all);
				double v = r[t][c][k];
				if (v >= 0)
					s[ok++] = v;
				if (v >= 0)
					snprintf(all + used, sizeof(all) - used, "%s%.0f",
						 k ? ", " : "", v);
				else
					snprintf(all + used, sizeof(all) - used, "%sfailed",
						 k ? ", " : "");
			}
			qsort(s, ok, sizeof(double), cmp_double);
			double med = !ok ? 0 : ok % 2 ? s[ok / 2] : (s[ok / 2 - 1] + s[ok / 2]) / 2;
			const char *target = target_name[t];
			if (ok)
				printf("| %s | %u | %.0f | %.1f | %s |\n", target, writer_counts[c],
				       med, med * ENTRY / 1e6, all);
			else
				printf("| %s | %u | failed | failed | %s |\n", target,
				       writer_counts[c], all);
		}
}
