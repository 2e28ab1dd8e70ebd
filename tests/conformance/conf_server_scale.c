/* The server under load (issue 6), its clients in processes of their own:
 * - server_event_loop: rx_depth 2..8, event arrays smaller and larger than
 *   the window, both peers sending, in every wait mode and in an own epoll
 *   loop: no stall;
 * - server_many_connections: 1,000 connections to one context from several
 *   client processes, each delivering its doorbells;
 * - server_connect_cycles: 200 connect/send/close cycles against one
 *   running server without growth of its descriptors or heap.
 * The child plumbing (struct srv_peer, child_*) is in conf_server.c. */
#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

#include "conf.h"

#define SCALE_PROCS 8
#define SCALE_DOORBELLS 10
#define SCALE_MAGIC 0x5743u /* "WC" */
#define SCALE_WAIT_MS ((int)(60000 * conf_scale()))
#define STALL_MS ((int)(10000 * conf_scale()))

/* Connections of server_many_connections: WIMM_TEST_SCALE_CONNS, else
 * 1,000; 100 with WIMM_TEST_QUICK and on Soft-RoCE (rxe under TCG). */
static int scale_conns(const char *uri)
{
	const char *e = getenv("WIMM_TEST_SCALE_CONNS");

	if (e && atoi(e) > 0)
		return atoi(e);
	if (conf_quick() || strncmp(uri, "verbs:rxe", 9) == 0)
		return 100;
	return 1000;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the DIR's own */
}

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

static void t_server_event_loop(const char *uri)
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

	int rc = wimm_ctx_open(uri, NULL, &ctx);
	if (rc == WIMM_E_NOFABRIC || rc == WIMM_E_NODEV) {
		conf_skip("fabric %s not available here (%s)", uri, wimm_err_name(rc));
		return;
	}
	CHECK_OK(rc);
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
static int child_loop(const char *uri, const char *addr, const char *mode, int rxd, int nev,
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

/* ---------------------------------------------------------- child roles */

struct scale_id {
	uint16_t magic, proc;
	uint32_t idx;
};

static char last_why[128];

/* Take what events there are: none may say a connection failed (-1, with
 * last_why set). */
static int close_requested;

/* Take what events there are: none may say a connection failed (-1, with
 * last_why set). Commands: 'c' close; 'd' + a byte i: say connection i's
 * counters (the test asks when the server dropped it). */
static int child_events(struct wimm_ctx *ctx, struct wimm_event *ev, int n, struct wimm_conn **c,
			int nconn)
{
	int rc = wimm_poll(ctx, ev, n), cmd;

	if (rc < 0) {
		snprintf(last_why, sizeof(last_why), "wimm_poll: %s", wimm_err_name(rc));
		return -1;
	}
	for (int i = 0; i < rc; i++) {
		if (ev[i].type == WIMM_EV_DISCONNECT || ev[i].type == WIMM_EV_ERROR) {
			snprintf(last_why, sizeof(last_why), "a connection failed: %s",
				 wimm_err_name(ev[i].status));
			return -1;
		}
	}
	while ((cmd = child_cmd(0)) != 0) {
		if (cmd == 'c')
			close_requested = 1;
		if (cmd != 'd')
			continue;
		int k = child_cmd(1);
		struct wimm_conn_stats cs = {0};
		struct wimm_conn_info ci = {0};

		if (k < nconn && c[k]) {
			wimm_conn_stats(c[k], &cs);
			wimm_conn_info(c[k], &ci);
		}
		child_say(
		    "stat #%d: connected %d, %llu heartbeats out, %llu in, %llu doorbells out", k,
		    ci.connected, (unsigned long long)cs.heartbeats_out,
		    (unsigned long long)cs.heartbeats_in, (unsigned long long)cs.doorbells_out);
	}
	return 0;
}

/* many PROC NCONN ADDR: open NCONN connections (each telling the server
 * who it is), ring SCALE_DOORBELLS on each, say "sent"; on 'c' close them
 * all, say "closed". */
static int child_many(const char *uri, int proc, int nconn, const char *addr)
{
	struct wimm_conn **c = calloc((size_t)nconn, sizeof(*c));
	struct wimm_ctx *ctx = NULL;
	struct wimm_event ev[64];
	char what[64];
	int rc;

	if (!c)
		return child_fail(NULL, "calloc", WIMM_E_NOMEM);
	if (child_open(uri, 0, &ctx))
		return 1;
	uint64_t t0 = conf_now_us(), slowest = 0;
	int slow_said = 0;

	for (int i = 0; i < nconn; i++) {
		uint64_t t1 = conf_now_us();

		struct scale_id id = {SCALE_MAGIC, (uint16_t)proc, (uint32_t)i};
		struct wimm_conn_attr attr = {.private_data = &id, .private_len = sizeof(id)};
		struct wimm_fabric_limits lim;
		/* verbs carries no private data (its REQ is full): go unnamed. */
		if (wimm_ctx_limits(ctx, &lim) == 0 && lim.private_max < sizeof(id)) {
			attr.private_data = NULL;
			attr.private_len = 0;
		}

		rc = wimm_connect(ctx, addr, &attr, 20000, &c[i]);
		if (rc) {
			struct rlimit rl = {0};

			getrlimit(RLIMIT_NOFILE, &rl);
			snprintf(what, sizeof(what), "connection %d of %d (fds %d of %llu)", i,
				 nconn, count_fds(), (unsigned long long)rl.rlim_cur);
			return child_fail(ctx, what, rc);
		}
		uint64_t took = conf_now_us() - t1;

		if (took > slowest)
			slowest = took;
		/* Heartbeats of this context's other connections wait meanwhile. */
		if (took > 1000000 && slow_said++ < 3)
			child_say("slow %d %llu", i, (unsigned long long)took);
		/* Poll between connects: heartbeats of the earlier ones go out
		 * from poll and wait only (wimm_ctx_attr.liveness_ms). */
		if (child_events(ctx, ev, 64, c, nconn)) {
			child_say("fail after connection %d of %d, %.1f s in (slowest connect "
				  "%.1f ms): %s",
				  i, nconn, (double)(conf_now_us() - t0) / 1e6,
				  (double)slowest / 1e3, last_why);
			return 1;
		}
	}
	child_say("connected %llu %llu", (unsigned long long)(conf_now_us() - t0),
		  (unsigned long long)slowest);
	for (int i = 0; i < nconn; i++) {
		for (uint32_t k = 0; k < SCALE_DOORBELLS; k++) {
			rc = wimm_write_imm(c[i], NULL, 0, 0, 0, k, WIMM_F_WAIT);
			if (rc) {
				snprintf(what, sizeof(what), "doorbell %u of connection %d", k, i);
				return child_fail(ctx, what, rc);
			}
		}
	}
	child_say("sent");
	while (!close_requested) {
		conf_sleep_us(2000);
		if (child_events(ctx, ev, 64, c, nconn)) {
			child_say("fail while idle: %s", last_why);
			return 1;
		}
	}
	for (int i = 0; i < nconn; i++) {
		rc = wimm_conn_close(&c[i], 5000);
		if (rc) {
			snprintf(what, sizeof(what), "closing connection %d", i);
			return child_fail(ctx, what, rc);
		}
	}
	child_say("closed");
	free(c);
	rc = wimm_ctx_close(&ctx);
	return rc ? child_fail(NULL, "wimm_ctx_close", rc) : 0;
}

/* cycles ADDR: on each 'g', connect, ring doorbell i, close; say "cycle i". */
static int child_cycles(const char *uri, const char *addr)
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

int conf_server_scale_child(int argc, char **argv)
{
	if (strcmp(argv[0], "many") == 0 && argc == 5)
		return child_many(argv[1], atoi(argv[2]), atoi(argv[3]), argv[4]);
	if (strcmp(argv[0], "cycles") == 0 && argc == 3)
		return child_cycles(argv[1], argv[2]);
	if (strcmp(argv[0], "loop") == 0 && argc == 7)
		return child_loop(argv[1], argv[2], argv[3], atoi(argv[4]), atoi(argv[5]),
				  (uint32_t)atol(argv[6]));
	return 2;
}

/* ----------------------------------------- server_many_connections */

struct many {
	struct srv_peer *peers;
	struct wimm_ctx *ctx;
	struct wimm_listener *l;
	int total, per;
	struct wimm_conn **conn;
	uint32_t *rx;
	int64_t *acc_ms, last_connect_ms;
	unsigned char *est;
	int requests, accepted, established, disconnects, doorbells;
	int closing;
	uint64_t slowest_accept_us, longest_turn_us, last_turn_us;
};

/* One request per CONNECT event, then the loop turns (heartbeats,
 * doorbells); CONNECT is level-triggered, the rest come next turn. (On
 * ofi:shm one wimm_request_accept takes up to ~400 ms here: eight in a row
 * kept the context from polling long enough that its idle connections were
 * dropped for silence.) */
#define ACCEPT_BURST 1

static int many_accept(struct many *m)
{
	for (int b = 0; b < ACCEPT_BURST; b++) {
		struct wimm_request *r = NULL;
		struct wimm_request_info info;
		int rc = wimm_listener_request(m->l, 0, &r);

		if (rc == WIMM_E_AGAIN || rc == WIMM_E_TIMEDOUT)
			return 0;
		CHECKF(rc == 0, "wimm_listener_request after %d requests: %s", m->requests,
		       wimm_err_name(rc));
		m->requests++;
		CHECK_OK(wimm_request_info(r, &info));
		struct scale_id id;

		struct wimm_fabric_limits lim;
		CHECK_OK(wimm_ctx_limits(m->ctx, &lim));
		int k;
		if (lim.private_max < sizeof(id)) {
			/* Unnamed (verbs): the next free place, in accept order. */
			CHECKF(info.private_len == 0, "request with %u bytes of private data",
			       info.private_len);
			for (k = 0; k < m->total && m->conn[k]; k++)
				;
			CHECKF(k < m->total, "more requests than clients (%d)", m->total);
		} else {
			CHECKF(info.private_len == sizeof(id),
			       "request with %u bytes of private data", info.private_len);
			memcpy(&id, info.private_data, sizeof(id));
			k = (int)id.proc * m->per + (int)id.idx;
			CHECKF(id.magic == SCALE_MAGIC && id.idx < (uint32_t)m->per &&
				   k < m->total && !m->conn[k],
			       "bad or repeated client id %u/%u", id.proc, id.idx);
		}
		struct wimm_conn_attr attr = {.user = (void *)(uintptr_t)(k + 1)};

		uint64_t ta = conf_now_us();

		rc = wimm_request_accept(&r, &attr, &m->conn[k]);
		ta = conf_now_us() - ta;
		if (ta > m->slowest_accept_us)
			m->slowest_accept_us = ta;
		if (rc) {
			const char *text = "";
			struct wimm_ctx_stats st = {0};

			wimm_provider_error(m->ctx, &text);
			wimm_ctx_stats(m->ctx, &st);
			conf_fail(__FILE__, __LINE__,
				  "accepting connection %d (%d accepted): %s (%s; CQ capacity %u, "
				  "reserved %u; %d fds)",
				  k, m->accepted, wimm_err_name(rc), text ? text : "",
				  st.cq_capacity, st.cq_reserved, count_fds());
			goto out;
		}
		m->acc_ms[k] = conf_now_ms();
		m->accepted++;
	}
	return 0;
out:
	return -1;
}

/* What the client's side of its connection idx says (a diagnostic). */
static void ask_client(struct srv_peer *p, int idx)
{
	char line[256];

	if (srv_peer_cmd(p, 'd') || srv_peer_cmd(p, (char)idx))
		return;
	for (int64_t end = conf_now_ms() + 1000; conf_now_ms() < end;) {
		int rc = srv_peer_line(p, line, sizeof(line));

		if (rc < 0)
			return;
		if (rc == 1 && strncmp(line, "stat ", 5) == 0) {
			conf_diag("its client: %s", line + 5);
			return;
		}
		if (rc == 0)
			conf_sleep_us(2000);
	}
}

/* The slowest wimm_connect a client reported. */
static unsigned long long slowest_connect_us;

static int many_turn(struct many *m)
{
	struct wimm_event ev[64];
	uint64_t now = conf_now_us();

	/* How long the context went without a poll (accepting meanwhile). */
	if (m->last_turn_us && now - m->last_turn_us > m->longest_turn_us)
		m->longest_turn_us = now - m->last_turn_us;
	int n = wimm_wait(m->ctx, ev, 64, WIMM_WAIT_ADAPTIVE, 10);

	m->last_turn_us = conf_now_us();
	CHECKF(n >= 0, "wimm_wait: %s", wimm_err_name(n));
	for (int i = 0; i < n; i++) {
		int k = (int)(uintptr_t)ev[i].user - 1;

		switch (ev[i].type) {
		case WIMM_EV_CONNECT:
			m->last_connect_ms = conf_now_ms();
			if (many_accept(m))
				goto out;
			break;
		case WIMM_EV_ESTABLISHED:
			if (k >= 0 && k < m->total)
				m->est[k] = 1;
			m->established++;
			break;
		case WIMM_EV_WRITE_IMM:
			CHECKF(k >= 0 && k < m->total && ev[i].imm == m->rx[k] &&
				   ev[i].imm < SCALE_DOORBELLS,
			       "doorbell %u on connection %d", ev[i].imm, k);
			m->rx[k]++;
			m->doorbells++;
			break;
		case WIMM_EV_DISCONNECT:
			if (!m->closing) {
				int ok = k >= 0 && k < m->total;
				struct wimm_conn_stats cs = {0};

				if (ok)
					wimm_conn_stats(m->conn[k], &cs);
				conf_diag("connection %d: %llu doorbells and %llu heartbeats in, "
					  "%llu heartbeats and %llu credit returns out",
					  k, (unsigned long long)cs.doorbells_in,
					  (unsigned long long)cs.heartbeats_in,
					  (unsigned long long)cs.heartbeats_out,
					  (unsigned long long)cs.credit_returns);
				if (ok)
					ask_client(&m->peers[k / m->per], k % m->per);
				/* A request waiting without a CONNECT event? */
				struct wimm_request *r = NULL;
				int64_t t_req = conf_now_ms();
				int rq = wimm_listener_request(m->l, 100, &r);

				conf_diag("wimm_listener_request(100 ms) now: %s after %lld ms "
					  "(the last CONNECT event %lld ms ago)",
					  rq ? wimm_err_name(rq) : "a request",
					  (long long)(conf_now_ms() - t_req),
					  (long long)(t_req - m->last_connect_ms));
				if (r)
					wimm_request_reject(&r, WIMM_E_REFUSED);

				conf_fail(__FILE__, __LINE__,
					  "connection %d (client process %d, #%d) dropped before "
					  "the clients closed: %s, %lld ms after it was accepted "
					  "(%s); %d of %d accepted by then (slowest "
					  "wimm_request_accept %.1f ms, longest time between two "
					  "polls %.1f ms, slowest wimm_connect %.1f ms)",
					  k, k / m->per, k % m->per, wimm_err_name(ev[i].status),
					  ok ? (long long)(conf_now_ms() - m->acc_ms[k]) : -1LL,
					  ok && m->est[k] ? "ESTABLISHED" : "never ESTABLISHED",
					  m->accepted, m->total, (double)m->slowest_accept_us / 1e3,
					  (double)m->longest_turn_us / 1e3,
					  (double)slowest_connect_us / 1e3);
				goto out;
			}
			CHECKF(k >= 0 && k < m->total && m->conn[k], "DISCONNECT of connection %d",
			       k);
			wimm_conn_delete(&m->conn[k]);
			m->disconnects++;
			break;
		default:
			CHECKF(0, "unexpected %s event on connection %d (%s)",
			       conf_ev_name(ev[i].type), k, wimm_err_name(ev[i].status));
		}
	}
	return 0;
out:
	return -1;
}

/* Collect the children's lines: how many said "sent" and "closed"; a
 * child that fails, or ends before it closed, fails the test. */
static int many_lines(struct srv_peer *p, int np, int *said_sent, int *said_closed,
		      unsigned char *state)
{
	char line[256];

	for (int i = 0; i < np; i++) {
		int rc;

		while ((rc = srv_peer_line(&p[i], line, sizeof(line))) == 1) {
			unsigned long long all_us, max_us;

			int idx;

			if (sscanf(line, "connected %llu %llu", &all_us, &max_us) == 2 &&
			    max_us > slowest_connect_us)
				slowest_connect_us = max_us;
			if (sscanf(line, "slow %d %llu", &idx, &max_us) == 2) {
				conf_diag("client process %d: wimm_connect #%d took %.1f ms (its "
					  "other connections send no heartbeat meanwhile)",
					  i, idx, (double)max_us / 1e3);
				if (max_us > slowest_connect_us)
					slowest_connect_us = max_us;
			}
			if (strcmp(line, "sent") == 0 && !(state[i] & 1)) {
				state[i] |= 1;
				(*said_sent)++;
			} else if (strcmp(line, "closed") == 0 && !(state[i] & 2)) {
				state[i] |= 2;
				(*said_closed)++;
			}
		}
		if (p[i].why[0]) {
			conf_fail(__FILE__, __LINE__, "client process %d: %s", i, p[i].why);
			return -1;
		}
		if (rc < 0 && !(state[i] & 2)) {
			conf_fail(__FILE__, __LINE__, "client process %d ended (exit %d)", i,
				  srv_peer_exit(&p[i], 1000));
			return -1;
		}
	}
	return 0;
}

static void t_server_many_connections(const char *uri)
{
	struct srv_peer p[SCALE_PROCS];
	struct many m = {0};
	char addr[300];
	int np = 0, sent = 0, closed = 0;
	unsigned char state[SCALE_PROCS] = {0};

	for (int i = 0; i < SCALE_PROCS; i++)
		p[i] = (struct srv_peer){.pid = -1, .st = -1, .cmd = -1};
	m.peers = p;
	m.total = scale_conns(uri);
	int procs = m.total < SCALE_PROCS ? m.total : SCALE_PROCS;

	m.per = (m.total + procs - 1) / procs;
	m.conn = calloc((size_t)m.total, sizeof(*m.conn));
	m.rx = calloc((size_t)m.total, sizeof(*m.rx));
	m.acc_ms = calloc((size_t)m.total, sizeof(*m.acc_ms));
	m.est = calloc((size_t)m.total, 1);
	CHECK(m.conn && m.rx && m.acc_ms && m.est);
	/* The test's own limit, not the library's business. */
	srv_raise_nofile();
	struct rlimit rl;

	CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	CHECKF(rl.rlim_cur >= (rlim_t)(2 * m.total + 64),
	       "RLIMIT_NOFILE %llu (hard limit) is below the %d descriptors %d connections "
	       "may need",
	       (unsigned long long)rl.rlim_cur, 2 * m.total + 64, m.total);
	struct wimm_ctx_attr cattr = {.log = srv_log};
	int rc = wimm_ctx_open(uri, &cattr, &m.ctx);

	if (rc == WIMM_E_NOFABRIC || rc == WIMM_E_NODEV) {
		conf_skip("fabric %s not available here (%s)", uri, wimm_err_name(rc));
		goto out;
	}
	CHECK_OK(rc);
	if (conf_listen(m.ctx, NULL, &m.l, addr, sizeof(addr)))
		goto out;
	int fds0 = count_fds();
	int64_t t0 = conf_now_ms();

	for (np = 0; np < procs; np++) {
		char proc[8], nconn[8];
		int n = m.total - np * m.per < m.per ? m.total - np * m.per : m.per;

		snprintf(proc, sizeof(proc), "%d", np);
		snprintf(nconn, sizeof(nconn), "%d", n);
		const char *argv[] = {"many", uri, proc, nconn, addr, NULL};

		if (srv_peer_spawn(&p[np], NULL, argv))
			goto out;
	}
	int64_t deadline = conf_now_ms() + SCALE_WAIT_MS, t_est = 0;

	while (m.established < m.total || m.doorbells < m.total * SCALE_DOORBELLS || sent < procs) {
		CHECKF(conf_now_ms() < deadline,
		       "after %d ms: %d requests, %d accepted, %d established of %d; %d of %d "
		       "doorbells; %d of %d clients done",
		       SCALE_WAIT_MS, m.requests, m.accepted, m.established, m.total, m.doorbells,
		       m.total * SCALE_DOORBELLS, sent, procs);
		if (many_turn(&m) || many_lines(p, np, &sent, &closed, state))
			goto out;
		if (!t_est && m.established == m.total)
			t_est = conf_now_ms();
	}
	int64_t t1 = conf_now_ms();
	struct wimm_ctx_stats st;

	CHECK_OK(wimm_ctx_stats(m.ctx, &st));
	conf_diag("%d connections from %d processes: all established after %lld ms (%.0f/s, "
		  "slowest wimm_connect %.1f ms, wimm_request_accept %.1f ms, longest time "
		  "between two polls %.1f ms), %d doorbells after %lld ms; server: %d more fds, "
		  "CQ capacity %u (reserved %u)",
		  m.total, procs, (long long)(t_est - t0),
		  m.total * 1000.0 / (double)(t_est - t0 + 1), (double)slowest_connect_us / 1e3,
		  (double)m.slowest_accept_us / 1e3, (double)m.longest_turn_us / 1e3, m.doorbells,
		  (long long)(t1 - t0), count_fds() - fds0, st.cq_capacity, st.cq_reserved);
	CHECK_EQ(m.requests, m.total);
	CHECK_EQ(st.conns_open, m.total);
	for (int k = 0; k < m.total; k++)
		CHECKF(m.rx[k] == SCALE_DOORBELLS, "connection %d: %u doorbells", k, m.rx[k]);

	/* The clients close: as many DISCONNECTs. */
	m.closing = 1;
	for (int i = 0; i < procs; i++)
		CHECK(srv_peer_cmd(&p[i], 'c') == 0);
	deadline = conf_now_ms() + SCALE_WAIT_MS;
	while (m.disconnects < m.total) {
		CHECKF(conf_now_ms() < deadline, "after %d ms: %d of %d DISCONNECTs", SCALE_WAIT_MS,
		       m.disconnects, m.total);
		if (many_turn(&m) || many_lines(p, np, &sent, &closed, state))
			goto out;
	}
	conf_diag("%d DISCONNECTs %lld ms after the clients were told to close", m.disconnects,
		  (long long)(conf_now_ms() - t1));
	for (int i = 0; i < procs; i++) {
		int ex = srv_peer_exit(&p[i], 10000);

		CHECKF(ex == 0, "client process %d: exit %d%s%s", i, ex, p[i].why[0] ? ": " : "",
		       p[i].why);
	}
	CHECK_OK(wimm_ctx_stats(m.ctx, &st));
	CHECK_EQ(st.conns_open, 0);
out:
	for (int i = 0; i < np; i++)
		srv_peer_reap(&p[i]);
	if (m.conn)
		for (int k = 0; k < m.total; k++)
			wimm_conn_delete(&m.conn[k]);
	wimm_listener_delete(&m.l);
	if (m.ctx && (rc = wimm_ctx_close(&m.ctx)))
		conf_fail(__FILE__, __LINE__, "wimm_ctx_close: %s", wimm_err_name(rc));
	free(m.conn);
	free(m.rx);
	free(m.acc_ms);
	free(m.est);
}

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

static void t_server_connect_cycles(const char *uri)
{
	struct srv_peer p = {.pid = -1, .st = -1, .cmd = -1};
	struct wimm_listener *l = NULL;
	struct wimm_ctx *ctx = NULL;
	char addr[300];
	int fds_base = 0;
	size_t heap_base = 0;
	int64_t t0 = 0, t_base = 0;

	int rc = wimm_ctx_open(uri, NULL, &ctx);
	if (rc == WIMM_E_NOFABRIC || rc == WIMM_E_NODEV) {
		conf_skip("fabric %s not available here (%s)", uri, wimm_err_name(rc));
		return;
	}
	CHECK_OK(rc);
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

const struct conf_test conf_tests_server_scale[] = {
    {"server_event_loop", t_server_event_loop, 180},
    {"server_many_connections", t_server_many_connections, 150},
    {"server_connect_cycles", t_server_connect_cycles, 90},
    {NULL, NULL, 0},
};
