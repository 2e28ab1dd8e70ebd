/* log_test raw_peer: writers that talk to the provider directly (a raw
 * libfabric tcp endpoint doing wimm's handshake with the log's hello,
 * tests/common) against `wimm log serve`, beside an honest `wimm log
 * append` fed line by line.
 *
 * (a) A raw writer gets its ring as its window like any writer and puts
 *     one good entry in it; then raw writers, each on a connection of its
 *     own, write into the honest writer's ring, across both ends of their
 *     own ring, into a ring no connection holds and past the arena's ends.
 *     The server's transport refuses each and drops its connection: every
 *     byte of the server's arena outside the writer's ring stays as it was
 *     (read from the server process with process_vm_readv).
 * (b) Raw writers whose doorbells lie: a length past what was written, a
 *     length header past the ring, a sequence gap, a sequence replayed.
 *     Each is refused with its reason and dropped, none of its lies is
 *     kept, and `wimm log stat` counts every refusal.
 * Then the honest writer goes on, and `wimm log tail` reads every entry
 * back: the honest ones whole, in order, each with a valid CRC32C, and of
 * the raw writers only their honest entries.
 *
 * Only on ofi:tcp: libfabric's shm does not check a write's range at the
 * target, so there windows are the honest sender's promise
 * (docs/design.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log_internal.h"
#include "log_test_util.h"

#ifdef LOG_TEST_HAVE_OFI
#include <rdma/fi_errno.h>

#include "raw_tcp_peer.h"

#define RING 65536u
#define CONNS 4u
#define HONEST_ID 1u
#define HONEST_BATCH 20u /* lines before the raw writers, and again after */
#define LINE_MAX 200u	 /* a tail line must fit log_test_util's 256 bytes */

struct raw_writer {
	struct raw_tcp_peer p;
	unsigned char src[8192], win[LOG_CLIENT_WINDOW];
	uint64_t id, seq; /* the next sequence it sends */
	uint32_t tail;
};

/* The honest writer's line seq: 10..180 bytes, its number first. */
static size_t honest_line(char *buf, uint64_t seq)
{
	size_t want = 10 + (size_t)(seq * 37) % 171;
	int n = snprintf(buf, LINE_MAX, "honest-%03llu-", (unsigned long long)seq);
	for (size_t i = (size_t)n; i < want; i++)
		buf[i] = (char)('a' + (i + seq) % 26);
	buf[want] = '\0';
	return want;
}

static size_t raw_text(char *buf, uint64_t id, uint64_t seq)
{
	return (size_t)snprintf(buf, LINE_MAX, "raw-writer-%llu-entry-%llu", (unsigned long long)id,
				(unsigned long long)seq);
}

static int feed_honest(struct proc *p, uint64_t from, uint64_t to)
{
	char l[LINE_MAX + 1];
	for (uint64_t s = from; s <= to; s++) {
		size_t n = honest_line(l, s);
		l[n++] = '\n';
		if (write(p->in, l, n) != (ssize_t)n)
			return -1;
	}
	return 0;
}

/* Until the first segment holds more than its 64-byte header: the honest
 * writer is connected, before any reader (it has slot 0). */
static int await_on_disk(void)
{
	char f[400];
	struct stat sb;
	snprintf(f, sizeof(f), "%s/0000000000000000.wlog", dir);
	for (int64_t end = now_ms() + scaled_ms(30000); now_ms() < end; usleep(20000))
		if (stat(f, &sb) == 0 && sb.st_size > 64)
			return 0;
	fprintf(stderr, "nothing was written to %s\n", f);
	return -1;
}

/* Until the log holds want entries (stat through a reader). */
static int await_entries(int port, uint64_t want)
{
	struct wimm_log_stat st = {0};
	for (int64_t end = now_ms() + scaled_ms(30000); now_ms() < end;) {
		if (stat_of(port, &st) == 0 && st.entries >= want)
			return 0;
		usleep(50000);
	}
	fprintf(stderr, "the log holds %llu entries, waited for %llu\n",
		(unsigned long long)st.entries, (unsigned long long)want);
	return -1;
}

/* ------------------------------------------------------ a raw writer */

static int kind_is(uint32_t imm, void *arg)
{
	uint32_t f[2];
	wimm_imm_unpack(log_layout_out(), imm, f);
	return f[0] == *(const uint32_t *)arg;
}

/* An acknowledgement (visible or durable) of *arg or later. */
static int acked(uint32_t imm, void *arg)
{
	uint32_t f[2];
	wimm_imm_unpack(log_layout_out(), imm, f);
	return (f[0] == LOG_K_VISIBLE || f[0] == LOG_K_DURABLE) && f[1] >= *(const uint32_t *)arg;
}

/* Connect as writer id with the hello as private data; 0 once the server
 * answered it (RESUME). */
static int raw_connect(struct raw_writer *w, int port, uint64_t id)
{
	unsigned char hello[LOG_HELLO_LEN];
	uint32_t want = LOG_K_RESUME;
	memset(w, 0, sizeof(*w));
	w->id = id;
	w->seq = 1;
	log_hello_encode(hello, &(struct log_hello){.role = LOG_ROLE_WRITER, .id = id});
	int ret = raw_tcp_peer_open(&w->p, w->src, sizeof(w->src), w->win, sizeof(w->win));
	if (!ret)
		ret = raw_tcp_peer_connect(&w->p, test_host(), port, hello, sizeof(hello), NULL,
					   NULL, scaled_ms(10000));
	CHECK(ret == 0, "raw writer %llu: connect: %s", (unsigned long long)id,
	      fi_strerror(ret < 0 ? -ret : ret));
	CHECK(w->p.srv.window_len == RING, "raw writer %llu: a window of %llu bytes, not the ring",
	      (unsigned long long)id, (unsigned long long)w->p.srv.window_len);
	long imm = raw_tcp_peer_await(&w->p, kind_is, &want, scaled_ms(10000));
	CHECK(imm >= 0, "raw writer %llu: no answer to its hello: %s", (unsigned long long)id,
	      fi_strerror((int)-imm));
	return 0;
}

/* Its next entry at its tail: the text and its CRC32C, rung with a
 * doorbell whose length says wire + claim_extra bytes, whose sequence is
 * seq (its next when 0) and whose flags are flag; with LOG_F_LONG a length
 * header of head. The provider's result. */
static int raw_entry(struct raw_writer *w, uint32_t claim_extra, uint64_t seq, uint32_t flag,
		     uint32_t head)
{
	uint32_t hdr = (flag & LOG_F_LONG) ? WIMM_LOG_LONG_HEADER : 0, imm;
	if (!seq)
		seq = w->seq;
	size_t len = raw_text((char *)w->src + hdr, w->id, seq);
	if (hdr)
		log_put32(w->src, head);
	log_put32(w->src + hdr + len, wimm_log_crc32c(0, w->src + hdr, len));
	uint32_t wire = hdr + (uint32_t)len + WIMM_LOG_TRAILER;
	uint32_t v[3] = {hdr ? 0 : wire + claim_extra, (uint32_t)seq & LOG_SEQ_MASK, flag};
	wimm_imm_pack(log_layout_in(), v, &imm);
	int ret = raw_tcp_peer_write_wait(&w->p, w->p.srv.window_addr + w->tail, wire, 1, imm,
					  scaled_ms(10000));
	w->tail += wire;
	w->seq = seq + 1;
	return ret;
}

/* The entry just sent is acknowledged. */
static int raw_expect_ack(struct raw_writer *w)
{
	uint32_t seq = (uint32_t)(w->seq - 1);
	long imm = raw_tcp_peer_await(&w->p, acked, &seq, scaled_ms(10000));
	CHECK(imm >= 0, "raw writer %llu: entry %u not acknowledged: %s", (unsigned long long)w->id,
	      seq, fi_strerror((int)-imm));
	return 0;
}

/* The server refuses the raw writer with code, then drops it. */
static int raw_expect_refusal(struct raw_writer *w, uint32_t code, const char *what)
{
	uint32_t want = LOG_K_ERROR;
	struct log_error e = {0};
	long imm = raw_tcp_peer_await(&w->p, kind_is, &want, scaled_ms(10000));
	CHECK(imm >= 0, "%s: no refusal: %s", what, fi_strerror((int)-imm));
	log_error_decode(w->win + LOG_ERROR_OFF, &e);
	CHECK(e.code == code, "%s: refused with code %u, expected %u", what, e.code, code);
	for (int64_t end = now_ms() + scaled_ms(10000); !w->p.shutdown && now_ms() < end;)
		raw_tcp_peer_progress(&w->p);
	CHECK(w->p.shutdown, "%s: refused but not dropped", what);
	return 0;
}

/* ------------------------------------------------ the server's memory */

static int peek(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec mine = {.iov_base = buf, .iov_len = len};
	struct iovec theirs = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
	return process_vm_readv(pid, &mine, 1, &theirs, 1, 0) == (ssize_t)len ? 0 : -1;
}

/* The arena's address: the ring below the raw writer's whose start holds
 * the honest writer's first entry (it connected first: slot 0). */
static uint64_t find_arena(pid_t pid, uint64_t ring_addr)
{
	char l[LINE_MAX + 1];
	unsigned char got[LINE_MAX];
	size_t n = honest_line(l, 1);
	for (uint64_t slot = 1; slot < CONNS; slot++) {
		uint64_t a = ring_addr - slot * RING;
		if (peek(pid, a, got, n) == 0 && memcmp(got, l, n) == 0)
			return a;
	}
	return 0;
}

/* Bytes of the arena outside [mine, mine + RING) that differ. */
static size_t changed_outside(const unsigned char *before, const unsigned char *after,
			      size_t mine_off)
{
	size_t changed = 0;
	for (size_t i = 0; i < (size_t)CONNS * RING; i++)
		if ((i < mine_off || i >= mine_off + RING) && before[i] != after[i])
			changed++;
	return changed;
}

/* One write outside the ring, on a connection of its own (the first one
 * the target refuses ends the connection): 0 when the server dropped the
 * connection or the write failed, and no byte of the arena outside the
 * writer's ring changed. at() gives the address from the arena and the
 * writer's ring. */
struct outside {
	const char *what;
	uint64_t (*at)(uint64_t arena, uint64_t mine);
	size_t len;
	int doorbell;
};

static uint64_t at_honest(uint64_t arena, uint64_t mine)
{
	(void)mine;
	return arena; /* slot 0 */
}

static uint64_t at_own_start(uint64_t arena, uint64_t mine)
{
	(void)arena;
	return mine - 2048;
}

static uint64_t at_own_end(uint64_t arena, uint64_t mine)
{
	(void)arena;
	return mine + RING - 2048;
}

/* The last ring, or the one before it when it is the writer's. */
static uint64_t at_free(uint64_t arena, uint64_t mine)
{
	uint64_t last = arena + (uint64_t)(CONNS - 1) * RING;
	return last == mine ? last - RING : last;
}

static uint64_t at_past(uint64_t arena, uint64_t mine)
{
	(void)mine;
	return arena + (uint64_t)CONNS * RING;
}

static uint64_t at_before(uint64_t arena, uint64_t mine)
{
	(void)mine;
	return arena - 4096;
}

static int raw_outside_one(struct proc *srv, int port, uint64_t id, uint64_t arena,
			   const struct outside *o)
{
	static struct raw_writer w;
	static unsigned char before[CONNS * RING], after[CONNS * RING];
	CHECK(raw_connect(&w, port, id) == 0, "%s: raw writer %llu", o->what,
	      (unsigned long long)id);
	uint64_t mine = w.p.srv.window_addr;
	CHECK(peek(srv->pid, arena, before, sizeof(before)) == 0, "read the arena: %s",
	      strerror(errno));
	uint32_t imm, v[3] = {(uint32_t)o->len, (uint32_t)w.seq, 0};
	wimm_imm_pack(log_layout_in(), v, &imm);
	memset(w.src, 0xee, sizeof(w.src));
	int ret = raw_tcp_peer_write_wait(&w.p, o->at(arena, mine), o->len, o->doorbell, imm,
					  scaled_ms(5000));
	/* The target's refusal ends the connection: wait for it. */
	for (int64_t end = now_ms() + scaled_ms(5000); !w.p.shutdown && now_ms() < end;)
		raw_tcp_peer_progress(&w.p);
	CHECK(peek(srv->pid, arena, after, sizeof(after)) == 0, "read the arena again: %s",
	      strerror(errno));
	size_t changed = changed_outside(before, after, (size_t)(mine - arena));
	printf("  %-34s (from slot %llu): write %s at our end, connection %s, %zu bytes of the "
	       "arena outside its ring changed\n",
	       o->what, (unsigned long long)((mine - arena) / RING), ret ? "failed" : "completed",
	       w.p.shutdown ? "dropped" : "up", changed);
	int dropped = w.p.shutdown; /* close zeroes the peer */
	raw_tcp_peer_close(&w.p);
	CHECK(changed == 0, "%s: %zu bytes of the server's arena outside the writer's ring changed",
	      o->what, changed);
	CHECK(ret != 0 || dropped, "%s: neither refused nor dropped", o->what);
	return 0;
}

/* (a): a good entry in its own ring, then writes out of it; *kept gets
 * the entries that count. */
static int raw_outside(struct proc *srv, int port, uint64_t *kept)
{
	static struct raw_writer w;
	static const struct outside cases[] = {
	    {"into the honest writer's ring", at_honest, 4096, 0},
	    {"across its own ring's start", at_own_start, 4096, 1},
	    {"across its own ring's end", at_own_end, 4096, 0},
	    {"into a ring of no connection", at_free, 4096, 1},
	    {"past the arena's end", at_past, 512, 0},
	    {"before the arena's start", at_before, 512, 0},
	};
	CHECK(raw_connect(&w, port, 2) == 0, "raw writer 2");
	uint64_t arena = find_arena(srv->pid, w.p.srv.window_addr);
	CHECK(arena,
	      "the honest writer's ring is not below the raw writer's (process_vm_readv: %s)",
	      strerror(errno));
	/* The control: a good entry in its own ring is taken. */
	CHECK(raw_entry(&w, 0, 0, 0, 0) == 0, "the raw writer's own entry failed");
	CHECK(raw_expect_ack(&w) == 0, "own entry");
	raw_tcp_peer_close(&w.p);
	*kept = 1;
	printf("raw writers outside their ring, each on a connection of its own:\n");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		CHECK(raw_outside_one(srv, port, 10 + i, arena, &cases[i]) == 0, "%s",
		      cases[i].what);
	return 0;
}

/* (b): doorbells that lie; *kept gets their honest entries. */
static int raw_lies(int port, uint64_t *kept)
{
	static struct raw_writer w;
	/* A length past what was written. */
	CHECK(raw_connect(&w, port, 3) == 0, "raw writer 3");
	CHECK(raw_entry(&w, 2000, 0, 0, 0) == 0, "post");
	CHECK(raw_expect_refusal(&w, LOG_ERR_CRC, "a length past the entry") == 0, "length");
	raw_tcp_peer_close(&w.p);
	/* A length header past the ring. */
	CHECK(raw_connect(&w, port, 4) == 0, "raw writer 4");
	CHECK(raw_entry(&w, 0, 0, LOG_F_LONG, 2 * RING) == 0, "post");
	CHECK(raw_expect_refusal(&w, LOG_ERR_BOUNDS, "a length header past the ring") == 0,
	      "header");
	raw_tcp_peer_close(&w.p);
	/* A sequence gap: 1, then 3. */
	CHECK(raw_connect(&w, port, 5) == 0, "raw writer 5");
	CHECK(raw_entry(&w, 0, 0, 0, 0) == 0 && raw_expect_ack(&w) == 0, "entry 1");
	CHECK(raw_entry(&w, 0, 3, 0, 0) == 0, "post");
	CHECK(raw_expect_refusal(&w, LOG_ERR_GAP, "a sequence gap") == 0, "gap");
	raw_tcp_peer_close(&w.p);
	/* Out of sequence: 1, 2, then 1 again. */
	CHECK(raw_connect(&w, port, 6) == 0, "raw writer 6");
	CHECK(raw_entry(&w, 0, 0, 0, 0) == 0 && raw_entry(&w, 0, 0, 0, 0) == 0 &&
		  raw_expect_ack(&w) == 0,
	      "entries 1, 2");
	CHECK(raw_entry(&w, 0, 1, 0, 0) == 0, "post");
	CHECK(raw_expect_refusal(&w, LOG_ERR_GAP, "a sequence replayed") == 0, "replay");
	raw_tcp_peer_close(&w.p);
	*kept = 3;
	return 0;
}

/* ------------------------------------------------------ reading back */

/* What `wimm log stat` prints as refused. */
static int cli_refused(const char *addr, uint64_t *refused)
{
	struct proc p;
	char *argv[] = {(char *)wimm_bin, "log", "stat", (char *)addr, "-f", (char *)fabric, NULL};
	const char *l;
	CHECK(spawn(&p, argv) == 0, "spawn");
	*refused = UINT64_MAX;
	while ((l = proc_line(&p, 10000)))
		sscanf(l, "refused %llu", (unsigned long long *)refused);
	CHECK(proc_wait(&p, 10000) == 0 && *refused != UINT64_MAX, "wimm log stat: %s", p.errtext);
	return 0;
}

/* One line of `wimm log tail`: the entry at pos, whole and as written. */
static int check_tail_line(const char *l, uint64_t pos, uint64_t *honest_next)
{
	unsigned long long p, writer, seq;
	unsigned len, crc;
	int at = 0;
	char want[LINE_MAX + 1];
	CHECK(sscanf(l, "%llu %u %x %llx:%llu %n", &p, &len, &crc, &writer, &seq, &at) == 5 && at,
	      "tail printed '%s'", l);
	const char *text = l + at;
	size_t n = writer == HONEST_ID ? honest_line(want, seq) : raw_text(want, writer, seq);
	CHECK(p == pos, "tail: position %llu where %llu was due", p, (unsigned long long)pos);
	CHECK(len == n && strcmp(text, want) == 0, "entry %llu (writer %llu seq %llu): '%s'", p,
	      writer, seq, text);
	CHECK(crc == wimm_log_crc32c(0, text, n), "entry %llu: CRC32C %08x is not its bytes'", p,
	      crc);
	if (writer == HONEST_ID) {
		CHECK(seq == *honest_next, "honest entry %llu where %llu was due", seq,
		      (unsigned long long)*honest_next);
		++*honest_next;
	}
	return 0;
}

static int tail_all(const char *addr, uint64_t n)
{
	struct proc p;
	char count[32];
	snprintf(count, sizeof(count), "%llu", (unsigned long long)n);
	char *argv[] = {(char *)wimm_bin, "log", "tail",    (char *)addr, "-f", (char *)fabric,
			"--from",	  "0",	 "--count", count,	  NULL};
	uint64_t honest_next = 1;
	CHECK(spawn(&p, argv) == 0, "spawn");
	for (uint64_t pos = 0; pos < n; pos++) {
		const char *l = proc_line(&p, 10000);
		CHECK(l, "tail ended after %llu of %llu entries: %s", (unsigned long long)pos,
		      (unsigned long long)n, p.errtext);
		if (check_tail_line(l, pos, &honest_next)) {
			proc_wait(&p, 1000);
			return -1;
		}
	}
	CHECK(proc_wait(&p, 10000) == 0, "tail: %s", p.errtext);
	CHECK(honest_next == 2 * HONEST_BATCH + 1, "%llu honest entries read back, not %u",
	      (unsigned long long)honest_next - 1, 2 * HONEST_BATCH);
	return 0;
}

/* Everything against the running server at addr. */
static int raw_peer_run(struct proc *srv, int port, const char *addr)
{
	struct proc honest;
	char idb[16];
	uint64_t kept_a = 0, kept_b = 0, refused0, refused1;
	snprintf(idb, sizeof(idb), "%u", HONEST_ID);
	char *argv[] = {(char *)wimm_bin, "log",  "append", (char *)addr, "-f",
			(char *)fabric,	  "--id", idb,	    NULL};
	CHECK(spawn_stdin(&honest, argv) == 0, "spawn");
	CHECK(feed_honest(&honest, 1, HONEST_BATCH) == 0 && await_on_disk() == 0 &&
		  await_entries(port, HONEST_BATCH) == 0,
	      "the honest writer's first entries");
	CHECK(raw_outside(srv, port, &kept_a) == 0, "outside the ring");
	CHECK(cli_refused(addr, &refused0) == 0, "stat");
	CHECK(raw_lies(port, &kept_b) == 0, "lying doorbells");
	CHECK(cli_refused(addr, &refused1) == 0, "stat");
	CHECK(refused1 == refused0 + 4,
	      "wimm log stat counts %llu refusals after 4 lies, %llu before",
	      (unsigned long long)refused1, (unsigned long long)refused0);
	/* The honest writer goes on and finishes: every entry durable. */
	CHECK(feed_honest(&honest, HONEST_BATCH + 1, 2 * HONEST_BATCH) == 0, "feed");
	close(honest.in);
	honest.in = -1;
	CHECK(proc_wait(&honest, 60000) == 0, "the honest writer: %s", honest.errtext);
	uint64_t total = 2 * HONEST_BATCH + kept_a + kept_b;
	struct wimm_log_stat st;
	CHECK(stat_of(port, &st) == 0 && st.entries == total,
	      "the log holds %llu entries, not %llu", (unsigned long long)st.entries,
	      (unsigned long long)total);
	CHECK(tail_all(addr, total) == 0, "read back");
	printf("raw_peer: writes outside the ring refused at the transport, nothing outside it "
	       "changed; 4 lying doorbells refused and counted (refused %llu -> %llu); %llu "
	       "entries read back by wimm log tail, the %u honest ones whole, in order, CRC32C "
	       "valid\n",
	       (unsigned long long)refused0, (unsigned long long)refused1,
	       (unsigned long long)total, 2 * HONEST_BATCH);
	return 0;
}

int test_raw_peer(void)
{
	struct proc srv;
	char addr[64];
	if (strcmp(fabric, "ofi:tcp") != 0) {
		fprintf(stderr, "raw_peer runs on ofi:tcp only (libfabric shm does not enforce "
				"windows)\n");
		return -1;
	}
	const char *opts[] = {"--ring", "65536", "--max-conns", "4", NULL};
	int port = server_start_opts(&srv, dir, 0, opts);
	CHECK(port > 0, "server");
	int rc = raw_peer_run(&srv, port, test_addr(addr, sizeof(addr), port));
	kill(srv.pid, SIGTERM);
	int st = proc_wait(&srv, 10000);
	if (rc)
		fprintf(stderr, "the server's stderr:\n%s\n", srv.errtext);
	CHECK(st == 0, "server exit: %s", srv.errtext);
	return rc;
}
#else
int test_raw_peer(void)
{
	fprintf(stderr, "built without libfabric: no raw tcp peer\n");
	return -1;
}
#endif
