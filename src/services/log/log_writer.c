/* The writer of the log service: one write-with-imm per entry into its
 * ring in the server's memory, a local mirror of the ring that keeps every
 * entry until it is durable (so a reconnect can send it again), and the
 * acknowledgements that come back as zero-length doorbells. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log_internal.h"

#define DEFAULT_TIMEOUT_MS 10000
#define RX_DEPTH 64

struct pend {
	uint64_t seq;
	uint32_t off, wire, foot, imm;
};

struct wimm_log_writer {
	struct wimm_ctx *ctx;
	char *addr;
	struct wimm_log_writer_attr attr;
	struct wimm_conn *conn;
	unsigned char win[LOG_CLIENT_WINDOW]; /* the server writes resume / error here */
	struct wimm_mr *win_mr;
	unsigned char *mirror; /* the ring as the server sees it */
	struct wimm_mr *mirror_mr;
	uint32_t ring_size;
	size_t max_msg;
	uint64_t next_seq, visible, durable, resent;
	uint32_t tail, used;
	struct pend *q; /* entries not yet durable, oldest first (circular) */
	size_t qhead, qlen, qcap;
	int broken;  /* 0, or why the connection is unusable */
	int resumed; /* RESUME seen on this connection */
	uint64_t resume_seq;
	char err[200];
	/* The shared ring (WIMM_LOG_WRITER_SHARED): aux holds the hello, the
	 * fetch-and-add's result and the limit word read back. */
	int shared, by_request, tail_be;
	_Alignas(16) unsigned char aux[64];
	struct wimm_mr *aux_mr;
	uint64_t limit;	     /* places below it may be written (last read) */
	uint64_t grant_base; /* by request: no grant is below it */
	int faa_done, read_done, granted;
	uint32_t grant_val;
};

#define AUX_HELLO 0
#define AUX_FAA 32
#define AUX_LIMIT 40
#define AUX_PAD 48

static struct pend *q_at(struct wimm_log_writer *w, size_t i)
{
	return &w->q[(w->qhead + i) % w->qcap];
}

static int q_push(struct wimm_log_writer *w, struct pend p)
{
	if (w->qlen == w->qcap) {
		size_t cap = w->qcap ? w->qcap * 2 : 256;
		struct pend *n = malloc(cap * sizeof(*n));
		if (!n)
			return WIMM_E_NOMEM;
		for (size_t i = 0; i < w->qlen; i++)
			n[i] = *q_at(w, i);
		free(w->q);
		w->q = n;
		w->qcap = cap;
		w->qhead = 0;
	}
	*q_at(w, w->qlen++) = p;
	return 0;
}

static void set_durable(struct wimm_log_writer *w, uint64_t seq)
{
	if (seq > w->durable)
		w->durable = seq;
	if (seq > w->visible)
		w->visible = seq;
	while (w->qlen && w->q[w->qhead].seq <= w->durable) {
		w->used -= w->q[w->qhead].foot;
		w->qhead = (w->qhead + 1) % w->qcap;
		w->qlen--;
	}
}

static void take_events(struct wimm_log_writer *w, const struct wimm_event *ev, int n)
{
	for (int i = 0; i < n; i++) {
		const struct wimm_event *e = &ev[i];
		if (e->conn != w->conn)
			continue;
		if (e->type == WIMM_EV_DISCONNECT || e->type == WIMM_EV_ERROR) {
			if (!w->broken) {
				w->broken = WIMM_E_DISCONNECTED;
				snprintf(w->err, sizeof(w->err),
					 "connection to the server lost: %s (%s)",
					 wimm_strerror(e->status), wimm_err_name(e->status));
			}
			continue;
		}
		if (e->type == WIMM_EV_SEND_DONE) {
			if (e->op == WIMM_OP_FETCH_ADD)
				w->faa_done = 1;
			else if (e->op == WIMM_OP_READ)
				w->read_done = 1;
			continue;
		}
		if (e->type != WIMM_EV_WRITE_IMM)
			continue;
		uint32_t f[2];
		wimm_imm_unpack(log_layout_out(), e->imm, f);
		uint64_t base = w->next_seq ? w->next_seq - 1 : 0;
		if (f[0] == LOG_K_VISIBLE) {
			uint64_t s = log_seq_extend(base, f[1]);
			if (s > w->visible)
				w->visible = s;
		} else if (f[0] == LOG_K_DURABLE) {
			set_durable(w, log_seq_extend(base, f[1]));
		} else if (f[0] == LOG_K_RESUME) {
			struct log_resume r;
			log_resume_decode(w->win + LOG_RESUME_OFF, &r);
			w->resumed = 1;
			w->resume_seq = r.last_seq;
			if (w->shared) {
				w->ring_size = r.ring_size;
				w->by_request = !!(r.flags & LOG_RESUME_BY_REQUEST);
				w->tail_be = !!(r.flags & LOG_RESUME_TAIL_BE);
				w->grant_base = r.base;
				w->limit = 0;
			}
		} else if (f[0] == LOG_K_GRANT) {
			w->granted = 1;
			w->grant_val = f[1];
		} else if (f[0] == LOG_K_ERROR) {
			struct log_error le;
			log_error_decode(w->win + LOG_ERROR_OFF, &le);
			log_error_text(&le, w->err, sizeof(w->err));
			/* A shared entry skipped, or spoiled in the ring by another
			 * member (its CRC was right when it left), is sent again
			 * by a reconnect. */
			int resend =
			    le.code == LOG_ERR_SKIPPED || (w->shared && le.code == LOG_ERR_CRC);
			w->broken = le.code == LOG_ERR_FENCED ? WIMM_E_REFUSED
				    : resend		      ? WIMM_E_DISCONNECTED
							      : WIMM_E_PROTO;
			if (w->attr.log)
				w->attr.log(w->attr.log_arg, WIMM_LOG_ERROR, w->err);
		}
	}
}

static int pump(struct wimm_log_writer *w, int timeout_ms)
{
	struct wimm_event ev[16];
	int n = timeout_ms ? wimm_wait(w->ctx, ev, 16, WIMM_WAIT_ADAPTIVE, timeout_ms)
			   : wimm_poll(w->ctx, ev, 16);
	if (n < 0)
		return n;
	take_events(w, ev, n);
	return 0;
}

int wimm_log_writer_poll(struct wimm_log_writer *w)
{
	if (!w)
		return WIMM_E_INVAL;
	int rc = pump(w, 0);
	return rc ? rc : w->broken;
}

/* Connect, say hello, wait for the server's answer. */
static int hello(struct wimm_log_writer *w, uint64_t first_seq, uint32_t start_off)
{
	struct wimm_fabric_limits lim;
	unsigned char hb[LOG_HELLO_LEN];
	struct log_hello h = {.role = w->shared ? LOG_ROLE_SHARED : LOG_ROLE_WRITER,
			      .id = w->attr.id,
			      .first_seq = first_seq,
			      .start_off = start_off,
			      .epoch = w->attr.epoch};
	int64_t deadline = log_now_ms() + w->attr.timeout_ms;
	int rc = wimm_ctx_limits(w->ctx, &lim);
	if (rc)
		return rc;
	w->max_msg = lim.max_msg;
	log_hello_encode(hb, &h);
	int inband = !w->shared && (lim.private_max < LOG_HELLO_LEN ||
				    (w->attr.flags & WIMM_LOG_WRITER_INBAND_HELLO));
	int priv = !inband && !w->shared;
	struct wimm_conn_attr a = {.window = w->win_mr,
				   .rx_depth = RX_DEPTH,
				   .private_data = priv ? hb : NULL,
				   .private_len = priv ? LOG_HELLO_LEN : 0};
	w->resumed = 0;
	w->broken = 0;
	w->err[0] = '\0';
	rc = log_connect_retry(w->ctx, w->addr, &a, deadline, &w->conn);
	if (rc)
		return rc;
	struct wimm_conn_info ci;
	wimm_conn_info(w->conn, &ci);
	if (w->shared) {
		/* The whole shared ring is the window; the hello goes into
		 * this connection's own receive buffer. */
		if (ci.peer_window_len < LOG_SHARED_CTL + 4096 ||
		    (w->ring_size && ci.peer_window_len != LOG_SHARED_CTL + w->ring_size))
			return WIMM_E_PROTO;
		memcpy(w->aux + AUX_HELLO, hb, sizeof(hb));
		rc = wimm_send_imm(w->conn, w->aux_mr, AUX_HELLO, LOG_HELLO_LEN,
				   log_imm_out(LOG_K_HELLO, 0), WIMM_F_WAIT);
	} else if (w->ring_size && ci.peer_window_len != w->ring_size) {
		return WIMM_E_PROTO; /* the server restarted with another ring size */
	} else {
		w->ring_size = (uint32_t)ci.peer_window_len;
	}
	if (inband) {
		/* Through a bounce in the mirror's first bytes: the server reads
		 * it before anything else may land there. */
		unsigned char keep[LOG_HELLO_LEN];
		if (!w->mirror)
			return WIMM_E_PROTO;
		memcpy(keep, w->mirror, sizeof(keep));
		memcpy(w->mirror, hb, sizeof(hb));
		uint32_t imm, v[3] = {LOG_HELLO_LEN, 0, LOG_F_HELLO};
		wimm_imm_pack(log_layout_in(), v, &imm);
		rc = wimm_write_imm(w->conn, w->mirror_mr, 0, 0, LOG_HELLO_LEN, imm,
				    WIMM_F_WAIT | WIMM_F_SIGNAL);
		while (!rc && !w->resumed && !w->broken && log_now_ms() < deadline)
			rc = pump(w, 10);
		memcpy(w->mirror, keep, sizeof(keep));
	}
	while (!rc && !w->resumed && !w->broken) {
		int64_t left = deadline - log_now_ms();
		if (left <= 0)
			return WIMM_E_TIMEDOUT;
		rc = pump(w, (int)(left < 100 ? left : 100));
	}
	return rc ? rc : w->broken;
}

/* hello() again while the connection is lost before the server answered
 * (under a burst of connects a server may drop one at accept), until the
 * attr's timeout. */
static int hello_retry(struct wimm_log_writer *w, uint64_t first_seq, uint32_t start_off)
{
	int64_t deadline = log_now_ms() + w->attr.timeout_ms;
	for (;;) {
		int rc = hello(w, first_seq, start_off);
		if (rc != WIMM_E_DISCONNECTED || w->resumed || log_now_ms() >= deadline)
			return rc;
		wimm_conn_delete(&w->conn);
		struct timespec ts = {0, 50 * 1000000};
		nanosleep(&ts, NULL);
	}
}

int wimm_log_writer_open(struct wimm_ctx *ctx, const char *addr,
			 const struct wimm_log_writer_attr *attr, struct wimm_log_writer **out)
{
	if (!ctx || !addr || !attr || !out || attr->id == 0)
		return WIMM_E_INVAL;
	struct wimm_log_writer *w = calloc(1, sizeof(*w));
	int rc = WIMM_E_NOMEM;
	if (!w)
		return rc;
	w->ctx = ctx;
	w->attr = *attr;
	if (w->attr.timeout_ms <= 0)
		w->attr.timeout_ms = DEFAULT_TIMEOUT_MS;
	w->addr = strdup(addr);
	if (!w->addr)
		goto fail;
	rc = wimm_mr_reg(ctx, w->win, sizeof(w->win), WIMM_REMOTE_WRITE, &w->win_mr);
	if (rc)
		goto fail;
	w->shared = !!(attr->flags & WIMM_LOG_WRITER_SHARED);
	if (w->shared && (attr->epoch || (attr->flags & WIMM_LOG_WRITER_SEND_NOTICE))) {
		rc = WIMM_E_INVAL;
		goto fail;
	}
	rc = w->shared ? wimm_mr_reg(ctx, w->aux, sizeof(w->aux), WIMM_LOCAL, &w->aux_mr) : 0;
	if (rc)
		goto fail;
	/* The mirror must exist before an in-band hello; its size is the
	 * server's ring, learned at connect: a provisional one first. */
	struct wimm_fabric_limits lim;
	rc = wimm_ctx_limits(ctx, &lim);
	if (rc)
		goto fail;
	if (!w->shared &&
	    (lim.private_max < LOG_HELLO_LEN || (attr->flags & WIMM_LOG_WRITER_INBAND_HELLO))) {
		w->mirror = calloc(1, LOG_HELLO_LEN);
		if (!w->mirror)
			goto nomem;
		rc = wimm_mr_reg(ctx, w->mirror, LOG_HELLO_LEN, WIMM_LOCAL, &w->mirror_mr);
		if (rc)
			goto fail;
	}
	rc = hello_retry(w, attr->first_seq, 0);
	if (rc)
		goto fail;
	wimm_mr_dereg(&w->mirror_mr);
	free(w->mirror);
	w->mirror = calloc(1, w->ring_size);
	if (!w->mirror)
		goto nomem;
	rc = wimm_mr_reg(ctx, w->mirror, w->ring_size, WIMM_LOCAL, &w->mirror_mr);
	if (rc)
		goto fail;
	w->next_seq = attr->first_seq ? attr->first_seq : w->resume_seq + 1;
	w->visible = w->durable = w->next_seq - 1;
	*out = w;
	return 0;
nomem:
	rc = WIMM_E_NOMEM;
fail:
	wimm_log_writer_close(&w, 0);
	return rc;
}

/* ---------------------------------------------------------- shared ring */

/* Drive the connection until *flag is set: 0, TIMEDOUT at deadline, or why
 * the connection broke. */
static int wait_flag(struct wimm_log_writer *w, const int *flag, int64_t deadline)
{
	while (!*flag) {
		if (w->broken)
			return w->broken;
		int64_t left = deadline - log_now_ms();
		if (left <= 0)
			return WIMM_E_TIMEDOUT;
		int rc = pump(w, left < 10 ? (int)left : 10);
		if (rc)
			return rc;
	}
	return 0;
}

/* An operation whose answer did not come: its completion may still come
 * on this connection and be taken for the next one's, so the connection
 * is given up (a reconnect starts clean). */
static int gave_up(struct wimm_log_writer *w, int rc, const char *what)
{
	if (rc == WIMM_E_TIMEDOUT && !w->broken) {
		w->broken = WIMM_E_DISCONNECTED;
		snprintf(w->err, sizeof(w->err), "shared ring: no answer to the %s within %d ms",
			 what, w->attr.timeout_ms);
	} else if (rc == WIMM_E_DISCONNECTED) {
		w->broken = rc;
	}
	return rc;
}

/* A place of len bytes: by fetch-and-add on the tail word, or asked of
 * the server on a fabric without atomics. */
static int shared_reserve(struct wimm_log_writer *w, uint32_t len, int64_t deadline,
			  uint64_t *place)
{
	int rc;
	if (w->by_request) {
		w->granted = 0;
		rc = wimm_write_imm(w->conn, NULL, 0, 0, 0, log_imm_out(LOG_K_RESERVE, len / 16),
				    WIMM_F_WAIT);
		if (!rc)
			rc = wait_flag(w, &w->granted, deadline);
		if (rc)
			return gave_up(w, rc, "reservation");
		uint32_t d = (w->grant_val - (uint32_t)(w->grant_base / 16)) & LOG_SH_MASK;
		*place = w->grant_base + (uint64_t)d * 16;
		w->grant_base = *place + len;
		return 0;
	}
	w->faa_done = 0;
	rc = wimm_fetch_add(w->conn, w->aux_mr, AUX_FAA, LOG_SHARED_TAIL, len, 0);
	if (!rc)
		rc = wait_flag(w, &w->faa_done, deadline);
	if (rc)
		return gave_up(w, rc, "fetch-and-add");
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)w->aux[AUX_FAA + (w->tail_be ? 7 - i : i)] << (8 * i);
	*place = v;
	return 0;
}

/* Wait until [place, place + len) is below the limit word: read it again
 * while it is not, having told the server once where this writer waits
 * (a head stalled at a dead writer's place skips to it). */
static int shared_room(struct wimm_log_writer *w, uint64_t place, uint32_t len, int64_t deadline)
{
	int told = 0;
	while (place + len > w->limit) {
		w->read_done = 0;
		int rc = wimm_read(w->conn, w->aux_mr, AUX_LIMIT, LOG_SHARED_LIMIT, 8, 0);
		if (!rc)
			rc = wait_flag(w, &w->read_done, deadline);
		if (rc)
			return gave_up(w, rc, "read of the limit word");
		w->limit = log_get64(w->aux + AUX_LIMIT);
		if (place + len <= w->limit)
			break;
		if (!told) {
			rc = wimm_write_imm(w->conn, NULL, 0, 0, 0,
					    log_imm_out(LOG_K_WAIT, (place / 16) & LOG_SH_MASK),
					    WIMM_F_WAIT);
			if (rc)
				return gave_up(w, rc, "wait notice");
			told = 1;
		}
		if (log_now_ms() > deadline)
			return WIMM_E_TIMEDOUT; /* the place stays a hole the server skips */
		rc = pump(w, 1);
		if (rc || w->broken)
			return rc ? rc : w->broken;
	}
	return 0;
}

/* Reserve a place for p and write it there: ONE write-with-imm, after a
 * padding entry where the place would cross the ring's end. */
static int shared_post(struct wimm_log_writer *w, const struct pend *p, int64_t deadline)
{
	for (;;) {
		uint64_t place;
		int rc = shared_reserve(w, p->wire, deadline, &place);
		if (!rc)
			rc = shared_room(w, place, p->wire, deadline);
		if (rc)
			return rc;
		size_t off = (size_t)(place % w->ring_size);
		uint32_t imm = log_imm_out(LOG_K_ENTRY, (place / 16) & LOG_SH_MASK);
		if (off + p->wire <= w->ring_size) {
			rc = wimm_write_imm(w->conn, w->mirror_mr, p->off, LOG_SHARED_CTL + off,
					    p->wire, imm, WIMM_F_WAIT);
			return rc == WIMM_E_DISCONNECTED ? gave_up(w, rc, "") : rc;
		}
		unsigned char *h = w->aux + AUX_PAD;
		log_put32(h, p->wire);
		log_put32(h + 4, LOG_SH_MAGIC | LOG_SH_PAD);
		log_put64(h + 8, 0);
		rc = wimm_write_imm(w->conn, w->aux_mr, AUX_PAD, LOG_SHARED_CTL + off,
				    LOG_SH_PAD_LEN, imm, WIMM_F_WAIT);
		if (rc)
			return rc == WIMM_E_DISCONNECTED ? gave_up(w, rc, "") : rc;
	}
}

static int post_entry(struct wimm_log_writer *w, const struct pend *p)
{
	if (w->attr.flags & WIMM_LOG_WRITER_SEND_NOTICE) {
		int rc = wimm_write(w->conn, w->mirror_mr, p->off, p->off, p->wire, 0);
		if (rc)
			return rc;
		return wimm_send_imm(w->conn, NULL, 0, 0, p->imm, WIMM_F_WAIT);
	}
	return wimm_write_imm(w->conn, w->mirror_mr, p->off, p->off, p->wire, p->imm, 0);
}

/* The entry {header, payload, CRC32C} at p (mirror offset off, foot bytes
 * of the mirror with its padding), then its place and its write. */
static int shared_append(struct wimm_log_writer *w, unsigned char *p, const void *data, size_t len,
			 uint32_t off, uint32_t foot, int64_t deadline, uint64_t *seq)
{
	log_put32(p, (uint32_t)len);
	log_put32(p + 4, LOG_SH_MAGIC);
	log_put64(p + 8, w->next_seq);
	log_put64(p + 16, w->attr.id);
	if (len)
		memcpy(p + LOG_SH_HDR, data, len);
	log_put32(p + LOG_SH_HDR + len, wimm_log_crc32c(0, p, LOG_SH_HDR + len));
	struct pend e = {
	    .seq = w->next_seq, .off = off, .wire = log_sh_extent((uint32_t)len), .foot = foot};
	int rc = shared_post(w, &e, deadline);
	if (!rc)
		rc = q_push(w, e);
	if (rc)
		return rc;
	w->used += e.foot;
	w->tail = off + e.wire;
	w->next_seq++;
	if (seq)
		*seq = e.seq;
	return 0;
}

int wimm_log_append(struct wimm_log_writer *w, const void *data, size_t len, unsigned flags,
		    uint64_t *seq)
{
	if (!w || (len && !data))
		return WIMM_E_INVAL;
	if (w->broken)
		return w->broken;
	size_t hdr = len + WIMM_LOG_TRAILER > LOG_IMM_LEN_MAX ? WIMM_LOG_LONG_HEADER : 0;
	size_t wire = w->shared ? (len > w->ring_size ? SIZE_MAX : log_sh_extent((uint32_t)len))
				: hdr + len + WIMM_LOG_TRAILER;
	if (wire > w->ring_size || wire > w->max_msg)
		return WIMM_E_TOOBIG;
	int64_t deadline = log_now_ms() + w->attr.timeout_ms;
	uint32_t off, pad;
	for (;;) {
		off = w->tail;
		pad = 0;
		if (off + wire > w->ring_size) {
			pad = w->ring_size - off;
			off = 0;
		}
		if (w->ring_size - w->used >= pad + wire)
			break;
		int rc = pump(w, (flags & WIMM_LOG_WAIT) ? 1 : 0);
		if (rc || w->broken)
			return rc ? rc : w->broken;
		if (w->ring_size - w->used >= pad + wire)
			continue;
		if (!(flags & WIMM_LOG_WAIT))
			return WIMM_E_AGAIN;
		if (log_now_ms() > deadline)
			return WIMM_E_TIMEDOUT;
	}
	unsigned char *p = w->mirror + off;
	if (w->shared)
		return shared_append(w, p, data, len, (uint32_t)off, (uint32_t)(pad + wire),
				     deadline, seq);
	if (hdr)
		log_put32(p, (uint32_t)wire);
	if (len)
		memcpy(p + hdr, data, len);
	log_put32(p + hdr + len, wimm_log_crc32c(0, data, len));
	struct pend e = {
	    .seq = w->next_seq, .off = off, .wire = (uint32_t)wire, .foot = (uint32_t)(pad + wire)};
	uint32_t v[3] = {hdr ? 0 : (uint32_t)wire, (uint32_t)(e.seq & LOG_SEQ_MASK),
			 (pad ? LOG_F_WRAP : 0) | (hdr ? LOG_F_LONG : 0)};
	/* A wrap with nothing left over: still say so, the server's tail is
	 * at the ring's end. */
	if (!pad && off == 0 && w->tail != 0)
		v[2] |= LOG_F_WRAP;
	wimm_imm_pack(log_layout_in(), v, &e.imm);
	for (;;) {
		int rc = post_entry(w, &e);
		if (rc == 0)
			break;
		if (rc != WIMM_E_AGAIN) {
			if (rc == WIMM_E_DISCONNECTED)
				w->broken = rc;
			return rc;
		}
		/* Every send in flight: wait for a completion rather than spin
		 * (many writers spinning starve the server on a slow machine,
		 * Soft-RoCE in the TCG guest). */
		rc = pump(w, (flags & WIMM_LOG_WAIT) ? 1 : 0);
		if (rc || w->broken)
			return rc ? rc : w->broken;
		if (!(flags & WIMM_LOG_WAIT))
			return WIMM_E_AGAIN;
		if (log_now_ms() > deadline)
			return WIMM_E_TIMEDOUT;
	}
	int rc = q_push(w, e);
	if (rc)
		return rc; /* cannot happen after a successful post in practice */
	w->used += e.foot;
	w->tail = off + (uint32_t)wire;
	w->next_seq++;
	if (seq)
		*seq = e.seq;
	return 0;
}

int wimm_log_wait(struct wimm_log_writer *w, uint64_t seq, enum wimm_log_ack level, int timeout_ms)
{
	if (!w || seq >= w->next_seq || (level != WIMM_LOG_VISIBLE && level != WIMM_LOG_DURABLE))
		return WIMM_E_INVAL;
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : log_now_ms() + timeout_ms;
	for (;;) {
		uint64_t have = level == WIMM_LOG_DURABLE ? w->durable : w->visible;
		if (have >= seq)
			return 0;
		if (w->broken)
			return w->broken;
		int64_t left = deadline - log_now_ms();
		if (left <= 0 && timeout_ms >= 0)
			return WIMM_E_TIMEDOUT;
		int rc = pump(w, timeout_ms == 0 ? 0 : (int)(left < 100 ? left : 100));
		if (rc)
			return rc;
		if (timeout_ms == 0) {
			have = level == WIMM_LOG_DURABLE ? w->durable : w->visible;
			return have >= seq ? 0 : (w->broken ? w->broken : WIMM_E_TIMEDOUT);
		}
	}
}

int wimm_log_writer_state(const struct wimm_log_writer *w, struct wimm_log_writer_state *out)
{
	if (!w || !out)
		return WIMM_E_INVAL;
	out->appended = w->next_seq - 1;
	out->visible = w->visible;
	out->durable = w->durable;
	out->pending = w->qlen;
	out->ring_size = w->ring_size;
	out->resent = w->resent;
	return 0;
}

int wimm_log_writer_reconnect(struct wimm_log_writer *w)
{
	if (!w)
		return WIMM_E_INVAL;
	wimm_conn_delete(&w->conn);
	uint64_t first = w->qlen ? w->q[w->qhead].seq : w->next_seq;
	uint32_t start = w->qlen ? w->q[w->qhead].off : w->tail;
	int rc = hello_retry(w, first, start);
	if (rc)
		return rc;
	/* Everything not durable goes again, in order; the server drops what
	 * it already holds. Acknowledgements taken meanwhile may retire
	 * entries from the front: walk by sequence, not by index. */
	int64_t deadline = log_now_ms() + w->attr.timeout_ms;
	for (uint64_t seq = first; seq < w->next_seq; seq++) {
		if (!w->qlen || seq < w->q[w->qhead].seq)
			continue;
		struct pend e = *q_at(w, (size_t)(seq - w->q[w->qhead].seq));
		if (w->shared) {
			/* A new place for each: the old ones may be taken by others. */
			rc = shared_post(w, &e, deadline);
			if (rc)
				return rc;
			w->resent++;
			continue;
		}
		while ((rc = post_entry(w, &e)) == WIMM_E_AGAIN) {
			if (log_now_ms() > deadline)
				return WIMM_E_TIMEDOUT;
			rc = pump(w, 0);
			if (rc || w->broken)
				return rc ? rc : w->broken;
		}
		if (rc) {
			if (rc == WIMM_E_DISCONNECTED)
				w->broken = rc;
			return rc;
		}
		w->resent++;
	}
	set_durable(w, w->resume_seq < w->next_seq ? w->resume_seq : w->next_seq - 1);
	return 0;
}

const char *wimm_log_writer_error(const struct wimm_log_writer *w)
{
	return w ? w->err : "";
}

int wimm_log_writer_close(struct wimm_log_writer **pw, int timeout_ms)
{
	struct wimm_log_writer *w = pw ? *pw : NULL;
	int rc = 0;
	if (!w)
		return 0;
	if (w->conn && timeout_ms != 0 && w->next_seq > 1 && w->durable < w->next_seq - 1)
		rc = wimm_log_wait(w, w->next_seq - 1, WIMM_LOG_DURABLE, timeout_ms);
	if (w->conn) {
		int crc =
		    w->broken ? (wimm_conn_delete(&w->conn), 0) : wimm_conn_close(&w->conn, 1000);
		if (!rc && crc == WIMM_E_DISCONNECTED)
			rc = crc;
	}
	wimm_mr_dereg(&w->mirror_mr);
	wimm_mr_dereg(&w->win_mr);
	wimm_mr_dereg(&w->aux_mr);
	free(w->mirror);
	free(w->q);
	free(w->addr);
	free(w);
	*pw = NULL;
	return rc;
}
