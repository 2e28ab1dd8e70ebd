/* wimm_kv client: synchronous requests on the control connection, value
 * writes into granted slots, checked one-sided reads. The shared index's
 * paths are in kv_client_index.c. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kv_client.h"

int kv_cl_wait(struct wimm_kv_client *c, uint32_t want)
{
	struct wimm_event ev[16];
	uint64_t deadline = kv_now_ns() + (uint64_t)c->timeout_ms * 1000000u;
	if (c->dead)
		return WIMM_E_DISCONNECTED;
	for (;;) {
		uint64_t t = kv_now_ns();
		if (t >= deadline)
			return WIMM_E_TIMEDOUT;
		int n =
		    wimm_wait(c->ctx, ev, 16, c->wait_mode, (int)((deadline - t) / 1000000u) + 1);
		if (n < 0)
			return n;
		int found = 0;
		for (int i = 0; i < n; i++) {
			const struct wimm_event *e = &ev[i];
			if (e->type == WIMM_EV_DISCONNECT) {
				c->dead = 1;
			} else if (e->type == WIMM_EV_SEND_IMM && e->conn == c->ctl &&
				   e->imm == want && want != 0) {
				c->reply_len = e->len < KV_CLIENT_RECV ? e->len : KV_CLIENT_RECV;
				memcpy(c->reply, e->data, c->reply_len);
				found = 1;
			} else if ((e->conn == c->rd || (c->ix && e->conn == c->ix)) &&
				   (e->op == WIMM_OP_READ || e->op == WIMM_OP_CMP_SWAP) &&
				   (e->type == WIMM_EV_SEND_DONE || e->type == WIMM_EV_ERROR) &&
				   c->ops_pending > 0) {
				c->ops_pending--;
				if (e->type == WIMM_EV_ERROR && c->ops_status == 0)
					c->ops_status = e->status;
				found |= want == 0 && c->ops_pending == 0;
			}
		}
		if (found)
			return 0;
		if (c->dead)
			return WIMM_E_DISCONNECTED;
	}
}

/* Send the request in c->msg[0..len) and wait for its answer; returns the
 * answer's status (its first field). */
int kv_cl_read(struct wimm_kv_client *c, struct wimm_conn *conn, struct wimm_mr *mr, size_t dst_off,
	       size_t src_off, size_t len)
{
	int rc = wimm_read(conn, mr, dst_off, src_off, len, WIMM_F_SIGNAL | WIMM_F_WAIT);
	c->ops_pending += rc == 0;
	return rc;
}

int kv_cl_await(struct wimm_kv_client *c)
{
	int rc = kv_cl_wait(c, 0);
	if (rc == 0)
		rc = c->ops_status;
	c->ops_status = 0;
	return rc;
}

int kv_cl_call(struct wimm_kv_client *c, enum kv_op op, size_t len)
{
	if (c->dead)
		return WIMM_E_DISCONNECTED;
	c->seq = (c->seq + 1) & 0xffffffu;
	uint32_t imm = KV_IMM(op, c->seq);
	int rc = wimm_send_imm(c->ctl, c->msg_mr, 0, len, imm, WIMM_F_WAIT);
	if (rc < 0)
		return rc;
	rc = kv_cl_wait(c, imm);
	if (rc < 0)
		return rc;
	if (c->reply_len < 4)
		return WIMM_E_PROTO;
	return (int32_t)kv_get32(c->reply);
}

size_t kv_cl_put_key(struct wimm_kv_client *c, size_t off, const void *key, size_t klen)
{
	kv_put16(c->msg + off, (uint16_t)klen);
	memcpy(c->msg + off + 2, key, klen);
	return off + 2 + klen;
}

static int check_key(const struct wimm_kv_client *c, const void *key, size_t klen)
{
	if (!c || !key || klen == 0 || klen > WIMM_KV_MAX_KEY)
		return WIMM_E_INVAL;
	return 0;
}

/* A request that the server may answer BUSY (slots waiting for leases):
 * retried until the leases must have ended. */
static int call_retry_busy(struct wimm_kv_client *c, enum kv_op op, size_t len)
{
	uint64_t give_up = kv_now_ns() + ((uint64_t)c->lease_ms * 2 + 1000) * 1000000u;
	for (;;) {
		int rc = kv_cl_call(c, op, len);
		if (rc != WIMM_KV_E_BUSY || kv_now_ns() > give_up)
			return rc == WIMM_KV_E_BUSY ? WIMM_KV_E_FULL : rc;
		nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	}
}

int wimm_kv_put_begin(struct wimm_kv_client *c, const void *key, size_t klen, size_t len,
		      unsigned flags, void **buf)
{
	int rc = check_key(c, key, klen);
	if (rc < 0 || !buf || c->begun || (flags & ~(unsigned)WIMM_KV_PIN))
		return WIMM_E_INVAL;
	/* Beside a shared index the slot holds the key before the value. */
	size_t kpart = c->ix ? klen : 0;
	int order = len > WIMM_KV_MAX_SLOT ? -1 : kv_class_of(len + kpart);
	if (order < 0 || ((size_t)WIMM_KV_MIN_SLOT << order) > c->max_slot)
		return WIMM_E_TOOBIG;
	kv_put32(c->msg, (uint32_t)len);
	kv_put32(c->msg + 4, flags);
	rc = call_retry_busy(c, KV_OP_PUT, kv_cl_put_key(c, 8, key, klen));
	if (rc < 0)
		return rc;
	if (c->reply_len < 24)
		return WIMM_E_PROTO;
	c->gid = kv_get32(c->reply + 4);
	c->off = kv_get64(c->reply + 8);
	c->version = kv_get64(c->reply + 16);
	if (c->ix && (rc = kv_cl_ix_granted(c)) < 0)
		return rc;
	c->hash = kv_key_hash(key, klen);
	c->len = (uint32_t)(len + kpart);
	c->klen = (uint32_t)kpart;
	c->order = (unsigned)order;
	c->begun = 1;
	memcpy(c->buf + WIMM_KV_HEADER, key, kpart);
	*buf = c->buf + WIMM_KV_HEADER + kpart;
	return 0;
}

int wimm_kv_put_commit(struct wimm_kv_client *c)
{
	if (!c || !c->begun)
		return WIMM_E_INVAL;
	c->begun = 0;
	struct kv_hdr h = {.len = c->len, .version = c->version, .khash = c->hash};
	kv_hdr_encode(c->buf, &h, c->buf + WIMM_KV_HEADER);
	kv_put32(c->buf + KV_HDR_KLEN, c->klen);
	/* The one write: header and value, the doorbell names the grant. */
	c->t_write = kv_now_ns();
	int rc = wimm_write_imm(c->ctl, c->buf_mr, 0, c->off, WIMM_KV_HEADER + c->len,
				KV_WIMM(c->gid, c->hash, c->order), WIMM_F_WAIT);
	if (rc < 0)
		return rc;
	rc = kv_cl_wait(c, KV_IMM(KV_OP_DONE, c->gid));
	if (rc < 0)
		return rc;
	rc = c->reply_len < 4 ? WIMM_E_PROTO : (int32_t)kv_get32(c->reply);
	/* Checked by the server: now the client publishes it itself. */
	return rc == 0 && c->ix ? kv_cl_ix_publish(c) : rc;
}

int wimm_kv_put(struct wimm_kv_client *c, const void *key, size_t klen, const void *value,
		size_t len, unsigned flags)
{
	void *dst;
	if (!value && len)
		return WIMM_E_INVAL;
	int rc = wimm_kv_put_begin(c, key, klen, len, flags, &dst);
	if (rc < 0)
		return rc;
	if (len)
		memcpy(dst, value, len);
	return wimm_kv_put_commit(c);
}

int wimm_kv_put_send(struct wimm_kv_client *c, const void *key, size_t klen, const void *value,
		     size_t len, unsigned flags)
{
	int rc = check_key(c, key, klen);
	if (rc < 0 || (!value && len) || (flags & ~(unsigned)WIMM_KV_PIN))
		return WIMM_E_INVAL;
	if (c->ix)
		return WIMM_E_NOTSUP; /* a shared index's server publishes nothing itself */
	if (len > c->send_put_max || kv_class_of(len) < 0)
		return WIMM_E_TOOBIG;
	kv_put32(c->msg, (uint32_t)len);
	kv_put32(c->msg + 4, flags);
	size_t off = kv_cl_put_key(c, 8, key, klen);
	if (len)
		memcpy(c->msg + off, value, len);
	return call_retry_busy(c, KV_OP_SPUT, off + len);
}

int wimm_kv_get(struct wimm_kv_client *c, const void *key, size_t klen, void *buf, size_t cap,
		size_t *len)
{
	int rc = check_key(c, key, klen);
	if (rc < 0 || !len || (!buf && cap))
		return WIMM_E_INVAL;
	if (c->ix)
		return kv_cl_ix_get(c, key, klen, buf, cap, len);
	uint32_t hash = kv_key_hash(key, klen);
	for (int attempt = 0; attempt < KV_GET_TRIES; attempt++) {
		uint64_t t0 = kv_now_ns();
		rc = kv_cl_call(c, KV_OP_GET, kv_cl_put_key(c, 0, key, klen));
		if (rc < 0)
			return rc;
		if (c->reply_len < 24)
			return WIMM_E_PROTO;
		uint32_t vlen = kv_get32(c->reply + 4);
		uint64_t off = kv_get64(c->reply + 8), version = kv_get64(c->reply + 16);
		if (vlen > c->max_slot - WIMM_KV_HEADER)
			return WIMM_E_PROTO;
		rc = kv_cl_read(c, c->rd, c->buf_mr, 0, off, WIMM_KV_HEADER + vlen);
		if (rc < 0 || (rc = kv_cl_await(c)) < 0)
			return rc;
		/* Re-check the lease after the transfer: past it, the slot may
		 * have been freed and rewritten while we read (2 ms margin for
		 * the server's millisecond clock). */
		uint64_t elapsed = kv_now_ns() - t0;
		struct kv_hdr h;
		if (elapsed + 2000000u >= (uint64_t)c->lease_ms * 1000000u ||
		    kv_hdr_decode(c->buf, &h) < 0 || h.version != version || h.len != vlen ||
		    h.khash != hash || wimm_kv_crc32c(c->buf + WIMM_KV_HEADER, vlen) != h.vcrc) {
			c->retries++;
			continue;
		}
		*len = vlen;
		if (cap < vlen)
			return WIMM_E_TRUNC;
		memcpy(buf, c->buf + WIMM_KV_HEADER, vlen);
		return 0;
	}
	return WIMM_KV_E_CORRUPT;
}

int wimm_kv_del(struct wimm_kv_client *c, const void *key, size_t klen)
{
	int rc = check_key(c, key, klen);
	if (rc < 0)
		return rc;
	if (c->ix)
		return kv_cl_ix_del(c, key, klen);
	return kv_cl_call(c, KV_OP_DEL, kv_cl_put_key(c, 0, key, klen));
}

int wimm_kv_stat(struct wimm_kv_client *c, struct wimm_kv_stats *out)
{
	uint64_t f[KV_STAT_FIELDS];
	if (!c || !out)
		return WIMM_E_INVAL;
	int rc = kv_cl_call(c, KV_OP_STAT, 0);
	if (rc < 0)
		return rc;
	if (c->reply_len < 4 + 8 * KV_STAT_FIELDS)
		return WIMM_E_PROTO;
	for (size_t i = 0; i < KV_STAT_FIELDS; i++)
		f[i] = kv_get64(c->reply + 4 + 8 * i);
	memcpy(out, f, sizeof(f));
	return 0;
}

int wimm_kv_client_poll(struct wimm_kv_client *c)
{
	struct wimm_event ev[16];
	if (!c)
		return WIMM_E_INVAL;
	int n;
	/* Nothing is expected now: late answers of timed-out calls go. */
	while (!c->dead && (n = wimm_poll(c->ctx, ev, 16)) > 0)
		for (int i = 0; i < n; i++)
			c->dead |= ev[i].type == WIMM_EV_DISCONNECT;
	return c->dead ? WIMM_E_DISCONNECTED : 0;
}

uint64_t wimm_kv_client_retries(const struct wimm_kv_client *c)
{
	return c ? c->retries : 0;
}

int wimm_kv_connect(const char *addr, const struct wimm_kv_client_attr *attr,
		    struct wimm_kv_client **out)
{
	struct wimm_kv_client *c = NULL;
	char raddr[192];
	int rc;

	if (!addr || !out)
		return WIMM_E_INVAL;
	*out = NULL;
	const char *colon = strrchr(addr, ':');
	if (!colon || (size_t)(colon - addr) >= sizeof(raddr) - 8)
		return WIMM_E_ADDR;
	c = calloc(1, sizeof(*c));
	if (!c)
		return WIMM_E_NOMEM;
	c->timeout_ms = attr && attr->timeout_ms > 0 ? attr->timeout_ms : 5000;
	unsigned flags = attr ? attr->ctx_flags : 0;
	struct wimm_ctx_attr cattr = {.flags = flags,
				      .post_wait_ms = (uint32_t)c->timeout_ms,
				      .liveness_ms = attr ? attr->liveness_ms : 0};
	rc = wimm_ctx_open(attr && attr->fabric ? attr->fabric : "auto", &cattr, &c->ctx);
	if (rc < 0)
		goto fail;
	c->wait_mode = kv_wait_mode(c->ctx, flags);
	struct wimm_conn_attr cta = {.rx_depth = 16, .recv_size = KV_CLIENT_RECV};
	rc = wimm_connect(c->ctx, addr, &cta, c->timeout_ms, &c->ctl);
	if (rc < 0)
		goto fail;
	rc = kv_cl_wait(c, KV_IMM(KV_OP_HELLO, 0));
	if (rc == WIMM_E_TIMEDOUT || rc == WIMM_E_DISCONNECTED)
		rc = WIMM_E_PROTO; /* something that is not a kv server */
	if (rc < 0)
		goto fail;
	rc = WIMM_E_PROTO;
	if (c->reply_len < KV_HELLO_LEN || kv_get32(c->reply) != KV_PROTO_VERSION)
		goto fail;
	c->lease_ms = kv_get32(c->reply + 4);
	c->max_slot = kv_get32(c->reply + 8);
	uint32_t rport = kv_get32(c->reply + 12);
	c->send_put_max = kv_get32(c->reply + 24);
	c->grant_ms = kv_get32(c->reply + 44);
	uint32_t iport = kv_get32(c->reply + 32);
	c->ix_buckets = kv_get32(c->reply + 36);
	c->ix_flags = kv_get32(c->reply + 40);
	if (c->lease_ms < 10 || c->max_slot < WIMM_KV_MIN_SLOT || c->max_slot > WIMM_KV_MAX_SLOT ||
	    rport == 0 || rport > 65535 || c->send_put_max > WIMM_KV_MAX_SLOT || c->grant_ms < 10 ||
	    iport > 65535 ||
	    (iport && (c->ix_buckets < 2 || (c->ix_buckets & (c->ix_buckets - 1)))))
		goto fail;
	snprintf(raddr, sizeof(raddr), "%.*s:%u", (int)(colon - addr), addr, rport);
	struct wimm_conn_attr rda = {.rx_depth = 4};
	rc = wimm_connect(c->ctx, raddr, &rda, c->timeout_ms, &c->rd);
	if (rc < 0)
		goto fail;
	rc = WIMM_E_NOMEM;
	c->buf = aligned_alloc(4096, c->max_slot);
	c->msg_len = 16 + WIMM_KV_MAX_KEY + c->send_put_max;
	c->msg = malloc(c->msg_len);
	if (!c->buf || !c->msg)
		goto fail;
	rc = wimm_mr_reg(c->ctx, c->buf, c->max_slot, WIMM_LOCAL, &c->buf_mr);
	if (rc < 0)
		goto fail;
	rc = wimm_mr_reg(c->ctx, c->msg, c->msg_len, WIMM_LOCAL, &c->msg_mr);
	if (rc < 0)
		goto fail;
	if (iport) {
		snprintf(raddr, sizeof(raddr), "%.*s:%u", (int)(colon - addr), addr, iport);
		rc = kv_cl_ix_connect(c, raddr);
		if (rc < 0)
			goto fail;
	}
	*out = c;
	return 0;
fail:
	wimm_kv_close(&c);
	return rc;
}

void wimm_kv_close(struct wimm_kv_client **cp)
{
	struct wimm_kv_client *c = cp ? *cp : NULL;
	if (!c)
		return;
	kv_cl_ix_close(c);
	wimm_conn_delete(&c->rd);
	wimm_conn_delete(&c->ctl);
	wimm_mr_dereg(&c->buf_mr);
	wimm_mr_dereg(&c->msg_mr);
	wimm_ctx_close(&c->ctx);
	free(c->buf);
	free(c->msg);
	free(c);
	*cp = NULL;
}
