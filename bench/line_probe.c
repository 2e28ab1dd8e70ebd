/* wimm_line_probe: how far apart the host has put this machine's CPUs right
 * now. Two processes (a fork) pass one cache line back and forth, each
 * spinning on its own half-line flag, as a ping-pong's two ends do; it
 * prints the mean round trip in ns.
 *
 * On a VM whose vCPUs the host moves between near and far cores, every
 * intra-host latency moves with them (on the machines of this project: 115
 * against 520 ns a round trip, from one minute to the next), so the bench
 * harness runs this before each run and keeps the figure beside it.
 *
 * usage: wimm_line_probe [-t MS] [-n MAX]
 *   -t MS   stop after about MS milliseconds (default 20)
 *   -n MAX  stop after MAX round trips (default 1000000)
 * Output: one JSON line {"line_rtt_ns": ..., "round_trips": ..., "ms": ...}.
 * Exit status: 0 done, 1 the system refused (fork, mmap) or the child died,
 * 2 bad flags. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The parent's flag and the child's, a line apart: each side writes its
 * own line and reads the other's, so every round trip moves each line
 * once, as a doorbell and its answer do. */
struct lines {
	_Alignas(64) volatile uint64_t ping;
	_Alignas(64) volatile uint64_t pong;
};

/* The ping that tells the child to leave. */
#define STOP UINT64_MAX
/* Round trips between two looks at the clock. */
#define BLOCK 16
/* Spins on the child's line between two looks at whether it still lives:
 * a round trip takes far fewer, so the measured ones never look. */
#define SPINS_PER_CHECK 65536

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static int parse(const char *text, long min, long max, long *out)
{
	char *end;

	errno = 0;
	long v = strtol(text, &end, 10);
	if (errno || end == text || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

static void usage(const char *why)
{
	fprintf(stderr,
		"wimm_line_probe: %s\n"
		"usage: wimm_line_probe [-t MS (1..10000, default 20)] [-n MAX (1..100000000, "
		"default 1000000)]\n",
		why);
	exit(2);
}

static void child(struct lines *l, pid_t parent)
{
	uint64_t seen = 0;

	/* A parent killed mid-run must not leave its child spinning. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
		_exit(1);

	for (;;) {
		uint64_t v;
		while ((v = l->ping) == seen)
			;
		if (v == STOP)
			_exit(0);
		seen = v;
		l->pong = v;
	}
}

/* Wait for the child's answer v. 0, or -1 when the child is gone (killed,
 * or it could not set itself up): the probe then fails, it does not hang. */
static int await_pong(struct lines *l, uint64_t v, pid_t child_pid)
{
	for (unsigned spins = 0; l->pong != v;) {
		if (++spins % SPINS_PER_CHECK == 0 && waitpid(child_pid, NULL, WNOHANG) != 0)
			return -1;
	}
	return 0;
}

static int child_gone(void)
{
	fprintf(stderr, "wimm_line_probe: the child process stopped answering\n");
	return 1;
}

int main(int argc, char **argv)
{
	long ms = 20, max = 1000000;
	int opt;

	while ((opt = getopt(argc, argv, "t:n:")) != -1) {
		if (opt == 't' && parse(optarg, 1, 10000, &ms) == 0)
			continue;
		if (opt == 'n' && parse(optarg, 1, 100000000, &max) == 0)
			continue;
		usage(opt == '?' ? "unknown flag" : "-t or -n out of range");
	}
	if (optind != argc)
		usage("no operands are taken");

	struct lines *l =
	    mmap(NULL, sizeof(*l), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (l == MAP_FAILED) {
		fprintf(stderr, "wimm_line_probe: mmap: %s\n", strerror(errno));
		return 1;
	}
	pid_t self = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "wimm_line_probe: fork: %s\n", strerror(errno));
		return 1;
	}
	if (pid == 0)
		child(l, self);

	/* The first round trip waits for the child to be scheduled at all:
	 * not part of the figure. */
	l->ping = 1;
	if (await_pong(l, 1, pid))
		return child_gone();
	uint64_t start = now_ns(), deadline = start + (uint64_t)ms * 1000000u, done = 0;
	uint64_t end = start;
	while (done < (uint64_t)max && end < deadline) {
		for (int i = 0; i < BLOCK && done < (uint64_t)max; i++) {
			uint64_t v = done + 2;
			l->ping = v;
			if (await_pong(l, v, pid))
				return child_gone();
			done++;
		}
		end = now_ns();
	}
	l->ping = STOP;
	int status;
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "wimm_line_probe: the child process did not finish\n");
		return 1;
	}
	printf("{\"line_rtt_ns\": %.1f, \"round_trips\": %llu, \"ms\": %.3f}\n",
	       (double)(end - start) / (double)done, (unsigned long long)done,
	       (double)(end - start) / 1e6);
	return 0;
}
