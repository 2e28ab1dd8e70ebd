/* The conformance runner: wimm_conformance URI [FILTER]
 *
 * Runs every test (or those whose name contains one of the comma-separated
 * FILTER words) one after another, each in a forked process so a crash or a
 * hang fails that test alone, and prints "ok - name" / "not ok - name:
 * reason" and finally "N passed, N failed". Exit status 1 if any failed.
 *
 * Environment: WIMM_TEST_HOST (listen/connect address, default 127.0.0.1),
 * WIMM_TEST_QUICK=1 (smaller workloads), WIMM_TEST_TIMEOUT_SCALE (multiplies
 * every watchdog, e.g. under valgrind), WIMM_TEST_NOFORK=1 (run tests in
 * this process, for a debugger). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conf.h"

#define DEFAULT_TIMEOUT_S 60

static const struct conf_test *const tables[] = {
    conf_tests_input,	conf_tests_handshake_cm,  conf_tests_data,   conf_tests_bounds,
    conf_tests_credit,	conf_tests_failure,	  conf_tests_wait,   conf_tests_requests,
    conf_tests_hostile, conf_tests_counter,	  conf_tests_server, conf_tests_server_scale,
    conf_tests_atomic,	conf_tests_connect_burst, conf_tests_alloc,  conf_tests_prep,
};

/* What a test process reports back to the runner. */
struct result {
	int status; /* 0 pass, 1 fail, 2 skip */
	char reason[480];
};

static int matches(const char *name, const char *filter)
{
	char buf[256];

	if (!filter || !*filter)
		return 1;
	snprintf(buf, sizeof(buf), "%s", filter);
	for (char *save = NULL, *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save))
		if (strstr(name, w))
			return 1;
	return 0;
}

static void run_inline(const struct conf_test *t, const char *uri, struct result *r)
{
	conf_reset();
	t->fn(uri);
	r->status = conf_result(r->reason, sizeof(r->reason));
}

static int read_full(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return 0;
}

static void run_forked(const struct conf_test *t, const char *uri, struct result *r)
{
	int timeout_s = (int)((t->timeout_s ? t->timeout_s : DEFAULT_TIMEOUT_S) * conf_scale());
	int fds[2], wstatus = 0;
	pid_t pid;

	memset(r, 0, sizeof(*r));
	fflush(stdout);
	fflush(stderr);
	if (pipe(fds) < 0) {
		r->status = 1;
		snprintf(r->reason, sizeof(r->reason), "pipe: %s", strerror(errno));
		return;
	}
	pid = fork();
	if (pid < 0) {
		r->status = 1;
		snprintf(r->reason, sizeof(r->reason), "fork: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return;
	}
	if (pid == 0) {
		/* Own process group: a timeout kills the test and its peers. */
		setpgid(0, 0);
		close(fds[0]);
		run_inline(t, uri, r);
		fflush(stdout);
		fflush(stderr);
		if (write(fds[1], r, sizeof(*r)) != (ssize_t)sizeof(*r))
			_exit(3);
		_exit(0);
	}
	close(fds[1]);

	int64_t deadline = conf_now_ms() + (int64_t)timeout_s * 1000;
	pid_t w;

	while ((w = waitpid(pid, &wstatus, WNOHANG)) == 0) {
		if (conf_now_ms() > deadline) {
			kill(-pid, SIGKILL);
			kill(pid, SIGKILL);
			waitpid(pid, &wstatus, 0);
			close(fds[0]);
			r->status = 1;
			snprintf(r->reason, sizeof(r->reason), "timed out after %d s (watchdog)",
				 timeout_s);
			return;
		}
		conf_sleep_us(2000);
	}
	/* Peers the test forked must not outlive it. */
	kill(-pid, SIGKILL);
	if (read_full(fds[0], r, sizeof(*r)) < 0) {
		r->status = 1;
		if (WIFSIGNALED(wstatus))
			snprintf(r->reason, sizeof(r->reason),
				 "test process killed by signal %d (%s)", WTERMSIG(wstatus),
				 strsignal(WTERMSIG(wstatus)));
		else
			snprintf(r->reason, sizeof(r->reason),
				 "test process died with exit status %d before reporting (a "
				 "crash caught by a library's handler? see the output above)",
				 WEXITSTATUS(wstatus));
	} else if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) != 0 && r->status == 0) {
		r->status = 1;
		snprintf(r->reason, sizeof(r->reason), "test process exit status %d",
			 WEXITSTATUS(wstatus));
	}
	close(fds[0]);
}

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s URI [FILTER]   run the suite on a fabric (e.g. ofi:tcp)\n"
		"       %s --list         list the tests\n",
		prog, prog);
}

int main(int argc, char **argv)
{
	static char self[PATH_MAX];
	int passed = 0, failed = 0, skipped = 0;
	const char *uri, *filter;

	/* argv[0], not /proc/self/exe: under valgrind the latter is valgrind. */
	conf_self = realpath(argv[0], self) ? self : argv[0];
	if (argc >= 2 && strcmp(argv[1], "--child") == 0)
		return conf_child_main(argc - 2, argv + 2);
	if (argc >= 2 && strcmp(argv[1], "--server-child") == 0)
		return conf_server_child_main(argc - 2, argv + 2);
	if (argc >= 2 && strcmp(argv[1], "--list") == 0) {
		for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
			for (const struct conf_test *t = tables[i]; t->name; t++)
				printf("%s\n", t->name);
		return 0;
	}
	if (argc < 2 || argc > 3) {
		usage(argv[0]);
		return 2;
	}
	uri = argv[1];
	filter = argc == 3 ? argv[2] : NULL;
	/* A peer that dies mid-write must fail a call, not kill us. */
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);

	int nofork = getenv("WIMM_TEST_NOFORK") && atoi(getenv("WIMM_TEST_NOFORK"));
	int64_t suite_start = conf_now_ms();

	printf("# wimm conformance on %s (host %s%s)\n", uri, conf_host(),
	       conf_quick() ? ", quick" : "");
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		for (const struct conf_test *t = tables[i]; t->name; t++) {
			struct result r;

			if (!matches(t->name, filter))
				continue;
			int64_t start = conf_now_ms();

			if (nofork)
				run_inline(t, uri, &r);
			else
				run_forked(t, uri, &r);
			double secs = (double)(conf_now_ms() - start) / 1000.0;

			if (r.status == 0) {
				printf("ok - %s\n", t->name);
				passed++;
			} else if (r.status == 2) {
				printf("ok - %s # SKIP %s\n", t->name, r.reason);
				passed++;
				skipped++;
			} else {
				printf("not ok - %s: %s\n", t->name, r.reason);
				failed++;
			}
			if (secs >= 1.0)
				printf("# %s took %.2f s\n", t->name, secs);
		}
	}
	if (passed + failed == 0) {
		fprintf(stderr, "no test matches \"%s\"\n", filter ? filter : "");
		return 1;
	}
	printf("# %s: %.2f s in all, %d skipped\n", uri,
	       (double)(conf_now_ms() - suite_start) / 1000.0, skipped);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
