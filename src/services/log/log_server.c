/* The log server: one registered arena cut into per-connection windows,
 * entries taken in completion order, group commit, acknowledgements back,
 * readers answered. On the public wimm API only. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "log_server_internal.h"

static unsigned char *ctl_of(struct sconn *k)
{
	return k->s->ctl + (size_t)k->slot * LOG_CLIENT_WINDOW;
}

static unsigned char *ring_of(struct sconn *k)
{
	return k->s->arena + (size_t)k->slot * k->s->ring_size;
}

static void conn_free(struct sconn *k)
{
	struct wimm_log_server *s = k->s;
	if (k->shared)
		log_shared_conn_gone(k);
	if (k->role == LOG_ROLE_WRITER || k->role == LOG_ROLE_SHARED) {
		struct log_writer_state *w = log_store_writer_at(s->st, (size_t)k->wi);
		if (w && w->live == k->slot)
			w->live = -1;
		s->writers--;
	} else if (k->role == LOG_ROLE_READER) {
		s->readers--;
	}
	wimm_conn_delete(&k->c);
	wimm_mr_dereg(&k->stage_mr);
	free(k->stage);
	s->conns[k->slot] = NULL;
	free(k);
}

struct sconn *log_server_live(struct wimm_log_server *s, size_t wi)
{
	struct log_writer_state *w = log_store_writer_at(s->st, wi);
	return w && w->live >= 0 ? s->conns[w->live] : NULL;
}

/* Tell the client why it is refused, give the doorbell a moment to leave,
 * and close. */
void log_server_refuse(struct sconn *k, uint32_t code, uint64_t a, uint64_t b)
{
	struct log_error e = {.code = code, .a = a, .b = b};
	char text[200];
	log_error_text(&e, text, sizeof(text));
	say(k->s, WIMM_LOG_WARN, "connection %d (%s): %s", k->slot,
	    k->role == LOG_ROLE_READER ? "reader" : "writer", text);
	k->s->refused++;
	log_error_encode(ctl_of(k) + LOG_ERROR_OFF, &e);
	if (k->established)
		wimm_write_imm(k->c, k->s->ctl_mr,
			       (size_t)k->slot * LOG_CLIENT_WINDOW + LOG_ERROR_OFF, LOG_ERROR_OFF,
			       32, log_imm_out(LOG_K_ERROR, code), 0);
	k->drop = 1;
}

static void post_resume(struct sconn *k, uint64_t last, uint32_t epoch)
{
	struct log_resume r = {
	    .last_seq = last, .ring_size = k->s->ring_size, .version = LOG_VERSION, .epoch = epoch};
	if (k->shared)
		log_shared_resume(k->s, &r);
	log_resume_encode(ctl_of(k) + LOG_RESUME_OFF, &r);
	int rc = wimm_write_imm(k->c, k->s->ctl_mr, (size_t)k->slot * LOG_CLIENT_WINDOW, 0, 32,
				log_imm_out(LOG_K_RESUME, 0), WIMM_F_WAIT);
	if (rc) {
		say(k->s, WIMM_LOG_WARN, "connection %d: cannot answer its hello: %s", k->slot,
		    wimm_strerror(rc));
		k->drop = 1;
	}
	k->sent_visible = k->sent_durable = k->expect_seq ? k->expect_seq - 1 : 0;
}

static void take_hello(struct sconn *k, const struct log_hello *h)
{
	struct wimm_log_server *s = k->s;
	/* The shared ring's listener takes its writers only, and they no
	 * other listener. */
	int shared = h->role == LOG_ROLE_SHARED;
	if (k->role != LOG_ROLE_NONE || shared != k->shared ||
	    (h->role != LOG_ROLE_WRITER && h->role != LOG_ROLE_READER && !shared) ||
	    (h->role != LOG_ROLE_READER && h->id == 0) ||
	    (h->role == LOG_ROLE_WRITER && h->start_off >= s->ring_size)) {
		log_server_refuse(k, LOG_ERR_PROTO, 0, 0);
		return;
	}
	if (h->role == LOG_ROLE_READER) {
		struct wimm_conn_info ci;
		k->role = LOG_ROLE_READER;
		s->readers++;
		wimm_conn_info(k->c, &ci);
		k->stage_len =
		    ci.peer_window_len < READER_STAGE_MAX ? ci.peer_window_len : READER_STAGE_MAX;
		k->stage = malloc(k->stage_len ? k->stage_len : 1);
		if (!k->stage || k->stage_len < LOG_STAT_LEN ||
		    wimm_mr_reg(s->ctx, k->stage, k->stage_len, WIMM_LOCAL, &k->stage_mr)) {
			log_server_refuse(k, LOG_ERR_PROTO, 0, 0);
			return;
		}
		post_resume(k, 0, 0);
		return;
	}
	long wi = log_store_writer_find(s->st, h->id, 1);
	if (wi < 0 || wi >= 0xffffff) { /* a shared ring's owner word holds 24 bits */
		log_server_refuse(k, LOG_ERR_PROTO, 0, 0);
		return;
	}
	k->role = h->role;
	k->wi = wi;
	k->epoch = h->epoch;
	s->writers++;
	struct log_writer_state *w = log_store_writer_at(s->st, (size_t)wi);
	if (h->epoch < w->epoch) {
		log_server_refuse(k, LOG_ERR_FENCED, w->epoch, h->epoch);
		return;
	}
	/* A higher epoch fences the id: durably, before anything is said. */
	if (h->epoch > w->epoch && log_store_fence(s->st, (size_t)wi, h->epoch)) {
		log_server_refuse(k, LOG_ERR_STORE, 0, 0);
		return;
	}
	if (w->live >= 0 && s->conns[w->live]) {
		/* The newer connection wins: the old one is a zombie. Newer by
		 * accept, not by when its hello is read: a writer that gave up a
		 * connection before its answer came has already resumed on its
		 * next one when the first one's hello is read late (events of two
		 * connections have no order). */
		struct sconn *old = s->conns[w->live];
		if (old->epoch < h->epoch) {
			log_server_refuse(old, LOG_ERR_FENCED, h->epoch, old->epoch);
		} else if (old->accepted > k->accepted) {
			log_server_refuse(k, LOG_ERR_TAKEN, h->id, 0);
			return;
		} else {
			log_server_refuse(old, LOG_ERR_TAKEN, h->id, 0);
		}
	}
	if (h->first_seq > w->last_seq + 1) {
		log_server_refuse(k, LOG_ERR_GAP, w->last_seq, h->first_seq);
		return;
	}
	/* A resuming writer is told a durable position. */
	if (w->durable_seq != w->last_seq && log_store_sync(s->st)) {
		s->failed = 1;
		log_server_refuse(k, LOG_ERR_STORE, 0, 0);
		return;
	}
	w = log_store_writer_at(s->st, (size_t)wi);
	w->live = k->slot;
	k->expect_seq = h->first_seq ? h->first_seq : w->last_seq + 1;
	k->tail = h->start_off;
	post_resume(k, w->last_seq, w->epoch);
}

/* A writer's entry landed at k->tail (or 0 with WRAP). */
static int take_entry(struct sconn *k, uint32_t len16, uint32_t seq12, uint32_t flag)
{
	struct wimm_log_server *s = k->s;
	unsigned char *ring = ring_of(k);
	size_t off = (flag & LOG_F_WRAP) ? 0 : k->tail, hdr = 0, wire = len16;
	if (flag & LOG_F_LONG) {
		hdr = WIMM_LOG_LONG_HEADER;
		if (off + hdr > s->ring_size) {
			log_server_refuse(k, LOG_ERR_BOUNDS, off, hdr);
			return 0;
		}
		wire = log_get32(ring + off);
	}
	if (wire < hdr + WIMM_LOG_TRAILER || off + wire > s->ring_size) {
		log_server_refuse(k, LOG_ERR_BOUNDS, off, wire);
		return 0;
	}
	uint64_t seq = k->expect_seq;
	if ((seq & LOG_SEQ_MASK) != seq12) {
		struct log_writer_state *w = log_store_writer_at(s->st, (size_t)k->wi);
		/* The low 12 bits of what was sent, past what was expected. */
		uint64_t sent = seq + ((seq12 - (uint32_t)seq) & LOG_SEQ_MASK);
		log_server_refuse(k, LOG_ERR_GAP, w->last_seq, sent);
		return 0;
	}
	const unsigned char *payload = ring + off + hdr;
	uint32_t plen = (uint32_t)(wire - hdr - WIMM_LOG_TRAILER);
	if (wimm_log_crc32c(0, payload, plen) != log_get32(payload + plen)) {
		log_server_refuse(k, LOG_ERR_CRC, seq, 0);
		return 0;
	}
	struct log_writer_state *w = log_store_writer_at(s->st, (size_t)k->wi);
	if (k->epoch < w->epoch) {
		log_server_refuse(k, LOG_ERR_FENCED, w->epoch, k->epoch);
		return 0;
	}
	k->expect_seq++;
	k->tail = off + wire;
	if (seq <= w->last_seq) {
		s->duplicates++;
		return 0;
	}
	uint64_t pos;
	int rc = log_store_append(s->st, (size_t)k->wi, seq, payload, plen, &pos);
	if (rc) {
		s->failed = 1;
		log_server_refuse(k, LOG_ERR_STORE, 0, 0);
		return 0;
	}
	return 1;
}

/* A read by position or by (writer, sequence): 1 when an answer is staged,
 * 0 when the reader was refused. */
static int answer_read(struct sconn *k, const struct log_req *q)
{
	struct log_store *st = k->s->st;
	uint32_t n = 0;
	long got = 0, wi = -1;
	if (q->op == LOG_REQ_READ) {
		got = log_store_read(st, q->from, q->max, k->stage, k->stage_len, &n);
	} else if ((wi = log_store_writer_find(st, q->id, 0)) >= 0) {
		got = log_store_read_writer(st, (size_t)wi, q->from, q->max, k->stage, k->stage_len,
					    &n);
	}
	if (got == WIMM_E_RANGE) {
		uint64_t first = q->op == LOG_REQ_READ
				     ? log_store_first(st)
				     : log_store_writer_at(st, (size_t)wi)->trunc_seq + 1;
		log_server_refuse(k, LOG_ERR_TRUNCATED, first, q->from);
		return 0;
	}
	if (got == WIMM_E_TOOBIG) {
		log_server_refuse(k, LOG_ERR_TOOBIG, n, 0);
		return 0;
	}
	if (got < 0) {
		k->s->failed = 1;
		log_server_refuse(k, LOG_ERR_STORE, 0, 0);
		return 0;
	}
	k->reply_len = (size_t)got;
	k->reply_imm = log_imm_out(LOG_K_DATA, n);
	return 1;
}

static void take_request(struct sconn *k)
{
	struct log_req q;
	log_req_decode(ring_of(k), &q);
	if (k->reply_due) {
		log_server_refuse(k, LOG_ERR_PROTO, 0, 0);
		return;
	}
	if (q.op == LOG_REQ_STAT) {
		struct wimm_log_stat st;
		wimm_log_server_stat(k->s, &st);
		log_stat_encode(k->stage, &st);
		k->reply_len = LOG_STAT_LEN;
		k->reply_imm = log_imm_out(LOG_K_STAT, 0);
	} else if (q.op == LOG_REQ_LEDGER) {
		long wi = log_store_writer_find(k->s->st, q.id, 0);
		struct log_writer_state *w =
		    wi < 0 ? NULL : log_store_writer_at(k->s->st, (size_t)wi);
		struct log_ledger_reply lr = {0};
		if (w)
			lr = (struct log_ledger_reply){.last_seq = w->last_seq,
						       .durable_seq = w->durable_seq,
						       .first_seq = w->trunc_seq + 1,
						       .epoch = w->epoch};
		log_ledger_reply_encode(k->stage, &lr);
		k->reply_len = LOG_LEDGER_REPLY_LEN;
		k->reply_imm = log_imm_out(LOG_K_LEDGER, 0);
	} else if (q.op == LOG_REQ_READ || q.op == LOG_REQ_READ_LEDGER) {
		if (!answer_read(k, &q))
			return;
	} else if (q.op == LOG_REQ_TRUNCATE) {
		uint64_t first;
		if (log_store_truncate(k->s->st, q.from, &first)) {
			log_server_refuse(k, LOG_ERR_STORE, 0, 0);
			return;
		}
		k->reply_len = 0;
		k->reply_imm = log_imm_out(LOG_K_DONE, 0);
	} else {
		log_server_refuse(k, LOG_ERR_PROTO, 0, 0);
		return;
	}
	k->reply_due = 1;
}

static int take_doorbell(struct sconn *k, const struct wimm_event *e)
{
	uint32_t f[3], imm = e->imm;
	if (k->shared) {
		/* The shared ring's window is everyone's: its hello comes as a
		 * send_imm into this connection's own receive buffer. */
		struct log_hello h;
		if (e->type == WIMM_EV_WRITE_IMM)
			log_shared_doorbell(k, imm);
		else if (imm != log_imm_out(LOG_K_HELLO, 0) ||
			 log_hello_decode(e->data, e->len, &h))
			log_server_refuse(k, LOG_ERR_PROTO, 0, 0);
		else
			take_hello(k, &h);
		return 0;
	}
	wimm_imm_unpack(log_layout_in(), imm, f);
	if (f[2] & LOG_F_HELLO) {
		struct log_hello h;
		if (log_hello_decode(ring_of(k), f[0], &h))
			log_server_refuse(k, LOG_ERR_PROTO, 0, 0);
		else
			take_hello(k, &h);
		return 0;
	}
	if (k->role == LOG_ROLE_READER && (f[2] & LOG_F_REQ)) {
		take_request(k);
		return 0;
	}
	if (k->role != LOG_ROLE_WRITER || (f[2] & LOG_F_REQ)) {
		log_server_refuse(k, LOG_ERR_PROTO, 0, 0);
		return 0;
	}
	return take_entry(k, f[0], f[1], f[2]);
}

/* ---------------------------------------------------------------- accept */

static void take_from(struct wimm_log_server *s, struct wimm_listener *l, int shared)
{
	struct wimm_request *r;
	while (wimm_listener_request(l, 0, &r) == 0) {
		struct wimm_request_info ri;
		struct log_hello h = {0};
		int have = 0;
		wimm_request_info(r, &ri);
		if (ri.private_len && !shared) {
			if (log_hello_decode(ri.private_data, ri.private_len, &h)) {
				say(s, WIMM_LOG_WARN, "refused %s: not a wimm log client",
				    ri.peer_addr);
				s->refused++;
				wimm_request_reject(&r, WIMM_E_PROTO);
				continue;
			}
			have = 1;
		}
		int slot = -1;
		for (uint32_t i = 0; i < s->max_conns && slot < 0; i++)
			if (!s->conns[i])
				slot = (int)i;
		struct sconn *k = slot < 0 ? NULL : calloc(1, sizeof(*k));
		if (!k) {
			say(s, WIMM_LOG_WARN, "refused %s: all %u connections in use", ri.peer_addr,
			    s->max_conns);
			s->refused++;
			wimm_request_reject(&r, WIMM_E_AGAIN);
			continue;
		}
		*k = (struct sconn){.s = s,
				    .slot = slot,
				    .wi = -1,
				    .have_hello = have,
				    .hello = h,
				    .shared = shared,
				    .accepted = ++s->accepts};
		struct wimm_conn_attr a = {.window = s->arena_mr,
					   .window_off = (size_t)slot * s->ring_size,
					   .window_len = s->ring_size,
					   .rx_depth = RX_DEPTH,
					   .recv_size = 16,
					   .user = k};
		if (shared)
			log_shared_window(s, &a);
		int rc = wimm_request_accept(&r, &a, &k->c);
		if (rc) {
			say(s, WIMM_LOG_WARN, "cannot accept %s: %s", ri.peer_addr,
			    wimm_strerror(rc));
			free(k);
			continue;
		}
		s->conns[slot] = k;
	}
}

static void take_requests(struct wimm_log_server *s)
{
	take_from(s, s->l, 0);
	if (s->sh)
		take_from(s, log_shared_listener(s), 1);
}

/* ------------------------------------------------------------ the loop */

static void send_acks(struct wimm_log_server *s)
{
	for (uint32_t i = 0; i < s->max_conns; i++) {
		struct sconn *k = s->conns[i];
		if (!k || !k->established || k->drop)
			continue;
		if (k->role == LOG_ROLE_READER && k->reply_due) {
			int rc =
			    wimm_write_imm(k->c, k->stage_mr, 0, 0, k->reply_len, k->reply_imm, 0);
			if (rc == 0)
				k->reply_due = 0;
			else if (rc != WIMM_E_AGAIN)
				k->drop = 1;
			continue;
		}
		if (k->role != LOG_ROLE_WRITER && k->role != LOG_ROLE_SHARED)
			continue;
		struct log_writer_state *w = log_store_writer_at(s->st, (size_t)k->wi);
		if (w->live != k->slot)
			continue;
		/* Never past what this connection sent: the writer extends the
		 * 28 bits from its own last sequence. */
		uint64_t top = k->expect_seq - 1;
		uint64_t dur = w->durable_seq < top ? w->durable_seq : top;
		uint64_t vis = w->last_seq < top ? w->last_seq : top;
		if (dur > k->sent_durable &&
		    wimm_write_imm(k->c, NULL, 0, 0, 0, log_imm_out(LOG_K_DURABLE, dur), 0) == 0)
			k->sent_durable = dur;
		if (vis > k->sent_visible && vis > k->sent_durable &&
		    wimm_write_imm(k->c, NULL, 0, 0, 0, log_imm_out(LOG_K_VISIBLE, vis), 0) == 0)
			k->sent_visible = vis;
	}
}

static void drop_marked(struct wimm_log_server *s)
{
	for (uint32_t i = 0; i < s->max_conns; i++) {
		struct sconn *k = s->conns[i];
		if (k && k->drop) {
			/* Let the error doorbell leave before the close. */
			if (k->c && k->established)
				wimm_conn_close(&k->c, 200);
			conn_free(k);
		}
	}
}

/* The connection is up: answer a hello that came as private data. */
static void conn_up(struct sconn *k)
{
	k->established = 1;
	if (k->have_hello) {
		k->have_hello = 0;
		take_hello(k, &k->hello);
	}
}

static int handle(struct wimm_log_server *s, const struct wimm_event *e)
{
	struct sconn *k = e->user;
	switch (e->type) {
	case WIMM_EV_CONNECT:
		take_requests(s);
		return 0;
	case WIMM_EV_ESTABLISHED:
		if (k && !k->established)
			conn_up(k);
		return 0;
	case WIMM_EV_WRITE_IMM:
	case WIMM_EV_SEND_IMM:
		if (!k || k->drop)
			return 0;
		/* A doorbell proves the connection up. On verbs the passive
		 * side's ESTABLISHED (the RTU) may come long after the client's
		 * first writes, or late under load: until then no ack, reply or
		 * error would be sent and the client stalls. */
		if (!k->established)
			conn_up(k);
		return take_doorbell(k, e);
	case WIMM_EV_DISCONNECT:
		if (k) {
			say(s, WIMM_LOG_INFO, "connection %d (%s) gone: %s", k->slot,
			    k->role == LOG_ROLE_READER ? "reader" : "writer",
			    wimm_strerror(e->status));
			k->drop = 1;
			wimm_conn_delete(&k->c);
		}
		return 0;
	case WIMM_EV_ERROR:
		if (k) {
			say(s, WIMM_LOG_WARN, "connection %d: an operation to it failed: %s",
			    k->slot, wimm_strerror(e->status));
			k->drop = 1;
		}
		return 0;
	default:
		return 0;
	}
}

static void *syncer_main(void *arg)
{
	struct wimm_log_server *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (!s->quit && s->sync_fd < 0)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->quit)
			break;
		int fd = s->sync_fd;
		pthread_mutex_unlock(&s->mu);
		int err = fdatasync(fd) ? errno : 0;
		pthread_mutex_lock(&s->mu);
		s->sync_fd = -1;
		s->sync_err = err;
		atomic_store(&s->sync_done, 1);
		uint64_t one = 1;
		if (write(s->efd, &one, sizeof(one)) < 0) {
			/* The loop also looks at sync_done every turn. */
		}
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* Take back a finished fdatasync; hand over the next one. */
static void group_commit(struct wimm_log_server *s)
{
	if (s->sync_busy && atomic_load(&s->sync_done)) {
		uint64_t v;
		pthread_mutex_lock(&s->mu);
		int err = s->sync_err;
		pthread_mutex_unlock(&s->mu);
		if (read(s->efd, &v, sizeof(v)) < 0) {
			/* nothing was pending */
		}
		atomic_store(&s->sync_done, 0);
		s->sync_busy = 0;
		if (err) {
			say(s, WIMM_LOG_ERROR, "fdatasync of the segment file failed: %s",
			    strerror(err));
			s->failed = 1;
		}
		log_store_sync_end(s->st, !err);
	}
	if (!s->sync_busy && !s->failed && log_store_dirty(s->st)) {
		int fd;
		if (log_store_sync_begin(s->st, &fd)) {
			s->failed = 1;
			return;
		}
		if (fd < 0)
			return;
		pthread_mutex_lock(&s->mu);
		s->sync_fd = fd;
		s->sync_busy = 1;
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
	}
}

/* Spin a little, then sleep on the context's fd and the syncer's eventfd
 * (the README's event-loop contract: arm, then sleep). */
static int wait_events(struct wimm_log_server *s, struct wimm_event *ev, int timeout_ms)
{
	int n = wimm_poll(s->ctx, ev, EV_BATCH);
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (n == 0 && timeout_ms != 0 && !atomic_load(&s->sync_done)) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		long us = (t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000;
		if (us >= s->spin_us) {
			if (wimm_ctx_arm(s->ctx) == 0 && !atomic_load(&s->sync_done)) {
				struct epoll_event e[2];
				int left = timeout_ms < 0 ? -1 : timeout_ms - (int)(us / 1000);
				epoll_wait(s->epfd, e, 2, left < 0 && timeout_ms >= 0 ? 0 : left);
			}
			n = wimm_poll(s->ctx, ev, EV_BATCH);
			break;
		}
		n = wimm_poll(s->ctx, ev, EV_BATCH);
	}
	return n;
}

/* The --retain policy: whole segments go once the log holds more than
 * retain entries after them. */
static void retain(struct wimm_log_server *s)
{
	struct wimm_log_stat st;
	uint64_t first;
	if (!s->retain || s->failed)
		return;
	log_store_stat(s->st, &st);
	if (st.entries - st.first > s->retain && st.segments > 1 &&
	    log_store_truncate(s->st, st.entries - s->retain, &first))
		s->failed = 1;
}

int wimm_log_server_run(struct wimm_log_server *s, int timeout_ms)
{
	struct wimm_event ev[EV_BATCH];
	int taken = 0;
	if (!s)
		return WIMM_E_INVAL;
	if (s->failed)
		return WIMM_E_PERM;
	take_requests(s);
	int n = wait_events(s, ev, log_shared_timeout(s, timeout_ms));
	for (int turn = 0; n > 0; turn++) {
		for (int i = 0; i < n; i++)
			taken += handle(s, &ev[i]);
		if (turn + 1 >= TURN_POLLS)
			break;
		n = wimm_poll(s->ctx, ev, EV_BATCH);
	}
	if (n < 0)
		return n;
	taken += log_shared_advance(s);
	/* Visible at once; durable when the syncer's fdatasync of everything
	 * written before it began returns (group commit). */
	if (log_store_flush(s->st))
		s->failed = 1;
	retain(s);
	send_acks(s);
	group_commit(s);
	send_acks(s);
	drop_marked(s);
	return s->failed ? WIMM_E_PERM : taken;
}

/* ------------------------------------------------------------ open/close */

/* The shared ring's listener: the listen port + 1 (any free port for 0). */
static int shared_listen(struct wimm_log_server *s, const char *listen_addr,
			 const struct wimm_log_server_attr *attr)
{
	char addr[300];
	const char *colon = strrchr(listen_addr, ':');
	if (!colon || strlen(listen_addr) > 256)
		return WIMM_E_INVAL;
	long port = strtol(colon + 1, NULL, 10);
	if (port < 0 || port > 65534)
		return WIMM_E_INVAL;
	snprintf(addr, sizeof(addr), "%.*s:%d", (int)(colon - listen_addr), listen_addr,
		 port ? wimm_listener_port(s->l) + 1 : 0);
	return log_shared_open(s, addr, attr->shared_ring, attr->hole_ms);
}

int wimm_log_server_open(struct wimm_ctx *ctx, const char *listen_addr,
			 const struct wimm_log_server_attr *attr, struct wimm_log_server **out)
{
	if (!ctx || !listen_addr || !attr || !attr->dir || !out)
		return WIMM_E_INVAL;
	uint32_t ring = attr->ring_size ? attr->ring_size : DEFAULT_RING;
	uint32_t conns = attr->max_conns ? attr->max_conns : DEFAULT_CONNS;
	if (ring < 4096 || ring > (64u << 20) || ring % 8 || conns > 4096)
		return WIMM_E_INVAL;
	struct wimm_log_server *s = calloc(1, sizeof(*s));
	int rc = WIMM_E_NOMEM, cfd;
	if (!s)
		return rc;
	s->efd = s->epfd = s->sync_fd = -1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->ctx = ctx;
	s->spin_us = attr->spin_us ? attr->spin_us : SPIN_US;
	s->ring_size = ring;
	s->max_conns = conns;
	s->log = attr->log;
	s->log_arg = attr->log_arg;
	s->retain = attr->retain;
	s->conns = calloc(conns, sizeof(*s->conns));
	s->arena = calloc(conns, ring);
	s->ctl = calloc(conns, LOG_CLIENT_WINDOW);
	if (!s->conns || !s->arena || !s->ctl)
		goto fail;
	rc = log_store_open(attr->dir, attr->segment_bytes ? attr->segment_bytes : DEFAULT_SEGMENT,
			    attr->log, attr->log_arg, &s->st);
	if (rc)
		goto fail;
	rc = wimm_mr_reg(ctx, s->arena, (size_t)conns * ring, WIMM_REMOTE_WRITE, &s->arena_mr);
	if (!rc)
		rc = wimm_mr_reg(ctx, s->ctl, (size_t)conns * LOG_CLIENT_WINDOW, WIMM_LOCAL,
				 &s->ctl_mr);
	if (rc)
		goto fail;
	/* The listener's own attributes are never used: every connection is
	 * accepted with a window of its own. */
	struct wimm_conn_attr la = {.rx_depth = RX_DEPTH};
	rc = wimm_listen(ctx, listen_addr, &la, &s->l);
	if (!rc)
		rc = wimm_ctx_fd(ctx, &cfd);
	if (rc)
		goto fail;
	rc = WIMM_E_NOMEM;
	s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event e1 = {.events = EPOLLIN}, e2 = {.events = EPOLLIN};
	if (s->efd < 0 || s->epfd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, cfd, &e1) ||
	    epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->efd, &e2) ||
	    epoll_ctl(s->epfd, EPOLL_CTL_ADD, wimm_listener_fd(s->l), &e1))
		goto fail;
	if (attr->shared_ring) {
		rc = shared_listen(s, listen_addr, attr);
		if (rc)
			goto fail;
		rc = WIMM_E_NOMEM;
		if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, wimm_listener_fd(log_shared_listener(s)),
			      &e1))
			goto fail;
	}
	if (pthread_create(&s->syncer, NULL, syncer_main, s))
		goto fail;
	s->syncer_up = 1;
	*out = s;
	return 0;
fail:
	wimm_log_server_close(&s);
	return rc;
}

int wimm_log_server_port(const struct wimm_log_server *s)
{
	return s ? wimm_listener_port(s->l) : WIMM_E_INVAL;
}

int wimm_log_server_shared_port(const struct wimm_log_server *s)
{
	return s ? log_shared_port(s) : WIMM_E_INVAL;
}

int wimm_log_server_stat(const struct wimm_log_server *s, struct wimm_log_stat *out)
{
	if (!s || !out)
		return WIMM_E_INVAL;
	memset(out, 0, sizeof(*out));
	log_store_stat(s->st, out);
	out->duplicates = s->duplicates;
	out->writers = s->writers;
	out->readers = s->readers;
	out->refused = s->refused;
	out->ring_size = s->ring_size;
	out->max_conns = s->max_conns;
	log_shared_stat(s, out);
	return 0;
}

int wimm_log_server_close(struct wimm_log_server **ps)
{
	struct wimm_log_server *s = ps ? *ps : NULL;
	int rc = 0;
	if (!s)
		return 0;
	if (s->syncer_up) {
		pthread_mutex_lock(&s->mu);
		s->quit = 1;
		pthread_cond_signal(&s->cv);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->syncer, NULL);
		if (s->sync_busy && atomic_load(&s->sync_done)) {
			log_store_sync_end(s->st, !s->sync_err);
			s->sync_busy = 0;
		}
	}
	if (s->efd >= 0)
		close(s->efd);
	if (s->epfd >= 0)
		close(s->epfd);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	if (s->st && !s->failed) {
		rc = log_store_sync(s->st);
		if (!rc)
			send_acks(s);
	}
	for (uint32_t i = 0; s->conns && i < s->max_conns; i++)
		if (s->conns[i]) {
			if (s->conns[i]->established)
				wimm_conn_close(&s->conns[i]->c, 200);
			conn_free(s->conns[i]);
		}
	log_shared_close(s);
	wimm_listener_delete(&s->l);
	wimm_mr_dereg(&s->arena_mr);
	wimm_mr_dereg(&s->ctl_mr);
	log_store_close(&s->st);
	free(s->conns);
	free(s->arena);
	free(s->ctl);
	free(s);
	*ps = NULL;
	return rc;
}
