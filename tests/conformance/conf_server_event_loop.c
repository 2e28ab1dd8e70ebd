/* server_event_loop (issue 6): rx_depth 2..8, event arrays smaller and
 * larger than the window, both peers sending, in every wait mode and in an
 * own epoll loop: no stall. The test's side and its client's ("loop", a
 * process of its own) run the same loop. In conf_tests_server_scale
 * (conf_server_scale.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "conf.h"

#define STALL_MS ((int)(10000 * conf_scale()))

/* --------------------------------------------------- server_event_loop */

/* Both sides: ring `count` doorbells and take the peer's `count`, waiting
 * in `mode` ("spin", "block", "adaptive", "epoll": own epoll loop on
 * wimm_ctx_fd after wimm_ctx_arm returned 0) with an event array of nev;
 * then close gracefully. No progress for STALL_MS is a stall. A side that
 * has sent everything sleeps up to STALL_MS at a time, so a lost wake-up
 * (or receive slots never handed back) is a stall, not a slow pass. */
static int loop_run(struct wimm_ctx *ctx, struct wimm_conn **c, const char *mode, int nev,
		    uint32_t count, const char *side, char *why, size_t why_len)
{
	struct wimm_event ev[16];
	uint32_t sent = 0, got = 0;
	int64_t last = conf_now_ms();
	int epfd = -1, fd = -1, ret = -1, m;

	if (strcmp(mode, "spin") == 0)
		m = WIMM_WAIT_SPIN;
	else if (strcmp(mode, "block") == 0)
		m = WIMM_WAIT_BLOCK;
	else if (strcmp(mode, "adaptive") == 0)
		m = WIMM_WAIT_ADAPTIVE;
	else
		m = -1;
	if (nev > 16)
		nev = 16;
	if (m < 0) {
		struct epoll_event e = {.events = EPOLLIN};

		if (wimm_ctx_fd(ctx, &fd) || (epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
		    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e)) {
			snprintf(why, why_len, "%s: no epoll on wimm_ctx_fd", side);
			goto out;
		}
	}
	while (sent < count || got < count) {
		uint32_t before = sent + got;
		int rc = 0, n;

		while (sent < count && (rc = wimm_write_imm(*c, NULL, 0, 0, 0, sent, 0)) == 0)
			sent++;
		if (rc && rc != WIMM_E_AGAIN) {
			snprintf(why, why_len, "%s: write_imm #%u: %s", side, sent,
				 wimm_err_name(rc));
			goto out;
		}
		if (sent == count && got == count)
			break;
		/* A credit coming back is no event: wimm_wait would sleep on
		 * until its timeout, so out of credit it looks again after 1 ms.
		 * The fd, though, wakes a sender out of credit (wimm_ctx_fd): the
		 * own loop always sleeps up to STALL_MS, as does a side with
		 * nothing left to send. */
		int sleep_ms = sent < count && m >= 0 ? 1 : STALL_MS;

		if (m >= 0) {
			n = wimm_wait(ctx, ev, nev, (enum wimm_wait_mode)m, sleep_ms);
		} else {
			rc = wimm_ctx_arm(ctx);
			if (rc == 0) {
				struct epoll_event e;

				if (epoll_wait(epfd, &e, 1, sleep_ms) < 0 && errno != EINTR) {
					snprintf(why, why_len, "%s: epoll_wait: %s", side,
						 strerror(errno));
					goto out;
				}
			} else if (rc != WIMM_E_AGAIN) {
				snprintf(why, why_len, "%s: wimm_ctx_arm: %s", side,
					 wimm_err_name(rc));
				goto out;
			}
			n = wimm_poll(ctx, ev, nev);
		}
		if (n < 0 || n > nev) {
			snprintf(why, why_len, "%s: wait/poll: %d (%s) with an array of %d", side,
				 n, n < 0 ? wimm_err_name(n) : "more than asked for", nev);
			goto out;
		}
		for (int i = 0; i < n; i++) {
			/* The peer closes once it has everything of ours. */
			if (ev[i].type == WIMM_EV_DISCONNECT && got == count && sent == count)
				break;
			if (ev[i].type != WIMM_EV_WRITE_IMM || ev[i].imm != got) {
				snprintf(why, why_len,
					 "%s: %s event (imm %u, %s) where doorbell %u was due (%u "
					 "of %u sent)",
					 side, conf_ev_name(ev[i].type), ev[i].imm,
					 wimm_err_name(ev[i].status), got, sent, count);
				goto out;
			}
			got++;
		}
		int64_t now = conf_now_ms();

		if (sent + got != before)
			last = now;
		else if (now - last > STALL_MS) {
			snprintf(why, why_len,
				 "%s: stall: no progress for %lld ms, %u of %u sent, %u of %u "
				 "received",
				 side, (long long)(now - last), sent, count, got, count);
			goto out;
		}
	}
	/* The peer's last doorbell is here, ours may still be in flight:
	 * close gracefully (the peer may have closed already). */
	int rc = wimm_conn_close(c, STALL_MS);

	if (rc && rc != WIMM_E_DISCONNECTED) {
		snprintf(why, why_len, "%s: wimm_conn_close: %s", side, wimm_err_name(rc));
		goto out;
	}
	ret = 0;
out:
	if (epfd >= 0)
		close(epfd);
	return ret;
}

void t_server_event_loop(const char *uri)
{
	static const int depths[] = {2, 3, 4, 8}, arrays[] = {1, 16};
	static const char *const modes[] = {"spin", "block", "adaptive", "epoll"};
	/* Soft-RoCE under TCG is slow: fewer there, as with WIMM_TEST_QUICK. */
	const uint32_t count = conf_quick() || strncmp(uri, "verbs:rxe", 9) == 0 ? 300 : 1000;
	struct srv_peer p = {.pid = -1, .st = -1, .cmd = -1};
	struct wimm_listener *l = NULL;
	struct wimm_ctx *ctx = NULL;
	struct wimm_conn *c = NULL;
	char addr[300], why[300], combo[80];
	int64_t slowest = 0, total = 0;
	int combos = 0;
	char slowest_combo[80] = "";
	/* To rerun one combination: e.g. "block, rx_depth 4, 16". */
	const char *only = getenv("WIMM_TEST_EVENT_LOOP");
	int rc;

	if (srv_ctx_open(uri, NULL, &ctx))
		return;
	for (size_t mi = 0; mi < sizeof(modes) / sizeof(modes[0]); mi++) {
		for (size_t di = 0; di < sizeof(depths) / sizeof(depths[0]); di++) {
			for (size_t ai = 0; ai < sizeof(arrays) / sizeof(arrays[0]); ai++) {
				struct wimm_conn_attr attr = {.rx_depth = (uint32_t)depths[di]};
				char rxd[8], nev[8], cnt[16];

				snprintf(combo, sizeof(combo), "%s, rx_depth %d, %d-event array",
					 modes[mi], depths[di], arrays[ai]);
				if (only && !strstr(combo, only))
					continue;
				snprintf(rxd, sizeof(rxd), "%d", depths[di]);
				snprintf(nev, sizeof(nev), "%d", arrays[ai]);
				snprintf(cnt, sizeof(cnt), "%u", count);
				if (conf_listen(ctx, &attr, &l, addr, sizeof(addr)))
					goto out;
				const char *argv[] = {"loop", uri, addr, modes[mi],
						      rxd,    nev, cnt,	 NULL};
				int64_t t0 = conf_now_ms();

				if (srv_peer_spawn(&p, NULL, argv))
					goto out;
				rc = wimm_accept(l, CONNECT_TIMEOUT_MS, &c);
				CHECKF(rc == 0, "%s: wimm_accept: %s", combo, wimm_err_name(rc));
				CHECKF(loop_run(ctx, &c, modes[mi], arrays[ai], count, "server",
						why, sizeof(why)) == 0,
				       "%s: %s", combo, why);
				int st = srv_peer_exit(&p, STALL_MS + 5000);
				char line[256];

				while (srv_peer_line(&p, line, sizeof(line)) == 1)
					;
				CHECKF(st == 0, "%s: the client %s%s%s", combo,
				       st < 0 ? "did not exit" : "failed", p.why[0] ? ": " : "",
				       p.why);
				int64_t ms = conf_now_ms() - t0;

				total += ms;
				combos++;
				if (ms > slowest) {
					slowest = ms;
					snprintf(slowest_combo, sizeof(slowest_combo), "%s", combo);
				}
				srv_peer_reap(&p);
				wimm_listener_delete(&l);
			}
		}
		conf_diag("%s: done, %lld ms so far", modes[mi], (long long)total);
	}
	conf_diag("%d combinations x %u doorbells each way: %lld ms in all, slowest %lld ms (%s)",
		  combos, count, (long long)total, (long long)slowest, slowest_combo);
	CHECKF(combos > 0, "WIMM_TEST_EVENT_LOOP=\"%s\" matches no combination", only);
out:
	srv_peer_reap(&p);
	wimm_conn_delete(&c);
	wimm_listener_delete(&l);
	if (ctx) {
		rc = wimm_ctx_close(&ctx);
		if (rc)
			conf_fail(__FILE__, __LINE__, "wimm_ctx_close: %s", wimm_err_name(rc));
	}
}

/* The peer of server_event_loop: the same loop as the test's side. */
int child_loop(const char *uri, const char *addr, const char *mode, int rxd, int nev,
	       uint32_t count)
{
	struct wimm_conn_attr attr = {.rx_depth = (uint32_t)rxd};
	struct wimm_ctx *ctx = NULL;
	struct wimm_conn *c = NULL;
	char why[300];

	if (child_open(uri, 0, &ctx))
		return 1;
	int rc = wimm_connect(ctx, addr, &attr, CONNECT_TIMEOUT_MS, &c);
	if (rc)
		return child_fail(ctx, "wimm_connect", rc);
	if (loop_run(ctx, &c, mode, nev, count, "client", why, sizeof(why))) {
		child_say("fail %s", why);
		return 1;
	}
	child_say("done");
	wimm_conn_delete(&c);
	wimm_ctx_close(&ctx);
	return 0;
}
