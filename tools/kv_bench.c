/* `wimm kv bench`: put and get latency (p50/p99) and throughput of the kv
 * slot pool with 1 and 8 clients and values of 64 B, 1 KiB and 16 KiB,
 * against redis-server + redis-benchmark on the same machine in the same
 * run, in interleaved rounds, and against the second wimm design (puts as
 * send_imm into the server's receive buffers, copied into a slot).
 *
 * The kv server runs in a child process, each client in a child of its own
 * (contexts are per process here: shm's provider state is not thread-safe
 * within one). Clients connect, wait for the start, then time each put of
 * KEYS keys (cycled) and then each get. Redis gets the same value size,
 * client count, operation count and key space (-r).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include "kv_cmd.h"

#define KEYS 200
#define NSIZES 3
#define NCLIENTS 2
#define NDESIGNS 3
#define MAX_ROUNDS 20

static const size_t sizes[NSIZES] = {64, 1024, 16384};
static const int clients[NCLIENTS] = {1, 8};
enum { D_WRITE_IMM, D_SEND_IMM, D_REDIS };
static unsigned spin_flags; /* --spin: WIMM_CTX_POLLING everywhere */
static const char *design_name[NDESIGNS] = {"wimm write_imm", "wimm send_imm", "redis"};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One configuration's results over all rounds. */
struct cell {
	double put_p50[MAX_ROUNDS], put_p99[MAX_ROUNDS], put_rate[MAX_ROUNDS];
	double get_p50[MAX_ROUNDS], get_p99[MAX_ROUNDS], get_rate[MAX_ROUNDS];
	int n;
};

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	if (n == 0)
		return 0;
	double t[MAX_ROUNDS];
	memcpy(t, v, sizeof(double) * (size_t)n);
	qsort(t, (size_t)n, sizeof(double), cmp_dbl);
	return t[n / 2];
}

/* ---------------------------------------------------------- wimm side */

/* A client: connect, say ready, wait for go, time OPS puts then OPS gets,
 * write the latencies (u32 ns) and both phase times to the pipe. */
static int bench_client(const char *fabric, const char *addr, int id, size_t size, uint32_t ops,
			int design, int rep_fd, int go_fd)
{
	struct wimm_kv_client_attr ca = {
	    .fabric = fabric, .ctx_flags = spin_flags, .timeout_ms = 20000};
	struct wimm_kv_client *c;
	uint32_t *lat = malloc(sizeof(uint32_t) * ops * 2);
	unsigned char *v = malloc(size), *g = malloc(size);
	char key[32], byte;
	size_t len;
	uint64_t phase[2];
	int rc = lat && v && g ? wimm_kv_connect(addr, &ca, &c) : WIMM_E_NOMEM;
	if (rc < 0) {
		fprintf(stderr, "wimm kv bench: client %d: %s\n", id, wimm_kv_strerror(rc));
		return 1;
	}
	memset(v, 'a' + id, size);
	if (write(rep_fd, "r", 1) != 1 || read(go_fd, &byte, 1) != 1)
		return 1;
	for (int p = 0; p < 2; p++) {
		uint64_t t0 = now_ns();
		for (uint32_t i = 0; i < ops; i++) {
			snprintf(key, sizeof(key), "b%d_%u", id, i % KEYS);
			uint64_t s = now_ns();
			if (p == 0 && design == D_WRITE_IMM)
				rc = wimm_kv_put(c, key, strlen(key), v, size, 0);
			else if (p == 0)
				rc = wimm_kv_put_send(c, key, strlen(key), v, size, 0);
			else
				rc = wimm_kv_get(c, key, strlen(key), g, size, &len);
			if (rc < 0) {
				fprintf(stderr, "wimm kv bench: client %d: %s %s: %s\n", id,
					p ? "get" : "put", key, wimm_kv_strerror(rc));
				return 1;
			}
			lat[p * ops + i] = (uint32_t)(now_ns() - s);
		}
		phase[p] = now_ns() - t0;
	}
	size_t bytes = sizeof(uint32_t) * ops * 2;
	if (write(rep_fd, phase, sizeof(phase)) != sizeof(phase) ||
	    write(rep_fd, lat, bytes) != (ssize_t)bytes)
		return 1;
	wimm_kv_close(&c);
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

static int run_wimm(const char *fabric, const char *addr, size_t size, int nc, uint32_t ops,
		    int design, struct cell *cell)
{
	int rep[8][2], go[2], fails = 0;
	pid_t pid[8];
	if (pipe(go) < 0)
		return -1;
	fflush(stdout);
	/* A report pipe per client: reports are larger than PIPE_BUF and
	 * would interleave in a shared one. */
	for (int i = 0; i < nc; i++) {
		if (pipe(rep[i]) < 0)
			return -1;
		pid[i] = fork();
		if (pid[i] == 0) {
			close(rep[i][0]);
			close(go[1]);
			_exit(bench_client(fabric, addr, i, size, ops, design, rep[i][1], go[0]));
		}
		close(rep[i][1]);
	}
	close(go[0]);
	char byte;
	for (int i = 0; i < nc; i++)
		if (read(rep[i][0], &byte, 1) != 1)
			fails++;
	for (int i = 0; i < nc && !fails; i++)
		if (write(go[1], "g", 1) != 1)
			fails++;
	uint32_t *all = malloc(sizeof(uint32_t) * ops * 2 * (size_t)nc);
	double rate[2] = {0, 0};
	for (int i = 0; i < nc && !fails && all; i++) {
		uint64_t phase[2];
		if (read_full(rep[i][0], phase, sizeof(phase)) < 0 ||
		    read_full(rep[i][0], all + (size_t)i * ops * 2, sizeof(uint32_t) * ops * 2) <
			0) {
			fails++;
			break;
		}
		rate[0] += ops / (phase[0] / 1e9);
		rate[1] += ops / (phase[1] / 1e9);
	}
	close(go[1]);
	for (int i = 0; i < nc; i++) {
		int st;
		close(rep[i][0]);
		waitpid(pid[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			fails++;
	}
	if (fails || !all) {
		free(all);
		return -1;
	}
	/* Split puts and gets of every client into two sorted arrays. */
	size_t n = (size_t)ops * (size_t)nc;
	uint32_t *put = malloc(sizeof(uint32_t) * n), *get = malloc(sizeof(uint32_t) * n);
	for (int i = 0; put && get && i < nc; i++) {
		memcpy(put + (size_t)i * ops, all + (size_t)i * ops * 2, sizeof(uint32_t) * ops);
		memcpy(get + (size_t)i * ops, all + (size_t)i * ops * 2 + ops,
		       sizeof(uint32_t) * ops);
	}
	if (put && get) {
		qsort(put, n, sizeof(uint32_t), cmp_u32);
		qsort(get, n, sizeof(uint32_t), cmp_u32);
		int r = cell->n++;
		cell->put_p50[r] = put[n / 2] / 1e3;
		cell->put_p99[r] = put[n * 99 / 100] / 1e3;
		cell->get_p50[r] = get[n / 2] / 1e3;
		cell->get_p99[r] = get[n * 99 / 100] / 1e3;
		cell->put_rate[r] = rate[0];
		cell->get_rate[r] = rate[1];
	}
	free(put);
	free(get);
	free(all);
	return 0;
}

/* --------------------------------------------------------- redis side */

static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static int port_open(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

static pid_t start_redis(int port)
{
	char p[16];
	snprintf(p, sizeof(p), "%d", port);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		if (!freopen("/dev/null", "w", stdout))
			_exit(127);
		execlp("redis-server", "redis-server", "--port", p, "--bind", "127.0.0.1", "--save",
		       "", "--appendonly", "no", "--daemonize", "no", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; pid > 0 && i < 500; i++) {
		if (port_open(port))
			return pid;
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return -1;
		usleep(10000);
	}
	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
	}
	return -1;
}

/* "SET","rps","avg","min","p50","p95","p99","max" lines of --csv. */
static int run_redis(int port, size_t size, int nc, uint32_t ops, struct cell *cell)
{
	char cmd[256], line[512];
	double put[3] = {0}, get[3] = {0};
	int seen = 0;
	snprintf(cmd, sizeof(cmd),
		 "redis-benchmark -h 127.0.0.1 -p %d -t set,get -d %zu -c %d -n %u -r %d --csv "
		 "2>/dev/null",
		 port, size, nc, ops * (uint32_t)nc, KEYS * nc);
	fflush(stdout);
	FILE *f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		double rps, avg, mn, p50, p95, p99;
		char name[16];
		if (sscanf(line, "\"%15[A-Z]\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\"",
			   name, &rps, &avg, &mn, &p50, &p95, &p99) != 7)
			continue;
		double *d = strcmp(name, "SET") == 0 ? put : strcmp(name, "GET") == 0 ? get : NULL;
		if (!d)
			continue;
		d[0] = p50 * 1e3;
		d[1] = p99 * 1e3;
		d[2] = rps;
		seen++;
	}
	if (pclose(f) != 0 || seen != 2)
		return -1;
	int r = cell->n++;
	cell->put_p50[r] = put[0];
	cell->put_p99[r] = put[1];
	cell->put_rate[r] = put[2];
	cell->get_p50[r] = get[0];
	cell->get_p99[r] = get[1];
	cell->get_rate[r] = get[2];
	return 0;
}

/* ---------------------------------------------------------- the bench */

static pid_t start_kv(const char *fabric, char *addr, size_t alen)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		/* 10 arenas of 16 MiB: 8 clients x 200 keys of 16 KiB (32 KiB
		 * slots) with room for overwrites waiting for leases. */
		struct wimm_kv_server_attr a = {.fabric = fabric,
						.addr = "127.0.0.1:0",
						.memory = (size_t)160 << 20,
						.max_clients = 10,
						.lease_ms = 100,
						.ctx_flags = spin_flags};
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
	line[r] = '\0';
	snprintf(addr, alen, "127.0.0.1:%d", atoi(line));
	return pid;
}

/* A run against a server of its own: every run starts from an empty pool,
 * and a long-lived ofi:shm server stops taking connections after a few
 * hundred peers have come and gone (seen here: the connect fails with a
 * provider error). */
static int run_wimm_fresh(const char *fabric, size_t size, int nc, uint32_t ops, int design,
			  struct cell *cell)
{
	char addr[64];
	pid_t kpid = start_kv(fabric, addr, sizeof(addr));
	if (kpid < 0) {
		fprintf(stderr, "wimm kv bench: cannot start the kv server on %s\n", fabric);
		return -1;
	}
	int rc = run_wimm(fabric, addr, size, nc, ops, design, cell);
	kill(kpid, SIGKILL);
	waitpid(kpid, NULL, 0);
	return rc;
}

static void print_table(struct cell (*cells)[NCLIENTS][NDESIGNS], int redis)
{
	printf("\n| value | clients | design | put p50 us | put p99 us | put kops/s | get p50 us | "
	       "get p99 us | get kops/s |%s\n",
	       redis ? " put p50 vs redis | get p50 vs redis | put rate vs redis | get rate vs "
		       "redis |"
		     : "");
	printf("|---:|---:|---|---:|---:|---:|---:|---:|---:|%s\n",
	       redis ? "---:|---:|---:|---:|" : "");
	for (int s = 0; s < NSIZES; s++)
		for (int c = 0; c < NCLIENTS; c++)
			for (int d = 0; d < NDESIGNS; d++) {
				struct cell *x = &cells[s][c][d], *rd = &cells[s][c][D_REDIS];
				if (!x->n)
					continue;
				double v[6] = {median(x->put_p50, x->n),
					       median(x->put_p99, x->n),
					       median(x->put_rate, x->n) / 1e3,
					       median(x->get_p50, x->n),
					       median(x->get_p99, x->n),
					       median(x->get_rate, x->n) / 1e3};
				printf(
				    "| %zu | %d | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |",
				    sizes[s], clients[c], design_name[d], v[0], v[1], v[2], v[3],
				    v[4], v[5]);
				if (redis && rd->n && d != D_REDIS)
					printf(" %.2fx | %.2fx | %.2fx | %.2fx |",
					       v[0] / median(rd->put_p50, rd->n),
					       v[3] / median(rd->get_p50, rd->n),
					       v[2] * 1e3 / median(rd->put_rate, rd->n),
					       v[5] * 1e3 / median(rd->get_rate, rd->n));
				else if (redis)
					printf(" | | | |");
				printf("\n");
			}
	printf("\nlatency ratios: wimm / redis (below 1: wimm faster); rate ratios: wimm / "
	       "redis (above 1: wimm more)\n");
}

int kv_bench(int argc, char **argv)
{
	const char *fabric = "ofi:tcp";
	unsigned long long ops = 2000, rounds = 3;
	int redis = 1;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-f") == 0 && i + 1 < argc) {
			fabric = argv[++i];
		} else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
			if (kv_parse_size(argv[++i], &ops) < 0 || ops == 0 || ops > 1000000) {
				fprintf(stderr, "wimm kv bench: -n is 1..1000000\n");
				return 2;
			}
		} else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
			if (kv_parse_size(argv[++i], &rounds) < 0 || rounds == 0 ||
			    rounds > MAX_ROUNDS) {
				fprintf(stderr, "wimm kv bench: --rounds is 1..%d\n", MAX_ROUNDS);
				return 2;
			}
		} else if (strcmp(argv[i], "--spin") == 0) {
			spin_flags = WIMM_CTX_POLLING;
		} else if (strcmp(argv[i], "--no-redis") == 0) {
			redis = 0;
		} else {
			fprintf(stderr, "usage: wimm kv bench [-f FABRIC] [-n OPS] [--rounds R] "
					"[--spin] [--no-redis]\n");
			return 2;
		}
	}
	static struct cell cells[NSIZES][NCLIENTS][NDESIGNS];
	int rport = redis ? free_port() : -1;
	pid_t rpid = redis ? start_redis(rport) : -1;
	if (redis && rpid < 0) {
		fprintf(stderr, "wimm kv bench: cannot start redis-server (Debian package redis; "
				"--no-redis to skip)\n");
		return 1;
	}
	int rc = 0;
	printf("wimm kv bench: %s, %llu ops per client and phase, %d keys per client, %llu "
	       "rounds, %s%s\n",
	       fabric, ops, KEYS, rounds, spin_flags ? "spinning" : "blocking waits",
	       redis ? ", redis-server on the same host" : "");
	for (unsigned r = 0; rc == 0 && r < rounds; r++)
		for (int s = 0; rc == 0 && s < NSIZES; s++)
			for (int c = 0; rc == 0 && c < NCLIENTS; c++)
				for (int d = 0; rc == 0 && d < NDESIGNS; d++) {
					struct cell *x = &cells[s][c][d];
					if (d == D_REDIS)
						rc = redis ? run_redis(rport, sizes[s], clients[c],
								       (uint32_t)ops, x)
							   : 0;
					else
						rc = run_wimm_fresh(fabric, sizes[s], clients[c],
								    (uint32_t)ops, d, x);
					if (rc < 0)
						fprintf(stderr,
							"wimm kv bench: %s, %zu B, %d "
							"clients failed\n",
							design_name[d], sizes[s], clients[c]);
				}
	if (rc == 0)
		print_table(cells, redis);
	if (rpid > 0) {
		kill(rpid, SIGTERM);
		waitpid(rpid, NULL, 0);
	}
	return rc < 0 ? 1 : 0;
}
