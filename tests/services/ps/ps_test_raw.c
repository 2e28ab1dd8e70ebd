/* ps_test bad_input: a worker that speaks the protocol by hand over a raw wimm
 * connection (ps_internal.h) against `wimm ps serve`: bad hellos, a rank
 * out of range, a second worker of one rank, a wrong window, then pushes
 * naming a shard the server does not hold, another worker, an iteration
 * ahead, and pushes longer and shorter than a shard: every one refused and
 * counted, nothing applied, and an honest worker's sums stay exact.
 * (hostile, a raw libfabric peer, is ps_test_hostile.c.) */
#include <string.h>
#include <unistd.h>

#include "ps_test.h"

#define SHARDS 4
#define SHARD 1024u
#define FLOATS (SHARD / 4)

/* -------------------------------------------------- a raw wimm worker */

struct rawc {
	struct wimm_ctx *ctx;
	struct wimm_conn *c;
	struct wimm_mr *win_mr, *src_mr;
	float win[SHARDS * FLOATS];
	float src[2 * SHARDS * FLOATS];
	unsigned char hello[PS_HELLO_LEN]; /* in-band */
	struct wimm_mr *hello_mr;
	uint32_t latest[SHARDS];
	int have[SHARDS];
};

/* One event for the raw worker: parameters noted; a refusal's reason, or
 * 1 for a disconnect (0: neither). */
static int raw_event(struct rawc *r, const struct wimm_event *ev)
{
	uint32_t v[3];
	if (ev->type == WIMM_EV_DISCONNECT)
		return 1;
	if (ev->type != WIMM_EV_WRITE_IMM)
		return 0;
	if (ps_refusal(ev))
		return ps_refusal(ev);
	wimm_imm_unpack(ps_layout_out(), ev->imm, v);
	if (v[PS_OUT_KIND] == PS_K_PARAMS && v[PS_OUT_SHARD] < SHARDS) {
		r->latest[v[PS_OUT_SHARD]] = v[PS_OUT_ITER];
		r->have[v[PS_OUT_SHARD]] = 1;
	}
	return 0;
}

/* In-band, the hello's answer on c: its first parameters (0) or a refusal
 * (which may be taken after the disconnect that follows it). Every event
 * of a batch is taken: parameters of other shards may follow. */
static int raw_answer(struct rawc *r, struct wimm_conn *c)
{
	struct wimm_event ev[16];
	int64_t until = now_ms() + 20000 * scale();
	int gone = 0, answer = 1;
	while (answer == 1 && now_ms() < until) {
		int n = wimm_wait(r->ctx, ev, 16, WIMM_WAIT_BLOCK, 100);
		for (int i = 0; i < n; i++) {
			int rc = raw_event(r, &ev[i]);
			if (ev[i].conn != c || answer != 1)
				continue;
			if (rc < 0)
				answer = rc;
			else if (!rc && ev[i].type == WIMM_EV_WRITE_IMM)
				answer = 0;
			gone |= rc == 1;
		}
		if (answer == 1 && gone && n == 0)
			answer = WIMM_E_DISCONNECTED;
	}
	return answer == 1 ? WIMM_E_TIMEDOUT : answer;
}

/* Connect as `rank` of `world` with a window of window_len bytes (a bad
 * magic with bad != 0): the result of wimm_connect or, in-band, of the
 * hello. */
static int raw_try(struct rawc *r, int port, uint32_t rank, uint32_t world, size_t window_len,
		   int bad, struct wimm_conn **out)
{
	unsigned char hello[PS_HELLO_LEN];
	char addr[64];
	ps_hello_encode(hello,
			&(struct ps_hello){.role = PS_ROLE_WORKER, .rank = rank, .world = world});
	if (bad)
		hello[0] ^= 0xff;
	snprintf(addr, sizeof(addr), "%s:%d", test_host(), port);
	int inband = ps_hello_inband(r->ctx, inband_hello);
	struct wimm_conn_attr ca = {.window = r->win_mr,
				    .window_len = window_len,
				    .rx_depth = 32,
				    .private_data = inband ? NULL : hello,
				    .private_len = inband ? 0 : PS_HELLO_LEN};
	int rc = wimm_connect(r->ctx, addr, &ca, 10000 * scale(), out);
	if (rc < 0 || !inband)
		return rc;
	memcpy(r->hello, hello, sizeof(hello));
	rc = wimm_send_imm(*out, r->hello_mr, 0, PS_HELLO_LEN, PS_HELLO_IMM, WIMM_F_WAIT);
	return rc < 0 ? rc : raw_answer(r, *out);
}

/* Take events until every shard's parameters are at iteration `iter`. */
static int raw_wait_params(struct rawc *r, uint32_t iter)
{
	struct wimm_event ev[16];
	int64_t until = now_ms() + 20000 * scale();
	for (;;) {
		int all = 1;
		for (int s = 0; s < SHARDS; s++)
			all &= r->have[s] && r->latest[s] == iter;
		if (all)
			return 0;
		if (now_ms() > until)
			return -1;
		int n = wimm_wait(r->ctx, ev, 16, WIMM_WAIT_BLOCK, 100);
		for (int i = 0; i < n; i++)
			if (raw_event(r, &ev[i]) && ev[i].conn == r->c)
				return -1;
	}
}

/* From src at the same offset as dst: a source still being sent is never
 * rewritten. */
static int raw_push(struct rawc *r, uint32_t worker, uint32_t shard, uint32_t iter, size_t dst,
		    size_t len)
{
	return wimm_write_imm(r->c, r->src_mr, dst, dst, len, ps_imm_in(worker, shard, iter),
			      WIMM_F_WAIT);
}

int t_bad_input(void)
{
	static struct rawc r;
	struct proc srv, w0;
	struct wimm_ps_stats st;
	struct wimm_conn *refused = NULL;
	int port = serve_cmd(&srv, "4", "1024", "2", "0", "20000");
	int rc = wimm_ctx_open(fabric, NULL, &r.ctx);
	if (rc == 0)
		rc = wimm_mr_reg(r.ctx, r.win, sizeof(r.win), WIMM_REMOTE_WRITE, &r.win_mr);
	if (rc == 0)
		rc = wimm_mr_reg(r.ctx, r.src, sizeof(r.src), WIMM_LOCAL, &r.src_mr);
	if (rc == 0)
		rc = wimm_mr_reg(r.ctx, r.hello, sizeof(r.hello), WIMM_LOCAL, &r.hello_mr);
	if (rc < 0)
		die("raw worker: %s", wimm_strerror(rc));
	/* Requests refused, each with its reason. */
	static const struct {
		uint32_t rank, world;
		size_t window;
		int bad, want;
	} refusals[] = {
	    {1, 2, sizeof(r.win), 1, WIMM_E_PROTO},	   /* not a ps hello */
	    {5, 2, sizeof(r.win), 0, WIMM_E_RANGE},	   /* no worker 5 of 2 */
	    {1, 3, sizeof(r.win), 0, WIMM_E_INVAL},	   /* another world size */
	    {1, 2, sizeof(r.win) / 2, 0, WIMM_E_NOWINDOW}, /* a window of the wrong size */
	};
	for (size_t k = 0; k < sizeof(refusals) / sizeof(refusals[0]); k++) {
		rc = raw_try(&r, port, refusals[k].rank, refusals[k].world, refusals[k].window,
			     refusals[k].bad, &refused);
		wimm_conn_delete(&refused);
		CHECK(rc == refusals[k].want, "request %zu: %s, want %s", k, wimm_err_name(rc),
		      wimm_err_name(refusals[k].want));
	}
	CHECK((rc = raw_try(&r, port, 1, 2, sizeof(r.win), 0, &r.c)) == 0, "connect: %s",
	      wimm_strerror(rc));
	CHECK(raw_wait_params(&r, 0) == 0, "no first parameters");
	rc = raw_try(&r, port, 1, 2, sizeof(r.win), 0, &refused);
	wimm_conn_delete(&refused);
	CHECK(rc == WIMM_E_BUSY, "a second worker 1: %s", wimm_err_name(rc));

	/* One honest iteration with worker 0, checked by it (--check). */
	workers_from(&w0, 0, 1, port, "1", "0", 1, "20000");
	for (uint32_t s = 0; s < SHARDS; s++) {
		for (uint32_t j = 0; j < FLOATS; j++)
			r.src[s * FLOATS + j] = ps_test_grad(1, s, j, 0);
		CHECK(raw_push(&r, 1, s, 0, s * SHARD, SHARD) == 0, "push");
	}
	CHECK(raw_wait_params(&r, 1) == 0, "no parameters of iteration 1");
	CHECK(wait_all(&w0, 1, 30000) == 0 && w0.status == 0, "worker 0: status %d", w0.status);
	for (uint32_t s = 0; s < SHARDS; s++)
		for (uint32_t j = 0; j < FLOATS; j++)
			CHECK(r.win[s * FLOATS + j] ==
				  ps_test_grad(0, s, j, 0) + ps_test_grad(1, s, j, 0),
			      "shard %u [%u] is not the sum of the two pushes", s, j);

	/* Bad pushes for iteration 1, carrying values that would show (the
	 * honest pushes above have completed: their parameters came back). */
	for (uint32_t j = 0; j < 2 * SHARDS * FLOATS; j++)
		r.src[j] = 1e30f;
	CHECK(raw_push(&r, 1, 900, 1, 0, SHARD) == 0, "push");		 /* a shard not held */
	CHECK(raw_push(&r, 0, 0, 1, 0, SHARD) == 0, "push");		 /* another worker */
	CHECK(raw_push(&r, 1, 1, 1, SHARD, 2 * SHARD) == 0, "push");	 /* longer */
	CHECK(raw_push(&r, 1, 2, 1, 2 * SHARD, SHARD / 2) == 0, "push"); /* shorter */
	CHECK(raw_push(&r, 1, 3, 7, 3 * SHARD, SHARD) == 0, "push");	 /* an iteration ahead */
	int64_t until = now_ms() + 20000 * scale();
	do {
		sleep_ms(50);
		stats_of(port, &st);
	} while (st.bad_shard + st.bad_worker + st.bad_length + st.future < 5 && now_ms() < until);
	CHECK(st.bad_shard == 1 && st.bad_worker == 1 && st.bad_length == 2 && st.future == 1,
	      "bad_shard %llu bad_worker %llu bad_length %llu future %llu",
	      (unsigned long long)st.bad_shard, (unsigned long long)st.bad_worker,
	      (unsigned long long)st.bad_length, (unsigned long long)st.future);
	CHECK(st.applied == SHARDS && st.pushes == 2 * SHARDS && st.refused == 5,
	      "applied %llu pushes %llu refused %llu", (unsigned long long)st.applied,
	      (unsigned long long)st.pushes, (unsigned long long)st.refused);
	/* The command says the same. */
	char port_s[80], out[2048];
	snprintf(port_s, sizeof(port_s), "%s:%d", test_host(), port);
	struct proc stat;
	char *argv[] = {(char *)wimm_bin, "ps", "stat", "-f", (char *)fabric, port_s, NULL};
	spawn(&stat, "stat", argv);
	CHECK(wait_all(&stat, 1, 20000) == 0 && stat.status == 0, "wimm ps stat: %d", stat.status);
	slurp(stat.out, out, sizeof(out));
	CHECK(strstr(out, "bad_shard 1  bad_worker 1  bad_length 2  future 1") &&
		  strstr(out, "applied 4"),
	      "wimm ps stat printed: %s", out);
	wimm_conn_delete(&r.c);
	wimm_mr_dereg(&r.hello_mr);
	wimm_mr_dereg(&r.src_mr);
	wimm_mr_dereg(&r.win_mr);
	wimm_ctx_close(&r.ctx);
	stop_all(&srv, 1);
	return 0;
}
