/* The small server loop of conf_server.c's tests: one context, one
 * listener, a few connections told apart by their conn pointer, every
 * event checked (doorbells in order per connection), served until a
 * condition holds or a child peer says a line. Declared in conf.h. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "conf.h"

/* ------------------------------------------------ a small server loop */

int srv_ctx_open(const char *uri, const struct wimm_ctx_attr *attr, struct wimm_ctx **ctx)
{
	int rc = wimm_ctx_open(uri, attr, ctx);

	if (rc == WIMM_E_NOFABRIC || rc == WIMM_E_NODEV) {
		conf_skip("fabric %s not available here (%s)", uri, wimm_err_name(rc));
		return -1;
	}
	if (rc) {
		conf_fail(__FILE__, __LINE__, "wimm_ctx_open(%s): %s", uri, wimm_err_name(rc));
		return -1;
	}
	return 0;
}

int srv_open(struct srv *s, const char *uri, uint32_t liveness_ms, const char *listen_addr)
{
	struct wimm_ctx_attr attr = {.liveness_ms = liveness_ms, .log = srv_log};

	memset(s, 0, sizeof(*s));
	if (srv_ctx_open(uri, &attr, &s->ctx))
		return -1;
	if (!listen_addr)
		return conf_listen(s->ctx, NULL, &s->l, s->addr, sizeof(s->addr)) ? -1 : 0;
	int rc = wimm_listen(s->ctx, listen_addr, NULL, &s->l);
	if (rc) {
		const char *text = "";

		wimm_provider_error(s->ctx, &text);
		conf_fail(__FILE__, __LINE__, "wimm_listen(%s): %s (%s)", listen_addr,
			  wimm_err_name(rc), text ? text : "");
		return -1;
	}
	char host[64];

	snprintf(host, sizeof(host), "%s", listen_addr);
	char *colon = strrchr(host, ':');
	if (colon)
		*colon = '\0';
	snprintf(s->addr, sizeof(s->addr), "%s:%d", host, wimm_listener_port(s->l));
	return 0;
}

void srv_close(struct srv *s)
{
	for (int i = 0; i < s->n; i++)
		wimm_conn_delete(&s->p[i].c);
	wimm_listener_delete(&s->l);
	if (s->ctx) {
		int rc = wimm_ctx_close(&s->ctx);

		if (rc)
			conf_fail(__FILE__, __LINE__, "wimm_ctx_close: %s", wimm_err_name(rc));
	}
}

static int srv_index(const struct srv *s, const struct wimm_conn *c)
{
	for (int i = 0; i < s->n; i++)
		if (s->p[i].c == c)
			return i;
	return -1;
}

/* One wimm_wait (up to wait_ms) and what it returned. -1 on a failure
 * (recorded). Doorbells must come in order 0, 1, 2 ... per connection. */
static int srv_turn(struct srv *s, int wait_ms)
{
	struct wimm_event ev[32];
	int n = wimm_wait(s->ctx, ev, 32, WIMM_WAIT_ADAPTIVE, wait_ms);

	if (n < 0) {
		conf_fail(__FILE__, __LINE__, "wimm_wait: %s", wimm_err_name(n));
		return -1;
	}
	int64_t now = conf_now_ms();

	for (int i = 0; i < n; i++) {
		int k = srv_index(s, ev[i].conn);

		switch (ev[i].type) {
		case WIMM_EV_CONNECT:
			s->connect_ev_ms = now;
			for (;;) {
				struct wimm_conn *c = NULL;
				int rc = wimm_accept(s->l, 0, &c);

				if (rc == WIMM_E_AGAIN || rc == WIMM_E_TIMEDOUT)
					break;
				if (rc) {
					conf_fail(__FILE__, __LINE__, "wimm_accept: %s",
						  wimm_err_name(rc));
					return -1;
				}
				if (s->n == SRV_MAX) {
					conf_fail(__FILE__, __LINE__,
						  "more connections than peers");
					wimm_conn_delete(&c);
					return -1;
				}
				s->p[s->n].c = c;
				s->p[s->n].accepted_ms = now;
				s->n++;
			}
			break;
		case WIMM_EV_ESTABLISHED:
			if (k < 0)
				break;
			s->p[k].established = 1;
			s->p[k].established_ms = now;
			break;
		case WIMM_EV_WRITE_IMM:
			if (k < 0 || ev[i].imm != (uint32_t)s->p[k].rx) {
				conf_fail(__FILE__, __LINE__,
					  "doorbell %u on connection %d where %llu was due",
					  ev[i].imm, k,
					  (unsigned long long)(k < 0 ? 0 : s->p[k].rx));
				return -1;
			}
			s->p[k].rx++;
			break;
		case WIMM_EV_DISCONNECT:
			if (k < 0)
				break;
			s->p[k].down = 1;
			s->p[k].down_ms = now;
			s->p[k].status = ev[i].status;
			break;
		default:
			conf_fail(__FILE__, __LINE__, "unexpected %s event (%s)",
				  conf_ev_name(ev[i].type), wimm_err_name(ev[i].status));
			return -1;
		}
	}
	return n;
}

int srv_until(struct srv *s, srv_cond cond, void *arg, int timeout_ms)
{
	int64_t deadline = conf_now_ms() + timeout_ms;

	while (!cond(s, arg)) {
		if (conf_now_ms() > deadline)
			return 0;
		if (srv_turn(s, 10) < 0)
			return -1;
	}
	return 1;
}

int cond_rx(struct srv *s, void *arg)
{
	struct rx_goal *g = arg;

	return s->n > g->k && s->p[g->k].rx >= g->n;
}

int cond_down(struct srv *s, void *arg)
{
	int k = *(int *)arg;

	return s->n > k && s->p[k].down;
}

struct line_goal {
	struct srv_peer *peer;
	const char *prefix;
	char line[256];
	int failed;
};

static int cond_line(struct srv *s, void *arg)
{
	struct line_goal *g = arg;
	int rc;

	(void)s;
	while ((rc = srv_peer_line(g->peer, g->line, sizeof(g->line))) == 1)
		if (strncmp(g->line, g->prefix, strlen(g->prefix)) == 0)
			return 1;
	if (rc < 0)
		g->failed = 1;
	return g->failed;
}

/* Serve until the peer says prefix; 0 when it did, else a failure is
 * recorded. */
int srv_expect(struct srv *s, struct srv_peer *peer, const char *prefix, char *line, size_t len,
	       int timeout_ms, const char *who)
{
	struct line_goal g = {.peer = peer, .prefix = prefix};
	int rc = srv_until(s, cond_line, &g, timeout_ms);

	if (rc < 0)
		return -1;
	if (rc == 0 || g.failed) {
		conf_fail(__FILE__, __LINE__, "%s did not say \"%s\" within %d ms%s%s", who, prefix,
			  timeout_ms, peer->why[0] ? ": " : "", peer->why);
		return -1;
	}
	if (line)
		snprintf(line, len, "%s", g.line);
	return 0;
}

int spawn_stream(struct srv_peer *p, const char *netns, const char *uri, const char *addr,
		 unsigned pace_us, uint32_t liveness)
{
	char pace[16], live[16];

	snprintf(pace, sizeof(pace), "%u", pace_us);
	snprintf(live, sizeof(live), "%u", liveness);
	const char *argv[] = {"stream", uri, addr, pace, live, NULL};

	return srv_peer_spawn(p, netns, argv);
}

/* Park the child between two wimm calls where the fabric needs it,
 * serving meanwhile; 0 when parked or not needed. */
int srv_park(struct srv *s, struct srv_peer *peer, const char *uri, const char *who)
{
	if (!srv_needs_park(uri))
		return 0;
	kill(peer->pid, SIGUSR1);
	return srv_expect(s, peer, "parked", NULL, 0, 5000, who);
}
