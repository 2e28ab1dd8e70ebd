/* The log service as separate processes: `wimm log serve` and writers
 * (`wimm log append`) spawned from here, every entry read back through
 * libwimm_log's reader and checked (per-writer order, CRC32C, contents,
 * nothing lost or duplicated).
 *
 *   log_test WIMM FABRIC concurrent | concurrent_wide | crash | writer_kill |
 *                        bad_input | replication | truncate | hostile | raw_peer |
 *                        shared | shared_hole | shared_hostile
 *
 * (replication, truncate and hostile are in log_test_repl.c, raw_peer in
 * log_test_raw.c, the shared ring's in log_test_shared.c.)
 *
 * concurrent is 16 writers x 2000 entries; concurrent_wide 64 writers at
 * once, 1563 entries each: 100,032 entries of 1 B..16 KiB (about 800 MB of
 * segments). WIMM_LOG_TEST_LONG=1 runs a far longer variant of concurrent:
 * 64 writers x 100k entries each (about 52 GB of segments in TMPDIR); WIMM_LOG_TEST_WRITERS /
 * WIMM_LOG_TEST_ENTRIES choose another shape (ENTRIES also for concurrent_wide).
 * WIMM_LOG_TEST_WORKLOAD=P runs concurrent, concurrent_wide, crash and
 * writer_kill with P percent of their entries (1..100, default 100): the
 * Soft-RoCE guest's smaller workload, the same checks. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <wimm/log.h>

#include "log_cmd.h"
#include "log_test_util.h"

/* ------------------------------------------------------------------ tests */

/* nw writers (separate processes) x per entries of 1..16384 bytes at
 * once, every entry read back and checked. */
static int concurrent_run(const char *name, unsigned nw, unsigned per, int wait_ms)
{
	struct proc srv, w[MAX_PROCS];
	int port = server_start(&srv, 0, NULL, NULL);
	CHECK(port > 0, "server");
	int64_t t0 = now_ms();
	for (unsigned i = 0; i < nw; i++)
		CHECK(writer_start(&w[i], port, i + 1, per, "1-16384", "--visible") == 0, "spawn");
	int bad = 0;
	for (unsigned i = 0; i < nw; i++) {
		int st = proc_wait(&w[i], wait_ms);
		if (st != 0) {
			fprintf(stderr, "writer %u: status %d, %llu acknowledged: %s\n", i + 1, st,
				(unsigned long long)w[i].durable, w[i].errtext);
			bad++;
		}
	}
	if (bad) {
		/* What the server said about them (refusals, drops). */
		kill(srv.pid, SIGTERM);
		proc_wait(&srv, 10000);
		fprintf(stderr, "the server's stderr:\n%s\n", srv.errtext);
	}
	CHECK(!bad, "%d writers failed", bad);
	struct verify *v = calloc(1, sizeof(*v));
	v->min = 1;
	v->max = 16384;
	int rc = verify_log(port, v);
	if (!rc)
		rc = check_counts(v, nw, per);
	printf("%s: %u writers x %u entries (1..16384 B), %llu entries read back and "
	       "checked in %.1f s\n",
	       name, nw, per, (unsigned long long)v->total, (now_ms() - t0) / 1000.0);
	free(v);
	kill(srv.pid, SIGTERM);
	CHECK(proc_wait(&srv, 10000) == 0, "server exit on SIGTERM: %s", srv.errtext);
	return rc;
}

/* The entries per writer: WIMM_LOG_TEST_ENTRIES, else dflt (as
 * WIMM_LOG_TEST_WORKLOAD scales it). */
static unsigned entries_per_writer(unsigned dflt)
{
	const char *e = getenv("WIMM_LOG_TEST_ENTRIES");
	return e && atoi(e) > 0 ? (unsigned)atoi(e) : workload(dflt);
}

int test_concurrent(void)
{
	int long_run = getenv("WIMM_LOG_TEST_LONG") != NULL;
	unsigned nw = long_run ? 64 : 16, per = entries_per_writer(long_run ? 100000 : 2000);
	/* Or any shape: WIMM_LOG_TEST_WRITERS (1..64) x WIMM_LOG_TEST_ENTRIES. */
	const char *ew = getenv("WIMM_LOG_TEST_WRITERS");
	if (ew && atoi(ew) > 0 && atoi(ew) <= 64)
		nw = (unsigned)atoi(ew);
	return concurrent_run("concurrent", nw, per, long_run ? 3600000 : 120000);
}

/* 64 writers connecting and appending at once, 100k entries in all. */
int test_concurrent_wide(void)
{
	return concurrent_run("concurrent_wide", 64, entries_per_writer(1563), 300000);
}

int test_crash(void)
{
	enum { NW = 4 };
	const unsigned per = workload(3000), mid = per / 10;
	struct proc srv, w[NW];
	int port = server_start(&srv, 0, NULL, NULL);
	CHECK(port > 0, "server");
	for (int i = 0; i < NW; i++)
		CHECK(writer_start(&w[i], port, (uint64_t)i + 1, per, "1-16384", NULL) == 0,
		      "spawn");
	/* Mid-stream: every writer has something durable. */
	int64_t end = now_ms() + scaled_ms(30000);
	for (int i = 0; i < NW; i++)
		while (w[i].durable < mid && now_ms() < end)
			proc_line(&w[i], 50);
	for (int i = 0; i < NW; i++)
		CHECK(w[i].durable >= mid, "writer %d reported no progress", i + 1);
	kill(srv.pid, kill_sig);
	proc_wait(&srv, 5000);
	CHECK(WIFSIGNALED(srv.status) && WTERMSIG(srv.status) == SIGKILL,
	      "the server was not killed");
	uint64_t acked = 0;
	for (int i = 0; i < NW; i++) {
		while (proc_line(&w[i], 0))
			;
		acked += w[i].durable;
	}
	struct timespec ts = {0, 300 * 1000000};
	nanosleep(&ts, NULL);
	int port2 = server_start(&srv, port, NULL, NULL);
	CHECK(port2 == port, "restart on port %d", port);
	/* Every entry acknowledged durable was found by the recovery. */
	CHECK(srv.entries >= acked, "recovered %llu entries, %llu were acknowledged durable",
	      (unsigned long long)srv.entries, (unsigned long long)acked);
	uint64_t resent = 0;
	for (int i = 0; i < NW; i++) {
		int st = proc_wait(&w[i], 120000);
		CHECK(st == 0, "writer %d after the restart: status %d: %s", i + 1, st,
		      w[i].errtext);
		resent += w[i].resent;
	}
	CHECK(resent > 0, "no writer resent anything: did they reconnect?");
	struct verify *v = calloc(1, sizeof(*v));
	v->min = 1;
	v->max = 16384;
	int rc = verify_log(port, v);
	if (!rc)
		rc = check_counts(v, NW, per);
	printf("crash: server SIGKILLed with %llu entries acknowledged durable, restarted: "
	       "%llu recovered, writers resumed resending %llu; %llu entries, every writer "
	       "complete, none lost or duplicated\n",
	       (unsigned long long)acked, (unsigned long long)srv.entries,
	       (unsigned long long)resent, (unsigned long long)v->total);
	free(v);
	kill(srv.pid, SIGTERM);
	CHECK(proc_wait(&srv, 10000) == 0, "server exit: %s", srv.errtext);
	return rc;
}

int test_writer_kill(void)
{
	struct proc srv, a, b, c, c2;
	/* Three connections: the killed writer's slot must come back for c2. */
	int port = server_start(&srv, 0, "--max-conns", "3");
	CHECK(port > 0, "server");
	const unsigned per = workload(4000), mid = workload(200), after = workload(500);
	CHECK(writer_start(&a, port, 1, per, "1-16384", NULL) == 0, "spawn");
	CHECK(writer_start(&b, port, 2, per, "1-16384", NULL) == 0, "spawn");
	CHECK(writer_start(&c, port, 3, 100000, "1-16384", NULL) == 0, "spawn");
	int64_t end = now_ms() + scaled_ms(30000);
	while (c.durable < mid && now_ms() < end)
		proc_line(&c, 50);
	CHECK(c.durable >= mid, "writer 3 made no progress");
	kill(c.pid, kill_sig);
	proc_wait(&c, 5000);
	CHECK(WIFSIGNALED(c.status) && WTERMSIG(c.status) == SIGKILL, "writer 3 was not killed");
	CHECK(writer_start(&c2, port, 3, after, "1-16384", NULL) == 0, "spawn");
	int sa = proc_wait(&a, 120000), sb = proc_wait(&b, 120000), sc = proc_wait(&c2, 120000);
	CHECK(sa == 0 && sb == 0, "the other writers: %d %d: %s %s", sa, sb, a.errtext, b.errtext);
	CHECK(sc == 0, "the writer's successor (its slot reclaimed?): %d: %s", sc, c2.errtext);
	struct verify *v = calloc(1, sizeof(*v));
	v->min = 1;
	v->max = 16384;
	int rc = verify_log(port, v);
	if (!rc && (v->next_seq[1] != per || v->next_seq[2] != per ||
		    v->next_seq[3] < c.durable + after)) {
		fprintf(stderr, "FAIL: writers hold %llu %llu %llu entries\n",
			(unsigned long long)v->next_seq[1], (unsigned long long)v->next_seq[2],
			(unsigned long long)v->next_seq[3]);
		failures++;
		rc = -1;
	}
	printf("writer_kill: writer 3 SIGKILLed after %llu durable; the others finished, its "
	       "successor resumed at its position (%llu entries of id 3, none duplicated)\n",
	       (unsigned long long)c.durable, (unsigned long long)v->next_seq[3]);
	free(v);
	kill(srv.pid, SIGTERM);
	CHECK(proc_wait(&srv, 10000) == 0, "server exit: %s", srv.errtext);
	return rc;
}

int test_bad_input(void)
{
	char d[300], f[400];
	struct stat sb;
	/* A directory that cannot be created. */
	CHECK(expect_serve_error("/proc/self/wimm-log", "cannot create directory") == 0, "mkdir");
	/* Not a directory at all. */
	snprintf(d, sizeof(d), "%s.file", dir);
	write_file(d, "x", 1);
	CHECK(expect_serve_error(d, "cannot open directory") == 0, "file");
	unlink(d);
	/* A foreign file: refused, and nothing is added to the directory. */
	snprintf(d, sizeof(d), "%s.foreign", dir);
	mkdir(d, 0755);
	snprintf(f, sizeof(f), "%s/notes.txt", d);
	write_file(f, "mine\n", 5);
	CHECK(expect_serve_error(d, "foreign file 'notes.txt'") == 0, "foreign");
	snprintf(f, sizeof(f), "%s/wimm-log.lock", d);
	CHECK(stat(f, &sb) != 0, "a refused directory was changed");
	rm_dir(d);
	/* A truncated segment: refused and left as it is. */
	snprintf(d, sizeof(d), "%s.trunc", dir);
	mkdir(d, 0755);
	snprintf(f, sizeof(f), "%s/0000000000000000.wlog", d);
	write_file(f, "WIMMLOG\0\1\0", 10);
	CHECK(expect_serve_error(d, "is truncated") == 0, "truncated");
	CHECK(stat(f, &sb) == 0 && sb.st_size == 10, "the truncated segment was changed");
	/* A segment of another format. */
	write_file(f, "this is not a segment of a wimm log, but long enough to have a header\n",
		   70);
	CHECK(expect_serve_error(d, "not a wimm log segment") == 0, "foreign segment");
	rm_dir(d);

	/* A running server: an entry larger than the ring, a sequence gap. */
	struct proc srv, p;
	int port = server_start(&srv, 0, "--ring", "65536");
	CHECK(port > 0, "server");
	char addr[64];
	test_addr(addr, sizeof(addr), port);
	/* The hello as the first doorbell, as verbs (no private data) does. */
	char *ok[] = {(char *)wimm_bin, "log", "append", addr, "-f",	 (char *)fabric,
		      "--id",		"5",   "--gen",	 "3",  "--size", "100",
		      "--inband-hello", NULL};
	CHECK(run(&p, ok) == 0, "append: %s", p.errtext);
	char *big[] = {(char *)wimm_bin, "log",	  "append", addr,    "-f",
		       (char *)fabric,	 "--id",  "6",	    "--gen", "1",
		       "--size",	 "70000", NULL};
	int st = run(&p, big);
	CHECK(st == 2 && strstr(p.errtext, "larger than the ring"), "big entry: %d: %s", st,
	      p.errtext);
	char *gap[] = {(char *)wimm_bin, "log",	 "append", addr,	  "-f",
		       (char *)fabric,	 "--id", "5",	   "--first-seq", "10",
		       "--gen",		 "1",	 "--size", "100",	  NULL};
	st = run(&p, gap);
	CHECK(st == 2 && strstr(p.errtext, "sequence gap"), "gap: %d: %s", st, p.errtext);
	/* --timeout: out of range refused; a server that does not answer
	 * (stopped) fails the writer after its timeout, not the default. */
	char *bad_to[] = {(char *)wimm_bin, "log",	 "append", addr, "-f",
			  (char *)fabric,   "--timeout", "0",	   NULL};
	st = run(&p, bad_to);
	CHECK(st == 2 && strstr(p.errtext, "--timeout must be"), "--timeout 0: %d: %s", st,
	      p.errtext);
	char *short_to[] = {(char *)wimm_bin, "log",  "append",	   addr,    "-f",
			    (char *)fabric,   "--id", "8",	   "--gen", "1",
			    "--size",	      "100",  "--timeout", "1000",  NULL};
	kill(srv.pid, SIGSTOP);
	int64_t t_stop = now_ms();
	st = run(&p, short_to);
	int64_t waited = now_ms() - t_stop;
	kill(srv.pid, SIGCONT);
	CHECK(st == 1 && waited < scaled_ms(12000),
	      "append --timeout 1000 to a stopped server: status %d after %lld ms: %s", st,
	      (long long)waited, p.errtext);
	/* Nothing lost: writer 5 still holds 1..3, and goes on at 4. */
	char *more[] = {(char *)wimm_bin, "log", "append", addr,  "-f", (char *)fabric, "--id", "5",
			"--gen",	  "2",	 "--size", "100", NULL};
	CHECK(run(&p, more) == 0 && strstr(p.line, "") != NULL, "append after the gap: %s",
	      p.errtext);
	struct verify *v = calloc(1, sizeof(*v));
	v->min = v->max = 100;
	int rc = verify_log(port, v);
	if (!rc && (v->total != 5 || v->next_seq[5] != 5)) {
		fprintf(stderr,
			"FAIL: after bad input the log holds %llu entries (writer 5: %llu)\n",
			(unsigned long long)v->total, (unsigned long long)v->next_seq[5]);
		failures++;
		rc = -1;
	}
	free(v);
	/* tail prints position, length, CRC32C, writer:seq and the text. */
	char *tail[] = {(char *)wimm_bin, "log", "tail",    addr, "-f", (char *)fabric,
			"--from",	  "4",	 "--count", "1",  NULL};
	CHECK(spawn(&p, tail) == 0, "spawn");
	const char *l = proc_line(&p, 10000);
	char want[160];
	unsigned char body[100];
	log_gen_fill(body, 100, 5, 5);
	snprintf(want, sizeof(want), "4 100 %08x 5:5 %.100s", wimm_log_crc32c(0, body, 100),
		 (const char *)body);
	CHECK(l && strcmp(l, want) == 0, "tail printed '%s', expected '%s'", l ? l : "", want);
	CHECK(proc_wait(&p, 10000) == 0, "tail --count 1 did not exit: %s", p.errtext);
	/* stdin lines (the last without a newline) as entries. */
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "printf 'alpha\\nbeta' | '%s' log append %s -f %s --id 7",
		 wimm_bin, addr, fabric);
	char *sh[] = {"/bin/sh", "-c", cmd, NULL};
	CHECK(run(&p, sh) == 0, "append from stdin: %s", p.errtext);
	char *tail2[] = {(char *)wimm_bin, "log", "tail",    addr, "-f", (char *)fabric,
			 "--from",	   "5",	  "--count", "2",  NULL};
	CHECK(spawn(&p, tail2) == 0, "spawn");
	const char *l1 = proc_line(&p, 10000);
	CHECK(l1 && strcmp(l1, "5 5 78d92f81 7:1 alpha") == 0, "tail printed '%s'", l1 ? l1 : "");
	const char *l2 = proc_line(&p, 10000);
	CHECK(l2 && strstr(l2, "6 4 ") == l2 && strstr(l2, " 7:2 beta"), "tail printed '%s'",
	      l2 ? l2 : "");
	CHECK(proc_wait(&p, 10000) == 0, "tail --count 2 did not exit: %s", p.errtext);
	kill(srv.pid, SIGTERM);
	CHECK(proc_wait(&srv, 10000) == 0, "server exit: %s", srv.errtext);
	printf("bad_input: uncreatable, non-directory, foreign and truncated directories refused "
	       "unchanged; too big an entry, a sequence gap and a bad --timeout refused, a stopped "
	       "server given up after --timeout (%lld ms), nothing lost\n",
	       (long long)waited);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr,
			"usage: %s WIMM FABRIC concurrent|concurrent_wide|crash|writer_kill|"
			"bad_input|replication|truncate|hostile|raw_peer|shared|shared_hole|"
			"shared_hostile\n",
			argv[0]);
		return 2;
	}
	wimm_bin = argv[1];
	fabric = argv[2];
	signal(SIGPIPE, SIG_IGN);
	if (strstr(fabric, "shm")) {
		kill_sig = SIGUSR1;
		setenv("WIMM_LOG_CRASH_ON_USR1", "1", 1);
	}
	snprintf(dir, sizeof(dir), "%s/wimm-log-test-%d",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
	rm_dir(dir);
	/* CRC32C: the standard check value, and a longer run (slicing-by-8)
	 * against a bit-at-a-time reference. */
	unsigned char run_bytes[1000];
	for (int i = 0; i < 1000; i++)
		run_bytes[i] = (unsigned char)(i * 7);
	if (wimm_log_crc32c(0, "123456789", 9) != 0xe3069283u ||
	    wimm_log_crc32c(0, run_bytes, sizeof(run_bytes)) != 0x79a16ae6u ||
	    wimm_log_crc32c(wimm_log_crc32c(0, run_bytes, 333), run_bytes + 333, 667) !=
		0x79a16ae6u) {
		fprintf(stderr, "FAIL: wimm_log_crc32c gives wrong values\n");
		return 1;
	}
	static const struct {
		const char *name;
		int (*fn)(void);
	} tests[] = {{"concurrent", test_concurrent},
		     {"crash", test_crash},
		     {"writer_kill", test_writer_kill},
		     {"bad_input", test_bad_input},
		     {"replication", test_replication},
		     {"truncate", test_truncate},
		     {"hostile", test_hostile},
		     {"raw_peer", test_raw_peer},
		     {"concurrent_wide", test_concurrent_wide},
		     {"shared", test_shared},
		     {"shared_hole", test_shared_hole},
		     {"shared_hostile", test_shared_hostile}};
	int rc = -2;
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
		if (!strcmp(argv[3], tests[i].name))
			rc = tests[i].fn();
	if (rc == -2)
		return 2;
	rm_dir(dir);
	return rc || failures ? 1 : 0;
}
