/* Atomics: fetch-and-add and compare-and-swap on a 64-bit word of the peer's
 * window. Where the fabric has them: the fetched values and the word's new
 * value, exact sums from several connections adding at once. Where it has
 * none: NOTSUP with a reason, and the connection unharmed. Everywhere: the
 * core's checks (alignment, bounds, permission) with nothing posted.
 *
 * Whether a fabric has atomics is asked of the provider itself, not of
 * wimm, so that a wimm that wrongly says NOTSUP (or wrongly posts) fails:
 * verbs' atomic_cap, libfabric's fi_getinfo with FI_ATOMIC for exactly the
 * provider named (tcp's MSG endpoints have none, shm's RDM ones have). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"

#ifdef CONF_HAVE_OFI
#include <rdma/fabric.h>
#endif
#ifdef CONF_HAVE_VERBS
#include <infiniband/verbs.h>
#endif

#define WORD 8u
#define WIN_OFF 256
#define WIN_LEN 4096
#define RESULT_LEN 4096
#define SIGNAL_OFF 64 /* the word the tests work on, inside the window */

enum expect { EXPECT_UNKNOWN, EXPECT_ATOMICS, EXPECT_NOTSUP };

#ifdef CONF_HAVE_OFI
static enum expect ofi_expect(const char *prov)
{
	struct fi_info *hints = fi_allocinfo(), *list = NULL;
	enum expect e = EXPECT_NOTSUP;

	if (!hints)
		return EXPECT_UNKNOWN;
	hints->caps = FI_ATOMIC | FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_MSG;
	hints->fabric_attr->prov_name = strdup(prov);
	if (fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &list) == 0) {
		for (struct fi_info *i = list; i; i = i->next)
			if (!strcmp(i->fabric_attr->prov_name, prov) &&
			    i->domain_attr->cq_data_size >= 4)
				e = EXPECT_ATOMICS;
	}
	fi_freeinfo(list);
	fi_freeinfo(hints);
	return e;
}
#endif

#ifdef CONF_HAVE_VERBS
static enum expect verbs_expect(const char *dev)
{
	int n = 0;
	struct ibv_device **devs = ibv_get_device_list(&n);
	enum expect e = EXPECT_UNKNOWN;

	for (int i = 0; devs && i < n; i++) {
		if (*dev && strcmp(ibv_get_device_name(devs[i]), dev))
			continue;
		struct ibv_context *vc = ibv_open_device(devs[i]);
		struct ibv_device_attr da;

		if (vc && ibv_query_device(vc, &da) == 0)
			e = da.atomic_cap == IBV_ATOMIC_NONE ? EXPECT_NOTSUP : EXPECT_ATOMICS;
		if (vc)
			ibv_close_device(vc);
		break;
	}
	if (devs)
		ibv_free_device_list(devs);
	return e;
}
#endif

/* What the fabric behind the context offers, by the provider's word. */
static enum expect expect_of(struct wimm_ctx *ctx)
{
	const char *f = wimm_ctx_fabric(ctx);

#ifdef CONF_HAVE_OFI
	if (!strncmp(f, "ofi:", 4))
		return ofi_expect(f + 4);
#endif
#ifdef CONF_HAVE_VERBS
	if (!strncmp(f, "verbs", 5))
		return verbs_expect(f[5] == ':' ? f + 6 : "");
#endif
	(void)f;
	return EXPECT_UNKNOWN;
}

static volatile uint64_t *word_at(struct region *r, size_t off)
{
	return (volatile uint64_t *)((char *)r->buf + off);
}

/* The log hook: keeps the last warning. */
struct log_capture {
	char last[256];
	int warnings;
};

static void capture_log(void *arg, enum wimm_log_level level, const char *msg)
{
	struct log_capture *lc = arg;

	if (level > WIMM_LOG_WARN)
		return;
	lc->warnings++;
	snprintf(lc->last, sizeof(lc->last), "%s", msg);
}

/* A pair whose server exposes [WIN_OFF, WIN_OFF + WIN_LEN) of a region with
 * `access`; the client has a result region. Returns 0 or fails the test. */
static int atomic_pair(struct pair *p, const char *uri, unsigned access, struct log_capture *lc,
		       struct region **win, struct region **res)
{
	struct wimm_ctx_attr cattr = {.log = capture_log, .log_arg = lc};
	struct wimm_conn_attr sattr = {.window_off = WIN_OFF, .window_len = WIN_LEN};

	if (pair_open_attr(p, uri, NULL, &cattr))
		return -1;
	*win = pair_region(p, p->sctx, WIN_OFF + WIN_LEN + 256, access);
	*res = pair_region(p, p->cctx, RESULT_LEN, WIMM_LOCAL);
	if (!*win || !*res)
		return -1;
	sattr.window = (*win)->mr;
	return pair_connect(p, &sattr, NULL);
}

/* The op's completion at the client: one SEND_DONE of op, len 8. */
static int atomic_done(struct pair *p, enum wimm_op op)
{
	struct wimm_event ev;
	int rc = next_event(p->cctx, p->sctx, &ev, 10000);

	if (rc != 1 || ev.type != WIMM_EV_SEND_DONE || ev.op != op || ev.len != WORD) {
		conf_fail(__FILE__, __LINE__,
			  "expected SEND_DONE of op %d, 8 bytes; got rc %d: %s op %d len %u "
			  "status %s",
			  (int)op, rc, rc == 1 ? conf_ev_name(ev.type) : "none",
			  rc == 1 ? (int)ev.op : 0, rc == 1 ? ev.len : 0,
			  rc == 1 ? wimm_err_name(ev.status) : "");
		return -1;
	}
	return 0;
}

static uint64_t result_at(struct region *res, size_t off)
{
	return *(volatile uint64_t *)((char *)res->buf + off);
}

/* The fetched values and the word's values, or NOTSUP where the provider
 * says the fabric has no atomics. */
static void t_atomic_values(const char *uri)
{
	struct log_capture lc = {{0}, 0};
	struct region *win, *res;
	struct wimm_conn_info ci;
	struct pair p;
	enum expect want;
	int rc;

	if (atomic_pair(&p, uri, WIMM_REMOTE_WRITE | WIMM_REMOTE_ATOMIC, &lc, &win, &res))
		goto out;
	CHECK_OK(wimm_conn_info(p.c, &ci));
	CHECK_EQ(ci.peer_window_access, WIMM_REMOTE_WRITE | WIMM_REMOTE_ATOMIC);
	want = expect_of(p.cctx);
	volatile uint64_t *w = word_at(win, WIN_OFF + SIGNAL_OFF);
	*w = 100;

	rc = wimm_fetch_add(p.c, res->mr, 0, SIGNAL_OFF, 5, 0);
	if (want == EXPECT_NOTSUP || (want == EXPECT_UNKNOWN && rc == WIMM_E_NOTSUP)) {
		const char *text = "";

		CHECK_RC(rc, WIMM_E_NOTSUP);
		CHECK_RC(wimm_cmp_swap(p.c, res->mr, 0, SIGNAL_OFF, 100, 1, WIMM_F_SIGNAL),
			 WIMM_E_NOTSUP);
		wimm_provider_error(p.cctx, &text);
		CHECKF(text && *text, "NOTSUP without a reason in wimm_provider_error");
		CHECKF(lc.warnings >= 2 && strstr(lc.last, "atomics not supported"),
		       "log hook: %d warnings, last '%s'", lc.warnings, lc.last);
		conf_diag("NOTSUP says: %s", text);
		CHECK_EQ(*w, 100);
		/* Nothing was posted: the connection is as good as before. */
		CHECK_OK(wimm_write_imm(p.c, res->mr, 0, 0, 8, 77, 0));
		struct wimm_event ev;

		CHECK_EQ(next_event(p.sctx, p.cctx, &ev, 5000), 1);
		CHECK(ev.type == WIMM_EV_WRITE_IMM && ev.imm == 77);
		CHECK_EQ(drain_events(p.cctx, p.sctx, 100), 0);
		goto out;
	}
	CHECKF(rc == 0, "fetch_add on %s, which the provider says has atomics: %s",
	       wimm_ctx_fabric(p.cctx), wimm_err_name(rc));
	if (atomic_done(&p, WIMM_OP_FETCH_ADD))
		goto out;
	CHECK_EQ(result_at(res, 0), 100);
	CHECK_EQ(*w, 105);

	/* A match swaps; the result is the old value either way. */
	CHECK_OK(wimm_cmp_swap(p.c, res->mr, 8, SIGNAL_OFF, 105, 7, 0));
	if (atomic_done(&p, WIMM_OP_CMP_SWAP))
		goto out;
	CHECK_EQ(result_at(res, 8), 105);
	CHECK_EQ(*w, 7);
	CHECK_OK(wimm_cmp_swap(p.c, res->mr, 16, SIGNAL_OFF, 105, 9, WIMM_F_SIGNAL));
	if (atomic_done(&p, WIMM_OP_CMP_SWAP))
		goto out;
	CHECK_EQ(result_at(res, 16), 7);
	CHECK_EQ(*w, 7);

	/* 64-bit arithmetic, modulo 2^64; the window's last word. */
	CHECK_OK(wimm_fetch_add(p.c, res->mr, 24, SIGNAL_OFF, UINT64_MAX, 0));
	if (atomic_done(&p, WIMM_OP_FETCH_ADD))
		goto out;
	CHECK_EQ(result_at(res, 24), 7);
	CHECK_EQ(*w, 6);
	*word_at(win, WIN_OFF + WIN_LEN - WORD) = 0xfffffffffull;
	CHECK_OK(wimm_fetch_add(p.c, res->mr, RESULT_LEN - WORD, WIN_LEN - WORD, 1, 0));
	if (atomic_done(&p, WIMM_OP_FETCH_ADD))
		goto out;
	CHECK(result_at(res, RESULT_LEN - WORD) == 0xfffffffffull);
	CHECK(*word_at(win, WIN_OFF + WIN_LEN - WORD) == 0x1000000000ull);
	/* The words around stayed as they were; the peer saw no event. */
	CHECK_EQ(*word_at(win, WIN_OFF + SIGNAL_OFF - WORD), 0);
	CHECK_EQ(*word_at(win, WIN_OFF + SIGNAL_OFF + WORD), 0);
	CHECK_EQ(*word_at(win, WIN_OFF + WIN_LEN), 0);
	CHECK_EQ(drain_events(p.sctx, p.cctx, 100), 0);
out:
	pair_close(&p);
}

/* The core's checks, on every fabric (they come before NOTSUP): each call
 * refused with its own error and nothing reaching the peer. */
static void t_atomic_errors(const char *uri)
{
	struct log_capture lc = {{0}, 0};
	struct region *win, *res, *small, *other;
	struct pair p;

	if (atomic_pair(&p, uri, WIMM_REMOTE_WRITE | WIMM_REMOTE_ATOMIC, &lc, &win, &res))
		goto out;
	small = pair_region(&p, p.cctx, 4, WIMM_LOCAL);
	other = pair_region(&p, p.sctx, 64, WIMM_LOCAL);
	CHECK(small && other);
	*word_at(win, WIN_OFF + SIGNAL_OFF) = 42;

	/* Misaligned: the target, the result. */
	CHECK_RC(wimm_fetch_add(p.c, res->mr, 0, SIGNAL_OFF + 4, 1, 0), WIMM_E_INVAL);
	CHECK_RC(wimm_fetch_add(p.c, res->mr, 0, 1, 1, 0), WIMM_E_INVAL);
	CHECK_RC(wimm_cmp_swap(p.c, res->mr, 0, SIGNAL_OFF + 2, 42, 1, 0), WIMM_E_INVAL);
	CHECK_RC(wimm_fetch_add(p.c, res->mr, 4, SIGNAL_OFF, 1, 0), WIMM_E_INVAL);
	CHECK_RC(wimm_cmp_swap(p.c, res->mr, 1, SIGNAL_OFF, 42, 1, 0), WIMM_E_INVAL);
	/* Out of the window: past its end, across it, offsets that wrap. */
	CHECK_RC(wimm_fetch_add(p.c, res->mr, 0, WIN_LEN, 1, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_fetch_add(p.c, res->mr, 0, WIN_LEN - 4, 1, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_cmp_swap(p.c, res->mr, 0, WIN_LEN + 8, 0, 1, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_fetch_add(p.c, res->mr, 0, SIZE_MAX, 1, 0), WIMM_E_BOUNDS);
	CHECK_RC(wimm_fetch_add(p.c, res->mr, 0, SIZE_MAX - 7, 1, 0), WIMM_E_BOUNDS);
	/* The result outside its region, or a region too small for a word. */
	CHECK_RC(wimm_fetch_add(p.c, res->mr, RESULT_LEN, SIGNAL_OFF, 1, 0), WIMM_E_LOCAL_BOUNDS);
	CHECK_RC(wimm_fetch_add(p.c, res->mr, RESULT_LEN - 4, SIGNAL_OFF, 1, 0),
		 WIMM_E_LOCAL_BOUNDS);
	CHECK_RC(wimm_cmp_swap(p.c, res->mr, SIZE_MAX - 7, SIGNAL_OFF, 42, 1, 0),
		 WIMM_E_LOCAL_BOUNDS);
	CHECK_RC(wimm_fetch_add(p.c, small->mr, 0, SIGNAL_OFF, 1, 0), WIMM_E_LOCAL_BOUNDS);
	/* Bad arguments: no connection, no result, another context's region,
	 * unknown flags. */
	CHECK_RC(wimm_fetch_add(NULL, res->mr, 0, SIGNAL_OFF, 1, 0), WIMM_E_INVAL);
	CHECK_RC(wimm_cmp_swap(NULL, res->mr, 0, SIGNAL_OFF, 42, 1, 0), WIMM_E_INVAL);
	CHECK_RC(wimm_fetch_add(p.c, NULL, 0, SIGNAL_OFF, 1, 0), WIMM_E_INVAL);
	CHECK_RC(wimm_fetch_add(p.c, other->mr, 0, SIGNAL_OFF, 1, 0), WIMM_E_INVAL);
	CHECK_RC(wimm_fetch_add(p.c, res->mr, 0, SIGNAL_OFF, 1, 0x100), WIMM_E_INVAL);
	/* The server's side has no window of the client to work on. */
	struct region *sres = pair_region(&p, p.sctx, 64, WIMM_LOCAL);

	CHECK(sres);
	CHECK_RC(wimm_fetch_add(p.s, sres->mr, 0, 0, 1, 0), WIMM_E_NOWINDOW);
	CHECK_RC(wimm_cmp_swap(p.s, sres->mr, 0, 0, 0, 1, 0), WIMM_E_NOWINDOW);

	CHECK_EQ(*word_at(win, WIN_OFF + SIGNAL_OFF), 42);
	CHECK_EQ(drain_events(p.cctx, p.sctx, 100), 0);
	CHECK_EQ(drain_events(p.sctx, p.cctx, 100), 0);
out:
	pair_close(&p);
}

/* A window without WIMM_REMOTE_ATOMIC refuses atomics with PERM, one with
 * only atomics refuses plain writes (and still takes atomics). */
static void t_atomic_permission(const char *uri)
{
	struct log_capture lc = {{0}, 0};
	struct region *win, *res;
	struct wimm_conn_info ci;
	struct pair p, q;

	memset(&q, 0, sizeof(q));
	if (atomic_pair(&p, uri, WIMM_REMOTE_WRITE | WIMM_REMOTE_READ, &lc, &win, &res))
		goto out;
	CHECK_OK(wimm_conn_info(p.c, &ci));
	CHECK_EQ(ci.peer_window_access, WIMM_REMOTE_WRITE | WIMM_REMOTE_READ);
	CHECK_RC(wimm_fetch_add(p.c, res->mr, 0, SIGNAL_OFF, 1, 0), WIMM_E_PERM);
	CHECK_RC(wimm_cmp_swap(p.c, res->mr, 0, SIGNAL_OFF, 0, 1, 0), WIMM_E_PERM);
	CHECK_EQ(*word_at(win, WIN_OFF + SIGNAL_OFF), 0);

	struct region *qwin, *qres;

	if (atomic_pair(&q, uri, WIMM_REMOTE_ATOMIC, &lc, &qwin, &qres))
		goto out;
	CHECK_OK(wimm_conn_info(q.c, &ci));
	CHECK_EQ(ci.peer_window_access, WIMM_REMOTE_ATOMIC);
	CHECK_RC(wimm_write(q.c, qres->mr, 0, SIGNAL_OFF, 8, 0), WIMM_E_PERM);
	CHECK_RC(wimm_read(q.c, qres->mr, 0, SIGNAL_OFF, 8, 0), WIMM_E_PERM);
	int rc = wimm_fetch_add(q.c, qres->mr, 0, SIGNAL_OFF, 3, 0);

	if (expect_of(q.cctx) == EXPECT_NOTSUP) {
		CHECK_RC(rc, WIMM_E_NOTSUP);
		goto out;
	}
	CHECK_OK(rc);
	if (atomic_done(&q, WIMM_OP_FETCH_ADD))
		goto out;
	CHECK_EQ(*word_at(qwin, WIN_OFF + SIGNAL_OFF), 3);
out:
	pair_close(&q);
	pair_close(&p);
}

/* ------------------------------------------ concurrent adds, several conns */

#define ADDERS 4

struct adder {
	struct wimm_ctx *ctx;
	struct wimm_conn *conn;
	struct wimm_mr *mr;
	uint64_t *results; /* one word per add: each fetched value kept */
	uint32_t n;
	int rc;
	char why[160];
};

/* One client: n adds of 1, up to `window` in flight, every completion
 * awaited. Its own thread: contexts are single-threaded. */
static void *adder_run(void *arg)
{
	struct adder *a = arg;
	const uint32_t window = 16;
	uint32_t posted = 0, done = 0;
	int64_t deadline = conf_now_ms() + (int64_t)(60000 * conf_scale());

	while (done < a->n) {
		while (posted < a->n && posted - done < window) {
			int rc =
			    wimm_fetch_add(a->conn, a->mr, (size_t)posted * WORD, SIGNAL_OFF, 1, 0);

			if (rc == WIMM_E_AGAIN)
				break;
			if (rc) {
				a->rc = rc;
				snprintf(a->why, sizeof(a->why), "fetch_add %u: %s", posted,
					 wimm_err_name(rc));
				return NULL;
			}
			posted++;
		}
		struct wimm_event ev[16];
		int k = wimm_poll(a->ctx, ev, 16);

		for (int i = 0; i < k; i++) {
			if (ev[i].type != WIMM_EV_SEND_DONE || ev[i].op != WIMM_OP_FETCH_ADD) {
				a->rc = WIMM_E_PROVIDER;
				snprintf(a->why, sizeof(a->why), "event %s status %s",
					 conf_ev_name(ev[i].type), wimm_err_name(ev[i].status));
				return NULL;
			}
			done++;
		}
		if (k < 0 || conf_now_ms() > deadline) {
			a->rc = k < 0 ? k : WIMM_E_TIMEDOUT;
			snprintf(a->why, sizeof(a->why), "%u of %u done: %s", done, a->n,
				 wimm_err_name(a->rc));
			return NULL;
		}
		if (k == 0)
			conf_sleep_us(20);
	}
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* ADDERS connections to one window, each in its own thread adding 1 to the
 * same word: the word ends at the exact total and the values fetched are
 * 0 .. total-1, each once (no add lost, none seen twice). */
static void t_atomic_concurrent(const char *uri)
{
	const uint32_t per = conf_quick() ? 200 : 2000;
	struct wimm_conn_attr sattr = {.window_off = WIN_OFF, .window_len = WIN_LEN};
	struct pair aux[ADDERS];
	struct adder ad[ADDERS];
	pthread_t th[ADDERS];
	int started = 0;
	uint64_t *all = NULL;
	char addr[300];
	struct pair p;

	memset(aux, 0, sizeof(aux));
	memset(ad, 0, sizeof(ad));
	if (pair_open(&p, uri))
		goto out;
	struct region *win = pair_region(&p, p.sctx, WIN_OFF + WIN_LEN, WIMM_REMOTE_ATOMIC);

	CHECK(win);
	if (expect_of(p.sctx) == EXPECT_NOTSUP) {
		conf_diag("no atomics on %s: t_atomic_values checks NOTSUP",
			  wimm_ctx_fabric(p.sctx));
		goto out;
	}
	sattr.window = win->mr;
	if (conf_listen(p.sctx, &sattr, &p.l, addr, sizeof(addr)))
		goto out;
	for (int i = 0; i < ADDERS; i++) {
		aux[i].sctx = p.sctx;
		aux[i].l = p.l;
		CHECK_OK(wimm_ctx_open(uri, NULL, &aux[i].cctx));
		if (pair_connect_on(&aux[i], addr, NULL))
			goto out;
		ad[i].ctx = aux[i].cctx;
		ad[i].conn = aux[i].c;
		ad[i].n = per;
		ad[i].results = calloc(per, WORD);
		CHECK(ad[i].results);
		CHECK_OK(wimm_mr_reg(aux[i].cctx, ad[i].results, (size_t)per * WORD, WIMM_LOCAL,
				     &ad[i].mr));
	}
	for (; started < ADDERS; started++)
		CHECK(pthread_create(&th[started], NULL, adder_run, &ad[started]) == 0);
	/* The server does nothing but drive its fabric (shm serves atomics in
	 * the target's progress) until every adder is through. */
	volatile uint64_t *w = word_at(win, WIN_OFF + SIGNAL_OFF);
	int64_t deadline = conf_now_ms() + (int64_t)(90000 * conf_scale());

	while (*w < (uint64_t)ADDERS * per && conf_now_ms() < deadline) {
		struct wimm_event ev[8];

		wimm_poll(p.sctx, ev, 8);
		conf_sleep_us(20);
	}
	for (; started > 0; started--)
		pthread_join(th[started - 1], NULL);
	for (int i = 0; i < ADDERS; i++)
		CHECKF(ad[i].rc == 0, "adder %d: %s", i, ad[i].why);
	CHECK_EQ(*w, (uint64_t)ADDERS * per);
	all = malloc((size_t)ADDERS * per * WORD);
	CHECK(all);
	for (int i = 0; i < ADDERS; i++)
		memcpy(all + (size_t)i * per, ad[i].results, (size_t)per * WORD);
	qsort(all, (size_t)ADDERS * per, WORD, cmp_u64);
	for (uint64_t v = 0; v < (uint64_t)ADDERS * per; v++)
		CHECKF(all[v] == v, "fetched values: position %llu holds %llu",
		       (unsigned long long)v, (unsigned long long)all[v]);
out:
	for (; started > 0; started--)
		pthread_join(th[started - 1], NULL);
	free(all);
	for (int i = 0; i < ADDERS; i++) {
		wimm_conn_delete(&aux[i].c);
		wimm_conn_delete(&aux[i].s);
		wimm_mr_dereg(&ad[i].mr);
		free(ad[i].results);
		wimm_ctx_close(&aux[i].cctx);
	}
	pair_close(&p);
}

/* A fetch-and-add on its way when the peer closes its side: the peer's
 * window goes with its connection, so the answer may never come (shm 1.17
 * drops such a command unanswered, and its answers come in order). The
 * connection given up on it, deleted before any DISCONNECT came (as a log
 * writer does when the server refuses it), must not take this context's
 * later connections down with it: a new one to the same listener gets its
 * atomics and reads answered. */
static void t_atomic_peer_closed(const char *uri)
{
	struct log_capture lc = {{0}, 0};
	struct wimm_ctx_attr cattr = {.log = capture_log, .log_arg = &lc};
	struct wimm_conn_attr sattr = {.window_off = WIN_OFF, .window_len = WIN_LEN};
	struct region *win, *res;
	struct pair p;
	char addr[300];
	int rc;

	if (pair_open_attr(&p, uri, NULL, &cattr))
		goto out;
	win = pair_region(&p, p.sctx, WIN_OFF + WIN_LEN + 256,
			  WIMM_REMOTE_WRITE | WIMM_REMOTE_READ | WIMM_REMOTE_ATOMIC);
	res = pair_region(&p, p.cctx, RESULT_LEN, WIMM_LOCAL);
	CHECK(win && res);
	sattr.window = win->mr;
	if (conf_listen(p.sctx, &sattr, &p.l, addr, sizeof(addr)) ||
	    pair_connect_on(&p, addr, NULL))
		goto out;
	volatile uint64_t *w = word_at(win, WIN_OFF + SIGNAL_OFF);
	rc = wimm_fetch_add(p.c, res->mr, 0, SIGNAL_OFF, 1, 0);
	if (rc == WIMM_E_NOTSUP)
		goto out; /* t_atomic_values checks that NOTSUP is right */
	CHECK_OK(rc);
	if (atomic_done(&p, WIMM_OP_FETCH_ADD))
		goto out;
	/* The server closes; the client posts before it can know. */
	wimm_conn_delete(&p.s);
	rc = wimm_fetch_add(p.c, res->mr, 8, SIGNAL_OFF, 1, 0);
	CHECKF(rc == 0 || rc == WIMM_E_DISCONNECTED, "fetch_add after the peer closed: %s",
	       wimm_err_name(rc));
	/* Only the server's fabric runs (shm: the command meets a key that
	 * is gone); then the client gives up on the connection. */
	drain_events(p.sctx, NULL, 200);
	wimm_conn_delete(&p.c);

	if (pair_connect_on(&p, addr, NULL))
		goto out;
	uint64_t before = *w;
	CHECK_OK(wimm_fetch_add(p.c, res->mr, 16, SIGNAL_OFF, 1, 0));
	if (atomic_done(&p, WIMM_OP_FETCH_ADD))
		goto out;
	CHECK_EQ(result_at(res, 16), before);
	CHECK_EQ(*w, before + 1);
	CHECK_OK(wimm_read(p.c, res->mr, 32, SIGNAL_OFF, WORD, WIMM_F_SIGNAL));
	struct wimm_event ev;

	CHECK_EQ(next_event(p.cctx, p.sctx, &ev, 10000), 1);
	CHECKF(ev.type == WIMM_EV_SEND_DONE && ev.op == WIMM_OP_READ,
	       "expected the read's SEND_DONE, got %s op %d", conf_ev_name(ev.type), (int)ev.op);
	CHECK_EQ(result_at(res, 32), before + 1);
out:
	pair_close(&p);
}

/* Operations that need the peer's answer (a fetch-and-add, a read) and
 * one that does not (a small write-with-imm, which shm completes as it is
 * posted), back to back: every SEND_DONE asked for is reported once, in
 * post order, each result there when its own is. */
struct mixed_count {
	int faa, writes, reads, imms;
	int done, atomics; /* SEND_DONEs so far; a round has a fetch-and-add */
};

/* One look at both sides: 0, or -1 with the failure recorded. */
static int mixed_take(struct pair *p, struct region *res, struct mixed_count *m)
{
	struct wimm_event ev[16];
	int n = wimm_poll(p->cctx, ev, 16);

	for (int i = 0; i < n; i++) {
		CHECKF(ev[i].type == WIMM_EV_SEND_DONE, "client: %s status %s",
		       conf_ev_name(ev[i].type), wimm_err_name(ev[i].status));
		/* Post order: [fetch-and-add,] write-with-imm, read. */
		static const enum wimm_op round[] = {WIMM_OP_FETCH_ADD, WIMM_OP_WRITE_IMM,
						     WIMM_OP_READ};
		int k = m->atomics ? m->done % 3 : 1 + m->done % 2;

		CHECKF(ev[i].op == round[k], "SEND_DONE %d: op %d, posted as op %d", m->done,
		       (int)ev[i].op, (int)round[k]);
		m->done++;
		if (ev[i].op == WIMM_OP_FETCH_ADD) {
			m->faa++;
			CHECKF(result_at(res, 8 * (size_t)m->faa) == (uint64_t)m->faa - 1,
			       "fetch-and-add %d: its result not there with its SEND_DONE", m->faa);
		}
		m->writes += ev[i].op == WIMM_OP_WRITE_IMM;
		m->reads += ev[i].op == WIMM_OP_READ;
	}
	n = wimm_poll(p->sctx, ev, 16);
	for (int i = 0; i < n; i++)
		m->imms += ev[i].type == WIMM_EV_WRITE_IMM;
	return 0;
out:
	return -1;
}

static void t_atomic_mixed(const char *uri)
{
	struct log_capture lc = {{0}, 0};
	struct region *win, *res;
	struct mixed_count m = {0, 0, 0, 0, 0, 0};
	struct pair p;
	enum { ROUNDS = 50 };
	int rc;

	if (atomic_pair(&p, uri, WIMM_REMOTE_WRITE | WIMM_REMOTE_READ | WIMM_REMOTE_ATOMIC, &lc,
			&win, &res))
		goto out;
	/* Without atomics (NOTSUP, checked by t_atomic_values): reads and
	 * writes, which tcp may complete out of order as well. */
	rc = wimm_fetch_add(p.c, res->mr, 0, SIGNAL_OFF, 0, 0);
	int atomics = rc != WIMM_E_NOTSUP;

	m.atomics = atomics;
	if (atomics) {
		CHECK_OK(rc);
		if (atomic_done(&p, WIMM_OP_FETCH_ADD))
			goto out;
	} else {
		*word_at(win, WIN_OFF + SIGNAL_OFF) = ROUNDS;
	}
	int64_t deadline = conf_now_ms() + 20000;

	for (int i = 1; i <= ROUNDS; i++) {
		int want_faa = atomics ? i : 0;

		if (atomics)
			CHECK_OK(wimm_fetch_add(p.c, res->mr, 8 * (size_t)i, SIGNAL_OFF, 1, 0));
		CHECK_OK(wimm_write_imm(p.c, res->mr, 0, 0, 8, (uint32_t)i, WIMM_F_SIGNAL));
		CHECK_OK(wimm_read(p.c, res->mr, 2048 + 8 * (size_t)i, SIGNAL_OFF, WORD, 0));
		while ((m.faa < want_faa || m.writes < i || m.reads < i || m.imms < i) &&
		       conf_now_ms() < deadline)
			if (mixed_take(&p, res, &m))
				goto out;
		CHECKF(m.faa == want_faa && m.writes == i && m.reads == i && m.imms >= i,
		       "round %d: SEND_DONEs of %d fetch-and-adds, %d writes, %d reads; %d "
		       "doorbells",
		       i, m.faa, m.writes, m.reads, m.imms);
		/* The read's bytes are there with its SEND_DONE. */
		CHECK_EQ(result_at(res, 2048 + 8 * (size_t)i), atomics ? (uint64_t)i : ROUNDS);
	}
	CHECK_EQ(m.imms, ROUNDS);
	CHECK_EQ(drain_events(p.cctx, p.sctx, 100), 0);
	CHECK_EQ(*word_at(win, WIN_OFF + SIGNAL_OFF), ROUNDS);
out:
	pair_close(&p);
}

const struct conf_test conf_tests_atomic[] = {
    {"atomic_values", t_atomic_values, 0},
    {"atomic_errors", t_atomic_errors, 0},
    {"atomic_permission", t_atomic_permission, 0},
    {"atomic_concurrent", t_atomic_concurrent, 180},
    {"atomic_peer_closed", t_atomic_peer_closed, 0},
    {"atomic_mixed", t_atomic_mixed, 0},
    {NULL, NULL, 0},
};
