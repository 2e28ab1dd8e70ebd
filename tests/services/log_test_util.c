/* Shared by the log service's process tests: see log_test_util.h. */
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

const char *wimm_bin, *fabric;
int kill_sig = SIGKILL;
char dir[256];
int failures;

int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *test_host(void)
{
	const char *h = getenv("WIMM_TEST_HOST");
	return h && *h ? h : "127.0.0.1";
}

char *test_addr(char *buf, size_t len, int port)
{
	snprintf(buf, len, "%s:%d", test_host(), port);
	return buf;
}

int scaled_ms(int ms)
{
	const char *s = getenv("WIMM_TEST_TIMEOUT_SCALE");
	int v = s ? atoi(s) : 1;
	return ms * (v > 0 ? v : 1);
}

unsigned workload(unsigned n)
{
	const char *e = getenv("WIMM_LOG_TEST_WORKLOAD");
	int pct = e ? atoi(e) : 100;
	if (pct < 1 || pct > 100)
		pct = 100;
	unsigned v = (unsigned)((uint64_t)n * (unsigned)pct / 100);
	return v ? v : 1;
}

/* ------------------------------------------------------------ processes */

static int spawn_with(struct proc *p, char *const argv[], int with_stdin)
{
	int o[2], e[2], i[2] = {-1, -1};
	memset(p, 0, sizeof(*p));
	p->in = -1;
	if (pipe2(o, O_CLOEXEC) || pipe2(e, O_CLOEXEC) || (with_stdin && pipe2(i, O_CLOEXEC)))
		return -1;
	fflush(stdout);
	fflush(stderr);
	p->pid = fork();
	if (p->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (with_stdin)
			dup2(i[0], 0);
		dup2(o[1], 1);
		dup2(e[1], 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(o[1]);
	close(e[1]);
	if (with_stdin) {
		close(i[0]);
		p->in = i[1];
	}
	p->out = o[0];
	p->err = e[0];
	fcntl(p->out, F_SETFL, O_NONBLOCK);
	fcntl(p->err, F_SETFL, O_NONBLOCK);
	return p->pid < 0 ? -1 : 0;
}

int spawn(struct proc *p, char *const argv[])
{
	return spawn_with(p, argv, 0);
}

int spawn_stdin(struct proc *p, char *const argv[])
{
	return spawn_with(p, argv, 1);
}

/* Read what the process printed; returns a complete stdout line or NULL. */
const char *proc_line(struct proc *p, int timeout_ms)
{
	for (;;) {
		char *nl = memchr(p->line, '\n', p->got);
		if (nl) {
			static char out[256];
			size_t n = (size_t)(nl - p->line);
			memcpy(out, p->line, n);
			out[n] = '\0';
			memmove(p->line, nl + 1, p->got - n - 1);
			p->got -= n + 1;
			unsigned long long d;
			const char *rs = strstr(out, "(resent ");
			if ((sscanf(out, "durable %llu", &d) == 1 ||
			     sscanf(out, "committed %llu", &d) == 1) &&
			    d > p->durable)
				p->durable = d;
			if (rs && sscanf(rs, "(resent %llu", &d) == 1)
				p->resent = d;
			return out;
		}
		struct pollfd pf = {.fd = p->out, .events = POLLIN};
		if (p->got == sizeof(p->line) - 1)
			p->got = 0;
		if (poll(&pf, 1, scaled_ms(timeout_ms)) <= 0)
			return NULL;
		ssize_t r = read(p->out, p->line + p->got, sizeof(p->line) - 1 - p->got);
		if (r <= 0)
			return NULL;
		p->got += (size_t)r;
	}
}

void proc_drain(struct proc *p)
{
	while (proc_line(p, 0))
		;
	ssize_t r;
	while (p->errlen < sizeof(p->errtext) - 1 &&
	       (r = read(p->err, p->errtext + p->errlen, sizeof(p->errtext) - 1 - p->errlen)) > 0)
		p->errlen += (size_t)r;
	p->errtext[p->errlen] = '\0';
}

/* Wait for the process to end (draining its output); its exit status, or
 * -1 after timeout_ms (it is then killed). */
int proc_wait(struct proc *p, int timeout_ms)
{
	return proc_wait_idle(p, timeout_ms, NULL, NULL);
}

int proc_wait_idle(struct proc *p, int timeout_ms, void (*idle)(void *), void *arg)
{
	int64_t end = now_ms() + scaled_ms(timeout_ms);
	for (;;) {
		proc_drain(p);
		pid_t r = waitpid(p->pid, &p->status, WNOHANG);
		if (r == p->pid) {
			proc_drain(p);
			close(p->out);
			close(p->err);
			if (p->in >= 0)
				close(p->in);
			return WIFEXITED(p->status) ? WEXITSTATUS(p->status) : 128;
		}
		if (now_ms() > end) {
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &p->status, 0);
			proc_drain(p);
			fprintf(stderr, "process %d timed out; stderr:\n%s\n", (int)p->pid,
				p->errtext);
			close(p->out);
			close(p->err);
			if (p->in >= 0)
				close(p->in);
			return -1;
		}
		struct pollfd pf[2] = {{.fd = p->out, .events = POLLIN},
				       {.fd = p->err, .events = POLLIN}};
		if (idle)
			idle(arg);
		poll(pf, 2, idle ? 0 : 20);
	}
}

int server_start(struct proc *p, int port, const char *extra1, const char *extra2)
{
	return server_start_dir(p, dir, port, extra1, extra2);
}

int server_start_dir(struct proc *p, const char *d, int port, const char *extra1,
		     const char *extra2)
{
	const char *extra[] = {extra1, extra2, NULL};
	return server_start_opts(p, d, port, extra1 ? extra : extra + 2);
}

int server_start_opts(struct proc *p, const char *d, int port, const char *const *extra)
{
	char portbuf[16];
	snprintf(portbuf, sizeof(portbuf), "%d", port);
	char *argv[24] = {(char *)wimm_bin,    "log",	 "serve",	 "--dir",
			  (char *)d,	       "-f",	 (char *)fabric, "--host",
			  (char *)test_host(), "--port", portbuf};
	for (int i = 0; extra[i] && i < 12; i++)
		argv[11 + i] = (char *)extra[i];
	if (spawn(p, argv))
		return -1;
	const char *l = proc_line(p, 15000);
	int got = 0;
	const char *ent = l ? strstr(l, "entries=") : NULL;
	if (ent)
		p->entries = strtoull(ent + 8, NULL, 10);
	const char *sh = l ? strstr(l, " shared=") : NULL;
	p->shared_port = sh ? atoi(sh + 8) : 0;
	if (!l || sscanf(l, "listening port=%d", &got) != 1) {
		proc_wait(p, 2000);
		fprintf(stderr, "the server did not start: %s\n", p->errtext);
		return -1;
	}
	return got;
}

int writer_start(struct proc *p, int port, uint64_t id, uint64_t n, const char *size,
		 const char *extra)
{
	char addr[64], idb[32], nb[32], tb[32];
	test_addr(addr, sizeof(addr), port);
	snprintf(idb, sizeof(idb), "%llu", (unsigned long long)id);
	snprintf(nb, sizeof(nb), "%llu", (unsigned long long)n);
	/* The writer's patience scales with the fabric's slowness as ours. */
	snprintf(tb, sizeof(tb), "%d", scaled_ms(15000));
	char *argv[] = {(char *)wimm_bin, "log",	"append",      addr,	     "-f",
			(char *)fabric,	  "--id",	idb,	       "--gen",	     nb,
			"--size",	  (char *)size, "--reconnect", "--progress", "50",
			"--timeout",	  tb,		(char *)extra, NULL};
	return spawn(p, argv);
}

/* ---------------------------------------------------------- verification */

int check_entry(void *arg, const struct wimm_log_entry *e)
{
	struct verify *v = arg;
	if (e->pos != v->next_pos || e->writer_id == 0 || e->writer_id > MAX_PROCS) {
		snprintf(v->why, sizeof(v->why), "position %llu: writer %llu (expected pos %llu)",
			 (unsigned long long)e->pos, (unsigned long long)e->writer_id,
			 (unsigned long long)v->next_pos);
		v->bad = 1;
		return 1;
	}
	uint64_t want = v->next_seq[e->writer_id] + 1;
	size_t len = log_gen_size(e->writer_id, e->seq, v->min, v->max);
	if (e->seq != want) {
		snprintf(v->why, sizeof(v->why),
			 "position %llu: writer %llu seq %llu, expected %llu (lost or duplicated)",
			 (unsigned long long)e->pos, (unsigned long long)e->writer_id,
			 (unsigned long long)e->seq, (unsigned long long)want);
		v->bad = 1;
		return 1;
	}
	log_gen_fill(v->buf, len, e->writer_id, e->seq);
	if (e->len != len || memcmp(v->buf, e->data, len) != 0 ||
	    wimm_log_crc32c(0, e->data, e->len) != e->crc) {
		snprintf(v->why, sizeof(v->why), "position %llu: writer %llu seq %llu: wrong bytes",
			 (unsigned long long)e->pos, (unsigned long long)e->writer_id,
			 (unsigned long long)e->seq);
		v->bad = 1;
		return 1;
	}
	v->next_seq[e->writer_id] = e->seq;
	v->next_pos++;
	v->total++;
	return 0;
}

/* Read the whole log at port and check every entry. */
int verify_log(int port, struct verify *v)
{
	struct wimm_ctx *ctx;
	struct wimm_log_reader *r;
	struct wimm_log_stat st;
	char addr[64];
	test_addr(addr, sizeof(addr), port);
	int rc = wimm_ctx_open(fabric, NULL, &ctx);
	CHECK(rc == 0, "open %s: %s", fabric, wimm_strerror(rc));
	rc = wimm_log_reader_open(ctx, addr, 0, scaled_ms(10000), &r);
	CHECK(rc == 0, "reader: %s", wimm_strerror(rc));
	rc = wimm_log_reader_stat(r, &st, scaled_ms(10000));
	CHECK(rc == 0, "stat: %s", wimm_strerror(rc));
	while (v->next_pos < st.entries) {
		int n = wimm_log_read(r, v->next_pos, 0, check_entry, v, scaled_ms(10000));
		if (n < 0 || v->bad)
			break;
		CHECK(n > 0, "no entry at %llu of %llu", (unsigned long long)v->next_pos,
		      (unsigned long long)st.entries);
	}
	wimm_log_reader_close(&r);
	wimm_ctx_close(&ctx);
	CHECK(!v->bad, "%s", v->why);
	CHECK(v->next_pos == st.entries, "read %llu of %llu entries",
	      (unsigned long long)v->next_pos, (unsigned long long)st.entries);
	return 0;
}

/* The server's statistics through a reader. */
int stat_of(int port, struct wimm_log_stat *st)
{
	struct wimm_ctx *ctx;
	struct wimm_log_reader *r = NULL;
	char addr[64];
	test_addr(addr, sizeof(addr), port);
	int rc = wimm_ctx_open(fabric, NULL, &ctx);
	if (!rc)
		rc = wimm_log_reader_open(ctx, addr, 0, scaled_ms(10000), &r);
	if (!rc)
		rc = wimm_log_reader_stat(r, st, scaled_ms(10000));
	wimm_log_reader_close(&r);
	wimm_ctx_close(&ctx);
	return rc;
}

/* Writers 1..n each hold exactly per entries. */
int check_counts(const struct verify *v, unsigned n, uint64_t per)
{
	int rc = 0;
	for (unsigned i = 1; i <= n; i++)
		if (v->next_seq[i] != per) {
			fprintf(stderr, "FAIL: writer %u has %llu of %llu entries\n", i,
				(unsigned long long)v->next_seq[i], (unsigned long long)per);
			failures++;
			rc = -1;
		}
	return rc;
}

void rm_dir(const char *d)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", d);
}

/* Run a wimm command to its end: its status, its stderr in p->errtext. */
int run(struct proc *p, char *const argv[])
{
	if (spawn(p, argv))
		return -1;
	return proc_wait(p, 30000);
}

int expect_serve_error(const char *d, const char *needle)
{
	struct proc p;
	char *argv[] = {(char *)wimm_bin, "log",    "serve", "--dir", (char *)d, "-f",
			(char *)fabric,	  "--port", "0",     NULL};
	int st = run(&p, argv);
	CHECK(st == 2 && strstr(p.errtext, needle), "serve --dir %s: status %d, stderr: %s", d, st,
	      p.errtext);
	return 0;
}

void write_file(const char *path, const void *data, size_t len)
{
	FILE *f = fopen(path, "w");
	if (f) {
		fwrite(data, 1, len, f);
		fclose(f);
	}
}
