/* server_connect_cycles (issue 6): 200 connect/send/close cycles of one
 * client process ("cycles") against one running server, without growth of
 * the server's descriptors or heap. In conf_tests_server_scale
 * (conf_server_scale.c). */
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "conf.h"

/* ------------------------------------------- server_connect_cycles */

#define CYCLES 200
#define CYCLES_BASE 10
/* Heap growth allowed from cycle 10 to cycle 200. ofi:tcp's grows in steps
 * of a few hundred bytes that level off (measured: +1 to +4.3 KB by cycle
 * 200, +2 KB more by cycle 3,000): a pool, not a leak per connection. The
 * ~290 B per connection libfabric shm kept (an endpoint enabled per
 * connection) went with one endpoint per context: +0 B here now. */
#define HEAP_TOLERANCE 8192

/* One cycle at the server: a CONNECT accepted, doorbell `i` on it, then its
 * DISCONNECT, and the connection deleted. */
static int serve_cycle(struct wimm_ctx *ctx, struct wimm_listener *l, struct srv_peer *p,
		       uint32_t i)
{
	struct wimm_conn *c = NULL;
	struct wimm_event ev[16];
	int got = 0, down = 0, closed = 0;
	int64_t deadline = conf_now_ms() + (int64_t)(10000 * conf_scale());

	CHECK(srv_peer_cmd(p, 'g') == 0);
	while (!down) {
		if (conf_now_ms() >= deadline) {
			struct wimm_conn_stats cs = {0};
			struct wimm_conn_info ci = {0};

			if (c) {
				wimm_conn_info(c, &ci);
				wimm_conn_stats(c, &cs);
			}
			CHECKF(0,
			       "cycle %u: %s after 10 s%s%s%s (the server's connection: "
			       "connected %d, %llu heartbeats in, %llu out)",
			       i,
			       !c     ? "no connection"
			       : !got ? "no doorbell"
				      : "no DISCONNECT",
			       p->why[0] ? "; client: " : "", p->why,
			       closed ? ", though the client's wimm_conn_close returned 0" : "",
			       ci.connected, (unsigned long long)cs.heartbeats_in,
			       (unsigned long long)cs.heartbeats_out);
		}
		int n = wimm_wait(ctx, ev, 16, WIMM_WAIT_ADAPTIVE, 10);

		CHECKF(n >= 0, "cycle %u: wimm_wait: %s", i, wimm_err_name(n));
		for (int k = 0; k < n; k++) {
			if (ev[k].type == WIMM_EV_CONNECT) {
				if (c)
					continue; /* level-triggered: one at a time here */
				int rc = wimm_accept(l, 0, &c);

				CHECKF(rc == 0 || rc == WIMM_E_AGAIN, "cycle %u: wimm_accept: %s",
				       i, wimm_err_name(rc));
				continue;
			}
			CHECKF(c && ev[k].conn == c, "cycle %u: %s event of another connection", i,
			       conf_ev_name(ev[k].type));
			if (ev[k].type == WIMM_EV_ESTABLISHED)
				continue;
			if (ev[k].type == WIMM_EV_WRITE_IMM) {
				CHECKF(ev[k].imm == i && !got, "cycle %u: doorbell %u", i,
				       ev[k].imm);
				got = 1;
				continue;
			}
			CHECKF(ev[k].type == WIMM_EV_DISCONNECT && got, "cycle %u: %s event (%s)%s",
			       i, conf_ev_name(ev[k].type), wimm_err_name(ev[k].status),
			       got ? "" : " before the doorbell");
			down = 1;
		}
		char line[256];

		unsigned said;

		while (srv_peer_line(p, line, sizeof(line)) == 1)
			if (sscanf(line, "cycle %u", &said) == 1 && said == i)
				closed = 1;
		CHECKF(!p->why[0], "cycle %u: client: %s", i, p->why);
	}
	wimm_conn_delete(&c);
	return 0;
out:
	wimm_conn_delete(&c);
	return -1;
}

void t_server_connect_cycles(const char *uri)
{
	struct srv_peer p = {.pid = -1, .st = -1, .cmd = -1};
	struct wimm_listener *l = NULL;
	struct wimm_ctx *ctx = NULL;
	char addr[300];
	int fds_base = 0;
	size_t heap_base = 0;
	int64_t t0 = 0, t_base = 0;
	int rc;

	if (srv_ctx_open(uri, NULL, &ctx))
		return;
	if (conf_listen(ctx, NULL, &l, addr, sizeof(addr)))
		goto out;
	const char *argv[] = {"cycles", uri, addr, NULL};

	if (srv_peer_spawn(&p, NULL, argv))
		goto out;
	t0 = conf_now_ms();
	for (uint32_t i = 0; i < (uint32_t)CYCLES; i++) {
		if (serve_cycle(ctx, l, &p, i))
			goto out;
		if (i + 1 == CYCLES_BASE) {
			fds_base = count_fds();
			heap_base = mallinfo2().uordblks;
			t_base = conf_now_ms();
		}
	}
	int fds = count_fds();
	size_t heap = mallinfo2().uordblks;
	long long grown = (long long)heap - (long long)heap_base;
	double per = (double)grown / (CYCLES - CYCLES_BASE);
	conf_diag("%d connect/doorbell/close cycles in %lld ms (%.1f ms each after the first "
		  "%d); server after %d: %d fds, heap %zu B; after %d: %d fds, heap %zu B "
		  "(%+lld B, %.1f B per cycle; tolerance %d B)",
		  CYCLES, (long long)(conf_now_ms() - t0),
		  (double)(conf_now_ms() - t_base) / (CYCLES - CYCLES_BASE), CYCLES_BASE,
		  CYCLES_BASE, fds_base, heap_base, CYCLES, fds, heap, grown, per, HEAP_TOLERANCE);
	CHECKF(fds <= fds_base, "the server's descriptors grew from %d to %d in %d cycles",
	       fds_base, fds, CYCLES - CYCLES_BASE);
	CHECKF(grown <= HEAP_TOLERANCE,
	       "the server's heap grew %lld B (%.1f B per cycle) in %d cycles", grown, per,
	       CYCLES - CYCLES_BASE);
out:
	srv_peer_reap(&p);
	wimm_listener_delete(&l);
	if (ctx && (rc = wimm_ctx_close(&ctx)))
		conf_fail(__FILE__, __LINE__, "wimm_ctx_close: %s", wimm_err_name(rc));
}

/* cycles ADDR: on each 'g', connect, ring doorbell i, close; say "cycle i". */
int child_cycles(const char *uri, const char *addr)
{
	struct wimm_ctx *ctx = NULL;
	char what[64];

	if (child_open(uri, 0, &ctx))
		return 1;
	for (uint32_t i = 0; child_cmd(1) == 'g'; i++) {
		struct wimm_conn *c = NULL;

		snprintf(what, sizeof(what), "cycle %u: wimm_connect", i);
		int rc = wimm_connect(ctx, addr, NULL, CONNECT_TIMEOUT_MS, &c);
		if (rc)
			return child_fail(ctx, what, rc);
		snprintf(what, sizeof(what), "cycle %u: wimm_write_imm", i);
		rc = wimm_write_imm(c, NULL, 0, 0, 0, i, WIMM_F_WAIT);
		if (rc)
			return child_fail(ctx, what, rc);
		snprintf(what, sizeof(what), "cycle %u: wimm_conn_close", i);
		rc = wimm_conn_close(&c, 5000);
		if (rc)
			return child_fail(ctx, what, rc);
		child_say("cycle %u", i);
	}
	wimm_ctx_close(&ctx);
	return 0;
}
