/* The parameter server as separate processes: a server (libwimm_ps in a
 * child process of this test, checking every update it applies, or the
 * `wimm ps serve` command) and `wimm ps worker` processes, over a real
 * fabric.
 *
 *   ps_test WIMM FABRIC sums | backup | async | worker_kill | worker_kill_backup |
 *                        server_kill | bad_input | hostile
 *
 * sums:    8 workers x 32 shards x 200 iterations with random pauses; every
 *          applied update is exactly the sum of that iteration's pushes (the
 *          server recomputes it, every worker checks what it pulls).
 * backup:  the same with one backup worker: every update is the exact sum of
 *          the 7 pushes it took, the late ones are dropped as stale and
 *          counted, and every push is accounted for.
 * async:   every push applied on arrival, bounded staleness 2: each update
 *          is exactly one push, the too old ones dropped and counted.
 * worker_kill[_backup]: a worker SIGKILLed mid-training: without a backup
 *          the server reports that it waits for it (and the others are told);
 *          with one the others finish.
 * split:   one model over two servers (--first-shard): every pull exact.
 * worker_rejoin: a killed worker started again under its rank: the stall
 *          ends and every worker finishes.
 * server_kill: every worker reports the server's death within the liveness
 *          bound.
 * bad_input, hostile: ps_test_raw.c. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ps_test.h"

const char *wimm_bin, *fabric;
int inband_hello;
/* The workers' liveness bound, times the scale: a slow machine's loops are
 * slow to answer. */
#define WORKER_LIVENESS_MS 2000
static char tmpdir[256];
static int kill_sig = SIGKILL;

/* ------------------------------------------------------------ utilities */

void spawn(struct proc *p, const char *name, char *const argv[])
{
	memset(p, 0, sizeof(*p));
	p->status = -1;
	snprintf(p->out, sizeof(p->out), "%s/%s.out", tmpdir, name);
	snprintf(p->err, sizeof(p->err), "%s/%s.err", tmpdir, name);
	/* Opened (and emptied) before the child runs: the caller may read
	 * p->out at once for the line a server prints. */
	int out = open(p->out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int err = open(p->err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out < 0 || err < 0)
		die("cannot create %s: %s", p->out, strerror(errno));
	fflush(NULL);
	p->pid = fork();
	if (p->pid < 0)
		die("cannot start %s: %s", argv[0], strerror(errno));
	if (p->pid == 0) {
		/* A test killed by ctest's timeout must not leave its servers
		 * and workers running. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (dup2(out, 1) < 0 || dup2(err, 2) < 0)
			_exit(126);
		execv(argv[0], argv);
		_exit(127);
	}
	close(out);
	close(err);
}

/* 1 when p has ended (its status recorded), 0 while it runs. */
static int reaped(struct proc *p)
{
	int st;
	if (p->status >= 0)
		return 1;
	if (waitpid(p->pid, &st, WNOHANG) != p->pid)
		return 0;
	p->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	p->ended_ms = now_ms();
	return 1;
}

/* Wait up to ms for all n to end; the number still running. */
int wait_all(struct proc *p, int n, int ms)
{
	int64_t until = now_ms() + (int64_t)ms * scale();
	int running;
	do {
		running = 0;
		for (int i = 0; i < n; i++)
			running += !reaped(&p[i]);
		if (running)
			sleep_ms(20);
	} while (running && now_ms() < until);
	return running;
}

void stop_all(struct proc *p, int n)
{
	for (int i = 0; i < n; i++)
		if (!reaped(&p[i])) {
			kill(p[i].pid, SIGKILL);
			waitpid(p[i].pid, NULL, 0);
			p[i].status = 137;
		}
}

void show(const struct proc *p, const char *who)
{
	char buf[4096];
	slurp(p->err, buf, sizeof(buf));
	fprintf(stderr, "--- %s (status %d) stderr:\n%s", who, p->status, buf);
}

const char *test_listen_addr(void)
{
	static char addr[80];
	snprintf(addr, sizeof(addr), "%s:0", test_host());
	return addr;
}

/* The statistics of the server at port, waiting for it to answer. */
void stats_of(int port, struct wimm_ps_stats *st)
{
	char addr[64];
	snprintf(addr, sizeof(addr), "%s:%d", test_host(), port);
	int64_t until = now_ms() + 20000 * scale();
	int rc;
	while ((rc = wimm_ps_stat(fabric, addr, 5000, st)) < 0 && now_ms() < until)
		sleep_ms(100);
	if (rc < 0)
		die("no statistics from the server at %s: %s", addr, wimm_strerror(rc));
}

/* ------------------------------------------------------- the servers */

/* The server in a child process: libwimm_ps, checking each update. */
struct check {
	uint32_t workers, required; /* contributions each update must have */
	unsigned long bad;
};

static void check_apply(void *arg, uint32_t shard, uint32_t iter, const float *sum, size_t n,
			const uint64_t *got)
{
	struct check *c = arg;
	uint32_t count = 0;
	for (uint32_t w = 0; w < c->workers; w++)
		count += (got[w / 64] >> (w % 64)) & 1;
	if (count != c->required) {
		if (c->bad++ < 5)
			fprintf(stderr,
				"server: shard %u iteration %u: %u contributions, want %u\n", shard,
				iter, count, c->required);
		return;
	}
	for (size_t j = 0; j < n; j++) {
		float want = 0;
		for (uint32_t w = 0; w < c->workers; w++)
			if ((got[w / 64] >> (w % 64)) & 1)
				want += ps_test_grad(w, shard, j, iter);
		if (sum[j] != want) {
			if (c->bad++ < 5)
				fprintf(stderr,
					"server: shard %u iteration %u [%zu]: sum %g, the pushes "
					"add up to %g\n",
					shard, iter, j, sum[j], want);
			return;
		}
	}
}

static volatile sig_atomic_t server_stop;

static void on_term(int sig)
{
	(void)sig;
	server_stop = 1;
}

/* Fork the checking server; its port comes back through a pipe. */
static int checking_server(struct proc *p, struct wimm_ps_server_attr *a)
{
	int fd[2];
	memset(p, 0, sizeof(*p));
	p->status = -1;
	if (pipe(fd))
		die("pipe: %s", strerror(errno));
	fflush(NULL);
	p->pid = fork();
	if (p->pid < 0)
		die("fork: %s", strerror(errno));
	if (p->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		struct check c = {a->workers,
				  a->mode == WIMM_PS_ASYNC ? 1 : a->workers - a->backups, 0};
		struct wimm_ps_server *s = NULL;
		signal(SIGTERM, on_term);
		a->on_apply = check_apply;
		a->apply_arg = &c;
		int rc = wimm_ps_server_new(a, &s), port = rc < 0 ? rc : wimm_ps_server_port(s);
		if (write(fd[1], &port, sizeof(port)) != sizeof(port) || rc < 0)
			_exit(1);
		while (!server_stop && wimm_ps_server_run(s, 50) >= 0)
			;
		wimm_ps_server_delete(&s);
		if (c.bad)
			fprintf(stderr, "server: %lu updates were not the sum of their pushes\n",
				c.bad);
		_exit(c.bad ? 1 : 0);
	}
	close(fd[1]);
	int port = -1;
	if (read(fd[0], &port, sizeof(port)) != sizeof(port) || port <= 0)
		die("the checking server did not start (%d)", port);
	close(fd[0]);
	return port;
}

/* `wimm ps serve` on a free port (the last one of the test's range). */
/* The --first-shard of the next serve_cmd (split models). */
static const char *serve_first = "0";

int serve_cmd(struct proc *p, const char *shards, const char *size, const char *workers,
	      const char *backups, const char *liveness)
{
	char port[] = "0"; /* any free port: the command prints it */
	char live[16];
	snprintf(live, sizeof(live), "%d", atoi(liveness) * scale());
	char *argv[] = {(char *)wimm_bin,
			"ps",
			"serve",
			"-f",
			(char *)fabric,
			"--port",
			port,
			"--shards",
			(char *)shards,
			"--shard-size",
			(char *)size,
			"--workers",
			(char *)workers,
			"--backups",
			(char *)backups,
			"--stall-ms",
			"300",
			"--liveness-ms",
			live,
			"--first-shard",
			(char *)serve_first,
			NULL};
	spawn(p, "server", argv);
	int64_t until = now_ms() + 20000 * scale();
	for (;;) {
		char out[512];
		const char *at;
		int got = 0;
		slurp(p->out, out, sizeof(out));
		if ((at = strstr(out, ", port ")) && sscanf(at, ", port %d", &got) == 1 && got > 0)
			return got;
		if (reaped(p) || now_ms() > until) {
			show(p, "server");
			die("wimm ps serve did not start");
		}
		sleep_ms(20);
	}
}

void workers_from(struct proc *w, int first_rank, int n, int port, const char *iters,
		  const char *delay, int check, const char *timeout)
{
	char addr[64], rank[16], name[32], live[16];
	snprintf(addr, sizeof(addr), "%s:%d", test_host(), port);
	snprintf(live, sizeof(live), "%d", WORKER_LIVENESS_MS * scale());
	char wait[16]; /* the pull's timeout, scaled likewise */
	snprintf(wait, sizeof(wait), "%d", atoi(timeout) * scale());
	for (int k = 0; k < n; k++) {
		int r = first_rank + k;
		snprintf(rank, sizeof(rank), "%d", r);
		snprintf(name, sizeof(name), "worker%d", r);
		char *argv[] = {(char *)wimm_bin,
				"ps",
				"worker",
				"-f",
				(char *)fabric,
				"--rank",
				rank,
				"--iterations",
				(char *)iters,
				"--delay-ms",
				(char *)delay,
				"--seed",
				"11",
				"--timeout",
				wait,
				"--liveness-ms",
				live,
				addr,
				NULL,
				NULL,
				NULL};
		size_t at = sizeof(argv) / sizeof(argv[0]) - 3;
		if (check)
			argv[at++] = "--check";
		if (inband_hello)
			argv[at++] = "--inband-hello";
		spawn(&w[k], name, argv);
	}
}

/* The pushes a worker reported in its summary line. */
static unsigned long long pushes_of(const struct proc *p)
{
	char buf[1024];
	unsigned long long steps = 0, pushes = 0;
	unsigned rank, shards, size;
	slurp(p->out, buf, sizeof(buf));
	if (sscanf(buf, "wimm ps worker %u: %llu steps of %u shards x %u B, %llu pushes", &rank,
		   &steps, &shards, &size, &pushes) != 5)
		return 0;
	return pushes;
}

/* ----------------------------------------------------------- scenarios */

/* Wait until every shard of the server at port has had `at_least` updates
 * (st: its statistics then); 0, or -1 after 30 s. */
static int wait_iteration(int port, uint64_t at_least, struct wimm_ps_stats *st)
{
	int64_t until = now_ms() + 30000 * scale();
	do {
		sleep_ms(50);
		stats_of(port, st);
	} while (st->iteration_min < at_least && now_ms() < until);
	return st->iteration_min >= at_least ? 0 : -1;
}

/* Wait until the server at port reports a stall waiting for exactly the
 * workers of mask (st: its statistics then); 0, or -1 after 20 s. */
static int wait_stall(int port, uint64_t mask, struct wimm_ps_stats *st)
{
	int64_t until = now_ms() + 20000 * scale();
	do {
		sleep_ms(50);
		stats_of(port, st);
	} while (!(st->stalls && st->waiting[0] == mask) && now_ms() < until);
	return st->stalls && st->waiting[0] == mask ? 0 : -1;
}

/* Every worker but rank `skip` (-1: none) ended with status 0, the stderr
 * of those that did not shown; the pushes they reported added to *sent
 * (NULL: not counted). 0, or -1 with the failure said. */
static int workers_ok(struct proc *w, int n, int skip, unsigned long long *sent)
{
	for (int r = 0; r < n; r++) {
		if (r == skip)
			continue;
		if (w[r].status != 0)
			show(&w[r], "worker");
		CHECK(w[r].status == 0, "worker %d ended with status %d", r, w[r].status);
		if (sent)
			*sent += pushes_of(&w[r]);
	}
	return 0;
}

/* The end of a run against the checking server at port: the n workers
 * waited for (up to ms), the server's statistics into st, the server told
 * to stop, whatever still runs killed. How many workers had not ended. */
static int end_checked_run(struct proc *srv, int port, struct proc *w, int n, int ms,
			   struct wimm_ps_stats *st)
{
	int left = wait_all(w, n, ms);
	stats_of(port, st);
	kill(srv->pid, SIGTERM);
	wait_all(srv, 1, 20000);
	stop_all(w, n);
	stop_all(srv, 1);
	return left;
}

/* The kill scenarios' run: `wimm ps serve` (8 shards of 4 KiB, liveness
 * 2 s, backups b) and its n workers (iterations, pause, pull timeout as
 * workers_from), until every shard has had `at` updates (st: the server's
 * statistics then). The port, or -1 when training made no progress. */
static int start_training(struct proc *srv, struct proc *w, int n, int b, const char *iters,
			  const char *delay, const char *timeout, uint64_t at,
			  struct wimm_ps_stats *st)
{
	char workers[8], backups[8];
	snprintf(workers, sizeof(workers), "%d", n);
	snprintf(backups, sizeof(backups), "%d", b);
	int port = serve_cmd(srv, "8", "4096", workers, backups, "2000");
	workers_from(w, 0, n, port, iters, delay, 0, timeout);
	CHECK(wait_iteration(port, at, st) == 0, "no progress: iteration %llu",
	      (unsigned long long)st->iteration_min);
	return port;
}

static int shape(const char *env, int dflt)
{
	const char *v = getenv(env);
	return v && atoi(v) > 0 ? atoi(v) : dflt;
}

/* 8 workers x 32 shards x 200 iterations, with `backups` backup workers. */
static int t_sums(int backups)
{
	int nw = shape("WIMM_PS_TEST_WORKERS", 8), iters = shape("WIMM_PS_TEST_ITERATIONS", 200);
	struct wimm_ps_server_attr a = {.fabric = fabric,
					.addr = test_listen_addr(),
					.shards = 32,
					.shard_size = 1024,
					.workers = (uint32_t)nw,
					.backups = (uint32_t)backups,
					.liveness_ms = 4000 * (uint32_t)scale()};
	struct proc srv, w[WIMM_PS_MAX_WORKERS];
	struct wimm_ps_stats st;
	char it[16];
	snprintf(it, sizeof(it), "%d", iters);
	int port = checking_server(&srv, &a);
	workers_from(w, 0, nw, port, it, "3", backups == 0, "30000");
	int left = end_checked_run(&srv, port, w, nw, 240000, &st);
	unsigned long long sent = 0;
	if (workers_ok(w, nw, -1, &sent))
		return -1;
	CHECK(left == 0, "%d workers still running", left);
	if (srv.status != 0)
		show(&srv, "server");
	CHECK(srv.status == 0, "the server found updates that were not the sum of their pushes");
	printf("server: applied %llu, pushes %llu, stale %llu, duplicates %llu; workers sent "
	       "%llu; iterations %llu..%llu\n",
	       (unsigned long long)st.applied, (unsigned long long)st.pushes,
	       (unsigned long long)st.stale, (unsigned long long)st.duplicates, sent,
	       (unsigned long long)st.iteration_min, (unsigned long long)st.iteration_max);
	CHECK(st.pushes + st.stale + st.duplicates == sent,
	      "pushes %llu + stale %llu + duplicates %llu != %llu sent",
	      (unsigned long long)st.pushes, (unsigned long long)st.stale,
	      (unsigned long long)st.duplicates, sent);
	CHECK(st.pushes == st.applied * (uint64_t)(nw - backups), "%llu pushes for %llu updates",
	      (unsigned long long)st.pushes, (unsigned long long)st.applied);
	CHECK(st.iteration_min >= (uint64_t)iters, "a shard only reached iteration %llu",
	      (unsigned long long)st.iteration_min);
	CHECK(st.bad_shard + st.bad_worker + st.bad_length + st.future == 0, "bad input counted");
	if (backups == 0) {
		CHECK(st.stale == 0 && st.applied == 32ull * (uint64_t)iters,
		      "stale %llu, applied %llu", (unsigned long long)st.stale,
		      (unsigned long long)st.applied);
	} else {
		/* The eighth push of an iteration always comes after the
		 * update. */
		CHECK(st.stale > 0, "no push was stale with %d backup(s)", backups);
	}
	return 0;
}

/* Asynchronous with bounded staleness: every update is exactly one push's
 * gradient, pushes on parameters too old are dropped and counted, every
 * push is accounted for. */
static int t_async(void)
{
	struct wimm_ps_server_attr a = {.fabric = fabric,
					.addr = test_listen_addr(),
					.shards = 8,
					.shard_size = 1024,
					.workers = 4,
					.mode = WIMM_PS_ASYNC,
					.staleness = 2,
					.liveness_ms = 4000 * (uint32_t)scale()};
	struct proc srv, w[4];
	struct wimm_ps_stats st;
	int port = checking_server(&srv, &a);
	workers_from(w, 0, 4, port, "300", "2", 0, "30000");
	int left = end_checked_run(&srv, port, w, 4, 120000, &st);
	unsigned long long sent = 0;
	if (workers_ok(w, 4, -1, &sent))
		return -1;
	CHECK(left == 0, "%d workers still running", left);
	if (srv.status != 0)
		show(&srv, "server");
	CHECK(srv.status == 0, "an update was not exactly its push");
	printf("server: applied %llu, pushes %llu, stale %llu; workers sent %llu\n",
	       (unsigned long long)st.applied, (unsigned long long)st.pushes,
	       (unsigned long long)st.stale, sent);
	CHECK(st.pushes == st.applied && st.pushes + st.stale + st.duplicates == sent,
	      "applied %llu, pushes %llu + stale %llu + duplicates %llu, sent %llu",
	      (unsigned long long)st.applied, (unsigned long long)st.pushes,
	      (unsigned long long)st.stale, (unsigned long long)st.duplicates, sent);
	CHECK(st.iteration_min >= 300, "a shard only had %llu updates",
	      (unsigned long long)st.iteration_min);
	return 0;
}

/* A worker killed mid-training, with or without a backup worker. */
static int t_worker_kill(int backups)
{
	struct proc srv, w[4];
	struct wimm_ps_stats st;
	int port =
	    start_training(&srv, w, 4, backups, backups ? "400" : "1000000", "2", "4000", 30, &st);
	if (port < 0)
		return -1;
	kill(w[2].pid, kill_sig);
	int64_t killed = now_ms();
	if (backups) {
		int left = wait_all(w, 4, 120000);
		stats_of(port, &st);
		stop_all(w, 4);
		stop_all(&srv, 1);
		CHECK(left == 0, "the workers did not finish with a backup");
		if (workers_ok(w, 4, 2, NULL))
			return -1;
		CHECK(st.iteration_min >= 400, "iteration %llu",
		      (unsigned long long)st.iteration_min);
		CHECK(st.workers_lost >= 1, "the dead worker was not reported");
		printf("worker 2 killed at iteration 30+; the other 3 finished 400 iterations\n");
		return 0;
	}
	/* No backup: the server says whom it waits for, the workers hear it. */
	wait_stall(port, 1u << 2, &st);
	printf("stall reported after %lld ms: shard %llu iteration %llu waits for mask %llx\n",
	       (long long)(now_ms() - killed), (unsigned long long)st.stalled_shard,
	       (unsigned long long)st.stalled_iteration, (unsigned long long)st.waiting[0]);
	CHECK(st.stalls > 0 && st.waiting[0] == (1u << 2), "no stall report naming worker 2");
	int left = wait_all(w, 4, 30000);
	stop_all(w, 4);
	kill(srv.pid, SIGTERM);
	wait_all(&srv, 1, 10000);
	stop_all(&srv, 1);
	CHECK(left == 0, "workers still waiting after their timeout");
	for (int r = 0; r < 4; r++) {
		char err[4096];
		if (r == 2)
			continue;
		slurp(w[r].err, err, sizeof(err));
		CHECK(w[r].status == 1 && strstr(err, "waits for worker 2"),
		      "worker %d: status %d, said: %s", r, w[r].status, err);
	}
	return 0;
}

/* One model split over two servers (shards 0..7 and 8..15): workers join
 * both, and every pull is the exact sum. */
static int t_split(void)
{
	struct proc srv[2], w[3];
	char a0[64], a1[64], rank[3][8];
	int port[2];
	for (int k = 0; k < 2; k++) {
		serve_first = k ? "8" : "0";
		port[k] = serve_cmd(&srv[k], "8", "1024", "3", "0", "4000");
	}
	serve_first = "0";
	snprintf(a0, sizeof(a0), "%s:%d", test_host(), port[0]);
	snprintf(a1, sizeof(a1), "%s:%d", test_host(), port[1]);
	for (int r = 0; r < 3; r++) {
		char name[16];
		snprintf(rank[r], sizeof(rank[r]), "%d", r);
		snprintf(name, sizeof(name), "split%d", r);
		/* The servers in either order: the worker sorts them. */
		char *argv[] = {(char *)wimm_bin,
				"ps",
				"worker",
				"-f",
				(char *)fabric,
				"--rank",
				rank[r],
				"--iterations",
				"100",
				"--delay-ms",
				"2",
				"--check",
				r % 2 ? a1 : a0,
				r % 2 ? a0 : a1,
				NULL};
		spawn(&w[r], name, argv);
	}
	int left = wait_all(w, 3, 120000);
	struct wimm_ps_stats st[2];
	stats_of(port[0], &st[0]);
	stats_of(port[1], &st[1]);
	stop_all(w, 3);
	stop_all(srv, 2);
	CHECK(left == 0, "%d workers still running", left);
	if (workers_ok(w, 3, -1, NULL))
		return -1;
	for (int k = 0; k < 2; k++)
		CHECK(st[k].first_shard == 8u * (unsigned)k && st[k].iteration_min >= 100 &&
			  st[k].pushes == 3 * st[k].applied,
		      "server %d: first %llu, iteration %llu", k,
		      (unsigned long long)st[k].first_shard,
		      (unsigned long long)st[k].iteration_min);
	printf("two servers, 8 shards each: 3 workers, 100 checked iterations\n");
	return 0;
}

/* A worker killed and started again under its rank: the stall ends, all
 * finish. */
static int t_worker_rejoin(void)
{
	struct proc srv, w[4];
	struct wimm_ps_stats st;
	int port = start_training(&srv, w, 3, 0, "200", "5", "15000", 20, &st);
	if (port < 0)
		return -1;
	CHECK(st.iteration_min < 200, "iteration %llu at the kill",
	      (unsigned long long)st.iteration_min);
	kill(w[1].pid, kill_sig);
	CHECK(wait_stall(port, 1u << 1, &st) == 0, "no stall report naming worker 1");
	wait_all(&w[1], 1, 10000);
	workers_from(&w[3], 1, 1, port, "200", "5", 0, "15000");
	int left = wait_all(w, 4, 120000);
	stats_of(port, &st);
	stop_all(w, 4);
	stop_all(&srv, 1);
	CHECK(left == 0, "%d workers still running", left);
	if (workers_ok(w, 4, 1, NULL))
		return -1;
	CHECK(st.iteration_min >= 200 && st.workers_lost >= 1, "iteration %llu, lost %llu",
	      (unsigned long long)st.iteration_min, (unsigned long long)st.workers_lost);
	printf("worker 1 killed at iteration 20+, stalled, rejoined: all finished 200\n");
	return 0;
}

/* The server killed: every worker says so within the liveness bound. */
static int t_server_kill(void)
{
	struct proc srv, w[4];
	struct wimm_ps_stats st;
	int port = start_training(&srv, w, 4, 0, "1000000", "1", "60000", 20, &st);
	if (port < 0)
		return -1;
	int64_t killed = now_ms();
	kill(srv.pid, kill_sig);
	int left = wait_all(w, 4, 2000 + 8000);
	stop_all(w, 4);
	stop_all(&srv, 1);
	CHECK(left == 0, "%d workers did not notice the server's death", left);
	for (int r = 0; r < 4; r++) {
		int64_t after = w[r].ended_ms - killed;
		printf("worker %d: status %d, %lld ms after the kill\n", r, w[r].status,
		       (long long)after);
		if (w[r].status != 3)
			show(&w[r], "worker");
		CHECK(w[r].status == 3, "worker %d: status %d, not 'server lost'", r, w[r].status);
		CHECK(after <= (2000 + 1500) * scale(), "worker %d took %lld ms (liveness %d)", r,
		      (long long)after, WORKER_LIVENESS_MS * scale());
	}
	remove_stale_shm();
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s WIMM FABRIC SCENARIO\n", argv[0]);
		return 2;
	}
	wimm_bin = argv[1];
	fabric = argv[2];
	char t[64];
	/* SCENARIO_inband: every hello in-band, as on verbs. */
	snprintf(t, sizeof(t), "%s", argv[3]);
	char *suffix = strstr(t, "_inband");
	if (suffix && !suffix[strlen("_inband")]) {
		*suffix = '\0';
		inband_hello = 1;
	}
	const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	snprintf(tmpdir, sizeof(tmpdir), "%s/ps_test.XXXXXX", base);
	if (!mkdtemp(tmpdir))
		die("mkdtemp %s: %s", tmpdir, strerror(errno));
	if (!strcmp(fabric, "ofi:shm")) {
		/* See ps_cmd.c: a SIGKILL inside a shm call leaves peers
		 * spinning; the command kills itself between calls instead. */
		setenv("WIMM_PS_CRASH_ON_USR1", "1", 1);
		kill_sig = SIGUSR1;
		remove_stale_shm();
	}
	int rc;
	if (!strcmp(t, "sums"))
		rc = t_sums(0);
	else if (!strcmp(t, "backup"))
		rc = t_sums(1);
	else if (!strcmp(t, "async"))
		rc = t_async();
	else if (!strcmp(t, "worker_kill"))
		rc = t_worker_kill(0);
	else if (!strcmp(t, "worker_kill_backup"))
		rc = t_worker_kill(1);
	else if (!strcmp(t, "split"))
		rc = t_split();
	else if (!strcmp(t, "worker_rejoin"))
		rc = t_worker_rejoin();
	else if (!strcmp(t, "server_kill"))
		rc = t_server_kill();
	else if (!strcmp(t, "bad_input"))
		rc = t_bad_input();
	else if (!strcmp(t, "hostile"))
		rc = t_hostile();
	else
		die("unknown scenario '%s'", t);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (rc == 0 && system(cmd) != 0)
		fprintf(stderr, "note: %s left behind\n", tmpdir);
	printf("%s %s: %s\n", t, fabric, rc == 0 ? "ok" : "FAILED");
	return rc == 0 ? 0 : 1;
}
