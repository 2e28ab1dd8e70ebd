/* wimm_scale: how one server context copes with many client connections.
 *
 *   wimm_scale [-f FABRIC] [-n 1,16,64,256,1000] [-p PROCS] [-t SECONDS]
 *              [-a HOST]   (the server's address: 127.0.0.1; on verbs the
 *                           RDMA device's, e.g. 192.0.2.1 in the guest)
 *
 * For each N the server (this process) listens; PROCS client processes
 * (this binary again, exec'd, so no libfabric state is shared through fork)
 * open N connections between them, one context per process. Measured, on
 * the server:
 *   connect/s     N / time from starting the clients to the N-th accept
 *   idle poll     CPU ns per wimm_poll with N idle connections (nothing
 *                 arrives but heartbeats)
 *   1-busy        doorbells/s and CPU ns per wimm_poll while one
 *                 connection streams and N-1 stay idle
 *   N-to-1        doorbells/s while every connection streams, and the
 *                 share of the wall time the server got the CPU (the
 *                 clients compete for the same cores)
 * and prints a markdown table. Doorbells are zero-length write_imm.
 * Not a test: it checks nothing but that every connection was made. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wimm.h"
#include "../tests/scale/load_util.h"

#define MAX_PROCS 64

static double idle_secs = 0.3;
static const char *server_host = "127.0.0.1";

/* ------------------------------------------------------------------ client */

/* Commands on the client's pipe: 'A' all connections stream, '1' the first
 * one only, 'S' stop, 'Q' quit. */
static int client_main(const char *fabric, const char *addr, int nconn, int cmd_fd, int ready_fd)
{
	struct wimm_conn **conns = calloc((size_t)nconn, sizeof(*conns));
	struct wimm_event ev[32];
	struct wimm_ctx *ctx;
	struct wimm_mr *mr;
	int streaming = 0, ret;
	char go;
	uint64_t iter = 0;

	ctx = load_client_open(fabric, &mr);
	/* Opened: connect when told, so the rate leaves process start-up out. */
	if (write(ready_fd, "o", 1) != 1 || read(cmd_fd, &go, 1) != 1)
		return 1;
	for (int i = 0; i < nconn; i++) {
		ret = wimm_connect(ctx, addr, NULL, 20000, &conns[i]);
		if (ret)
			load_die("connect", ret, ctx);
		/* Heartbeats: the connections made so far must not fall
		 * silent while the rest are made (liveness_ms). */
		wimm_poll(ctx, ev, 32);
	}
	if (write(ready_fd, "r", 1) != 1)
		return 1;
	for (;;) {
		if (iter++ % 256 == 0 || !streaming) {
			struct pollfd p = {.fd = cmd_fd, .events = POLLIN};
			char cmd;

			if (poll(&p, 1, streaming ? 0 : 5) > 0) {
				if (read(cmd_fd, &cmd, 1) != 1 || cmd == 'Q')
					break;
				streaming = cmd == 'A' ? nconn : cmd == '1' ? 1 : 0;
			}
		}
		int posted = 0;

		for (int i = 0; i < streaming; i++)
			posted += wimm_write_imm(conns[i], mr, 0, 0, 0, (uint32_t)i, 0) == 0;
		/* Credits come back through the poll. Out of them everywhere:
		 * sleep until they come, leaving the CPU to the server (two
		 * cores for everyone here). */
		if (streaming && !posted)
			wimm_wait(ctx, ev, 32, WIMM_WAIT_BLOCK, 1);
		else
			wimm_poll(ctx, ev, 32);
	}
	for (int i = 0; i < nconn; i++)
		wimm_conn_delete(&conns[i]);
	wimm_mr_dereg(&mr);
	wimm_ctx_close(&ctx);
	free(conns);
	return 0;
}

/* ------------------------------------------------------------------ server */

struct run {
	int n, procs;
	pid_t pid[MAX_PROCS];
	int cmd[MAX_PROCS];
	double connect_rate, idle_ns, busy_rate, busy_ns, all_rate, all_cpu;
};

static void tell(struct run *r, int who, char cmd)
{
	for (int i = 0; i < r->procs; i++)
		if ((who < 0 || who == i) && write(r->cmd[i], &cmd, 1) != 1)
			load_die("tell", -errno, NULL);
}

static void spawn(struct run *r, const char *self, const char *fabric, const char *addr,
		  int ready_w)
{
	for (int i = 0; i < r->procs; i++) {
		int p[2];
		char n[16], cfd[16], rfd[16];
		int share = r->n / r->procs + (i < r->n % r->procs);

		if (pipe(p))
			load_die("pipe", -errno, NULL);
		snprintf(n, sizeof(n), "%d", share);
		snprintf(cfd, sizeof(cfd), "%d", p[0]);
		snprintf(rfd, sizeof(rfd), "%d", ready_w);
		r->pid[i] = fork();
		if (r->pid[i] == 0) {
			close(p[1]);
			execl(self, self, "--client", fabric, addr, n, cfd, rfd, (char *)NULL);
			_exit(127);
		}
		close(p[0]);
		r->cmd[i] = p[1];
	}
}

/* One byte from every client. */
static void wait_ready(struct run *r, int fd)
{
	for (int got = 0; got < r->procs;) {
		char b;

		if (read(fd, &b, 1) == 1)
			got++;
	}
}

/* Doorbells per second and ns per poll over `secs`. */
static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Doorbells per second (wall clock) and the server's CPU time per poll
 * (its thread's clock: the clients and other load on the host preempt the
 * server, which the wall clock would count as poll cost). */
static double cpu_share; /* of the last measure(): server CPU / wall time */

static void measure(struct wimm_ctx *ctx, double secs, double *rate, double *ns_per_poll)
{
	struct wimm_event ev[32];
	uint64_t events = 0, polls = 0;
	double t0 = load_now_ms() / 1e3, c0 = cpu_s(), t;

	do {
		for (int k = 0; k < 64; k++, polls++) {
			int got = wimm_poll(ctx, ev, 32);

			for (int i = 0; i < got; i++)
				events += ev[i].type == WIMM_EV_WRITE_IMM;
		}
		t = load_now_ms() / 1e3;
	} while (t - t0 < secs);
	*rate = (double)events / (t - t0);
	*ns_per_poll = (cpu_s() - c0) * 1e9 / (double)polls;
	cpu_share = (cpu_s() - c0) / (t - t0);
}

static void run_one(struct run *r, const char *self, const char *fabric, double secs)
{
	struct wimm_conn **conns = calloc((size_t)r->n, sizeof(*conns));
	struct wimm_listener *l;
	struct wimm_ctx *ctx;
	char addr[64];
	int ready[2], accepted = 0, ret;
	double t0, unused;

	/* Default attributes: the CQ grows as connections come. */
	ret = wimm_ctx_open(fabric, NULL, &ctx);
	if (ret)
		load_die("ctx_open", ret, NULL);
	snprintf(addr, sizeof(addr), "%s:0", server_host);
	ret = wimm_listen(ctx, addr, NULL, &l);
	if (ret)
		load_die("listen", ret, ctx);
	snprintf(addr, sizeof(addr), "%s:%d", server_host, wimm_listener_port(l));
	if (pipe(ready))
		load_die("pipe", -errno, NULL);
	spawn(r, self, fabric, addr, ready[1]);
	wait_ready(r, ready[0]);
	t0 = load_now_ms() / 1e3;
	tell(r, -1, 'C');
	while (accepted < r->n) {
		ret = wimm_accept(l, 20000, &conns[accepted]);
		if (ret)
			load_die("accept", ret, ctx);
		accepted++;
	}
	r->connect_rate = r->n / (load_now_ms() / 1e3 - t0);
	wait_ready(r, ready[0]);
	measure(ctx, idle_secs, &unused, &r->idle_ns);
	tell(r, 0, '1');
	measure(ctx, secs, &r->busy_rate, &r->busy_ns);
	tell(r, -1, 'A');
	measure(ctx, secs, &r->all_rate, &unused);
	r->all_cpu = cpu_share;
	tell(r, -1, 'Q');
	/* Keep serving (credits, disconnects) while the clients leave. */
	for (int i = 0; i < r->procs; i++) {
		while (waitpid(r->pid[i], NULL, WNOHANG) == 0)
			measure(ctx, 0.01, &unused, &unused);
		close(r->cmd[i]);
	}
	for (int i = 0; i < r->n; i++)
		wimm_conn_delete(&conns[i]);
	wimm_listener_delete(&l);
	wimm_ctx_close(&ctx);
	close(ready[0]);
	close(ready[1]);
	free(conns);
}

int main(int argc, char **argv)
{
	const char *fabric = "ofi:tcp", *list = "1,16,64,256,1000";
	int procs = 8, opt;
	double secs = 1.0;
	char self[4096];

	if (argc == 7 && !strcmp(argv[1], "--client"))
		return client_main(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), atoi(argv[6]));
	while ((opt = getopt(argc, argv, "a:f:n:p:t:i:h")) != -1) {
		switch (opt) {
		case 'a':
			server_host = optarg;
			break;
		case 'i':
			idle_secs = atof(optarg);
			break;
		case 'f':
			fabric = optarg;
			break;
		case 'n':
			list = optarg;
			break;
		case 'p':
			procs = atoi(optarg);
			break;
		case 't':
			secs = atof(optarg);
			break;
		default:
			fprintf(stderr,
				"usage: %s [-f FABRIC] [-n N,N,...] [-p PROCS] "
				"[-t SECONDS] [-i IDLE_SECONDS] [-a HOST]\n",
				argv[0]);
			return 2;
		}
	}
	if (procs < 1 || procs > MAX_PROCS)
		procs = 8;
	load_self(self, sizeof(self));
	signal(SIGPIPE, SIG_IGN);
	load_raise_nofile();

	printf(
	    "| fabric | N | procs | connect/s | idle poll ns | 1-busy doorbells/s | 1-busy poll ns "
	    "| N-to-1 doorbells/s | server CPU share in N-to-1 |\n");
	printf("|---|---|---|---|---|---|---|---|---|\n");
	fflush(stdout);
	for (const char *p = list; *p;) {
		struct run r = {.n = atoi(p)};

		r.procs = r.n < procs ? r.n : procs;
		if (r.n > 0) {
			run_one(&r, self, fabric, secs);
			printf("| %s | %d | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f%% |\n",
			       fabric, r.n, r.procs, r.connect_rate, r.idle_ns, r.busy_rate,
			       r.busy_ns, r.all_rate, 100 * r.all_cpu);
			fflush(stdout);
		}
		p = strchr(p, ',');
		if (!p)
			break;
		p++;
	}
	return 0;
}
