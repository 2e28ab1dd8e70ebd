/* The server under load (issue 6), its clients in processes of their own:
 * - server_event_loop: rx_depth 2..8, event arrays smaller and larger than
 *   the window, both peers sending, in every wait mode and in an own epoll
 *   loop: no stall (conf_server_event_loop.c);
 * - server_many_connections: 1,000 connections to one context from several
 *   client processes, each delivering its doorbells (here);
 * - server_connect_cycles: 200 connect/send/close cycles against one
 *   running server without growth of its descriptors or heap
 *   (conf_server_cycles.c).
 * Here: the table of the three, the many-connections test and its client
 * role, and the dispatch of the load tests' child roles. The child
 * plumbing (struct srv_peer, child_*) is in conf_server_peer.c. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "conf.h"

#define SCALE_PROCS 8
#define SCALE_DOORBELLS 10
#define SCALE_MAGIC 0x5743u /* "WC" */
#define SCALE_WAIT_MS ((int)(60000 * conf_scale()))

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

int count_fds(void)
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

int conf_server_scale_child(int argc, char **argv)
{
	if (strcmp(argv[0], "many") == 0 && argc == 5)
		return child_many(argv[1], atoi(argv[2]), atoi(argv[3]), argv[4]);
	if (strcmp(argv[0], "burst") == 0)
		return conf_burst_child(argc, argv);
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
	int rc;

	if (srv_ctx_open(uri, &cattr, &m.ctx))
		goto out;
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

const struct conf_test conf_tests_server_scale[] = {
    {"server_event_loop", t_server_event_loop, 180},
    {"server_many_connections", t_server_many_connections, 150},
    {"server_connect_cycles", t_server_connect_cycles, 90},
    {NULL, NULL, 0},
};
