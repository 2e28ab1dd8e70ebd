/* `wimm ps`: the parameter server (include/wimm/ps.h).
 *
 *   wimm ps serve --shards N --shard-size BYTES --workers N [--backups B]
 *                 [--first-shard F] [--async] [--staleness S]
 *                 [--update sum|average|sgd] [--lr X] [-f FABRIC] [--port P]
 *                 [--stall-ms MS] [--liveness-ms MS] [-v]
 *   wimm ps stat [-f FABRIC] HOST[:PORT]
 *   wimm ps worker [-f FABRIC] [--rank R] [--world N] [--iterations I]
 *                  [--delay-ms MAX] [--seed S] [--check] [--timeout MS]
 *                  [--liveness-ms MS] [--inband-hello] [HOST[:PORT] ...]
 *
 * The worker pushes the deterministic gradients of ps_grad.c (for tests and
 * benchmarks); rank, world size and the server's address also come from
 * the environment a launcher sets: RANK / WORLD_SIZE / MASTER_ADDR /
 * MASTER_PORT (torchrun), OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE
 * (mpirun).
 *
 * Exit status: 0 done, 1 failed, 2 bad usage, 3 (worker) a server died.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_util.h"
#include "kv_cmd.h" /* kv_parse_size */
#include "ps_cmd.h"

#define PS_EXIT_SERVER_LOST 3
#define PS_MASK ((1u << WIMM_PS_ITERATION_BITS) - 1)

static void ps_usage(FILE *f)
{
	fputs("usage: wimm ps serve --shards N --shard-size BYTES --workers N [--backups B]\n"
	      "                     [--first-shard F] [--async] [--staleness S]\n"
	      "                     [--update sum|average|sgd] [--lr X] [-f FABRIC] [--port P]\n"
	      "                     [--stall-ms MS] [--liveness-ms MS] [-v]\n"
	      "       wimm ps stat [-f FABRIC] HOST[:PORT]\n"
	      "       wimm ps worker [-f FABRIC] [--rank R] [--world N] [--iterations I]\n"
	      "                      [--delay-ms MAX] [--seed S] [--check] [--timeout MS]\n"
	      "                      [--liveness-ms MS] [--inband-hello] [HOST[:PORT] ...]\n"
	      "\n"
	      "  --shards N       shards this server holds (1..1024); --first-shard F: the\n"
	      "                   global id of its first (several servers split a model)\n"
	      "  --shard-size B   bytes per shard, K/M suffixes, a multiple of 4, <= 4M\n"
	      "  --workers N      workers per iteration (1..256); --backups B: apply at N - B\n"
	      "  --async          apply every push on arrival (--staleness S: drop pushes more\n"
	      "                   than S versions old); default: synchronous iterations\n"
	      "  --update U       sum (default), average, or sgd with --lr X (default 0.1)\n"
	      "  -f FABRIC        auto, ofi:tcp, ofi:shm, verbs:rxe0 (default auto)\n"
	      "  --port P         default 7490 (HOST without a port means it too)\n"
	      "  worker: pushes deterministic test gradients until every shard has had I\n"
	      "          updates since the server started (default 100), each step after a\n"
	      "          random pause of up to MAX ms; --check verifies that\n"
	      "          every pull is exactly the sum of all workers' pushes (sync, sum, no\n"
	      "          backups); rank / world / host default to RANK, WORLD_SIZE,\n"
	      "          MASTER_ADDR:MASTER_PORT or OMPI_COMM_WORLD_RANK / _SIZE;\n"
	      "          --inband-hello says hello once connected, as on verbs\n"
	      "exit status: 0 done, 1 failed, 2 bad usage, 3 (worker) a server died\n",
	      f);
}

static _Noreturn void bad_usage(const char *fmt, const char *arg)
{
	cli_bad_usage("wimm ps", ps_usage, fmt, arg);
}

/* A number within [lo, hi], else bad usage naming the flag. */
static uint32_t number(const char *flag, const char *val, unsigned long long lo,
		       unsigned long long hi)
{
	unsigned long long v;
	if (!val)
		bad_usage("%s needs a value", flag);
	if (kv_parse_size(val, &v) < 0 || v < lo || v > hi) {
		fprintf(stderr, "wimm ps: %s %s: must be %llu..%llu\n", flag, val, lo, hi);
		exit(2);
	}
	return (uint32_t)v;
}

/* HOST[:PORT] with the default port (or MASTER_PORT's) when none is given. */
static void host_addr(const char *host, const char *port, char *out, size_t len)
{
	cli_host_addr(host, port ? port : "7490", out, len);
}

static volatile sig_atomic_t stop, crash_flag;

/* A crash on request, for tests on ofi:shm (as `wimm log`): libfabric's shm
 * provider takes a spinlock in the peer's shared region inside its calls,
 * and a process killed while it holds one leaves the peer spinning. With
 * WIMM_PS_CRASH_ON_USR1=1, SIGUSR1 makes serve and worker SIGKILL
 * themselves between two calls into the library: as abrupt as a SIGKILL. */
static void on_crash(int sig)
{
	(void)sig;
	crash_flag = 1;
}

static void crash_setup(void)
{
	const char *e = getenv("WIMM_PS_CRASH_ON_USR1");
	if (e && !strcmp(e, "1")) {
		struct sigaction sa = {.sa_handler = on_crash};
		sigaction(SIGUSR1, &sa, NULL);
	}
}

static void crash_point(void)
{
	if (crash_flag)
		raise(SIGKILL);
}

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int verbose;

static void log_line(void *arg, enum wimm_log_level level, const char *msg)
{
	if (level <= WIMM_LOG_WARN || verbose)
		fprintf(stderr, "%s: %s\n", (const char *)arg, msg);
}

static int ps_serve(int argc, char **argv)
{
	struct wimm_ps_server_attr a = {
	    .fabric = "auto", .learning_rate = 0.1f, .log = log_line, .log_arg = "wimm ps serve"};
	uint32_t port = WIMM_PS_DEFAULT_PORT;
	char addr[64];

	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(o, "-v")) {
			verbose = 1;
			continue;
		}
		if (!strcmp(o, "--async")) {
			a.mode = WIMM_PS_ASYNC;
			continue;
		}
		if (!strcmp(o, "-h") || !strcmp(o, "--help"))
			return ps_usage(stdout), 0;
		i++;
		if (!strcmp(o, "--shards"))
			a.shards = number(o, val, 1, WIMM_PS_MAX_SHARDS);
		else if (!strcmp(o, "--first-shard"))
			a.first_shard = number(o, val, 0, WIMM_PS_MAX_SHARDS - 1);
		else if (!strcmp(o, "--shard-size"))
			a.shard_size = number(o, val, 4, WIMM_PS_MAX_SHARD_SIZE);
		else if (!strcmp(o, "--workers"))
			a.workers = number(o, val, 1, WIMM_PS_MAX_WORKERS);
		else if (!strcmp(o, "--backups"))
			a.backups = number(o, val, 0, WIMM_PS_MAX_WORKERS - 1);
		else if (!strcmp(o, "--staleness"))
			a.staleness = number(o, val, 0, (1u << (WIMM_PS_ITERATION_BITS - 1)) - 1);
		else if (!strcmp(o, "--stall-ms"))
			a.stall_ms = number(o, val, 10, 3600000);
		else if (!strcmp(o, "--liveness-ms"))
			a.liveness_ms = number(o, val, 100, 3600000);
		else if (!strcmp(o, "--port") || !strcmp(o, "-p"))
			port = number(o, val, 0, 65534);
		else if (!strcmp(o, "-f") && val)
			a.fabric = val;
		else if (!strcmp(o, "--lr") && val)
			a.learning_rate = strtof(val, NULL);
		else if (!strcmp(o, "--update") && val) {
			if (!strcmp(val, "sum"))
				a.update = WIMM_PS_SUM;
			else if (!strcmp(val, "average"))
				a.update = WIMM_PS_AVERAGE;
			else if (!strcmp(val, "sgd"))
				a.update = WIMM_PS_SGD;
			else
				bad_usage("unknown update '%s' (sum, average, sgd)", val);
		} else
			bad_usage("unknown flag or missing value: '%s'", o);
	}
	if (!a.shards || !a.shard_size || !a.workers)
		bad_usage("%s needs --shards, --shard-size and --workers", "serve");
	if (a.shard_size % 4)
		bad_usage("--shard-size %s: a multiple of 4 (float32 parameters)", "");
	if (a.backups >= a.workers)
		bad_usage("--backups must be below --workers%s", "");
	if (a.first_shard + a.shards > WIMM_PS_MAX_SHARDS)
		bad_usage("--first-shard + --shards must be at most 1024%s", "");
	snprintf(addr, sizeof(addr), "0.0.0.0:%u", port);
	a.addr = addr;
	struct wimm_ps_server *s = NULL;
	int rc = wimm_ps_server_new(&a, &s);
	if (rc < 0) {
		fprintf(stderr, "wimm ps serve: cannot serve on %s (%s): %s\n", addr, a.fabric,
			wimm_strerror(rc));
		return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	printf("wimm ps serve: %s, port %d, shards %u..%u of %u B, %u workers (%u backups), "
	       "%s\n",
	       a.fabric, wimm_ps_server_port(s), a.first_shard, a.first_shard + a.shards - 1,
	       a.shard_size, a.workers, a.backups, a.mode == WIMM_PS_ASYNC ? "async" : "sync");
	fflush(stdout);
	crash_setup();
	while (!stop && (rc = wimm_ps_server_run(s, 100)) >= 0)
		crash_point();
	if (rc < 0)
		fprintf(stderr, "wimm ps serve: %s\n", wimm_strerror(rc));
	struct wimm_ps_stats st;
	wimm_ps_server_stats(s, &st);
	ps_print_stats(stdout, &st);
	wimm_ps_server_delete(&s);
	return rc < 0 ? 1 : 0;
}

static int ps_stat(int argc, char **argv)
{
	const char *fabric = "auto", *host = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-f") && i + 1 < argc)
			fabric = argv[++i];
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return ps_usage(stdout), 0;
		else if (argv[i][0] == '-' || host)
			bad_usage("unexpected argument '%s'", argv[i]);
		else
			host = argv[i];
	}
	if (!host)
		bad_usage("%s needs HOST[:PORT]", "stat");
	char addr[300];
	struct wimm_ps_stats st;
	host_addr(host, NULL, addr, sizeof(addr));
	int rc = wimm_ps_stat(fabric, addr, 10000, &st);
	if (rc < 0) {
		fprintf(stderr, "wimm ps stat: no ps server at %s (%s): %s\n", addr, fabric,
			wimm_strerror(rc));
		return 1;
	}
	ps_print_stats(stdout, &st);
	return 0;
}

/* ---------------------------------------------------------------- worker */

struct worker_opts {
	struct wimm_ps_worker_attr a;
	const char *hosts[64];
	char addrs[64][300];
	int have_rank, world;
	uint32_t iterations, delay_ms, seed;
	int check, timeout_ms;
};

/* The first of the environment variables that is set, as a number (-1:
 * none). */
static int env_number(const char *a, const char *b)
{
	const char *v = getenv(a);
	if (!v || !*v)
		v = getenv(b);
	if (!v || !*v)
		return -1;
	char *end;
	long n = strtol(v, &end, 10);
	if (*end || n < 0 || n > 65535) {
		fprintf(stderr, "wimm ps worker: %s / %s: '%s' is not a rank or size\n", a, b, v);
		exit(2);
	}
	return (int)n;
}

static void worker_parse(int argc, char **argv, struct worker_opts *o)
{
	*o = (struct worker_opts){
	    .a = {.fabric = "auto", .log = log_line, .log_arg = "wimm ps worker"},
	    .world = -1,
	    .iterations = 100,
	    .timeout_ms = 30000};
	for (int i = 1; i < argc; i++) {
		const char *f = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(f, "--check")) {
			o->check = 1;
			continue;
		}
		if (!strcmp(f, "--inband-hello")) {
			o->a.flags |= WIMM_PS_WORKER_INBAND_HELLO;
			continue;
		}
		if (!strcmp(f, "-v")) {
			verbose = 1;
			continue;
		}
		if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
			ps_usage(stdout);
			exit(0);
		}
		if (f[0] != '-') {
			if (o->a.nservers == 64)
				bad_usage("at most 64 servers (%s)", f);
			o->hosts[o->a.nservers++] = f;
			continue;
		}
		i++;
		if (!strcmp(f, "-f") && val)
			o->a.fabric = val;
		else if (!strcmp(f, "--rank"))
			o->a.rank = number(f, val, 0, WIMM_PS_MAX_WORKERS - 1), o->have_rank = 1;
		else if (!strcmp(f, "--world"))
			o->world = (int)number(f, val, 1, WIMM_PS_MAX_WORKERS);
		else if (!strcmp(f, "--iterations"))
			o->iterations = number(f, val, 1, 100000000);
		else if (!strcmp(f, "--delay-ms"))
			o->delay_ms = number(f, val, 0, 60000);
		else if (!strcmp(f, "--seed"))
			o->seed = number(f, val, 0, UINT32_MAX);
		else if (!strcmp(f, "--timeout"))
			o->timeout_ms = (int)number(f, val, 1, 3600000);
		else if (!strcmp(f, "--liveness-ms"))
			o->a.liveness_ms = number(f, val, 100, 3600000);
		else
			bad_usage("unknown flag or missing value: '%s'", f);
	}
	if (!o->have_rank) {
		int r = env_number("RANK", "OMPI_COMM_WORLD_RANK");
		if (r < 0)
			bad_usage("no rank: --rank R, or RANK / OMPI_COMM_WORLD_RANK%s", "");
		if (r >= (int)WIMM_PS_MAX_WORKERS)
			bad_usage("rank %s is above 255", getenv("RANK") ? getenv("RANK") : "");
		o->a.rank = (uint32_t)r;
	}
	if (o->world < 0)
		o->world = env_number("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE");
	if (!o->a.nservers) {
		const char *h = getenv("MASTER_ADDR");
		if (!h || !*h)
			bad_usage("no server: HOST[:PORT], or MASTER_ADDR [MASTER_PORT]%s", "");
		host_addr(h, getenv("MASTER_PORT"), o->addrs[0], sizeof(o->addrs[0]));
		o->a.nservers = 1;
	} else {
		for (uint32_t k = 0; k < o->a.nservers; k++)
			host_addr(o->hosts[k], NULL, o->addrs[k], sizeof(o->addrs[k]));
	}
	for (uint32_t k = 0; k < o->a.nservers; k++)
		o->hosts[k] = o->addrs[k];
	o->a.servers = o->hosts;
	o->a.timeout_ms = o->timeout_ms;
}

static void sleep_ms(uint32_t ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* With --check: every element of every shard is the sum of all workers'
 * gradients for the iteration pushed. */
static int check_sums(const struct wimm_ps_worker_info *in, const uint64_t *pushed_iter,
		      uint32_t rank)
{
	size_t per = in->shard_size / sizeof(float);
	for (uint32_t s = 0; s < in->shards; s++)
		for (size_t j = 0; j < per; j++) {
			float want = 0;
			for (uint32_t w = 0; w < in->workers; w++)
				want += ps_test_grad(w, s, j, (uint32_t)(pushed_iter[s] & PS_MASK));
			float got = in->params[(size_t)s * per + j];
			if (got != want) {
				fprintf(
				    stderr,
				    "wimm ps worker %u: shard %u iteration %llu element %zu: %g, "
				    "the sum of the pushes is %g\n",
				    rank, s, (unsigned long long)pushed_iter[s], j, got, want);
				return -1;
			}
		}
	return 0;
}

static int worker_fail(struct wimm_ps_worker *w, uint32_t rank, int rc, const char *what)
{
	struct wimm_ps_worker_stats st;
	wimm_ps_worker_stats(w, &st);
	if (rc == WIMM_E_DISCONNECTED) {
		fprintf(stderr, "wimm ps worker %u: %s: server %lld lost\n", rank, what,
			(long long)st.server_lost);
		return PS_EXIT_SERVER_LOST;
	}
	if (rc == WIMM_E_TIMEDOUT && st.waiting_for >= 0)
		fprintf(stderr,
			"wimm ps worker %u: %s: timed out; the server waits for worker %lld (%llu "
			"stall reports)\n",
			rank, what, (long long)st.waiting_for,
			(unsigned long long)st.stall_reports);
	else
		fprintf(stderr, "wimm ps worker %u: %s: %s\n", rank, what, wimm_strerror(rc));
	return 1;
}

static int ps_worker(int argc, char **argv)
{
	struct worker_opts o;
	struct wimm_ps_worker *w = NULL;
	struct wimm_ps_worker_info in;
	worker_parse(argc, argv, &o);
	uint32_t rank = o.a.rank;
	int rc = wimm_ps_worker_new(&o.a, &w);
	if (rc < 0) {
		fprintf(stderr, "wimm ps worker %u: cannot join %s (%s): %s\n", rank, o.hosts[0],
			o.a.fabric, wimm_strerror(rc));
		return rc == WIMM_E_DISCONNECTED ? PS_EXIT_SERVER_LOST : 1;
	}
	wimm_ps_worker_info(w, &in);
	if (o.world >= 0 && (uint32_t)o.world != in.workers) {
		fprintf(stderr,
			"wimm ps worker %u: world size %d, but the servers take %u workers\n", rank,
			o.world, in.workers);
		wimm_ps_worker_delete(&w);
		return 1;
	}
	if (o.check && (in.backups || in.mode != WIMM_PS_SYNC)) {
		fprintf(stderr, "wimm ps worker %u: --check needs sync servers without backups\n",
			rank);
		wimm_ps_worker_delete(&w);
		return 2;
	}
	uint64_t *iter = calloc(in.shards, sizeof(*iter)), steps = 0;
	size_t per = in.shard_size / sizeof(float);
	unsigned seed = o.seed * 7919u + rank;
	double start = now_s();
	int status = iter ? 0 : 1;
	crash_setup();
	/* Until every shard has had I updates since the server started (so
	 * that with backups a worker whose pushes were stale, or one that
	 * joined late, stops with the others). */
	for (;;) {
		uint64_t least = UINT64_MAX;
		for (uint32_t s = 0; s < in.shards; s++) {
			wimm_ps_worker_iteration(w, s, &iter[s]);
			least = iter[s] < least ? iter[s] : least;
		}
		if (status || least >= o.iterations)
			break;
		if (o.delay_ms)
			sleep_ms((uint32_t)rand_r(&seed) % (o.delay_ms + 1));
		/* Shards go in a random order: arrival order must not matter.
		 * Only those short of I: with backups, shards that one pull
		 * left at I and I - 1 are both possible, and a push at I would
		 * wait for workers that, seeing I everywhere, have stopped (more
		 * of them than there are backups). */
		uint32_t first = (uint32_t)rand_r(&seed) % in.shards;
		for (uint32_t k = 0; k < in.shards && status == 0; k++) {
			uint32_t s = (first + k) % in.shards, it = (uint32_t)(iter[s] & PS_MASK);
			if (iter[s] >= o.iterations)
				continue;
			crash_point();
			for (size_t j = 0; j < per; j++)
				in.grads[(size_t)s * per + j] = ps_test_grad(rank, s, j, it);
			if ((rc = wimm_ps_worker_push(w, s)) < 0)
				status = worker_fail(w, rank, rc, "push");
		}
		/* Pulled in slices, so a crash request is served while waiting. */
		int64_t until = (int64_t)(now_s() * 1e3) + o.timeout_ms;
		rc = WIMM_E_TIMEDOUT;
		while (status == 0 && rc == WIMM_E_TIMEDOUT && (int64_t)(now_s() * 1e3) < until) {
			crash_point();
			rc = wimm_ps_worker_pull(w, 100);
		}
		if (status == 0 && rc < 0)
			status = worker_fail(w, rank, rc, "pull");
		if (status == 0 && o.check && check_sums(&in, iter, rank) < 0)
			status = 1;
		steps++;
	}
	double secs = now_s() - start;
	struct wimm_ps_worker_stats st;
	wimm_ps_worker_stats(w, &st);
	if (status == 0)
		printf("wimm ps worker %u: %llu steps of %u shards x %u B, %llu pushes, %.3f s, "
		       "%.3f ms per step%s\n",
		       rank, (unsigned long long)steps, in.shards, in.shard_size,
		       (unsigned long long)st.pushes, secs,
		       secs * 1e3 / (double)(steps ? steps : 1),
		       o.check ? "; every sum checked" : "");
	free(iter);
	wimm_ps_worker_delete(&w);
	return status;
}

int ps_main(int argc, char **argv)
{
	if (argc < 2) {
		ps_usage(stderr);
		return 2;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help"))
		return ps_usage(stdout), 0;
	if (!strcmp(cmd, "serve"))
		return ps_serve(argc - 1, argv + 1);
	if (!strcmp(cmd, "stat"))
		return ps_stat(argc - 1, argv + 1);
	if (!strcmp(cmd, "worker"))
		return ps_worker(argc - 1, argv + 1);
	bad_usage("unknown ps command '%s'", cmd);
}
