/* The log service's replication, truncation and hostile-input tests, as
 * separate processes (see log_test.c):
 *
 *   replication  three servers, a ledger writer at ack quorum 2 fed line by
 *                line; one server killed mid-stream, appends go on; a new
 *                writer recovers (fences) the ledger, the old one is refused;
 *                the fence survives a restart; everything committed is read
 *                back by the quorum rule
 *   truncate     truncation by position (segments deleted, a read before the
 *                first kept position refused, writers keep their sequence
 *                across a restart) and the --retain policy
 *   hostile      a hand-made writer over a raw wimm connection (entries
 *                outside its ring, a bad CRC, a sequence gap inside the
 *                stream), a directory that cannot be written, a corrupt
 *                metadata file, a ledger entry larger than the ring */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log_cmd.h"
#include "log_internal.h"
#include "log_test_util.h"

#define LEDGER_ID 9

static void line_of(char *buf, size_t len, uint64_t seq)
{
	snprintf(buf, len, "entry-%llu-of-the-old-writer", (unsigned long long)seq);
}

/* Feed lines from..to to a ledger writer's stdin. */
static int feed(struct proc *p, uint64_t from, uint64_t to)
{
	for (uint64_t s = from; s <= to; s++) {
		char l[64];
		line_of(l, sizeof(l), s);
		size_t n = strlen(l);
		l[n++] = '\n';
		if (write(p->in, l, n) != (ssize_t)n)
			return -1;
	}
	return 0;
}

/* Until the writer says its LAC reached want (or 60 s). */
static int await_committed(struct proc *p, uint64_t want)
{
	int64_t end = now_ms() + scaled_ms(60000);
	while (p->durable < want && now_ms() < end)
		proc_line(p, 50);
	return p->durable >= want ? 0 : -1;
}

struct ledger_check {
	uint64_t next, old_last, delivered;
	int bad;
	char why[200];
	unsigned char buf[MAX_SIZE];
};

/* Entries 1..old_last are the old writer's lines, the rest the new
 * writer's generated entries (their contents follow the sequence). */
static int check_ledger_entry(void *arg, const struct wimm_log_entry *e)
{
	struct ledger_check *c = arg;
	char l[64];
	const void *want = c->buf;
	size_t len;
	if (e->seq <= c->old_last) {
		line_of(l, sizeof(l), e->seq);
		want = l;
		len = strlen(l);
	} else {
		len = log_gen_size(LEDGER_ID, e->seq, 1, 2000);
		log_gen_fill(c->buf, len, LEDGER_ID, e->seq);
	}
	if (e->seq < c->next || e->len != len || memcmp(e->data, want, len) ||
	    wimm_log_crc32c(0, e->data, e->len) != e->crc) {
		snprintf(c->why, sizeof(c->why), "ledger seq %llu (expected from %llu): wrong",
			 (unsigned long long)e->seq, (unsigned long long)c->next);
		c->bad = 1;
		return 1;
	}
	c->next = e->seq + 1;
	c->delivered++;
	return 0;
}

/* Read the ledger from the servers at ports (0: left out) by the quorum
 * rule until it delivers nothing more. */
static int read_ledger(const int *ports, unsigned n, struct ledger_check *c)
{
	struct wimm_ctx *ctx[3] = {0};
	struct wimm_log_reader *r[3] = {0};
	uint64_t from = 1;
	int rc = 0;
	for (unsigned i = 0; i < n; i++) {
		char addr[64];
		if (!ports[i])
			continue;
		test_addr(addr, sizeof(addr), ports[i]);
		if (wimm_ctx_open(fabric, NULL, &ctx[i]) ||
		    wimm_log_reader_open(ctx[i], addr, 0, scaled_ms(10000), &r[i]))
			rc = -1;
	}
	while (!rc) {
		int got = wimm_log_ledger_read(r, n, LEDGER_ID, from, 0, check_ledger_entry, c,
					       scaled_ms(10000));
		if (got <= 0 || c->bad) {
			rc = got < 0 || c->bad ? -1 : 0;
			break;
		}
		from += (uint64_t)got;
	}
	for (unsigned i = 0; i < n; i++) {
		wimm_log_reader_close(&r[i]);
		wimm_ctx_close(&ctx[i]);
	}
	return rc;
}

int test_replication(void)
{
	struct proc srv[3], a, b, z;
	char d[3][300], hosts[200], addr1[64];
	int port[3];
	for (int i = 0; i < 3; i++) {
		snprintf(d[i], sizeof(d[i]), "%s.r%d", dir, i + 1);
		port[i] = server_start_dir(&srv[i], d[i], 0, NULL, NULL);
		CHECK(port[i] > 0, "server %d", i + 1);
	}
	const char *h = test_host();
	snprintf(hosts, sizeof(hosts), "%s:%d,%s:%d,%s:%d", h, port[0], h, port[1], h, port[2]);
	test_addr(addr1, sizeof(addr1), port[0]);
	char *old[] = {(char *)wimm_bin, "log",		 "append", hosts,  "-f",
		       (char *)fabric,	 "--ack-quorum", "2",	   "--id", "9",
		       "--progress",	 "50",		 NULL};
	CHECK(spawn_stdin(&a, old) == 0, "spawn");
	CHECK(feed(&a, 1, 300) == 0 && await_committed(&a, 300) == 0,
	      "the ledger writer committed %llu of 300: %s", (unsigned long long)a.durable,
	      a.errtext);
	/* One of the three dies mid-stream: Qa = 2 still holds. */
	kill(srv[2].pid, kill_sig);
	proc_wait(&srv[2], 10000);
	CHECK(WIFSIGNALED(srv[2].status), "server 3 was not killed");
	CHECK(feed(&a, 301, 600) == 0 && await_committed(&a, 600) == 0,
	      "after the kill the writer committed %llu of 600: %s", (unsigned long long)a.durable,
	      a.errtext);
	uint64_t acked = a.durable;
	/* A new writer recovers the ledger while the old one still lives. */
	char *rec[] = {(char *)wimm_bin, "log",	   "append",	hosts, "-f",	(char *)fabric,
		       "--ack-quorum",	 "2",	   "--id",	"9",   "--gen", "200",
		       "--size",	 "1-2000", "--recover", NULL};
	int st = run(&b, rec);
	CHECK(st == 0, "the recovering writer: status %d: %s", st, b.errtext);
	/* The old writer's next append is refused: fenced. */
	CHECK(feed(&a, 601, 601) == 0, "feed");
	st = proc_wait(&a, 30000);
	CHECK(st == 2 && strstr(a.errtext, "fenced"), "the old writer: status %d: %s", st,
	      a.errtext);
	/* The fence is on disk: a restarted server still refuses epoch 0. */
	kill(srv[0].pid, SIGTERM);
	CHECK(proc_wait(&srv[0], 10000) == 0, "server 1 exit: %s", srv[0].errtext);
	CHECK(server_start_dir(&srv[0], d[0], port[0], NULL, NULL) == port[0], "restart 1");
	char *zombie[] = {(char *)wimm_bin, "log",  "append", addr1,   "-f",
			  (char *)fabric,   "--id", "9",      "--gen", "1",
			  "--size",	    "10",   NULL};
	st = run(&z, zombie);
	CHECK(st == 2 && strstr(z.errtext, "refused"), "a writer of epoch 0 after restart: %d: %s",
	      st, z.errtext);
	/* Everything committed is there, by the quorum rule, also with the
	 * killed server back (behind the others). */
	CHECK(server_start_dir(&srv[2], d[2], port[2], NULL, NULL) == port[2], "restart 3");
	struct ledger_check *c = calloc(1, sizeof(*c));
	c->next = 1;
	c->old_last = 600;
	int rc = read_ledger(port, 3, c);
	CHECK(rc == 0 && !c->bad, "read the ledger: %s", c->why);
	CHECK(c->next == 801 && c->delivered == 800,
	      "the ledger holds seq 1..%llu (%llu entries), expected 1..800",
	      (unsigned long long)c->next - 1, (unsigned long long)c->delivered);
	/* The same rule through `wimm log tail --ledger`: seq first (the old
	 * writer's short lines: the new one's fill more than a line buffer). */
	char *tail[] = {(char *)wimm_bin, "log",      "tail", hosts,	"-f",
			(char *)fabric,	  "--ledger", "9",    "--from", "599",
			"--count",	  "2",	      NULL};
	CHECK(spawn(&z, tail) == 0, "spawn");
	for (uint64_t q = 599; q <= 600; q++) {
		char want[64], head[16];
		line_of(want, sizeof(want), q);
		snprintf(head, sizeof(head), "%llu ", (unsigned long long)q);
		const char *tl = proc_line(&z, 15000);
		CHECK(tl && strncmp(tl, head, strlen(head)) == 0 && strstr(tl, want),
		      "tail --ledger printed '%s' for seq %llu", tl ? tl : "",
		      (unsigned long long)q);
	}
	CHECK(proc_wait(&z, 15000) == 0, "tail --ledger --count 2: %s", z.errtext);
	printf("replication: %llu committed at Qa=2 with one of three servers killed, "
	       "recovered by a new writer, the old writer fenced (also after a restart); %llu "
	       "entries read back by the quorum rule\n",
	       (unsigned long long)acked, (unsigned long long)c->delivered);
	free(c);
	for (int i = 0; i < 3; i++) {
		kill(srv[i].pid, SIGTERM);
		CHECK(proc_wait(&srv[i], 10000) == 0, "server %d exit: %s", i + 1, srv[i].errtext);
		rm_dir(d[i]);
	}
	return 0;
}

static int count_segments(const char *d)
{
	DIR *dd = opendir(d);
	struct dirent *e;
	int n = 0;
	while (dd && (e = readdir(dd)) != NULL)
		n += strstr(e->d_name, ".wlog") != NULL;
	if (dd)
		closedir(dd);
	return n;
}

int test_truncate(void)
{
	struct proc srv, p, w;
	struct wimm_log_stat st;
	char addr[64], fb[32];
	int port = server_start(&srv, 0, "--segment", "65536");
	CHECK(port > 0, "server");
	test_addr(addr, sizeof(addr), port);
	CHECK(writer_start(&w, port, 1, 2000, "100", NULL) == 0 && proc_wait(&w, 60000) == 0,
	      "writer: %s", w.errtext);
	int before = count_segments(dir);
	char *trunc[] = {(char *)wimm_bin, "log",      "truncate", addr, "-f",
			 (char *)fabric,   "--before", "1000",	   NULL};
	CHECK(spawn(&p, trunc) == 0, "spawn");
	const char *l = proc_line(&p, 30000);
	unsigned long long first = 0;
	CHECK(l && sscanf(l, "truncated: the log keeps positions from %llu", &first) == 1,
	      "truncate printed '%s'", l ? l : "");
	CHECK(proc_wait(&p, 10000) == 0, "truncate: %s", p.errtext);
	CHECK(first > 0 && first <= 1000, "first kept position %llu", first);
	CHECK(count_segments(dir) < before, "segments %d before, %d after", before,
	      count_segments(dir));
	/* A read before the first kept position: a clear error. */
	char *tail0[] = {(char *)wimm_bin, "log", "tail",    addr, "-f", (char *)fabric,
			 "--from",	   "0",	  "--count", "1",  NULL};
	int s = run(&p, tail0);
	CHECK(s == 2 && strstr(p.errtext, "was truncated"), "tail --from 0: %d: %s", s, p.errtext);
	snprintf(fb, sizeof(fb), "%llu", first);
	char *tailf[] = {(char *)wimm_bin, "log", "tail",    addr, "-f", (char *)fabric,
			 "--from",	   fb,	  "--count", "1",  NULL};
	CHECK(run(&p, tailf) == 0, "tail --from %s: %s", fb, p.errtext);
	/* Across a restart: the first position, and the writer's sequence. */
	kill(srv.pid, SIGTERM);
	CHECK(proc_wait(&srv, 10000) == 0, "server exit: %s", srv.errtext);
	CHECK(server_start(&srv, port, "--segment", "65536") == port, "restart");
	CHECK(stat_of(port, &st) == 0 && st.first == first && st.entries == 2000,
	      "after restart: first %llu entries %llu", (unsigned long long)st.first,
	      (unsigned long long)st.entries);
	CHECK(writer_start(&w, port, 1, 10, "100", NULL) == 0 && proc_wait(&w, 60000) == 0 &&
		  strstr(w.line, "") != NULL,
	      "writer after restart: %s", w.errtext);
	struct verify *v = calloc(1, sizeof(*v));
	v->min = v->max = 100;
	v->next_pos = first;
	v->next_seq[1] = first; /* writer 1 wrote positions 0.. as seq 1.. */
	struct wimm_ctx *ctx;
	struct wimm_log_reader *r;
	CHECK(wimm_ctx_open(fabric, NULL, &ctx) == 0 &&
		  wimm_log_reader_open(ctx, addr, 0, scaled_ms(10000), &r) == 0,
	      "reader");
	while (v->next_pos < 2010 && !v->bad)
		if (wimm_log_read(r, v->next_pos, 0, check_entry, v, scaled_ms(10000)) <= 0)
			break;
	wimm_log_reader_close(&r);
	wimm_ctx_close(&ctx);
	CHECK(!v->bad && v->next_seq[1] == 2010, "writer 1 after truncation: seq %llu: %s",
	      (unsigned long long)v->next_seq[1], v->why);
	free(v);
	kill(srv.pid, SIGTERM);
	CHECK(proc_wait(&srv, 10000) == 0, "server exit: %s", srv.errtext);
	rm_dir(dir);
	/* --retain: the server deletes old segments by itself. */
	const char *keep[] = {"--segment", "65536", "--retain", "500", NULL};
	port = server_start_opts(&srv, dir, 0, keep);
	CHECK(port > 0, "server");
	CHECK(writer_start(&w, port, 2, 3000, "100", NULL) == 0 && proc_wait(&w, 60000) == 0,
	      "writer: %s", w.errtext);
	CHECK(stat_of(port, &st) == 0, "stat");
	CHECK(st.first > 0 && st.entries - st.first >= 500 && st.entries == 3000,
	      "--retain 500: the log keeps %llu..%llu", (unsigned long long)st.first,
	      (unsigned long long)st.entries);
	CHECK(count_segments(dir) == (int)st.segments && st.segments <= 4,
	      "--retain 500: %d segment files (stat %llu)", count_segments(dir),
	      (unsigned long long)st.segments);
	kill(srv.pid, SIGTERM);
	CHECK(proc_wait(&srv, 10000) == 0, "server exit: %s", srv.errtext);
	printf("truncate: --before 1000 kept positions from %llu on (%d segment files before, "
	       "fewer after), a read before refused, writer 1 continued after a restart; "
	       "--retain 500 keeps %llu..%llu in %llu segments\n",
	       first, before, (unsigned long long)st.first, (unsigned long long)st.entries,
	       (unsigned long long)st.segments);
	return 0;
}

/* ------------------------------------------------------------- hostile */

/* A writer by hand: a raw wimm connection speaking the log's wire format
 * (log_internal.h), to send what wimm_log_append never does. */
struct raw {
	struct wimm_ctx *ctx;
	struct wimm_conn *c;
	unsigned char ring[65536], win[LOG_CLIENT_WINDOW];
	struct wimm_mr *ring_mr, *win_mr;
	struct log_error err;
};

/* The first answer of the server of kind `want`, or -1 (dropped, none). */
static int raw_await(struct raw *r, uint32_t want)
{
	int64_t end = now_ms() + scaled_ms(15000);
	while (now_ms() < end) {
		struct wimm_event ev[8];
		int n = wimm_wait(r->ctx, ev, 8, WIMM_WAIT_ADAPTIVE, 100);
		for (int i = 0; i < n; i++) {
			uint32_t f[2];
			if (ev[i].type == WIMM_EV_DISCONNECT)
				return -1;
			if (ev[i].type != WIMM_EV_WRITE_IMM)
				continue;
			wimm_imm_unpack(log_layout_out(), ev[i].imm, f);
			if (f[0] == LOG_K_ERROR)
				log_error_decode(r->win + LOG_ERROR_OFF, &r->err);
			if (f[0] == want)
				return 0;
		}
	}
	return -1;
}

static int raw_open(struct raw *r, int port, uint64_t id)
{
	struct wimm_fabric_limits lim;
	unsigned char hb[LOG_HELLO_LEN];
	char addr[64];
	memset(r, 0, sizeof(*r));
	test_addr(addr, sizeof(addr), port);
	log_hello_encode(hb, &(struct log_hello){.role = LOG_ROLE_WRITER, .id = id});
	if (wimm_ctx_open(fabric, NULL, &r->ctx) || wimm_ctx_limits(r->ctx, &lim) ||
	    wimm_mr_reg(r->ctx, r->ring, sizeof(r->ring), WIMM_LOCAL, &r->ring_mr) ||
	    wimm_mr_reg(r->ctx, r->win, sizeof(r->win), WIMM_REMOTE_WRITE, &r->win_mr))
		return -1;
	int inband = lim.private_max < LOG_HELLO_LEN;
	struct wimm_conn_attr a = {.window = r->win_mr,
				   .rx_depth = 16,
				   .private_data = inband ? NULL : hb,
				   .private_len = inband ? 0 : LOG_HELLO_LEN};
	if (wimm_connect(r->ctx, addr, &a, scaled_ms(10000), &r->c))
		return -1;
	if (inband) {
		uint32_t imm, v[3] = {LOG_HELLO_LEN, 0, LOG_F_HELLO};
		memcpy(r->ring, hb, sizeof(hb));
		wimm_imm_pack(log_layout_in(), v, &imm);
		if (wimm_write_imm(r->c, r->ring_mr, 0, 0, LOG_HELLO_LEN, imm, WIMM_F_WAIT))
			return -1;
	}
	return raw_await(r, LOG_K_RESUME);
}

static void raw_close(struct raw *r)
{
	wimm_conn_delete(&r->c);
	wimm_mr_dereg(&r->ring_mr);
	wimm_mr_dereg(&r->win_mr);
	wimm_ctx_close(&r->ctx);
}

/* An entry of len payload bytes at ring offset off, its imm as given, its
 * CRC right or wrong. */
static int raw_entry(struct raw *r, uint32_t off, uint32_t len, uint32_t seq, uint32_t flag,
		     uint32_t head, int bad_crc)
{
	uint32_t hdr = (flag & LOG_F_LONG) ? 4 : 0, imm;
	unsigned char *p = r->ring + off;
	if (hdr)
		log_put32(p, head);
	memset(p + hdr, 'h', len);
	log_put32(p + hdr + len, wimm_log_crc32c(0, p + hdr, len) ^ (bad_crc ? 1u : 0u));
	uint32_t v[3] = {hdr ? 0 : len + 4, seq & LOG_SEQ_MASK, flag};
	wimm_imm_pack(log_layout_in(), v, &imm);
	return wimm_write_imm(r->c, r->ring_mr, off, off, hdr + len + 4, imm, WIMM_F_WAIT);
}

/* The server refuses the hand-made writer with code, saying so. */
static int expect_refusal(struct raw *r, uint32_t code, const char *what)
{
	CHECK(raw_await(r, LOG_K_ERROR) == 0 && r->err.code == code,
	      "%s: the server answered code %u, expected %u", what, r->err.code, code);
	return 0;
}

static int hostile_writers(int port, struct proc *srv)
{
	struct raw r;
	/* An entry whose length header reaches past the ring's end. */
	CHECK(raw_open(&r, port, 31) == 0, "raw writer");
	CHECK(raw_entry(&r, 0, 16, 1, LOG_F_LONG, 100000, 0) == 0, "post");
	CHECK(expect_refusal(&r, LOG_ERR_BOUNDS, "outside the ring") == 0, "bounds");
	raw_close(&r);
	/* A bad CRC32C. */
	CHECK(raw_open(&r, port, 32) == 0, "raw writer");
	CHECK(raw_entry(&r, 0, 16, 1, 0, 0, 1) == 0, "post");
	CHECK(expect_refusal(&r, LOG_ERR_CRC, "bad CRC") == 0, "crc");
	raw_close(&r);
	/* A sequence gap inside the stream: 1, then 3. */
	CHECK(raw_open(&r, port, 33) == 0, "raw writer");
	CHECK(raw_entry(&r, 0, 16, 1, 0, 0, 0) == 0, "post");
	CHECK(raw_entry(&r, 24, 16, 3, 0, 0, 0) == 0, "post");
	CHECK(expect_refusal(&r, LOG_ERR_GAP, "sequence gap") == 0, "gap");
	raw_close(&r);
	proc_drain(srv);
	CHECK(strstr(srv->errtext, "outside the ring") && strstr(srv->errtext, "bad CRC32C") &&
		  strstr(srv->errtext, "sequence gap"),
	      "the server's log does not say what it refused: %s", srv->errtext);
	return 0;
}

int test_hostile(void)
{
	struct proc srv, p;
	struct wimm_log_stat st;
	char addr[64], d[300], f[400];
	int port = server_start(&srv, 0, "--ring", "65536");
	CHECK(port > 0, "server");
	test_addr(addr, sizeof(addr), port);
	CHECK(hostile_writers(port, &srv) == 0, "hostile writers");
	/* Nothing but writer 33's one good entry got in; honest writers go on. */
	CHECK(stat_of(port, &st) == 0 && st.entries == 1 && st.refused >= 3,
	      "after the hostile writers: %llu entries, %llu refused",
	      (unsigned long long)st.entries, (unsigned long long)st.refused);
	struct proc w;
	CHECK(writer_start(&w, port, 1, 50, "1-1000", NULL) == 0 && proc_wait(&w, 60000) == 0,
	      "an honest writer after them: %s", w.errtext);
	/* A ledger entry larger than the ring (its header counted). */
	char *big[] = {(char *)wimm_bin, "log",	  "append", addr, "-f",	   (char *)fabric,
		       "--ack-quorum",	 "1",	  "--id",   "40", "--gen", "1",
		       "--size",	 "65530", NULL};
	int s = run(&p, big);
	CHECK(s == 2 && strstr(p.errtext, "larger than the ring"), "ledger big entry: %d: %s", s,
	      p.errtext);
	CHECK(stat_of(port, &st) == 0 && st.entries == 51, "the log holds %llu entries, not 51",
	      (unsigned long long)st.entries);
	kill(srv.pid, SIGTERM);
	CHECK(proc_wait(&srv, 10000) == 0, "server exit: %s", srv.errtext);
	/* The directory's metadata file, cut short: refused, left as it is. */
	snprintf(f, sizeof(f), "%s/%s", dir, LOG_META_NAME);
	write_file(f, "WIMMMETA\1\0", 10);
	CHECK(expect_serve_error(dir, "is truncated or corrupt") == 0, "meta");
	struct stat sb;
	CHECK(stat(f, &sb) == 0 && sb.st_size == 10, "the metadata file was changed");
	unlink(f);
	/* A directory the server may not write (as root: a user who may not). */
	snprintf(d, sizeof(d), "%s.ro", dir);
	mkdir(d, 0555);
	chmod(d, 0555);
	if (geteuid() == 0 && access("/usr/bin/setpriv", X_OK) == 0) {
		char *argv[] = {"/usr/bin/setpriv",
				"--reuid=65534",
				"--regid=65534",
				"--clear-groups",
				(char *)wimm_bin,
				"log",
				"serve",
				"--dir",
				d,
				"-f",
				(char *)fabric,
				"--port",
				"0",
				NULL};
		s = run(&p, argv);
		CHECK(s == 2 && strstr(p.errtext, "is not writable"), "read-only dir: %d: %s", s,
		      p.errtext);
	} else {
		CHECK(geteuid() != 0, "root without setpriv: cannot test a read-only directory");
		CHECK(expect_serve_error(d, "is not writable") == 0, "read-only dir");
	}
	rmdir(d);
	printf("hostile: entries outside the ring, a bad CRC32C and a sequence gap from a "
	       "hand-made writer refused (nothing of theirs kept, honest writers go on); a "
	       "ledger entry larger than the ring, a corrupt metadata file and a read-only "
	       "directory refused\n");
	return 0;
}
