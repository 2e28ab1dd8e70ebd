/* wimm_kv tests, multi-process on a real fabric:
 *   kv_test FABRIC SCENARIO     SCENARIO: mixed overwrite crash hostile lease expiry evict
 *                               full input, and beside a shared index index_mixed
 *                               index_overwrite index_contend index_crash index_hostile
 *                               index_full
 * The parent only orchestrates: the server and every client are processes
 * of their own (fork + exec of this binary with --child ROLE), since
 * libfabric's shm provider state is not safe to share between threads. A
 * child's exit status is its verdict; it says why on stderr. Here: the
 * scenarios and the processes they run; the roles are in kv_test_roles.c
 * and kv_test_hostile.c.
 *
 * Values are self-verifying: [u32 key id, u32 writer, u32 seq, u32 len] and
 * then bytes drawn from a generator seeded by those, so any get can tell a
 * torn or foreign value from the right one. WIMM_KV_TEST_LONG=1 runs the
 * issue's size (64 clients, 1M operations over 100k keys) for mixed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kv_test.h"

#define MAX_KIDS 80

static const char *self_path;

_Noreturn void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "kv_test[%d]: ", (int)getpid());
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------- orchestrator */

struct kid {
	pid_t pid;
	int out, in; /* its stdout, its stdin */
	char name[32];
};

static struct kid kids[MAX_KIDS];
static int nkids;

static struct kid *spawn(const char *name, char *const *args)
{
	int p[2], q[2];
	char *argv[16] = {(char *)self_path, "--child"};
	int n = 2;
	for (int i = 0; args[i] && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	if (nkids == MAX_KIDS || pipe2(p, O_CLOEXEC) < 0 || pipe2(q, O_CLOEXEC) < 0)
		die("cannot start %s", name);
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(p[1], 1);
		dup2(q[0], 0);
		execv(self_path, argv);
		_exit(127);
	}
	close(p[1]);
	close(q[0]);
	if (pid < 0)
		die("fork: %s", strerror(errno));
	struct kid *k = &kids[nkids++];
	k->pid = pid;
	k->out = p[0];
	k->in = q[1];
	snprintf(k->name, sizeof(k->name), "%s", name);
	return k;
}

/* A line of the kid's stdout, waiting up to secs. */
static int read_line(struct kid *k, char *buf, size_t len, double secs)
{
	size_t got = 0;
	double end = now_s() + secs;
	while (got + 1 < len) {
		struct pollfd pf = {.fd = k->out, .events = POLLIN};
		int ms = (int)((end - now_s()) * 1000);
		if (ms <= 0 || poll(&pf, 1, ms) <= 0)
			return -1;
		if (read(k->out, buf + got, 1) != 1)
			return -1;
		if (buf[got] == '\n')
			break;
		got++;
	}
	buf[got] = '\0';
	return 0;
}

/* Wait for a kid to exit, killing it past secs; its exit status. */
static int reap(struct kid *k, double secs)
{
	double end = now_s() + secs;
	int st;
	for (;;) {
		pid_t r = waitpid(k->pid, &st, WNOHANG);
		if (r == k->pid)
			break;
		if (now_s() > end) {
			fprintf(stderr, "kv_test: %s did not finish in %.0f s: killed\n", k->name,
				secs);
			kill(k->pid, SIGKILL);
			waitpid(k->pid, &st, 0);
			return -1;
		}
		usleep(10000);
	}
	k->pid = 0;
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	fprintf(stderr, "kv_test: %s died of signal %d\n", k->name, WTERMSIG(st));
	return -1;
}

static void kill_all(void)
{
	for (int i = 0; i < nkids; i++)
		if (kids[i].pid > 0) {
			kill(kids[i].pid, SIGKILL);
			waitpid(kids[i].pid, NULL, 0);
			kids[i].pid = 0;
		}
}

static struct kid *server;
static char addr[96];
/* keys puts evictions grants_pending grants_reclaimed bad_puts clients
 * index_pending foreign_words */
static unsigned long long srv_stats[9];
static char srv_grant_ms[16] = "0"; /* the next server's grant time (0: default) */
static char srv_index[16] = "0";    /* the next server's index bytes (0: none) */

static void start_server(const char *fabric, const char *memory, const char *clients,
			 const char *lease)
{
	char line[64];
	const char *host = test_host();
	server = spawn("server",
		       (char *const[]){"server", (char *)fabric, (char *)memory, (char *)clients,
				       (char *)lease, srv_grant_ms, srv_index, NULL});
	if (read_line(server, line, sizeof(line), 20.0 * scale()) < 0 || atoi(line) <= 0) {
		kill_all();
		die("the server did not start");
	}
	snprintf(addr, sizeof(addr), "%s:%s", host, line);
}

static int stop_server(void)
{
	char line[256];
	kill(server->pid, SIGTERM);
	int rc = read_line(server, line, sizeof(line), 10.0 * scale());
	if (rc == 0)
		rc = sscanf(line, "S %llu %llu %llu %llu %llu %llu %llu %llu %llu", &srv_stats[0],
			    &srv_stats[1], &srv_stats[2], &srv_stats[3], &srv_stats[4],
			    &srv_stats[5], &srv_stats[6], &srv_stats[7], &srv_stats[8]) == 9
			 ? 0
			 : -1;
	int st = reap(server, 10.0 * scale());
	return rc == 0 && st == 0 ? 0 : -1;
}

/* Start the kids given, wait for all; 0 if every one passed. */
static int run_kids(int first, double secs)
{
	int fails = 0;
	for (int i = first; i < nkids; i++)
		if (reap(&kids[i], secs) != 0) {
			fprintf(stderr, "kv_test: %s failed\n", kids[i].name);
			fails++;
		}
	return fails;
}

static int index_scenario(const char *fabric, const char *name);

static int scenario(const char *fabric, const char *name)
{
	int fails = 0, first;
	char b[8][24];
	if (strncmp(name, "index_", 6) == 0)
		return index_scenario(fabric, name + 6);
	if (strcmp(name, "mixed") == 0) {
		int longrun = getenv("WIMM_KV_TEST_LONG") && atoi(getenv("WIMM_KV_TEST_LONG"));
		int n = longrun ? 64 : 8;
		unsigned keys = longrun ? 100000 : 2000, ops = longrun ? 1000000 / 64 : 2000;
		start_server(fabric, longrun ? "603979776" : "100663296", longrun ? "72" : "12",
			     "200");
		first = nkids;
		for (int i = 0; i < n; i++) {
			snprintf(b[0], sizeof(b[0]), "%d", i);
			snprintf(b[1], sizeof(b[1]), "%d", n);
			snprintf(b[2], sizeof(b[2]), "%u", keys);
			snprintf(b[3], sizeof(b[3]), "%u", ops);
			spawn("mixed", (char *const[]){"mixed", (char *)fabric, addr, b[0], b[1],
						       b[2], b[3], NULL});
		}
		fails += run_kids(first, (longrun ? 3000.0 : 120.0) * scale());
		fails += stop_server() != 0;
		if (!fails && (srv_stats[2] != 0 || srv_stats[3] != 0 || srv_stats[5] != 0)) {
			fprintf(stderr,
				"kv_test: server: %llu evictions, %llu grants pending, %llu "
				"bad puts\n",
				srv_stats[2], srv_stats[3], srv_stats[5]);
			fails++;
		}
	} else if (strcmp(name, "overwrite") == 0) {
		start_server(fabric, "67108864", "8", "100");
		first = nkids;
		spawn("writer", (char *const[]){"writer", (char *)fabric, addr, "600", NULL});
		for (int i = 0; i < 3; i++)
			spawn("reader",
			      (char *const[]){"reader", (char *)fabric, addr, "600", NULL});
		fails += run_kids(first, 90.0 * scale());
		fails += stop_server() != 0;
	} else if (strcmp(name, "crash") == 0) {
		char line[16];
		start_server(fabric, "8388608", "4", "200");
		struct kid *k =
		    spawn("crasher", (char *const[]){"crasher", (char *)fabric, addr, NULL});
		if (read_line(k, line, sizeof(line), 20.0 * scale()) < 0 || line[0] != 'G') {
			kill_all();
			die("the crasher did not get its grant");
		}
		first = nkids;
		spawn("checker0", (char *const[]){"checker", (char *)fabric, addr, "crash0", NULL});
		fails += run_kids(first, 30.0 * scale());
		kill(k->pid, SIGKILL);
		waitpid(k->pid, NULL, 0);
		k->pid = 0;
		first = nkids;
		spawn("checker1", (char *const[]){"checker", (char *)fabric, addr, "crash1", NULL});
		fails += run_kids(first, 30.0 * scale());
		fails += stop_server() != 0;
	} else if (strcmp(name, "hostile") == 0) {
		start_server(fabric, "8388608", "4", "200");
		const char *steps[3][2] = {
		    {"checker", "safe0"}, {"hostile", NULL}, {"checker", "safe1"}};
		for (int i = 0; i < 3; i++) {
			first = nkids;
			spawn(steps[i][0], (char *const[]){(char *)steps[i][0], (char *)fabric,
							   addr, (char *)steps[i][1], NULL});
			fails += run_kids(first, 60.0 * scale());
		}
		fails += stop_server() != 0;
	} else if (strcmp(name, "lease") == 0) {
		/* A reader holds a lease on "L" v1 while v1 is overwritten and
		 * more is put: the old slot waits, the reader still reads v1
		 * whole after the overwrite; after the lease the slot is freed. */
		char line[16], lease[16];
		snprintf(lease, sizeof(lease), "%d", 2000 * scale());
		start_server(fabric, "8388608", "4", lease);
		first = nkids;
		spawn("lease0", (char *const[]){"checker", (char *)fabric, addr, "lease0", NULL});
		fails += run_kids(first, 30.0 * scale());
		struct kid *k =
		    spawn("leaser", (char *const[]){"leaser", (char *)fabric, addr, NULL});
		if (read_line(k, line, sizeof(line), 20.0 * scale()) < 0 || line[0] != 'G') {
			kill_all();
			die("the leaser did not get its lease");
		}
		first = nkids;
		spawn("lease1", (char *const[]){"checker", (char *)fabric, addr, "lease1", NULL});
		fails += run_kids(first, 30.0 * scale());
		if (write(k->in, "go\n", 3) != 3 || reap(k, 30.0 * scale()) != 0) {
			fprintf(stderr, "kv_test: the leaser failed\n");
			fails++;
		}
		first = nkids;
		spawn("lease2", (char *const[]){"checker", (char *)fabric, addr, "lease2", NULL});
		fails += run_kids(first, 30.0 * scale());
		fails += stop_server() != 0;
	} else if (strcmp(name, "expiry") == 0) {
		snprintf(srv_grant_ms, sizeof(srv_grant_ms), "%d", 300 * scale());
		start_server(fabric, "262144", "2", "200");
		first = nkids;
		spawn("expirer",
		      (char *const[]){"expirer", (char *)fabric, addr, srv_grant_ms, NULL});
		fails += run_kids(first, 60.0 * scale());
		fails += stop_server() != 0;
	} else if (strcmp(name, "evict") == 0 || strcmp(name, "full") == 0 ||
		   strcmp(name, "input") == 0) {
		start_server(fabric, "262144", "2", "200");
		first = nkids;
		spawn(name, (char *const[]){(char *)name, (char *)fabric, addr, NULL});
		fails += run_kids(first, 60.0 * scale());
		fails += stop_server() != 0;
	} else {
		die("unknown scenario %s (mixed overwrite crash hostile lease expiry evict full "
		    "input)",
		    name);
	}
	kill_all();
	return fails;
}

/* Beside a shared index: mixed and overwrite as above; contend (4 writers
 * of one key, reading it back), crash (a raw client dies between write and
 * swap, and between swap and note), hostile (a raw client swaps words by
 * hand), full (a 4 KiB index fills, deletes free its words). */
static int index_scenario(const char *fabric, const char *name)
{
	int fails = 0, first;
	snprintf(srv_index, sizeof(srv_index), "%s",
		 strcmp(name, "full") == 0    ? "4096"
		 : strcmp(name, "mixed") == 0 ? "3145728"
					      : "65536");
	if (strcmp(name, "mixed") == 0 || strcmp(name, "overwrite") == 0) {
		fails = scenario(fabric, name);
		if (!fails && (srv_stats[7] != 0 || srv_stats[8] != 0)) {
			fprintf(stderr,
				"kv_test: server: %llu written values pending, %llu foreign "
				"words\n",
				srv_stats[7], srv_stats[8]);
			fails++;
		}
		return fails;
	}
	if (strcmp(name, "contend") == 0) {
		start_server(fabric, "16777216", "8", "100");
		first = nkids;
		for (int i = 0; i < 4; i++) {
			char id[8];
			snprintf(id, sizeof(id), "%d", i);
			spawn("contender",
			      (char *const[]){"contender", (char *)fabric, addr, id, "150", NULL});
		}
		fails += run_kids(first, 90.0 * scale());
		first = nkids;
		spawn("check",
		      (char *const[]){"ix_check", (char *)fabric, addr, "contend", "150", NULL});
		fails += run_kids(first, 30.0 * scale());
	} else if (strcmp(name, "crash") == 0) {
		char line[16];
		start_server(fabric, "8388608", "4", "200");
		struct kid *k =
		    spawn("ix_crasher", (char *const[]){"ix_crasher", (char *)fabric, addr, NULL});
		if (read_line(k, line, sizeof(line), 20.0 * scale()) < 0 || line[0] != 'G') {
			kill_all();
			die("the crasher did not get its puts written");
		}
		first = nkids;
		spawn("check0", (char *const[]){"ix_check", (char *)fabric, addr, "crash0", NULL});
		fails += run_kids(first, 30.0 * scale());
		kill(k->pid, SIGKILL);
		waitpid(k->pid, NULL, 0);
		k->pid = 0;
		first = nkids;
		spawn("check1", (char *const[]){"ix_check", (char *)fabric, addr, "crash1", NULL});
		fails += run_kids(first, 30.0 * scale());
	} else if (strcmp(name, "hostile") == 0) {
		start_server(fabric, "8388608", "4", "200");
		const char *steps[3][2] = {
		    {"ix_check", "safe0"}, {"ix_hostile", NULL}, {"ix_check", "safe1"}};
		for (int i = 0; i < 3; i++) {
			first = nkids;
			spawn(steps[i][0], (char *const[]){(char *)steps[i][0], (char *)fabric,
							   addr, (char *)steps[i][1], NULL});
			fails += run_kids(first, 60.0 * scale());
		}
	} else if (strcmp(name, "full") == 0) {
		start_server(fabric, "1048576", "2", "200");
		first = nkids;
		spawn("ix_full", (char *const[]){"ix_full", (char *)fabric, addr, NULL});
		fails += run_kids(first, 60.0 * scale());
	} else {
		die("unknown scenario index_%s (index_mixed index_overwrite index_contend "
		    "index_crash index_hostile index_full)",
		    name);
	}
	fails += stop_server() != 0;
	kill_all();
	return fails;
}

int main(int argc, char **argv)
{
	static char path[4096];
	self_path = realpath(argv[0], path) ? path : argv[0];
	if (argc >= 3 && strcmp(argv[1], "--child") == 0)
		return child_main(argc - 2, argv + 2);
	if (argc != 3) {
		fprintf(
		    stderr,
		    "usage: %s FABRIC SCENARIO (mixed overwrite crash hostile lease expiry evict "
		    "full input index_mixed index_overwrite index_contend index_crash "
		    "index_hostile index_full)\n",
		    argv[0]);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	double t0 = now_s();
	int fails = scenario(argv[1], argv[2]);
	printf("kv_test %s %s: %s in %.1f s\n", argv[1], argv[2], fails ? "FAIL" : "pass",
	       now_s() - t0);
	return fails ? 1 : 0;
}
