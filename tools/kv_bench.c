/* `wimm kv bench`: put and get latency (p50/p99/p99.9) and throughput of
 * the kv slot pool with 1, 8 and 64 clients, values of 64 B .. 256 KiB,
 * uniform and zipfian keys, against redis-server on the same machine in the
 * same run, in interleaved rounds, and against the second wimm design
 * (puts as send_imm into the server's receive buffers, copied into a slot)
 * and the shared index (puts published by the client's compare-and-swap,
 * gets one-sided: wimm_kv_server_attr.index_bytes). Beside each latency the
 * server's CPU time per operation of the phase (all its threads, from
 * /proc/PID/task/TID/schedstat), for wimm's servers and redis-server.
 *
 * Every client is a process of its own (contexts are per process here:
 * shm's provider state is not thread-safe within one). A client connects,
 * waits for the start, times each put of its key sequence, then each get.
 * The three stores (wimm write_imm, wimm send_imm, Redis through a RESP
 * client) run exactly the same key sequences with the same timing code;
 * redis-benchmark, Debian's own tool, is shown beside them for uniform keys
 * (it has no other distribution and prints no p99.9).
 */
#include <errno.h>
#include <math.h>
#include <dirent.h>
#include <poll.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kv_bench.h"
#include "kv_cmd.h"

#define MAX_ROUNDS 20
/* 64 client processes and a server on 2 shared cores can each be off the
 * CPU for seconds: the default 5 s liveness bound then drops live clients
 * as silent and the run measures nothing. */
#define KVB_LIVENESS_MS 60000
#define MAX_LIST 8
#define MAX_CLIENTS 128

/* The address wimm's servers listen on and clients connect to (--host):
 * loopback, or on Soft-RoCE the address of the rxe device. */
static const char *bench_host = "127.0.0.1";

enum { D_WRITE_IMM, D_SEND_IMM, D_INDEX, D_REDIS, D_REDIS_BENCHMARK, NDESIGNS };
static const char *design_name[NDESIGNS] = {"wimm write_imm", "wimm send_imm", "wimm index (CAS)",
					    "redis", "redis-benchmark"};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------ key sequence */

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

int kvb_keys_init(struct kvb_keys *k, uint32_t n, int zipf, uint64_t seed)
{
	*k = (struct kvb_keys){.n = n, .rng = 0x9e3779b97f4a7c15ull * (seed + 1)};
	if (!zipf)
		return 0;
	k->cdf = malloc(sizeof(double) * n);
	if (!k->cdf)
		return -1;
	double sum = 0;
	for (uint32_t i = 0; i < n; i++)
		sum += 1.0 / pow(i + 1.0, 0.99);
	double acc = 0;
	for (uint32_t i = 0; i < n; i++) {
		acc += 1.0 / pow(i + 1.0, 0.99) / sum;
		k->cdf[i] = acc;
	}
	return 0;
}

uint32_t kvb_keys_next(struct kvb_keys *k)
{
	uint64_t x = xorshift(&k->rng);
	if (!k->cdf)
		return (uint32_t)(x % k->n);
	double u = (double)(x >> 11) / 9007199254740992.0; /* [0, 1) */
	uint32_t lo = 0, hi = k->n - 1;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		if (k->cdf[mid] > u)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

void kvb_keys_fini(struct kvb_keys *k)
{
	free(k->cdf);
	k->cdf = NULL;
}

/* ------------------------------------------------------- the wimm stores */

static int wimm_open(void **h, const char *addr, const struct kvb_workload *w)
{
	struct wimm_kv_client_attr ca = {.fabric = w->fabric,
					 .ctx_flags = w->flags,
					 .timeout_ms = 30000,
					 .liveness_ms = KVB_LIVENESS_MS};
	return wimm_kv_connect(addr, &ca, (struct wimm_kv_client **)h);
}

static int wimm_put_grant(void *h, const char *key, size_t klen, const void *v, size_t len)
{
	return wimm_kv_put(h, key, klen, v, len, 0);
}

static int wimm_put_send(void *h, const char *key, size_t klen, const void *v, size_t len)
{
	return wimm_kv_put_send(h, key, klen, v, len, 0);
}

static int wimm_get(void *h, const char *key, size_t klen, void *buf, size_t cap)
{
	size_t len;
	int rc = wimm_kv_get(h, key, klen, buf, cap, &len);
	return rc == WIMM_KV_E_NOTFOUND ? 1 : rc;
}

static int wimm_idle(void *h)
{
	return wimm_kv_client_poll(h);
}

static void wimm_close(void *h)
{
	struct wimm_kv_client *c = h;
	wimm_kv_close(&c);
}

/* wimm's stores differ in their name and how they put; beside a shared
 * index the same calls publish by compare-and-swap and get one-sided. */
#define WIMM_STORE(store_name, put_fn)                                                             \
	{                                                                                          \
		.name = store_name, .open = wimm_open, .put = put_fn, .get = wimm_get,             \
		.idle = wimm_idle, .close = wimm_close, .error = wimm_kv_strerror                  \
	}
static const struct kvb_store store_write_imm = WIMM_STORE("wimm write_imm", wimm_put_grant);
static const struct kvb_store store_send_imm = WIMM_STORE("wimm send_imm", wimm_put_send);
static const struct kvb_store store_index = WIMM_STORE("wimm index (CAS)", wimm_put_grant);
static const struct kvb_store *const stores[] = {&store_write_imm, &store_send_imm, &store_index,
						 &kvb_redis_store};

/* ------------------------------------------------------------ a client */

/* Keys of client `id`: every clients-th key from id on. */
static uint32_t own_keys(const struct kvb_workload *w, int id)
{
	return (w->keys - (uint32_t)id + (uint32_t)w->clients - 1) / (uint32_t)w->clients;
}

static int key_name(char *key, size_t len, uint32_t k)
{
	return snprintf(key, len, "key:%012u", k);
}

/* Wait for the start, keeping the connections alive meanwhile: with many
 * clients on a loaded host the last may be ready only after the first's
 * liveness bound (the server would drop it as silent). */
static int wait_go(const struct kvb_store *st, void *h, int go_fd)
{
	struct pollfd p = {.fd = go_fd, .events = POLLIN};
	char byte;
	for (;;) {
		int r = poll(&p, 1, 200);
		if (r > 0)
			return read(go_fd, &byte, 1) == 1 ? 0 : -1;
		if (r < 0 && errno != EINTR)
			return -1;
		if (st->idle && st->idle(h) < 0)
			return -1;
	}
}

/* Connect; put every key of its own once (untimed: a get then never misses
 * on any store); say ready, wait for go; time w->ops puts of its own keys;
 * say so, wait for go again; time w->ops gets over all keys; write both phase times and the
 * latencies (u32 ns) to the pipe. */
static int bench_client(const struct kvb_store *st, const char *addr, const struct kvb_workload *w,
			int id, int rep_fd, int go_fd)
{
	uint32_t *lat = malloc(sizeof(uint32_t) * w->ops * 2), own = own_keys(w, id);
	unsigned char *v = malloc(w->size), *g = malloc(w->size);
	struct kvb_keys keys[2] = {{0}, {0}};
	char key[32];
	uint64_t phase[2];
	void *h;
	int rc = lat && v && g && own && kvb_keys_init(&keys[0], own, w->zipf, (uint64_t)id) == 0 &&
			 kvb_keys_init(&keys[1], w->keys, w->zipf, (uint64_t)id + 1000) == 0
		     ? st->open(&h, addr, w)
		     : -1;
	if (rc < 0) {
		fprintf(stderr, "wimm kv bench: %s client %d: %s\n", st->name, id, st->error(rc));
		return 1;
	}
	memset(v, 'a' + id % 26, w->size);
	for (uint32_t r = 0; r < own && rc >= 0; r++) {
		int klen = key_name(key, sizeof(key), r * (uint32_t)w->clients + (uint32_t)id);
		rc = st->put(h, key, (size_t)klen, v, w->size);
	}
	if (rc < 0 || write(rep_fd, "r", 1) != 1 || wait_go(st, h, go_fd) < 0) {
		fprintf(stderr, "wimm kv bench: %s client %d: preload: %s\n", st->name, id,
			st->error(rc));
		return 1;
	}
	for (int p = 0; p < 2; p++) {
		/* Every client's puts end before any get starts: an overwrite
		 * while others read waits for their leases, and with too many
		 * of them the arena would evict (a miss no Redis run has). */
		if (p == 1 && (write(rep_fd, "p", 1) != 1 || wait_go(st, h, go_fd) < 0))
			return 1;
		uint64_t t0 = now_ns();
		for (uint32_t i = 0; i < w->ops; i++) {
			uint32_t r = kvb_keys_next(&keys[p]);
			int klen = key_name(key, sizeof(key),
					    p == 0 ? r * (uint32_t)w->clients + (uint32_t)id : r);
			uint64_t s = now_ns();
			rc = p == 0 ? st->put(h, key, (size_t)klen, v, w->size)
				    : st->get(h, key, (size_t)klen, g, w->size);
			if (rc != 0) {
				fprintf(stderr, "wimm kv bench: %s client %d: %s %s: %s\n",
					st->name, id, p ? "get" : "put", key,
					rc > 0 ? "a miss" : st->error(rc));
				return 1;
			}
			lat[p * w->ops + i] = (uint32_t)(now_ns() - s);
		}
		phase[p] = now_ns() - t0;
	}
	size_t bytes = sizeof(uint32_t) * w->ops * 2;
	if (write(rep_fd, phase, sizeof(phase)) != sizeof(phase) ||
	    write(rep_fd, lat, bytes) != (ssize_t)bytes)
		return 1;
	st->close(h);
	kvb_keys_fini(&keys[0]);
	kvb_keys_fini(&keys[1]);
	return 0;
}

static int read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		ssize_t r = read(fd, (char *)buf + got, len - got);
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* Percentiles of n sorted latencies (ns) in us. */
static void phase_stats(uint32_t *lat, size_t n, double rate, struct kvb_phase_stats *out)
{
	qsort(lat, n, sizeof(uint32_t), cmp_u32);
	*out = (struct kvb_phase_stats){.p50 = lat[n / 2] / 1e3,
					.p99 = lat[n * 99 / 100] / 1e3,
					.p999 = lat[n * 999 / 1000] / 1e3,
					.rate = rate};
}

/* CPU time of process pid in ns, all its threads; NAN if unknown. */
static double proc_cpu_ns(pid_t pid)
{
	char path[96];
	double sum = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = pid > 0 ? opendir(path) : NULL;
	if (!d)
		return NAN;
	for (struct dirent *e; (e = readdir(d));) {
		unsigned long long t;
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.32s/schedstat", (int)pid, e->d_name);
		FILE *f = fopen(path, "r");
		if (f && fscanf(f, "%llu", &t) == 1)
			sum += (double)t;
		if (f)
			fclose(f);
	}
	closedir(d);
	return sum;
}

/* Fork w->clients clients of store st, start them together, gather; the
 * server's (process `server`) CPU per operation of each phase. */
static int run_clients(const struct kvb_store *st, const char *addr, const struct kvb_workload *w,
		       pid_t server, struct kvb_phase_stats out[2])
{
	double cpu[3] = {NAN, NAN, NAN};
	static int rep[MAX_CLIENTS][2], go[MAX_CLIENTS][2];
	static pid_t pid[MAX_CLIENTS];
	int fails = 0, nc = w->clients;
	fflush(stdout);
	/* A report pipe and a start pipe per client: reports are larger than
	 * PIPE_BUF and would interleave in a shared one, and a client done with
	 * its puts must not take the start meant for a slower one. */
	for (int i = 0; i < nc; i++) {
		if (pipe(rep[i]) < 0 || pipe(go[i]) < 0)
			return -1;
		pid[i] = fork();
		if (pid[i] == 0) {
			/* Only our own ends: a start pipe held open here would
			 * keep its client from seeing the end of the run. */
			for (int j = 0; j < i; j++)
				close(go[j][1]);
			close(rep[i][0]);
			close(go[i][1]);
			_exit(bench_client(st, addr, w, i, rep[i][1], go[i][0]));
		}
		close(rep[i][1]);
		close(go[i][0]);
	}
	char byte;
	for (int i = 0; i < nc; i++)
		if (read(rep[i][0], &byte, 1) != 1)
			fails++;
	/* Go, then the same again after every client's put phase. */
	for (int phase = 0; phase < 2 && !fails; phase++) {
		cpu[phase] = proc_cpu_ns(server);
		for (int i = 0; i < nc && !fails; i++)
			if (write(go[i][1], "g", 1) != 1)
				fails++;
		for (int i = 0; i < nc && !fails && phase == 0; i++)
			if (read(rep[i][0], &byte, 1) != 1 || byte != 'p')
				fails++;
	}
	size_t n = (size_t)w->ops * (size_t)nc;
	uint32_t *put = malloc(sizeof(uint32_t) * n), *get = malloc(sizeof(uint32_t) * n);
	double rate[2] = {0, 0};
	for (int i = 0; i < nc && !fails && put && get; i++) {
		uint64_t phase[2];
		if (read_full(rep[i][0], phase, sizeof(phase)) < 0 ||
		    read_full(rep[i][0], put + (size_t)i * w->ops, sizeof(uint32_t) * w->ops) < 0 ||
		    read_full(rep[i][0], get + (size_t)i * w->ops, sizeof(uint32_t) * w->ops) < 0) {
			fails++;
			break;
		}
		rate[0] += w->ops / (phase[0] / 1e9);
		rate[1] += w->ops / (phase[1] / 1e9);
	}
	cpu[2] = proc_cpu_ns(server);
	for (int i = 0; i < nc; i++) {
		int status;
		close(go[i][1]);
		close(rep[i][0]);
		waitpid(pid[i], &status, 0);
		if (WIFSIGNALED(status))
			fprintf(stderr, "wimm kv bench: %s client %d: killed by signal %d\n",
				st->name, i, WTERMSIG(status));
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			fails++;
	}
	if (!fails && put && get) {
		phase_stats(put, n, rate[0], &out[0]);
		phase_stats(get, n, rate[1], &out[1]);
		out[0].srv_cpu = (cpu[1] - cpu[0]) / 1e3 / (double)n;
		out[1].srv_cpu = (cpu[2] - cpu[1]) / 1e3 / (double)n;
	}
	free(put);
	free(get);
	return fails || !put || !get ? -1 : 0;
}

/* Why the server refused or dropped a client: a failed run says why. */
static void server_log(void *arg, enum wimm_log_level level, const char *msg)
{
	(void)arg;
	if (level <= (getenv("KVB_DEBUG") ? WIMM_LOG_INFO : WIMM_LOG_WARN))
		fprintf(stderr, "wimm kv bench: server: %s\n", msg);
}

/* A kv server of its own in a child: every run starts from an empty pool,
 * and a long-lived ofi:shm server stops taking connections after a few
 * hundred peers have come and gone (seen here: the connect fails with a
 * provider error). */
static pid_t start_kv(const struct kvb_workload *w, int index, char *addr, size_t alen)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	/* An arena per client (and two spare), each holding the client's own
	 * keys and 16 slots more for overwrites waiting for reader leases: no
	 * eviction, so a get finds every key as on Redis. */
	size_t slot = WIMM_KV_MIN_SLOT;
	/* Beside an index the slot holds the key too (key_name: 12 at most). */
	while (slot < w->size + WIMM_KV_HEADER + (index ? 12 : 0))
		slot <<= 1;
	size_t arena = (size_t)1 << 20;
	while (arena < (own_keys(w, 0) + 16) * slot)
		arena <<= 1;
	fflush(stdout);
	char listen_addr[96];
	snprintf(listen_addr, sizeof(listen_addr), "%s:0", bench_host);
	pid_t pid = fork();
	if (pid == 0) {
		uint32_t sput = w->size > 16384 ? (uint32_t)w->size : 0;
		size_t memory = arena * (size_t)(w->clients + 2), ix = memory / 32;
		struct wimm_kv_server_attr a = {.fabric = w->fabric,
						.addr = listen_addr,
						.memory = memory,
						.index_bytes = !index	       ? 0
							       : ix < 4096     ? 4096
							       : ix > 1u << 30 ? 1u << 30
									       : ix,
						.max_clients = (uint32_t)w->clients + 2,
						.lease_ms = 100,
						.liveness_ms = KVB_LIVENESS_MS,
						.send_put_max = sput,
						.ctx_flags = w->flags,
						.log = server_log};
		struct wimm_kv_server *s;
		int rc = wimm_kv_server_new(&a, &s);
		if (rc < 0) {
			fprintf(stderr, "wimm kv bench: server: %s\n", wimm_kv_strerror(rc));
			_exit(1);
		}
		dprintf(p[1], "%d\n", wimm_kv_server_port(s));
		close(p[1]);
		for (;;)
			if (wimm_kv_server_run(s, 100) < 0)
				_exit(1);
	}
	close(p[1]);
	char line[16] = "";
	ssize_t r = read(p[0], line, sizeof(line) - 1);
	close(p[0]);
	if (pid < 0 || r <= 0 || atoi(line) <= 0) {
		if (pid > 0) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
		}
		return -1;
	}
	snprintf(addr, alen, "%s:%d", bench_host, atoi(line));
	return pid;
}

static int run_wimm(int design, const struct kvb_workload *w, struct kvb_phase_stats out[2])
{
	char addr[64];
	pid_t kpid = start_kv(w, design == D_INDEX, addr, sizeof(addr));
	if (kpid < 0) {
		fprintf(stderr, "wimm kv bench: cannot start the kv server on %s\n", w->fabric);
		return -1;
	}
	int rc = run_clients(stores[design], addr, w, kpid, out);
	kill(kpid, SIGKILL);
	waitpid(kpid, NULL, 0);
	return rc;
}

/* ---------------------------------------------------------- the table */

/* One configuration's results over all rounds. */
struct cell {
	struct kvb_phase_stats r[MAX_ROUNDS][2];
	int n;
};

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The median over the rounds of one figure (field offset into the stats). */
static double median_of(const struct cell *c, int phase, size_t field)
{
	double t[MAX_ROUNDS];
	if (c->n == 0)
		return NAN;
	for (int i = 0; i < c->n; i++)
		t[i] = *(const double *)((const char *)&c->r[i][phase] + field);
	qsort(t, (size_t)c->n, sizeof(double), cmp_dbl);
	return t[c->n / 2];
}

static void print_num(double v, const char *fmt)
{
	if (isnan(v))
		printf(" - |");
	else
		printf(fmt, v);
}

static const size_t fields[5] = {
    offsetof(struct kvb_phase_stats, p50), offsetof(struct kvb_phase_stats, p99),
    offsetof(struct kvb_phase_stats, p999), offsetof(struct kvb_phase_stats, rate),
    offsetof(struct kvb_phase_stats, srv_cpu)};

static void print_row(const struct kvb_workload *w, int design, const struct cell *x,
		      const struct cell *rd)
{
	double v[2][5], ref[2][5];
	for (int p = 0; p < 2; p++)
		for (int f = 0; f < 5; f++) {
			v[p][f] = median_of(x, p, fields[f]);
			ref[p][f] = median_of(rd, p, fields[f]);
		}
	printf("| %zu | %d | %s | %s |", w->size, w->clients, w->zipf ? "zipf" : "uniform",
	       design_name[design]);
	for (int p = 0; p < 2; p++) {
		for (int f = 0; f < 3; f++)
			print_num(v[p][f], " %.1f |");
		print_num(v[p][3] / 1e3, " %.1f |");
	}
	print_num(v[0][4], " %.2f |");
	print_num(v[1][4], " %.2f |");
	if (design <= D_INDEX) {
		print_num(v[0][0] / ref[0][0], " %.2fx |");
		print_num(v[1][0] / ref[1][0], " %.2fx |");
		print_num(v[0][3] / ref[0][3], " %.2fx |");
		print_num(v[1][3] / ref[1][3], " %.2fx |");
	} else {
		printf(" | | | |");
	}
	printf("\n");
}

/* ---------------------------------------------------------- the bench */

/* "64,1K,256K" -> values; the count, or -1. */
static int parse_list(const char *text, unsigned long long *out, unsigned long long max)
{
	char buf[128], *save, *tok;
	int n = 0;
	snprintf(buf, sizeof(buf), "%s", text);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (n == MAX_LIST || kv_parse_size(tok, &out[n]) < 0 || out[n] == 0 || out[n] > max)
			return -1;
		n++;
	}
	return n ? n : -1;
}

static int usage(void)
{
	fprintf(stderr,
		"usage: wimm kv bench [-f FABRIC] [-n OPS] [--rounds R] [--sizes LIST]\n"
		"                     [--clients LIST] [--keys K] [--dist uniform|zipf|both]\n"
		"                     [--spin] [--no-redis] [--host ADDR]\n"
		"  --host ADDR     where wimm's servers listen (default 127.0.0.1; on\n"
		"                  Soft-RoCE the rxe device's address)\n"
		"  -n OPS          operations per configuration and phase, split over the\n"
		"                  clients (at least 200 each; default 8000)\n"
		"  --sizes LIST    value bytes (default 64,1K,16K,256K)\n"
		"  --clients LIST  client processes (default 1,8,64; at most %d)\n"
		"  --keys K        key space (default 1000): each client puts its own share\n"
		"                  (every N-th key), gets go over all of them\n"
		"  --rounds R      interleaved rounds, medians reported (default 3)\n",
		MAX_CLIENTS);
	return 2;
}

int kv_bench(int argc, char **argv)
{
	const char *fabric = "ofi:tcp";
	unsigned long long ops = 8000, rounds = 3, keys = 1000;
	unsigned long long sizes[MAX_LIST] = {64, 1024, 16384, 262144},
			   clients[MAX_LIST] = {1, 8, 64};
	int nsizes = 4, nclients = 3, dist_lo = 0, dist_hi = 1, redis = 1;
	unsigned flags = 0;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
		int ok = 1;
		if (strcmp(o, "--spin") == 0)
			flags = WIMM_CTX_POLLING;
		else if (strcmp(o, "--no-redis") == 0)
			redis = 0;
		else if (!val)
			return usage();
		else if (i++, strcmp(o, "-f") == 0)
			fabric = val;
		else if (strcmp(o, "--host") == 0)
			bench_host = val;
		else if (strcmp(o, "-n") == 0)
			ok = kv_parse_size(val, &ops) == 0 && ops > 0 && ops <= 10000000;
		else if (strcmp(o, "--rounds") == 0)
			ok = kv_parse_size(val, &rounds) == 0 && rounds > 0 && rounds <= MAX_ROUNDS;
		else if (strcmp(o, "--keys") == 0)
			ok = kv_parse_size(val, &keys) == 0 && keys > 0 && keys <= 10000000;
		else if (strcmp(o, "--sizes") == 0)
			ok = (nsizes = parse_list(val, sizes, WIMM_KV_MAX_SLOT - WIMM_KV_HEADER)) >
			     0;
		else if (strcmp(o, "--clients") == 0)
			ok = (nclients = parse_list(val, clients, MAX_CLIENTS)) > 0;
		else if (strcmp(o, "--dist") == 0 && strcmp(val, "uniform") == 0)
			dist_lo = dist_hi = 0;
		else if (strcmp(o, "--dist") == 0 && strcmp(val, "zipf") == 0)
			dist_lo = dist_hi = 1;
		else if (strcmp(o, "--dist") == 0 && strcmp(val, "both") == 0)
			dist_lo = 0, dist_hi = 1;
		else
			return usage();
		if (!ok) {
			fprintf(stderr, "wimm kv bench: bad %s '%s'\n", o, val);
			return 2;
		}
	}
	/* A client that dies early must fail its run, not kill the bench
	 * with the start byte written to its closed pipe. */
	signal(SIGPIPE, SIG_IGN);
	static struct cell cells[MAX_LIST][MAX_LIST][2][NDESIGNS];
	int rport = redis ? kvb_free_port() : -1;
	pid_t rpid = redis ? kvb_start_redis(rport) : -1;
	if (redis && rpid < 0) {
		fprintf(stderr, "wimm kv bench: cannot start redis-server (Debian package redis; "
				"--no-redis to skip)\n");
		return 1;
	}
	char raddr[32];
	snprintf(raddr, sizeof(raddr), "127.0.0.1:%d", rport);
	double load[3] = {0, 0, 0};
	if (getloadavg(load, 3) < 0)
		load[0] = NAN;
	printf("wimm kv bench: %s, %llu ops per configuration and phase, %llu keys, %llu rounds, "
	       "%s%s, load average %.2f\n",
	       fabric, ops, keys, rounds, flags ? "spinning" : "blocking waits",
	       redis ? ", redis-server on the same host" : "", load[0]);
	int rc = 0;
	for (unsigned r = 0; rc == 0 && r < rounds; r++)
		for (int s = 0; rc == 0 && s < nsizes; s++)
			for (int c = 0; rc == 0 && c < nclients; c++)
				for (int z = dist_lo; rc == 0 && z <= dist_hi; z++) {
					struct kvb_workload w = {
					    .fabric = fabric,
					    .size = sizes[s],
					    .clients = (int)clients[c],
					    .ops =
						(uint32_t)(ops / clients[c] > 200 ? ops / clients[c]
										  : 200),
					    .keys = (uint32_t)keys,
					    .zipf = z,
					    .flags = flags};
					fprintf(stderr,
						"wimm kv bench: round %u/%llu: %zu B, %d clients, "
						"%s\n",
						r + 1, rounds, w.size, w.clients,
						z ? "zipf" : "uniform");
					for (int d = 0; rc == 0 && d < NDESIGNS; d++) {
						struct cell *x = &cells[s][c][z][d];
						if (d >= D_REDIS && !redis)
							continue;
						if (d == D_REDIS_BENCHMARK && z)
							continue; /* uniform keys only */
						if (d == D_REDIS_BENCHMARK)
							rc = kvb_redis_benchmark(rport, &w,
										 x->r[x->n]);
						else if (d == D_REDIS)
							rc = run_clients(&kvb_redis_store, raddr,
									 &w, rpid, x->r[x->n]);
						else
							rc = run_wimm(d, &w, x->r[x->n]);
						if (rc < 0)
							fprintf(stderr,
								"wimm kv bench: %s, %zu B, %d "
								"clients failed\n",
								design_name[d], w.size, w.clients);
						else
							x->n++;
					}
				}
	if (rc == 0) {
		printf(
		    "\n| value | clients | keys | design | put p50 us | put p99 us | put p99.9 us "
		    "| put kops/s | get p50 us | get p99 us | get p99.9 us | get kops/s | server "
		    "CPU us/put | server CPU us/get | put "
		    "p50 vs redis | get p50 vs redis | put rate vs redis | get rate vs redis |\n"
		    "|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
		    "---:|---:|---:|\n");
		for (int s = 0; s < nsizes; s++)
			for (int c = 0; c < nclients; c++)
				for (int z = dist_lo; z <= dist_hi; z++)
					for (int d = 0; d < NDESIGNS; d++) {
						struct kvb_workload w = {.size = sizes[s],
									 .clients = (int)clients[c],
									 .zipf = z};
						if (cells[s][c][z][d].n)
							print_row(&w, d, &cells[s][c][z][d],
								  &cells[s][c][z][D_REDIS]);
					}
		printf("\nlatency ratios: wimm / redis (below 1: wimm faster); rate ratios: wimm / "
		       "redis (above 1: wimm more); redis = redis-server driven by the bench's own "
		       "client processes with the same keys; redis-benchmark for reference; server "
		       "CPU: the server process's CPU time (all threads) during the phase / its "
		       "operations%s\n",
		       flags
			   ? " (spinning, a server burns its CPU between operations too: about 1 / "
			     "its rate)"
			   : "");
	}
	if (rpid > 0) {
		kill(rpid, SIGTERM);
		waitpid(rpid, NULL, 0);
	}
	return rc < 0 ? 1 : 0;
}
