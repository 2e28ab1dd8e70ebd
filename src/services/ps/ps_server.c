/* The parameter server: its regions, its connections (workers and
 * statistics queries) and its loop. The work on shards is ps_shard.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ps_server.h"
#include "svc_loop.h"

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

static void send_stats(struct wimm_ps_server *s, struct ps_peer *p);

static void drop_peer(struct wimm_ps_server *s, struct ps_peer *p)
{
	struct ps_peer **pp = &s->peers;
	while (*pp && *pp != p)
		pp = &(*pp)->next;
	if (*pp)
		*pp = p->next;
	if (p->refused)
		wimm_conn_close(&p->conn, 200); /* the refusal doorbell first */
	else
		wimm_conn_delete(&p->conn);
	if (p->has_window)
		s->slot_used[p->slot] = 0;
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

/* Why a worker's hello is refused (0: it is not). */
static int check_worker(struct wimm_ps_server *s, const struct ps_hello *h)
{
	if (h->rank >= s->a.workers)
		return WIMM_E_RANGE;
	if (h->world && h->world != s->a.workers)
		return WIMM_E_INVAL;
	if (s->worker[h->rank])
		return WIMM_E_BUSY;
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

/* A connected peer's hello refused: the reason in a doorbell once the
 * connection is up, then the close (gentle, so that the doorbell arrives
 * first). */
static void refuse_inband(struct wimm_ps_server *s, struct ps_peer *p, int why)
{
	if (!p->refuse_why) {
		s->st.refused++;
		ps_say(s->a.log, s->a.log_arg, WIMM_LOG_WARN,
		       "ps: refused a peer's in-band hello: %s", wimm_strerror(why));
		p->refuse_why = why;
	}
	if (!p->up)
		return;
	/* Signaled: the peer is dropped once it has the reason (SEND_DONE),
	 * or when hello_by_ms passes. */
	p->hello_by_ms = ps_now_ms() + PS_REFUSAL_WAIT_MS;
	p->refused =
	    wimm_write_imm(p->conn, NULL, 0, 0, 0, ps_imm_out(PS_K_REFUSED, (uint32_t)-why, 0),
			   WIMM_F_SIGNAL) == 0;
	if (p->refused)
		p->ops++;
	else
		p->dead = 1;
}

/* A free receive region for a worker's window, its rank's when known and
 * free (the layout a reader of the memory expects); -1: none. */
static int take_slot(struct wimm_ps_server *s, const struct ps_hello *h)
{
	if (h && h->rank < s->a.workers && !s->slot_used[h->rank]) {
		s->slot_used[h->rank] = 1;
		return (int)h->rank;
	}
	for (uint32_t i = 0; i < s->a.workers; i++)
		if (!s->slot_used[i]) {
			s->slot_used[i] = 1;
			return (int)i;
		}
	return -1;
}

/* The peer is a worker of rank h->rank from now on. */
static void become_worker(struct wimm_ps_server *s, struct ps_peer *p, const struct ps_hello *h,
			  const char *from)
{
	p->role = PS_ROLE_WORKER;
	p->rank = h->rank;
	s->worker[h->rank] = p;
	ps_say(s->a.log, s->a.log_arg, WIMM_LOG_INFO, "ps: worker %u connected%s%s", h->rank,
	       from ? " from " : "", from ? from : "");
}

/* What an established peer that has said hello is owed: a worker its
 * parameters, a query its answer. */
static void peer_ready(struct wimm_ps_server *s, struct ps_peer *p)
{
	if (p->refuse_why)
		refuse_inband(s, p, p->refuse_why);
	else if (p->role == PS_ROLE_STAT)
		send_stats(s, p);
	else if (p->role == PS_ROLE_WORKER)
		ps_worker_joined(s, p);
}

/* The first send-with-imm of a peer without private data: its hello. */
static void take_inband_hello(struct wimm_ps_server *s, struct ps_peer *p,
			      const struct wimm_event *ev)
{
	struct ps_hello h;
	int rc = ev->imm == PS_HELLO_IMM ? ps_hello_decode(ev->data, ev->len, &h) : WIMM_E_PROTO;
	if (rc == 0 && h.role == PS_ROLE_WORKER)
		rc = p->has_window ? check_worker(s, &h) : WIMM_E_NOWINDOW;
	else if (rc == 0 && (h.role != PS_ROLE_STAT || p->has_window))
		rc = WIMM_E_PROTO;
	if (rc < 0)
		return refuse_inband(s, p, rc);
	if (p->refuse_why)
		return;
	if (h.role == PS_ROLE_WORKER)
		become_worker(s, p, &h, NULL);
	else
		p->role = PS_ROLE_STAT;
	if (p->up)
		peer_ready(s, p);
}

/* A peer as its request says, before any hello if the request has none:
 * a worker's window is known from the request alone. */
static void take_request(void *arg, struct wimm_request *r)
{
	struct wimm_ps_server *s = arg;
	struct wimm_request_info ri;
	struct ps_hello h = {0};
	wimm_request_info(r, &ri);
	int inband = ri.private_len == 0, rc = 0;
	if (!inband) {
		rc = ps_hello_decode(ri.private_data, ri.private_len, &h);
		if (rc < 0 || (h.role != PS_ROLE_WORKER && h.role != PS_ROLE_STAT))
			return refuse(s, &r, rc < 0 ? rc : WIMM_E_PROTO, "a peer", ri.peer_addr);
		if (h.role == PS_ROLE_WORKER && (rc = check_worker(s, &h)) == 0 &&
		    ri.peer_window_len != s->region)
			rc = WIMM_E_NOWINDOW;
		if (rc < 0)
			return refuse(s, &r, rc, "a worker", ri.peer_addr);
	} else if (ri.peer_window_len && ri.peer_window_len != s->region) {
		return refuse(s, &r, WIMM_E_NOWINDOW, "a peer", ri.peer_addr);
	}
	int has_window = inband ? ri.peer_window_len != 0 : h.role == PS_ROLE_WORKER;
	int slot = has_window ? take_slot(s, inband ? NULL : &h) : 0;
	if (slot < 0)
		return refuse(s, &r, WIMM_E_BUSY, "a worker", ri.peer_addr);
	struct ps_peer *p = calloc(1, sizeof(*p));
	if (!p) {
		if (has_window)
			s->slot_used[slot] = 0;
		return refuse(s, &r, WIMM_E_NOMEM, "a peer", ri.peer_addr);
	}
	p->has_window = has_window;
	p->slot = (uint32_t)slot;
	p->hello_by_ms = ps_now_ms() + PS_HELLO_WAIT_MS;
	/* In-band, the hello comes by send-with-imm: one buffer for it. */
	struct wimm_conn_attr ca = {
	    .user = p, .rx_depth = 4, .sq_depth = 8, .recv_size = inband ? PS_HELLO_LEN : 0};
	if (has_window) {
		/* Without a hello, no counter: its expectations start from
		 * the first doorbell, which would be the hello's; ps_push
		 * drops the stale and duplicate pushes itself. */
		struct wimm_counter_attr ka = {
		    .layout = ps_layout_in(), .key_field = "shard", .epoch_field = "iter"};
		rc = inband ? 0 : wimm_counter_new(s->ctx, &ka, &p->counter);
		if (rc < 0) {
			s->slot_used[slot] = 0;
			free(p);
			return refuse(s, &r, rc, "a worker", ri.peer_addr);
		}
		/* Its own receive regions and nothing else. */
		ca.window = s->recv_mr;
		ca.window_off = (size_t)slot * s->region;
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
		if (has_window)
			s->slot_used[slot] = 0;
		free(p);
		return;
	}
	p->next = s->peers;
	s->peers = p;
	if (!inband && h.role == PS_ROLE_WORKER)
		become_worker(s, p, &h, ri.peer_addr);
	else if (!inband)
		p->role = PS_ROLE_STAT;
}

static void request_failed(void *arg, int rc)
{
	struct wimm_ps_server *s = arg;
	(void)rc;
	s->st.refused++;
}

static void send_stats(struct wimm_ps_server *s, struct ps_peer *p)
{
	/* Answered once. */
	if (p->answered++)
		return;
	struct wimm_ps_stats st;
	fill_stats(s, &st);
	uint32_t slot = s->stat_next++ % PS_STAT_RING;
	ps_stats_encode(s->stat_buf[slot], &st);
	if (wimm_send_imm(p->conn, s->stat_mr, (size_t)slot * PS_STAT_LEN, PS_STAT_LEN,
			  ps_imm_out(PS_K_STAT, 0, 0), WIMM_F_WAIT) < 0)
		p->dead = 1;
}

static void handle(void *arg, const struct wimm_event *ev)
{
	struct wimm_ps_server *s = arg;
	struct ps_peer *p = ev->user;
	if (ev->type == WIMM_EV_CONNECT) {
		svc_take_requests(s->l, take_request, request_failed, s);
		return;
	}
	if (!p || p->dead)
		return;
	switch (ev->type) {
	case WIMM_EV_ESTABLISHED:
		p->up = 1;
		peer_ready(s, p);
		break;
	case WIMM_EV_SEND_IMM:
		if (!p->role && !p->refuse_why)
			take_inband_hello(s, p, ev);
		break;
	case WIMM_EV_WRITE_IMM:
		if (p->role == PS_ROLE_WORKER)
			ps_push(s, p, ev);
		else if (!p->role && !p->refuse_why)
			refuse_inband(s, p, WIMM_E_PROTO);
		break;
	case WIMM_EV_SEND_DONE:
		ps_sends_done(s, p, ev->op_seq, 0);
		p->dead |= p->refused;
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
	if (!s)
		return WIMM_E_INVAL;
	s->applied_now = 0;
	/* Owed writes waiting for credit or a free send buffer: come back soon. */
	int owed = 0;
	for (uint32_t i = 0; i < s->a.shards && !owed; i++)
		owed = s->shard[i].owed != 0;
	if (owed && (timeout_ms < 0 || timeout_ms > 1))
		timeout_ms = 1;
	int n = svc_dispatch(s->ctx, WIMM_WAIT_ADAPTIVE, timeout_ms, handle, s);
	if (n < 0)
		return n;
	int64_t now = ps_now_ms();
	for (struct ps_peer *p = s->peers, *next; p; p = next) {
		next = p->next;
		if (!p->role && !p->dead && now > p->hello_by_ms) {
			if (!p->refuse_why)
				refuse_inband(s, p, WIMM_E_TIMEDOUT);
			else
				p->dead = 1;
		}
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
