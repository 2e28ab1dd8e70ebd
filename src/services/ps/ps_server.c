/* The parameter server: its regions, its connections (workers and
 * statistics queries) and its loop. The work on shards is ps_shard.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ps_server.h"

static void *zeroed(size_t len)
{
	/* Anonymous pages: zero, and touched only when used. */
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void unmap(void *p, size_t len)
{
	if (p)
		munmap(p, len);
}

/* ------------------------------------------------------------ statistics */

static void fill_stats(const struct wimm_ps_server *s, struct wimm_ps_stats *out)
{
	*out = s->st;
	out->stale += s->gone_stale;
	out->duplicates += s->gone_dups;
	out->workers_live = 0;
	for (const struct ps_peer *p = s->peers; p; p = p->next) {
		struct wimm_counter_stats cs;
		if (p->role != PS_ROLE_WORKER)
			continue;
		out->workers_live += p->up && !p->dead;
		if (wimm_counter_stats(p->counter, &cs) == 0) {
			out->stale += cs.stale;
			out->duplicates += cs.duplicates;
		}
	}
	out->iteration_min = UINT64_MAX;
	out->iteration_max = 0;
	for (uint32_t i = 0; i < s->a.shards; i++) {
		if (s->shard[i].done < out->iteration_min)
			out->iteration_min = s->shard[i].done;
		if (s->shard[i].done > out->iteration_max)
			out->iteration_max = s->shard[i].done;
	}
}

int wimm_ps_server_stats(const struct wimm_ps_server *s, struct wimm_ps_stats *out)
{
	if (!s || !out)
		return WIMM_E_INVAL;
	fill_stats(s, out);
	return 0;
}

/* ----------------------------------------------------------- connections */

static void drop_peer(struct wimm_ps_server *s, struct ps_peer *p)
{
	struct ps_peer **pp = &s->peers;
	while (*pp && *pp != p)
		pp = &(*pp)->next;
	if (*pp)
		*pp = p->next;
	wimm_conn_delete(&p->conn);
	/* Its writes in flight are abandoned with the connection. */
	ps_sends_done(s, p, 0, 1);
	if (p->role == PS_ROLE_WORKER) {
		struct wimm_counter_stats cs;
		if (wimm_counter_stats(p->counter, &cs) == 0) {
			s->gone_stale += cs.stale;
			s->gone_dups += cs.duplicates;
		}
		wimm_counter_delete(&p->counter);
		if (s->worker[p->rank] == p) {
			s->worker[p->rank] = NULL;
			for (uint32_t i = 0; i < s->a.shards; i++) {
				uint8_t *o = &s->owed[(size_t)p->rank * s->a.shards + i];
				s->shard[i].owed -= *o;
				*o = 0;
			}
		}
		s->st.workers_lost++;
	}
	free(p->fifo);
	free(p);
}

/* Why a worker's request is refused (0: it is not). */
static int check_worker(struct wimm_ps_server *s, const struct ps_hello *h,
			const struct wimm_request_info *ri)
{
	if (h->rank >= s->a.workers)
		return WIMM_E_RANGE;
	if (h->world && h->world != s->a.workers)
		return WIMM_E_INVAL;
	if (s->worker[h->rank])
		return WIMM_E_BUSY;
	if (ri->peer_window_len != s->region)
		return WIMM_E_NOWINDOW;
	return 0;
}

static void refuse(struct wimm_ps_server *s, struct wimm_request **r, int why, const char *who,
		   const char *peer)
{
	s->st.refused++;
	ps_say(s->a.log, s->a.log_arg, WIMM_LOG_WARN, "ps: refused %s from %s: %s", who, peer,
	       wimm_strerror(why));
	wimm_request_reject(r, why);
}

static void take_request(struct wimm_ps_server *s, struct wimm_request *r)
{
	struct wimm_request_info ri;
	struct ps_hello h;
	wimm_request_info(r, &ri);
	int rc = ps_hello_decode(ri.private_data, ri.private_len, &h);
	if (rc < 0 || (h.role != PS_ROLE_WORKER && h.role != PS_ROLE_STAT))
		return refuse(s, &r, rc < 0 ? rc : WIMM_E_PROTO, "a peer", ri.peer_addr);
	if (h.role == PS_ROLE_WORKER && (rc = check_worker(s, &h, &ri)) < 0)
		return refuse(s, &r, rc, "a worker", ri.peer_addr);
	struct ps_peer *p = calloc(1, sizeof(*p));
	if (!p)
		return refuse(s, &r, WIMM_E_NOMEM, "a peer", ri.peer_addr);
	p->role = (int)h.role;
	p->rank = h.rank;
	struct wimm_conn_attr ca = {.user = p, .rx_depth = 4, .sq_depth = 8};
	if (h.role == PS_ROLE_WORKER) {
		struct wimm_counter_attr ka = {
		    .layout = ps_layout_in(), .key_field = "shard", .epoch_field = "iter"};
		rc = wimm_counter_new(s->ctx, &ka, &p->counter);
		if (rc < 0) {
			free(p);
			return refuse(s, &r, rc, "a worker", ri.peer_addr);
		}
		/* Its own receive regions and nothing else. */
		ca.window = s->recv_mr;
		ca.window_off = (size_t)h.rank * s->region;
		ca.window_len = s->region;
		ca.counter = p->counter;
		ca.rx_depth = 2 * s->a.shards + 8;
		ca.sq_depth = 2 * s->a.shards + 8;
	}
	rc = wimm_request_accept(&r, &ca, &p->conn);
	if (rc < 0) {
		s->st.refused++;
		ps_say(s->a.log, s->a.log_arg, WIMM_LOG_WARN, "ps: accept of %s failed: %s",
		       ri.peer_addr, wimm_strerror(rc));
		wimm_counter_delete(&p->counter);
		free(p);
		return;
	}
	p->next = s->peers;
	s->peers = p;
	if (h.role == PS_ROLE_WORKER) {
		s->worker[h.rank] = p;
		ps_say(s->a.log, s->a.log_arg, WIMM_LOG_INFO, "ps: worker %u connected from %s",
		       h.rank, ri.peer_addr);
	}
}

static void take_requests(struct wimm_ps_server *s)
{
	for (;;) {
		struct wimm_request *r = NULL;
		int rc = wimm_listener_request(s->l, 0, &r);
		if (rc == WIMM_E_AGAIN || rc == WIMM_E_TIMEDOUT)
			return;
		if (rc < 0) {
			s->st.refused++;
			continue;
		}
		take_request(s, r);
	}
}

static void send_stats(struct wimm_ps_server *s, struct ps_peer *p)
{
	struct wimm_ps_stats st;
	fill_stats(s, &st);
	uint32_t slot = s->stat_next++ % PS_STAT_RING;
	ps_stats_encode(s->stat_buf[slot], &st);
	if (wimm_send_imm(p->conn, s->stat_mr, (size_t)slot * PS_STAT_LEN, PS_STAT_LEN,
			  ps_imm_out(PS_K_STAT, 0, 0), WIMM_F_WAIT) < 0)
		p->dead = 1;
}

static void handle(struct wimm_ps_server *s, const struct wimm_event *ev)
{
	struct ps_peer *p = ev->user;
	if (ev->type == WIMM_EV_CONNECT) {
		take_requests(s);
		return;
	}
	if (!p || p->dead)
		return;
	switch (ev->type) {
	case WIMM_EV_ESTABLISHED:
		p->up = 1;
		if (p->role == PS_ROLE_STAT)
			send_stats(s, p);
		else
			ps_worker_joined(s, p);
		break;
	case WIMM_EV_WRITE_IMM:
		if (p->role == PS_ROLE_WORKER)
			ps_push(s, p, ev);
		break;
	case WIMM_EV_SEND_DONE:
		ps_sends_done(s, p, ev->op_seq, 0);
		break;
	case WIMM_EV_DISCONNECT:
	case WIMM_EV_ERROR:
		p->dead = 1;
		if (p->role == PS_ROLE_WORKER)
			ps_say(s->a.log, s->a.log_arg,
			       ev->status == WIMM_E_DISCONNECTED ? WIMM_LOG_INFO : WIMM_LOG_WARN,
			       "ps: worker %u gone: %s", p->rank, wimm_strerror(ev->status));
		break;
	default:
		break;
	}
}

int wimm_ps_server_run(struct wimm_ps_server *s, int timeout_ms)
{
	struct wimm_event ev[64];
	if (!s)
		return WIMM_E_INVAL;
	s->applied_now = 0;
	/* Owed writes waiting for credit or a free send buffer: come back soon. */
	int owed = 0;
	for (uint32_t i = 0; i < s->a.shards && !owed; i++)
		owed = s->shard[i].owed != 0;
	if (owed && (timeout_ms < 0 || timeout_ms > 1))
		timeout_ms = 1;
	int n = wimm_wait(s->ctx, ev, 64, WIMM_WAIT_ADAPTIVE, timeout_ms);
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++)
		handle(s, &ev[i]);
	for (struct ps_peer *p = s->peers, *next; p; p = next) {
		next = p->next;
		if (p->dead)
			drop_peer(s, p);
	}
	ps_flush(s);
	ps_stall_check(s);
	return s->applied_now;
}

/* ------------------------------------------------------ life of a server */

static int check_attr(const struct wimm_ps_server_attr *a)
{
	if (!a->shards || a->shards > WIMM_PS_MAX_SHARDS ||
	    a->first_shard > WIMM_PS_MAX_SHARDS - a->shards)
		return WIMM_E_INVAL;
	if (a->shard_size < 4 || a->shard_size > WIMM_PS_MAX_SHARD_SIZE || a->shard_size % 4)
		return WIMM_E_INVAL;
	if (!a->workers || a->workers > WIMM_PS_MAX_WORKERS || a->backups >= a->workers)
		return WIMM_E_INVAL;
	if (a->mode != WIMM_PS_SYNC && a->mode != WIMM_PS_ASYNC)
		return WIMM_E_INVAL;
	if (a->update != WIMM_PS_SUM && a->update != WIMM_PS_AVERAGE && a->update != WIMM_PS_SGD)
		return WIMM_E_INVAL;
	if (a->staleness >= (1u << (WIMM_PS_ITERATION_BITS - 1)))
		return WIMM_E_INVAL;
	return 0;
}

int wimm_ps_server_new(const struct wimm_ps_server_attr *attr, struct wimm_ps_server **out)
{
	struct wimm_ps_server *s;
	int rc;

	if (!out)
		return WIMM_E_INVAL;
	*out = NULL;
	if (!attr || (rc = check_attr(attr)) < 0)
		return WIMM_E_INVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return WIMM_E_NOMEM;
	s->a = *attr;
	s->a.fabric = s->a.addr = NULL;
	s->a.initial = NULL;
	if (!s->a.stall_ms)
		s->a.stall_ms = 2000;
	s->required = attr->mode == WIMM_PS_SYNC ? attr->workers - attr->backups : 1;
	s->nfloats = attr->shard_size / sizeof(float);
	s->region = (size_t)attr->shards * attr->shard_size;
	s->st = (struct wimm_ps_stats){.shards = attr->shards,
				       .first_shard = attr->first_shard,
				       .shard_size = attr->shard_size,
				       .workers = attr->workers,
				       .backups = attr->backups,
				       .mode = attr->mode,
				       .update = attr->update,
				       .staleness = attr->staleness};
	s->next_stall_ms = ps_now_ms() + s->a.stall_ms;

	rc = WIMM_E_NOMEM;
	s->recv = zeroed(s->region * attr->workers);
	s->master = zeroed(s->region);
	s->sum = zeroed(s->region);
	s->copies = zeroed(2 * s->region);
	s->shard = calloc(attr->shards, sizeof(*s->shard));
	s->owed = calloc((size_t)attr->workers * attr->shards, 1);
	if (!s->recv || !s->master || !s->sum || !s->copies || !s->shard || !s->owed)
		goto fail;
	if (attr->initial)
		memcpy(s->master, attr->initial, s->region);

	struct wimm_ctx_attr cattr = {.post_wait_ms = 5000,
				      .liveness_ms = attr->liveness_ms,
				      .log = attr->log,
				      .log_arg = attr->log_arg};
	rc = wimm_ctx_open(attr->fabric ? attr->fabric : "auto", &cattr, &s->ctx);
	if (rc < 0)
		goto fail;
	rc =
	    wimm_mr_reg(s->ctx, s->recv, s->region * attr->workers, WIMM_REMOTE_WRITE, &s->recv_mr);
	if (rc == 0)
		rc = wimm_mr_reg(s->ctx, s->copies, 2 * s->region, WIMM_LOCAL, &s->copies_mr);
	if (rc == 0)
		rc = wimm_mr_reg(s->ctx, s->stat_buf, sizeof(s->stat_buf), WIMM_LOCAL, &s->stat_mr);
	if (rc < 0)
		goto fail;
	rc = wimm_listen(s->ctx, attr->addr ? attr->addr : "0.0.0.0:7490", NULL, &s->l);
	if (rc < 0)
		goto fail;
	*out = s;
	return 0;
fail:
	wimm_ps_server_delete(&s);
	return rc;
}

int wimm_ps_server_port(const struct wimm_ps_server *s)
{
	return s ? wimm_listener_port(s->l) : WIMM_E_INVAL;
}

int wimm_ps_server_delete(struct wimm_ps_server **sp)
{
	struct wimm_ps_server *s = sp ? *sp : NULL;
	if (!s)
		return 0;
	while (s->peers)
		drop_peer(s, s->peers);
	wimm_listener_delete(&s->l);
	wimm_mr_dereg(&s->stat_mr);
	wimm_mr_dereg(&s->copies_mr);
	wimm_mr_dereg(&s->recv_mr);
	wimm_ctx_close(&s->ctx);
	unmap(s->recv, s->region * s->a.workers);
	unmap(s->master, s->region);
	unmap(s->sum, s->region);
	unmap(s->copies, 2 * s->region);
	free(s->shard);
	free(s->owed);
	free(s);
	*sp = NULL;
	return 0;
}
