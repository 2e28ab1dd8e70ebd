/* Memory of wimm_mr_alloc as windows (contract: a window is a window,
 * whoever allocated it). On ipc such a window is mapped into a writer of
 * the same user, whose writes then are its own stores (src/ipc/ipc_wire.h):
 * these tests hold that path to the same contract as the copied one, on
 * every fabric: the bytes land exactly where the write says and nowhere
 * else in the region, every doorbell comes after its bytes, the core still
 * refuses ranges outside the window, and once the receiver has closed the
 * connection nothing of the writer's lands any more. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"

#define MiB (1024u * 1024u)

/* The API: arguments, what the memory is, and dereg while exposed. */
static void t_alloc_api(const char *uri)
{
	struct wimm_conn_attr sattr = {0};
	struct wimm_mr *mr = NULL, *other = NULL;
	long page = sysconf(_SC_PAGESIZE);
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	CHECK_RC(wimm_mr_alloc(NULL, 4096, WIMM_REMOTE_WRITE, &mr), WIMM_E_INVAL);
	CHECK(mr == NULL);
	CHECK_RC(wimm_mr_alloc(p.sctx, 0, WIMM_REMOTE_WRITE, &mr), WIMM_E_INVAL);
	CHECK_RC(wimm_mr_alloc(p.sctx, 4096, 1u << 7, &mr), WIMM_E_INVAL);
	CHECK_RC(wimm_mr_alloc(p.sctx, 4096, WIMM_REMOTE_WRITE, NULL), WIMM_E_INVAL);
	CHECK_RC(wimm_mr_alloc(p.sctx, SIZE_MAX, WIMM_REMOTE_WRITE, &mr), WIMM_E_NOMEM);
	CHECK(mr == NULL);
	/* No file descriptor left for the memfd: NOMEM, the errno kept. */
	struct rlimit nofile;
	CHECK(getrlimit(RLIMIT_NOFILE, &nofile) == 0);
	struct rlimit none = {.rlim_cur = 0, .rlim_max = nofile.rlim_max};
	CHECK(setrlimit(RLIMIT_NOFILE, &none) == 0);
	int rc = wimm_mr_alloc(p.sctx, 4096, WIMM_REMOTE_WRITE, &mr);
	CHECK(setrlimit(RLIMIT_NOFILE, &nofile) == 0);
	CHECK_RC(rc, WIMM_E_NOMEM);
	CHECK(mr == NULL);
	CHECK_EQ(wimm_provider_error(p.sctx, NULL), EMFILE);

	/* Zeroed, page-aligned, of the length asked for (not rounded up). */
	CHECK_OK(wimm_mr_alloc(p.sctx, 10000, WIMM_REMOTE_WRITE | WIMM_REMOTE_READ, &mr));
	uint8_t *b = wimm_mr_addr(mr);
	CHECK(b != NULL && (uintptr_t)b % (uintptr_t)page == 0);
	CHECK_EQ(wimm_mr_len(mr), 10000);
	for (size_t i = 0; i < 10000; i++)
		CHECKF(b[i] == 0, "byte %zu of a fresh allocation is %u", i, b[i]);
	memset(b, 0x5A, 10000);

	/* Exposed by a live connection: not freed under it. */
	sattr.window = mr;
	if (pair_connect(&p, &sattr, NULL))
		goto out;
	CHECK_RC(wimm_mr_dereg(&mr), WIMM_E_BUSY);
	CHECK(mr != NULL);
	CHECK(((uint8_t *)wimm_mr_addr(mr))[9999] == 0x5A);
	/* The listener's attr names it too. */
	CHECK_OK(wimm_conn_delete(&p.s));
	CHECK_OK(wimm_listener_delete(&p.l));
	CHECK_OK(wimm_mr_dereg(&mr));
	CHECK(mr == NULL);
	CHECK_OK(wimm_mr_dereg(&mr)); /* NULL: nothing to do */
	/* A second allocation is fresh memory again. */
	CHECK_OK(wimm_mr_alloc(p.sctx, 1, WIMM_LOCAL, &other));
	CHECK(((uint8_t *)wimm_mr_addr(other))[0] == 0);
out:
	wimm_conn_delete(&p.s);
	wimm_mr_dereg(&other);
	wimm_mr_dereg(&mr);
	pair_close(&p);
}

/* Writes of every size class (ipc's small stores of 1-3, 4-7 and 8-16
 * bytes as at most two moves, inline, data area, direct, page-crossing)
 * into a window that starts at an unaligned offset of its region: each
 * lands at its offset, the window's neighbours in the region stay as they
 * were, and a doorbell after plain writes finds all their bytes. Both
 * sides' windows are allocated, so on ipc both directions are mapped. */
static void t_alloc_integrity(const char *uri)
{
	static const size_t sizes[] = {1,  2,  3,  4,  5,    7,	   8,	  9,	   15,
				       16, 17, 24, 25, 1200, 4096, 65537, MiB - 1, MiB};
	const size_t win_off = 4096 + 100, win_len = 2 * MiB, guard = 64;
	struct wimm_conn_attr sattr = {.window_off = win_off, .window_len = win_len};
	struct wimm_conn_attr cattr = {0};
	struct region *win, *src, *back;
	struct wimm_event ev;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	win = pair_region_alloc(&p, p.sctx, win_off + win_len + 4096, WIMM_REMOTE_WRITE);
	src = pair_region_alloc(&p, p.cctx, 2 * MiB, WIMM_LOCAL);
	back = pair_region_alloc(&p, p.cctx, 4096, WIMM_REMOTE_WRITE);
	CHECK(win && src && back);
	sattr.window = win->mr;
	cattr.window = back->mr;
	if (pair_connect(&p, &sattr, &cattr))
		goto out;
	uint8_t *w = (uint8_t *)win->buf + win_off;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t len = sizes[i];
		/* The last one ends exactly at the window's end. */
		size_t dst_off =
		    i + 1 < sizeof(sizes) / sizeof(sizes[0]) ? guard + (i & 1) * 7 : win_len - len;
		uint64_t seed = 7000 + i;

		memset(win->buf, 0xEE, win->len);
		conf_fill((uint8_t *)src->buf + (i & 1) * 13, len, seed);
		/* A plain write, then a doorbell: the doorbell comes after it. */
		CHECK_OK(wimm_write(p.c, src->mr, (i & 1) * 13, dst_off, len, 0));
		CHECK_OK(wimm_write_imm(p.c, src->mr, 0, 0, 0, (uint32_t)i, 0));
		CHECK_EQ(wait_event(p.sctx, p.cctx, WIMM_EV_WRITE_IMM, p.s, &ev, 10000, NULL), 1);
		CHECK_EQ((int)ev.imm, (int)i);
		size_t bad = conf_verify(w + dst_off, len, seed);
		CHECKF(bad == 0, "size %zu: byte %zu differs at the receiver", len, bad - 1);
		for (size_t k = 0; k < win_off + dst_off; k++)
			CHECKF(((uint8_t *)win->buf)[k] == 0xEE,
			       "size %zu: byte %zu of the region before the target changed", len,
			       k);
		for (size_t k = win_off + dst_off + len; k < win->len; k++)
			CHECKF(((uint8_t *)win->buf)[k] == 0xEE,
			       "size %zu: byte %zu of the region after the target changed", len, k);
		/* And a write_imm with its own bytes, the other way round. */
		conf_fill(w, 100, seed + 1);
		CHECK_OK(wimm_write_imm(p.s, win->mr, win_off, 50, 100, 0x100u + (uint32_t)i, 0));
		CHECK_EQ(wait_event(p.cctx, p.sctx, WIMM_EV_WRITE_IMM, p.c, &ev, 10000, NULL), 1);
		CHECK_EQ(ev.imm, 0x100u + i);
		CHECK_EQ(ev.len, 100);
		bad = conf_verify((uint8_t *)back->buf + 50, 100, seed + 1);
		CHECKF(bad == 0, "size %zu: byte %zu differs on the way back", len, bad - 1);
	}
	/* A signaled plain write completes, after the unsignaled ones. */
	CHECK_OK(wimm_write(p.c, src->mr, 0, 0, 64, 0));
	CHECK_OK(wimm_write(p.c, src->mr, 0, 64, 64, WIMM_F_SIGNAL));
	CHECK_EQ(wait_event(p.cctx, p.sctx, WIMM_EV_SEND_DONE, p.c, &ev, 10000, NULL), 1);
	CHECK(ev.op == WIMM_OP_WRITE);
	CHECK_RC(ev.status, 0);
	/* (A completion says the write left; a doorbell after it that it landed.) */
	CHECK_OK(wimm_write_imm(p.c, src->mr, 0, 0, 0, 0x200, 0));
	CHECK_EQ(wait_event(p.sctx, p.cctx, WIMM_EV_WRITE_IMM, p.s, &ev, 10000, NULL), 1);
	CHECK(memcmp(w, src->buf, 64) == 0 && memcmp(w + 64, src->buf, 64) == 0);
	/* Stored at once or posted, a plain write counts as an operation
	 * (WIMM_F_WAIT changes nothing), and a flag it does not know is
	 * refused before any byte moves. */
	struct wimm_conn_stats before, after;
	memset(w + 128, 0xEE, 64);
	CHECK_OK(wimm_conn_stats(p.c, &before));
	CHECK_OK(wimm_write(p.c, src->mr, 0, 128, 24, 0));
	CHECK_OK(wimm_write(p.c, src->mr, 0, 152, 8, WIMM_F_WAIT));
	CHECK_RC(wimm_write(p.c, src->mr, 0, 160, 8, 0x8000u), WIMM_E_INVAL);
	CHECK_OK(wimm_conn_stats(p.c, &after));
	CHECK_EQ(after.ops_out - before.ops_out, 2);
	CHECK_EQ(after.bytes_out - before.bytes_out, 32);
	CHECK_EQ(after.doorbells_out, before.doorbells_out);
	CHECK_OK(wimm_write_imm(p.c, src->mr, 0, 0, 0, 0x201, 0));
	CHECK_EQ(wait_event(p.sctx, p.cctx, WIMM_EV_WRITE_IMM, p.s, &ev, 10000, NULL), 1);
	CHECK(memcmp(w + 128, src->buf, 24) == 0 && memcmp(w + 152, src->buf, 8) == 0);
	CHECK(w[160] == 0xEE);
	/* The core still refuses what lies outside the window. */
	CHECK_RC(wimm_write(p.c, src->mr, 0, win_len, 1, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_write_imm(p.c, src->mr, 0, win_len - 10, 11, 1, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_write(p.s, win->mr, 0, 4096 - 1, 2, 0), WIMM_E_BOUNDS);
out:
	pair_close(&p);
}

/* ------------------------------------------- nothing lands after close */

struct writer {
	struct wimm_ctx *ctx;
	struct wimm_conn *c;
	struct wimm_mr *src;
	struct wimm_mr *src2; /* if set, every other write comes from it */
	atomic_int stop;
	atomic_int pause, paused; /* asked to hold still, holding still */
	atomic_long posted;	  /* writes the fabric took */
	int last_rc;
};

/* Writes into the peer's window until told to stop or the connection is
 * refused; polls its own context so the send queue keeps moving. */
static void *writer_run(void *arg)
{
	struct writer *wr = arg;
	struct wimm_event ev[16];
	int64_t until = conf_now_ms() + (int64_t)(20000 * conf_scale());

	while (!atomic_load(&wr->stop) && conf_now_ms() < until) {
		atomic_store(&wr->paused, atomic_load(&wr->pause));
		if (atomic_load(&wr->paused)) {
			wimm_poll(wr->ctx, ev, 16);
			continue;
		}
		long n = atomic_load(&wr->posted);
		struct wimm_mr *from = wr->src2 && n % 2 ? wr->src2 : wr->src;
		int rc = wimm_write(wr->c, from, 0, (size_t)(n % 64) * 64, 4096,
				    n % 32 == 31 ? WIMM_F_SIGNAL : 0);
		if (rc == 0)
			atomic_fetch_add(&wr->posted, 1);
		else if (rc != WIMM_E_AGAIN) {
			wr->last_rc = rc;
			break;
		}
		/* Not after every post: a writer learns of the close late. */
		if (n % 64 && rc == 0)
			continue;
		int got = wimm_poll(wr->ctx, ev, 16);
		for (int i = 0; i < got; i++)
			if (ev[i].type == WIMM_EV_DISCONNECT)
				atomic_store(&wr->stop, 1);
	}
	return NULL;
}

/* Connects p with win as the server's window and starts a writer of src
 * (and src2, when given) into it: 1 when it runs. */
static int writer_start(struct pair *p, struct writer *wr, struct region *win, struct region *src,
			struct region *src2, pthread_t *th)
{
	struct wimm_conn_attr sattr = {.window = win->mr};

	if (pair_connect(p, &sattr, NULL))
		return 0;
	wr->ctx = p->cctx;
	wr->c = p->c;
	wr->src = src->mr;
	wr->src2 = src2 ? src2->mr : NULL;
	CHECK(pthread_create(th, NULL, writer_run, wr) == 0);
	return 1;
out:
	return 0;
}

/* A writer streams into the window, holds still while the receiver takes
 * what is in flight, clears the window and closes its end (delete: at
 * once), then goes on writing until it learns of the close: the window
 * stays clear. */
static void t_alloc_close(const char *uri)
{
	struct writer wr = {0};
	struct region *win, *src;
	pthread_t th;
	int started = 0;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	win = pair_region_alloc(&p, p.sctx, 64 * 64 + 4096, WIMM_REMOTE_WRITE);
	src = pair_region_alloc(&p, p.cctx, 4096, WIMM_LOCAL);
	CHECK(win && src);
	memset(src->buf, 0xAB, 4096);
	started = writer_start(&p, &wr, win, src, NULL, &th);
	if (!started)
		goto out;
	/* Until the writes are landing (the receiver's progress moves them
	 * on fabrics that need it). */
	volatile uint8_t *w = win->buf;
	int64_t until = conf_now_ms() + (int64_t)(10000 * conf_scale());
	while (w[0] != 0xAB && conf_now_ms() < until) {
		struct wimm_event ev[16];
		wimm_poll(p.sctx, ev, 16);
	}
	CHECKF(w[0] == 0xAB, "no write landed in 10 s (%ld posted)", atomic_load(&wr.posted));
	atomic_store(&wr.pause, 1);
	while (!atomic_load(&wr.paused))
		conf_sleep_us(100);
	/* What the writer posted lands now (room in its queue again). */
	drain_events(p.sctx, NULL, (int)(100 * conf_scale()));
	memset(win->buf, 0, win->len);
	long before = atomic_load(&wr.posted);
	CHECK_OK(wimm_conn_delete(&p.s));
	atomic_store(&wr.pause, 0);
	conf_sleep_us((unsigned)(200000 * conf_scale()));
	for (size_t k = 0; k < win->len; k++)
		CHECKF(w[k] == 0,
		       "byte %zu changed after the receiver closed (%ld writes before the close, "
		       "%ld now)",
		       k, before, atomic_load(&wr.posted));
out:
	if (started) {
		atomic_store(&wr.stop, 1);
		pthread_join(th, NULL);
	}
	pair_close(&p);
}

/* The close while the writer streams on, unpaused: the receiver's close
 * races the writer's stores (on ipc the gate's two sides, whichever
 * barrier orders them). Two sources of different bytes at moving offsets,
 * so that any store keeps changing the window: once the close has
 * returned, the window must stay as it was. Repeated, since each round
 * catches the writer at some other point of a store. */
static void close_live_round(const char *uri, int round)
{
	struct writer wr = {0};
	struct region *win, *src, *src2;
	pthread_t th;
	int started = 0;
	uint8_t *snap = NULL;
	struct pair p;

	if (pair_open(&p, uri))
		goto out;
	win = pair_region_alloc(&p, p.sctx, 64 * 64 + 4096, WIMM_REMOTE_WRITE);
	src = pair_region_alloc(&p, p.cctx, 4096, WIMM_LOCAL);
	src2 = pair_region_alloc(&p, p.cctx, 4096, WIMM_LOCAL);
	snap = malloc(64 * 64 + 4096);
	CHECK(win && src && src2 && snap);
	memset(src->buf, 0xAB, 4096);
	memset(src2->buf, 0xCD, 4096);
	started = writer_start(&p, &wr, win, src, src2, &th);
	if (!started)
		goto out;
	/* Some writes landed, and the writer is still at it (a few more each
	 * round, to close at another point of its stream). */
	volatile uint8_t *w = win->buf;
	long want = 100 + round * 37;
	int64_t until = conf_now_ms() + (int64_t)(10000 * conf_scale());
	while ((w[0] == 0 || atomic_load(&wr.posted) < want) && !atomic_load(&wr.stop) &&
	       conf_now_ms() < until) {
		struct wimm_event ev[16];
		wimm_poll(p.sctx, ev, 16);
	}
	CHECKF(w[0] != 0, "no write landed in 10 s (%ld posted)", atomic_load(&wr.posted));
	CHECK_OK(wimm_conn_delete(&p.s));
	long at_close = atomic_load(&wr.posted);
	memcpy(snap, win->buf, win->len);
	conf_sleep_us((unsigned)(20000 * conf_scale()));
	for (size_t k = 0; k < win->len; k++)
		CHECKF(w[k] == snap[k],
		       "round %d: byte %zu changed after the receiver's close returned (%ld writes "
		       "at the close, %ld now)",
		       round, k, at_close, atomic_load(&wr.posted));
out:
	if (started) {
		atomic_store(&wr.stop, 1);
		pthread_join(th, NULL);
	}
	free(snap);
	pair_close(&p);
}

static void t_alloc_close_live(const char *uri)
{
	int rounds = conf_quick() ? 3 : 12;

	for (int r = 0; r < rounds && !conf_failed(); r++)
		close_live_round(uri, r);
}

const struct conf_test conf_tests_alloc[] = {
    {"alloc_api", t_alloc_api, 0},
    {"alloc_integrity", t_alloc_integrity, 0},
    {"alloc_close", t_alloc_close, 0},
    {"alloc_close_live", t_alloc_close_live, 0},
    {NULL, NULL, 0},
};
