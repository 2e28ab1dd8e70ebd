/* The log's shared ring as separate processes: `wimm log serve
 * --shared-ring` and `wimm log append --shared` writers, every entry read
 * back and checked; and hand-made shared writers (raw wimm connections
 * speaking the wire format of log_internal.h) that reserve a place and
 * never write it, write it late, lie about it or send what no writer sends.
 *
 *   shared          8 shared writers and 2 private-ring writers, 800 entries
 *                   each, at once into one log (a 64 KiB shared ring: many
 *                   laps, writers waiting for room), every entry checked
 *   shared_hole     a place reserved and held unwritten: the others' entries
 *                   wait, the head skips it after --hole-ms, the late write is
 *                   refused; a place whose writer goes away unwritten
 *   shared_hostile  a bad CRC at a reserved place, an entry behind the head,
 *                   an entry at another writer's place (with atomics) or at
 *                   a place not granted (by request), a reservation the
 *                   fabric's atomics own, a private
 *                   writer's hello on the shared port and the reverse: each
 *                   refused, nothing of theirs kept, honest writers go on */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log_cmd.h"
#include "log_internal.h"
#include "log_test_util.h"

#define SHARED_RING "65536"

static int start(struct proc *srv, const char *hole_ms)
{
	const char *opts[] = {"--shared-ring", SHARED_RING, "--hole-ms", hole_ms, NULL};
	int port = server_start_opts(srv, dir, 0, opts);
	if (port > 0 && srv->shared_port <= 0) {
		fprintf(stderr, "the server names no shared port\n");
		return -1;
	}
	return port;
}

static int writers_done(struct proc *w, unsigned n, int wait_ms)
{
	int bad = 0;
	for (unsigned i = 0; i < n; i++) {
		int st = proc_wait(&w[i], wait_ms);
		if (st != 0) {
			fprintf(stderr, "writer %u: status %d: %s\n", i + 1, st, w[i].errtext);
			bad++;
		}
	}
	CHECK(!bad, "%d writers failed", bad);
	return 0;
}

int test_shared(void)
{
	enum { NS = 8, NP = 2 };
	const unsigned per = workload(800);
	struct proc srv, w[NS + NP];
	char hole[16];
	snprintf(hole, sizeof(hole), "%d", scaled_ms(5000));
	int port = start(&srv, hole);
	CHECK(port > 0, "server");
	int64_t t0 = now_ms();
	for (unsigned i = 0; i < NS + NP; i++)
		CHECK(writer_start(&w[i], i < NS ? srv.shared_port : port, i + 1, per, "1-9000",
				   i < NS ? "--shared" : "--visible") == 0,
		      "spawn");
	CHECK(writers_done(w, NS + NP, scaled_ms(180000)) == 0, "writers");
	struct verify *v = calloc(1, sizeof(*v));
	v->min = 1;
	v->max = 9000;
	int rc = verify_log(port, v);
	if (!rc)
		rc = check_counts(v, NS + NP, per);
	struct wimm_log_stat st;
	CHECK(stat_of(port, &st) == 0, "stat");
	printf("shared: %u shared-ring writers and %u private-ring writers x %u entries "
	       "(1..9000 B, a %s B shared ring), %llu entries read back and checked in %.1f s; "
	       "holes %llu, late %u, duplicates %llu\n",
	       NS, NP, per, SHARED_RING, (unsigned long long)v->total, (now_ms() - t0) / 1000.0,
	       (unsigned long long)st.holes, st.late, (unsigned long long)st.duplicates);
	free(v);
	CHECK(st.shared_ring == 65536, "stat says shared_ring %u", st.shared_ring);
	kill(srv.pid, SIGTERM);
	CHECK(proc_wait(&srv, 10000) == 0, "server exit on SIGTERM: %s", srv.errtext);
	return rc;
}

/* ---------------------------------------------------- hand-made writers */

struct raw {
	struct wimm_ctx *ctx;
	struct wimm_conn *c;
	_Alignas(16) unsigned char buf[4096];
	unsigned char win[LOG_CLIENT_WINDOW];
	struct wimm_mr *buf_mr, *win_mr;
	struct log_resume res;
	struct log_error err;
	uint64_t id;
	uint32_t grant;
	uint32_t got; /* answers arrived and not yet awaited, by kind (bit) */
	int faa_done, down;
};

/* Take what arrives within ms: the server's answers, the fetch-and-add's
 * completion, a disconnect. Kept until awaited: a raw writer that waits
 * on a writer process meanwhile keeps its connection polled (liveness)
 * without losing an answer. */
static void raw_take(struct raw *r, int ms)
{
	struct wimm_event ev[8];
	int n = wimm_wait(r->ctx, ev, 8, WIMM_WAIT_ADAPTIVE, ms);
	for (int i = 0; i < n; i++) {
		uint32_t f[2];
		if (ev[i].type == WIMM_EV_DISCONNECT)
			r->down = 1;
		if (ev[i].type == WIMM_EV_SEND_DONE && ev[i].op == WIMM_OP_FETCH_ADD)
			r->faa_done = 1;
		if (ev[i].type != WIMM_EV_WRITE_IMM)
			continue;
		wimm_imm_unpack(log_layout_out(), ev[i].imm, f);
		if (f[0] == LOG_K_ERROR)
			log_error_decode(r->win + LOG_ERROR_OFF, &r->err);
		if (f[0] == LOG_K_RESUME)
			log_resume_decode(r->win + LOG_RESUME_OFF, &r->res);
		if (f[0] == LOG_K_GRANT)
			r->grant = f[1];
		if (f[0] < 32)
			r->got |= 1u << f[0];
	}
}

static void raw_take_idle(void *arg)
{
	raw_take(arg, 20);
}

/* Wait for an answer of kind want (0: a fetch-and-add's completion): 0,
 * or -1 when the connection went down or nothing came. */
static int raw_await(struct raw *r, uint32_t want, int ms)
{
	int64_t end = now_ms() + scaled_ms(ms);
	for (;;) {
		if (want == 0 && r->faa_done) {
			r->faa_done = 0;
			return 0;
		}
		if (want && (r->got >> want & 1)) {
			r->got &= ~(1u << want);
			return 0;
		}
		if (r->down || now_ms() >= end)
			return -1;
		raw_take(r, 50);
	}
}

static void raw_close(struct raw *r)
{
	wimm_conn_delete(&r->c);
	wimm_mr_dereg(&r->buf_mr);
	wimm_mr_dereg(&r->win_mr);
	wimm_ctx_close(&r->ctx);
}

/* Connect to port and send a hello of role (in a send_imm, as shared
 * writers do); 0 when the connection is up and the hello posted. */
static int raw_connect(struct raw *r, int port, uint64_t id, uint16_t role, int in_private)
{
	char addr[64];
	memset(r, 0, sizeof(*r));
	r->id = id;
	test_addr(addr, sizeof(addr), port);
	log_hello_encode(r->buf, &(struct log_hello){.role = role, .id = id});
	if (wimm_ctx_open(fabric, NULL, &r->ctx) ||
	    wimm_mr_reg(r->ctx, r->buf, sizeof(r->buf), WIMM_LOCAL, &r->buf_mr) ||
	    wimm_mr_reg(r->ctx, r->win, sizeof(r->win), WIMM_REMOTE_WRITE, &r->win_mr))
		return -1;
	struct wimm_conn_attr a = {.window = r->win_mr,
				   .rx_depth = 16,
				   .private_data = in_private ? r->buf : NULL,
				   .private_len = in_private ? LOG_HELLO_LEN : 0};
	if (wimm_connect(r->ctx, addr, &a, scaled_ms(10000), &r->c))
		return -1;
	if (in_private)
		return 0;
	return wimm_send_imm(r->c, r->buf_mr, 0, LOG_HELLO_LEN, log_imm_out(LOG_K_HELLO, 0),
			     WIMM_F_WAIT);
}

static int raw_open(struct raw *r, int port, uint64_t id)
{
	CHECK(raw_connect(r, port, id, LOG_ROLE_SHARED, 0) == 0, "raw shared writer %llu",
	      (unsigned long long)id);
	CHECK(raw_await(r, LOG_K_RESUME, 15000) == 0, "no resume for raw writer %llu",
	      (unsigned long long)id);
	CHECK(r->res.ring_size == 65536, "resume says ring %u", r->res.ring_size);
	return 0;
}

/* Reserve len bytes as a writer does: the place. */
static int raw_reserve(struct raw *r, uint32_t len, uint64_t *place)
{
	if (r->res.flags & LOG_RESUME_BY_REQUEST) {
		CHECK(wimm_write_imm(r->c, NULL, 0, 0, 0, log_imm_out(LOG_K_RESERVE, len / 16),
				     WIMM_F_WAIT) == 0,
		      "reserve");
		CHECK(raw_await(r, LOG_K_GRANT, 15000) == 0, "no grant");
		/* Grants start at the resume's base; this writer's first one
		 * is within 2^32 bytes of it. */
		uint32_t d = (r->grant - (uint32_t)(r->res.base / 16)) & LOG_SH_MASK;
		*place = r->res.base + (uint64_t)d * 16;
		return 0;
	}
	CHECK(wimm_fetch_add(r->c, r->buf_mr, 64, LOG_SHARED_TAIL, len, 0) == 0, "fetch-and-add");
	CHECK(raw_await(r, 0, 15000) == 0, "no fetch-and-add completion");
	memcpy(place, r->buf + 64, 8);
	return 0;
}

/* An entry of len bytes ('r') with sequence seq at place; its CRC32C right
 * or wrong. */
static int raw_write(struct raw *r, uint64_t place, uint32_t len, uint64_t seq, int bad_crc)
{
	unsigned char *p = r->buf + 128;
	log_put32(p, len);
	log_put32(p + 4, LOG_SH_MAGIC);
	log_put64(p + 8, seq);
	log_put64(p + 16, r->id);
	memset(p + LOG_SH_HDR, 'r', len);
	log_put32(p + LOG_SH_HDR + len,
		  wimm_log_crc32c(0, p, LOG_SH_HDR + len) ^ (bad_crc ? 1u : 0u));
	return wimm_write_imm(r->c, r->buf_mr, 128, LOG_SHARED_CTL + place % 65536,
			      log_sh_extent(len),
			      log_imm_out(LOG_K_ENTRY, (place / 16) & LOG_SH_MASK), WIMM_F_WAIT);
}

static int expect_refusal(struct raw *r, uint32_t code, const char *what)
{
	int got = raw_await(r, LOG_K_ERROR, 15000);
	CHECK(got == 0 && r->err.code == code, "%s: the server answered %s %u, expected %u", what,
	      got ? "nothing, last code" : "code", r->err.code, code);
	return 0;
}

/* Keep the raw writers' connections alive (heartbeats) for ms. */
static void raw_idle(struct raw *r, int ms)
{
	int64_t end = now_ms() + ms;
	while (now_ms() < end) {
		struct wimm_event ev[8];
		wimm_poll(r->ctx, ev, 8);
		usleep(2000);
	}
}

int test_shared_hole(void)
{
	enum { NW = 4 };
	const unsigned per = workload(300);
	const int hole_ms = scaled_ms(1000);
	struct proc srv, w[NW];
	struct raw held, gone;
	struct wimm_log_stat st;
	char hole[16];
	uint64_t at, at2;
	snprintf(hole, sizeof(hole), "%d", hole_ms);
	int port = start(&srv, hole);
	CHECK(port > 0, "server");
	/* One place held unwritten by a live writer, one by a writer that then
	 * goes away. */
	CHECK(raw_open(&held, srv.shared_port, 50) == 0, "held");
	CHECK(raw_reserve(&held, 256, &at) == 0, "reserve");
	CHECK(raw_open(&gone, srv.shared_port, 51) == 0, "gone");
	CHECK(raw_reserve(&gone, 512, &at2) == 0, "reserve");
	raw_close(&gone);
	int by_request = !!(held.res.flags & LOG_RESUME_BY_REQUEST);
	int64_t t0 = now_ms();
	for (unsigned i = 0; i < NW; i++)
		CHECK(writer_start(&w[i], srv.shared_port, i + 1, per, "1-3000", "--shared") == 0,
		      "spawn");
	/* The writers' entries wait behind the held place until the head
	 * skips it; meanwhile the held writer stays alive. */
	int64_t deadline = now_ms() + scaled_ms(120000);
	while (stat_of(port, &st) == 0 && st.entries < (uint64_t)NW * per && now_ms() < deadline)
		raw_idle(&held, 250);
	int64_t took = now_ms() - t0;
	CHECK(writers_done(w, NW, scaled_ms(60000)) == 0, "writers");
	CHECK(st.entries == (uint64_t)NW * per, "%llu of %u entries in the log",
	      (unsigned long long)st.entries, NW * per);
	CHECK(took >= hole_ms - 50,
	      "the writers' entries were taken in %lld ms, before the "
	      "held place's %d ms ran out",
	      (long long)took, hole_ms);
	/* By request the server knows both places (the held one is skipped
	 * after hole_ms, the gone one at once); with atomics one skip ends at
	 * the first entry landed after both. */
	CHECK(st.holes == (by_request ? 2u : 1u), "stat says %llu holes, expected %d",
	      (unsigned long long)st.holes, by_request ? 2 : 1);
	/* The held writer writes at last: refused, nothing kept. */
	CHECK(raw_write(&held, at, 100, 1, 0) == 0, "late write");
	CHECK(expect_refusal(&held, LOG_ERR_SKIPPED, "a write into a skipped place") == 0, "late");
	raw_close(&held);
	struct verify *v = calloc(1, sizeof(*v));
	v->min = 1;
	v->max = 3000;
	int rc = verify_log(port, v);
	if (!rc)
		rc = check_counts(v, NW, per);
	CHECK(stat_of(port, &st) == 0 && st.entries == (uint64_t)NW * per,
	      "after the late write: %llu entries", (unsigned long long)st.entries);
	printf("shared_hole (%s): places %llu (held) and %llu (its writer gone) skipped "
	       "after %lld ms, %u writers x %u entries all in order, the late write refused\n",
	       by_request ? "granted by the server" : "fetch-and-add", (unsigned long long)at,
	       (unsigned long long)at2, (long long)took, NW, per);
	free(v);
	kill(srv.pid, SIGTERM);
	CHECK(proc_wait(&srv, 10000) == 0, "server exit: %s", srv.errtext);
	return rc;
}

int test_shared_hostile(void)
{
	struct proc srv, w;
	struct raw r, q;
	struct wimm_log_stat st;
	char hole[16];
	uint64_t at;
	snprintf(hole, sizeof(hole), "%d", scaled_ms(500));
	int port = start(&srv, hole);
	CHECK(port > 0, "server");
	CHECK(writer_start(&w, srv.shared_port, 1, 40, "1-2000", "--shared") == 0 &&
		  proc_wait(&w, scaled_ms(60000)) == 0,
	      "an honest writer: %s", w.errtext);
	/* A bad CRC32C at its own place: refused; the place becomes a hole
	 * the next honest entries wait behind. */
	CHECK(raw_open(&r, srv.shared_port, 60) == 0, "raw");
	CHECK(raw_reserve(&r, log_sh_extent(64), &at) == 0, "reserve");
	CHECK(raw_write(&r, at, 64, 1, 1) == 0, "post");
	CHECK(writer_start(&w, srv.shared_port, 2, 40, "1-2000", "--shared") == 0, "spawn");
	CHECK(expect_refusal(&r, LOG_ERR_CRC, "bad CRC") == 0, "crc");
	CHECK(proc_wait(&w, scaled_ms(60000)) == 0, "honest writer 2: %s", w.errtext);
	raw_close(&r);
	/* An entry at a place behind the head (never reserved there). */
	CHECK(raw_open(&r, srv.shared_port, 61) == 0, "raw");
	CHECK(stat_of(port, &st) == 0 && st.entries == 80, "%llu entries before",
	      (unsigned long long)st.entries);
	CHECK(raw_write(&r, 0, 16, 1, 0) == 0, "post");
	CHECK(expect_refusal(&r, LOG_ERR_SKIPPED, "an entry behind the head") == 0, "behind");
	raw_close(&r);
	/* An entry at a place this writer did not get. With atomics: it
	 * holds a place of its own unwritten (the head waits there) and writes
	 * at the next one, which the next honest writer then reserves and
	 * writes over: the two completions collide (the honest writer sends
	 * again), and when the head reaches the place the bytes there are not
	 * the raw writer's (refused, skipped as a hole). By request: the
	 * server knows the grants and refuses it at once. */
	CHECK(raw_open(&r, srv.shared_port, 65) == 0, "raw");
	if (!(r.res.flags & LOG_RESUME_BY_REQUEST)) {
		CHECK(raw_reserve(&r, 256, &at) == 0, "reserve");
		CHECK(raw_write(&r, at + 256, 64, 1, 0) == 0, "post");
		/* The raw writer stays polled meanwhile: silent for
		 * liveness_ms, the server would drop it before it can refuse. */
		CHECK(writer_start(&w, srv.shared_port, 4, 40, "1-2000", "--shared") == 0 &&
			  proc_wait_idle(&w, 60000, raw_take_idle, &r) == 0,
		      "honest writer 4 after a collision: %s", w.errtext);
		CHECK(raw_await(&r, LOG_K_ERROR, 15000) == 0 && r.err.code == LOG_ERR_SKIPPED,
		      "the raw writer at another's place: code %u, expected %u", r.err.code,
		      LOG_ERR_SKIPPED);
	} else {
		/* Ahead of the head: the grants so far end at the resume's base. */
		CHECK(raw_write(&r, r.res.base + 4096, 64, 1, 0) == 0, "post");
		CHECK(expect_refusal(&r, LOG_ERR_BOUNDS, "an entry at a place not granted") == 0,
		      "ungranted");
		CHECK(writer_start(&w, srv.shared_port, 4, 40, "1-2000", "--shared") == 0 &&
			  proc_wait(&w, scaled_ms(60000)) == 0,
		      "honest writer 4: %s", w.errtext);
	}
	raw_close(&r);
	/* A reservation the server must not grant: on a fabric with atomics the
	 * tail word is the atomics'; by request, a second one before the first
	 * is written. */
	CHECK(raw_open(&r, srv.shared_port, 62) == 0, "raw");
	int by_request = !!(r.res.flags & LOG_RESUME_BY_REQUEST);
	if (by_request)
		CHECK(raw_reserve(&r, 64, &at) == 0, "first reservation");
	CHECK(wimm_write_imm(r.c, NULL, 0, 0, 0, log_imm_out(LOG_K_RESERVE, 4), WIMM_F_WAIT) == 0,
	      "post");
	CHECK(expect_refusal(&r, LOG_ERR_PROTO, "a reservation not to grant") == 0, "reserve");
	raw_close(&r);
	/* A private-ring writer's hello on the shared port, a shared writer's
	 * in the main port's private data (where the fabric has any). */
	CHECK(raw_connect(&r, srv.shared_port, 63, LOG_ROLE_WRITER, 0) == 0, "raw");
	CHECK(expect_refusal(&r, LOG_ERR_PROTO, "a private writer's hello on the shared port") == 0,
	      "hello");
	raw_close(&r);
	struct wimm_fabric_limits lim;
	CHECK(wimm_ctx_open(fabric, NULL, &q.ctx) == 0 && wimm_ctx_limits(q.ctx, &lim) == 0,
	      "limits");
	wimm_ctx_close(&q.ctx);
	if (lim.private_max >= LOG_HELLO_LEN) {
		CHECK(raw_connect(&r, port, 64, LOG_ROLE_SHARED, 1) == 0, "raw");
		CHECK(expect_refusal(&r, LOG_ERR_PROTO, "a shared hello on the main port") == 0,
		      "hello");
		raw_close(&r);
	}
	/* Nothing of theirs kept; an honest writer after them goes on. */
	CHECK(writer_start(&w, srv.shared_port, 3, 40, "1-2000", "--shared") == 0 &&
		  proc_wait(&w, scaled_ms(60000)) == 0,
	      "honest writer 3: %s", w.errtext);
	struct verify *v = calloc(1, sizeof(*v));
	v->min = 1;
	v->max = 2000;
	int rc = verify_log(port, v);
	if (!rc)
		rc = check_counts(v, 4, 40);
	free(v);
	CHECK(stat_of(port, &st) == 0 && st.entries == 160 && st.holes >= 1 && st.late >= 1,
	      "the log holds %llu entries (160), %llu holes, %u late",
	      (unsigned long long)st.entries, (unsigned long long)st.holes, st.late);
	proc_drain(&srv);
	CHECK(strstr(srv.errtext, "bad CRC32C") && strstr(srv.errtext, "skipped"),
	      "the server's log does not say what it refused: %s", srv.errtext);
	kill(srv.pid, SIGTERM);
	CHECK(proc_wait(&srv, 10000) == 0, "server exit: %s", srv.errtext);
	printf("shared_hostile (%s): a bad CRC32C at a reserved place, an entry behind the "
	       "head, an entry at a place not its own, a reservation not to grant and hellos on "
	       "the wrong port refused; 160 honest entries kept, nothing else\n",
	       by_request ? "granted by the server" : "fetch-and-add");
	return rc;
}
