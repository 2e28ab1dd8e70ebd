/* The reader of the log service: a request (one write-with-imm into its
 * window on the server), and the server's answer written into the
 * reader's window with one write-with-imm: whole records, CRC32C checked
 * here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log_internal.h"

#define DEFAULT_WINDOW (4u << 20)
#define RX_DEPTH 16

struct wimm_log_reader {
	struct wimm_ctx *ctx;
	struct wimm_conn *conn;
	unsigned char *win;
	size_t win_len;
	struct wimm_mr *win_mr;
	unsigned char req[64];
	struct wimm_mr *req_mr;
	int broken;
	/* the last answer */
	int answered;
	uint32_t kind, val, len;
	char err[200];
};

static int pump(struct wimm_log_reader *r, int timeout_ms)
{
	struct wimm_event ev[8];
	int n = wimm_wait(r->ctx, ev, 8, WIMM_WAIT_ADAPTIVE, timeout_ms);
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		if (ev[i].conn != r->conn)
			continue;
		if (ev[i].type == WIMM_EV_DISCONNECT || ev[i].type == WIMM_EV_ERROR) {
			/* The server's error doorbell, then its close: both may come
			 * in one batch (verbs); the close must not hide the reason. */
			if (!r->broken)
				r->broken = WIMM_E_DISCONNECTED;
		} else if (ev[i].type == WIMM_EV_WRITE_IMM) {
			uint32_t f[2];
			wimm_imm_unpack(log_layout_out(), ev[i].imm, f);
			r->kind = f[0];
			r->val = f[1];
			r->len = ev[i].len;
			r->answered = 1;
			if (f[0] == LOG_K_ERROR) {
				struct log_error le;
				log_error_decode(r->win + LOG_ERROR_OFF, &le);
				log_error_text(&le, r->err, sizeof(r->err));
				r->broken =
				    le.code == LOG_ERR_TRUNCATED ? WIMM_E_RANGE : WIMM_E_PROTO;
			}
		}
	}
	return 0;
}

static int await(struct wimm_log_reader *r, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : log_now_ms() + timeout_ms;
	while (!r->answered) {
		if (r->broken)
			return r->broken;
		int64_t left = deadline - log_now_ms();
		if (left <= 0)
			return WIMM_E_TIMEDOUT;
		int rc = pump(r, (int)(left < 100 ? left : 100));
		if (rc)
			return rc;
	}
	return r->kind == LOG_K_ERROR ? r->broken : 0;
}

int wimm_log_reader_open(struct wimm_ctx *ctx, const char *addr, size_t window_bytes,
			 int timeout_ms, struct wimm_log_reader **out)
{
	if (!ctx || !addr || !out)
		return WIMM_E_INVAL;
	struct wimm_log_reader *r = calloc(1, sizeof(*r));
	struct wimm_fabric_limits lim;
	unsigned char hb[LOG_HELLO_LEN];
	int rc = WIMM_E_NOMEM;
	if (!r)
		return rc;
	r->ctx = ctx;
	r->win_len = window_bytes ? window_bytes : DEFAULT_WINDOW;
	if (r->win_len < 4096) {
		rc = WIMM_E_INVAL;
		goto fail;
	}
	r->win = calloc(1, r->win_len);
	if (!r->win)
		goto fail;
	rc = wimm_mr_reg(ctx, r->win, r->win_len, WIMM_REMOTE_WRITE, &r->win_mr);
	if (!rc)
		rc = wimm_mr_reg(ctx, r->req, sizeof(r->req), WIMM_LOCAL, &r->req_mr);
	if (!rc)
		rc = wimm_ctx_limits(ctx, &lim);
	if (rc)
		goto fail;
	if (timeout_ms <= 0)
		timeout_ms = 10000;
	log_hello_encode(hb, &(struct log_hello){.role = LOG_ROLE_READER});
	int inband = lim.private_max < LOG_HELLO_LEN;
	struct wimm_conn_attr a = {.window = r->win_mr,
				   .rx_depth = RX_DEPTH,
				   .private_data = inband ? NULL : hb,
				   .private_len = inband ? 0 : LOG_HELLO_LEN};
	rc = log_connect_retry(ctx, addr, &a, log_now_ms() + timeout_ms, &r->conn);
	if (rc)
		goto fail;
	if (inband) {
		uint32_t imm, v[3] = {LOG_HELLO_LEN, 0, LOG_F_HELLO};
		memcpy(r->req, hb, sizeof(hb));
		wimm_imm_pack(log_layout_in(), v, &imm);
		rc = wimm_write_imm(r->conn, r->req_mr, 0, 0, LOG_HELLO_LEN, imm, WIMM_F_WAIT);
		if (rc)
			goto fail;
	}
	rc = await(r, timeout_ms);
	if (!rc && r->kind != LOG_K_RESUME)
		rc = WIMM_E_PROTO;
	if (rc)
		goto fail;
	*out = r;
	return 0;
fail:
	wimm_log_reader_close(&r);
	return rc;
}

static int request(struct wimm_log_reader *r, const struct log_req *q, int timeout_ms)
{
	uint32_t imm, v[3] = {LOG_REQ_LEN, 0, LOG_F_REQ};
	if (r->broken)
		return r->broken;
	log_req_encode(r->req, q);
	wimm_imm_pack(log_layout_in(), v, &imm);
	r->answered = 0;
	int rc = wimm_write_imm(r->conn, r->req_mr, 0, 0, LOG_REQ_LEN, imm, WIMM_F_WAIT);
	return rc ? rc : await(r, timeout_ms);
}

/* Ask for records (by position, or by writer id and sequence) and deliver
 * them, each checked against what was asked. */
static int read_records(struct wimm_log_reader *r, const struct log_req *q, wimm_log_entry_fn fn,
			void *arg, int timeout_ms)
{
	if (!r || !fn)
		return WIMM_E_INVAL;
	int rc = request(r, q, timeout_ms);
	if (rc)
		return rc;
	if (r->kind != LOG_K_DATA)
		return WIMM_E_PROTO;
	size_t off = 0;
	uint32_t n = 0;
	for (; n < r->val; n++) {
		struct log_rec h;
		if (off + LOG_REC_HDR > r->len || log_rec_decode(r->win + off, &h) ||
		    off + LOG_REC_HDR + h.len > r->len)
			return WIMM_E_PROTO;
		if (q->op == LOG_REQ_READ ? h.pos != q->from + n
					  : (h.writer != q->id || h.seq != q->from + n))
			return WIMM_E_PROTO;
		const unsigned char *data = r->win + off + LOG_REC_HDR;
		if (wimm_log_crc32c(0, data, h.len) != h.crc)
			return WIMM_E_PROTO;
		struct wimm_log_entry e = {.pos = h.pos,
					   .writer_id = h.writer,
					   .seq = h.seq,
					   .len = h.len,
					   .crc = h.crc,
					   .data = data};
		off += LOG_REC_HDR + h.len;
		if (fn(arg, &e))
			return (int)n + 1;
	}
	return (int)n;
}

int wimm_log_read(struct wimm_log_reader *r, uint64_t from, uint32_t max, wimm_log_entry_fn fn,
		  void *arg, int timeout_ms)
{
	struct log_req q = {.op = LOG_REQ_READ, .max = max, .from = from};
	return read_records(r, &q, fn, arg, timeout_ms);
}

int wimm_log_read_writer(struct wimm_log_reader *r, uint64_t id, uint64_t from_seq, uint32_t max,
			 wimm_log_entry_fn fn, void *arg, int timeout_ms)
{
	struct log_req q = {.op = LOG_REQ_READ_LEDGER, .max = max, .from = from_seq, .id = id};
	return from_seq == 0 ? WIMM_E_INVAL : read_records(r, &q, fn, arg, timeout_ms);
}

int wimm_log_reader_ledger(struct wimm_log_reader *r, uint64_t id, struct wimm_log_ledger_info *out,
			   int timeout_ms)
{
	if (!r || !out)
		return WIMM_E_INVAL;
	int rc = request(r, &(struct log_req){.op = LOG_REQ_LEDGER, .id = id}, timeout_ms);
	if (rc)
		return rc;
	if (r->kind != LOG_K_LEDGER || r->len < LOG_LEDGER_REPLY_LEN)
		return WIMM_E_PROTO;
	struct log_ledger_reply lr;
	log_ledger_reply_decode(r->win, &lr);
	*out = (struct wimm_log_ledger_info){.last_seq = lr.last_seq,
					     .durable_seq = lr.durable_seq,
					     .first_seq = lr.first_seq,
					     .epoch = lr.epoch};
	return 0;
}

int wimm_log_truncate(struct wimm_log_reader *r, uint64_t before, uint64_t *first, int timeout_ms)
{
	if (!r)
		return WIMM_E_INVAL;
	int rc = request(r, &(struct log_req){.op = LOG_REQ_TRUNCATE, .from = before}, timeout_ms);
	if (!rc && r->kind != LOG_K_DONE)
		rc = WIMM_E_PROTO;
	if (rc || !first)
		return rc;
	struct wimm_log_stat st;
	rc = wimm_log_reader_stat(r, &st, timeout_ms);
	if (!rc)
		*first = st.first;
	return rc;
}

const char *wimm_log_reader_error(const struct wimm_log_reader *r)
{
	return r ? r->err : "";
}

int wimm_log_reader_stat(struct wimm_log_reader *r, struct wimm_log_stat *out, int timeout_ms)
{
	if (!r || !out)
		return WIMM_E_INVAL;
	int rc = request(r, &(struct log_req){.op = LOG_REQ_STAT}, timeout_ms);
	if (rc)
		return rc;
	if (r->kind != LOG_K_STAT || r->len < LOG_STAT_LEN)
		return WIMM_E_PROTO;
	log_stat_decode(r->win, out);
	return 0;
}

int wimm_log_reader_close(struct wimm_log_reader **pr)
{
	struct wimm_log_reader *r = pr ? *pr : NULL;
	if (!r)
		return 0;
	if (r->conn)
		wimm_conn_close(&r->conn, 500);
	wimm_mr_dereg(&r->win_mr);
	wimm_mr_dereg(&r->req_mr);
	free(r->win);
	free(r);
	*pr = NULL;
	return 0;
}
