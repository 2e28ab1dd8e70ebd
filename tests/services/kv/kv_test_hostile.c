/* kv_test's hostile client: it speaks the kv protocol by hand over a raw
 * wimm connection (kv_internal.h), to try what the client library never
 * does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_internal.h"
#include "kv_test.h"

/* ------------------------------------------------------ hostile client */

int raw_wait(struct raw *r, uint32_t want)
{
	struct wimm_event ev[16];
	double give_up = now_s() + 10.0 * scale();
	while (now_s() < give_up) {
		int n = wimm_wait(r->ctx, ev, 16, WIMM_WAIT_ADAPTIVE, 100);
		for (int i = 0; i < n; i++) {
			if (ev[i].type == WIMM_EV_DISCONNECT)
				die("hostile: dropped by the server");
			if (ev[i].type == WIMM_EV_SEND_IMM && ev[i].imm == want) {
				memcpy(r->reply, ev[i].data, ev[i].len < 256 ? ev[i].len : 256);
				return (int32_t)kv_get32(r->reply);
			}
		}
	}
	die("hostile: no answer %08x", want);
}

void raw_open(struct raw *r, char **a, const char *who)
{
	struct wimm_conn_attr ca = {.rx_depth = 16, .recv_size = KV_CLIENT_RECV};
	int rc = wimm_ctx_open(a[0], NULL, &r->ctx);
	if (rc == 0)
		rc = wimm_mr_reg(r->ctx, r->buf, sizeof(r->buf), WIMM_LOCAL, &r->mr);
	if (rc == 0)
		rc = wimm_connect(r->ctx, a[1], &ca, 10000 * scale(), &r->c);
	if (rc < 0)
		die("%s: connect: %s", who, wimm_kv_strerror(rc));
	raw_wait(r, KV_IMM(KV_OP_HELLO, 0));
}

void raw_grant(struct raw *r, const char *key, uint32_t len, uint32_t seq, uint32_t *gid,
	       uint64_t *off, uint64_t *version)
{
	size_t klen = strlen(key);
	kv_put32(r->buf, len);
	kv_put32(r->buf + 4, 0);
	kv_put16(r->buf + 8, (uint16_t)klen);
	memcpy(r->buf + 10, key, klen);
	int rc = wimm_send_imm(r->c, r->mr, 0, 10 + klen, KV_IMM(KV_OP_PUT, seq), WIMM_F_WAIT);
	if (rc < 0 || (rc = raw_wait(r, KV_IMM(KV_OP_PUT, seq))) != 0)
		die("hostile: grant: %s", wimm_kv_strerror(rc));
	*gid = kv_get32(r->reply + 4);
	*off = kv_get64(r->reply + 8);
	*version = kv_get64(r->reply + 16);
}

/* Write [header | value] of key into off with imm; the server's verdict. */
static int raw_write(struct raw *r, const char *key, uint32_t len, uint64_t off, uint64_t version,
		     uint32_t imm, int corrupt)
{
	struct kv_hdr h = {.len = len, .version = version, .khash = kv_key_hash(key, strlen(key))};
	memset(r->buf + WIMM_KV_HEADER, 'h', len);
	kv_hdr_encode(r->buf, &h, r->buf + WIMM_KV_HEADER);
	if (corrupt)
		r->buf[WIMM_KV_HEADER + len / 2] ^= 1;
	int rc = wimm_write_imm(r->c, r->mr, 0, off, WIMM_KV_HEADER + len, imm, WIMM_F_WAIT);
	if (rc < 0)
		die("hostile: write_imm: %s", wimm_kv_strerror(rc));
	return raw_wait(r, KV_IMM(KV_OP_DONE, KV_WIMM_GRANT(imm)));
}

/* hostile FABRIC ADDR: outside its window, a bad checksum, a grant it does
 * not hold, a wrong key hash: all refused; then it publishes "mine" and
 * rewrites that slot behind the server's back (checked by the checker). */
int role_hostile(char **a)
{
	static struct raw r;
	struct wimm_conn_info ci;
	uint32_t gid;
	uint64_t off, version;
	int rc = 0;
	raw_open(&r, a, "hostile");
	wimm_conn_info(r.c, &ci);
	/* Its window is its arena and nothing more. */
	if (ci.peer_window_len != kv_get64(r.reply + 16) ||
	    (rc = wimm_write(r.c, r.mr, 0, ci.peer_window_len - 8, 64, 0)) != WIMM_E_BOUNDS)
		die("hostile: window %zu, write past it: %s", ci.peer_window_len,
		    wimm_kv_strerror(rc));
	uint32_t hash = kv_key_hash("h", 1);
	raw_grant(&r, "h", 100, 1, &gid, &off, &version);
	if ((rc = raw_write(&r, "h", 100, off, version, KV_WIMM(gid, hash, 0), 1)) !=
	    WIMM_KV_E_CORRUPT)
		die("hostile: a bad checksum: %s", wimm_kv_strerror(rc));
	if ((rc = raw_write(&r, "h", 100, off, version, KV_WIMM(gid, hash, 0), 0)) !=
	    WIMM_KV_E_CORRUPT)
		die("hostile: a grant already used: %s", wimm_kv_strerror(rc));
	raw_grant(&r, "h", 100, 2, &gid, &off, &version);
	if ((rc = raw_write(&r, "h", 100, off, version, KV_WIMM(gid, hash + 1, 0), 0)) !=
	    WIMM_KV_E_CORRUPT)
		die("hostile: a wrong key hash: %s", wimm_kv_strerror(rc));
	hash = kv_key_hash("mine", 4);
	raw_grant(&r, "mine", 100, 3, &gid, &off, &version);
	if ((rc = raw_write(&r, "mine", 100, off, version, KV_WIMM(gid, hash, 0), 0)) != 0)
		die("hostile: a good put: %s", wimm_kv_strerror(rc));
	memset(r.buf, 'X', 64);
	rc = wimm_write(r.c, r.mr, 0, off + WIMM_KV_HEADER, 64, WIMM_F_SIGNAL | WIMM_F_WAIT);
	if (rc < 0 || (rc = wimm_conn_close(&r.c, 5000)) < 0)
		die("hostile: rewrite its own slot: %s", wimm_kv_strerror(rc));
	wimm_mr_dereg(&r.mr);
	wimm_ctx_close(&r.ctx);
	return 0;
}

/* leaser FABRIC ADDR: look "L" up by hand (a lease), say "G", wait for a
 * line on stdin (the overwrite happens meanwhile), then read the slot of
 * the lookup one-sided: it must still be v1, whole. */
int role_leaser(char **a)
{
	static struct raw r;
	struct wimm_conn *rd = NULL;
	struct wimm_event ev[16];
	char raddr[96], line[16];
	int rc = 0;
	raw_open(&r, a, "leaser");
	snprintf(raddr, sizeof(raddr), "%.*s:%u", (int)(strrchr(a[1], ':') - a[1]), a[1],
		 kv_get32(r.reply + 12));
	rc = wimm_connect(r.ctx, raddr, &(struct wimm_conn_attr){.rx_depth = 4}, 10000 * scale(),
			  &rd);
	if (rc < 0)
		die("leaser: connect the read port: %s", wimm_kv_strerror(rc));
	kv_put16(r.buf, 1);
	r.buf[2] = 'L';
	rc = wimm_send_imm(r.c, r.mr, 0, 3, KV_IMM(KV_OP_GET, 1), WIMM_F_WAIT);
	if (rc < 0 || (rc = raw_wait(&r, KV_IMM(KV_OP_GET, 1))) != 0)
		die("leaser: lookup: %s", wimm_kv_strerror(rc));
	uint32_t len = kv_get32(r.reply + 4);
	uint64_t off = kv_get64(r.reply + 8), version = kv_get64(r.reply + 16);
	printf("G\n");
	fflush(stdout);
	/* Waiting outside any wimm call (heartbeats pause; the test takes far
	 * less than the 5 s liveness). */
	if (!fgets(line, sizeof(line), stdin))
		die("leaser: no go");
	rc = wimm_read(rd, r.mr, 0, off, WIMM_KV_HEADER + len, WIMM_F_SIGNAL | WIMM_F_WAIT);
	if (rc < 0)
		die("leaser: read: %s", wimm_kv_strerror(rc));
	for (int done = 0; !done;) {
		int n = wimm_wait(r.ctx, ev, 16, WIMM_WAIT_ADAPTIVE, 10000 * scale());
		if (n <= 0)
			die("leaser: the read never completed");
		for (int i = 0; i < n; i++) {
			if (ev[i].type == WIMM_EV_ERROR || ev[i].type == WIMM_EV_DISCONNECT)
				die("leaser: the read failed: %s", wimm_kv_strerror(ev[i].status));
			done |= ev[i].type == WIMM_EV_SEND_DONE && ev[i].op == WIMM_OP_READ;
		}
	}
	struct kv_hdr h;
	uint32_t w, seq;
	if (kv_hdr_decode(r.buf, &h) < 0 || h.version != version || h.len != len ||
	    wimm_kv_crc32c(r.buf + WIMM_KV_HEADER, len) != h.vcrc ||
	    check_value(r.buf + WIMM_KV_HEADER, len, 21, &w, &seq) < 0 || seq != 1)
		die("leaser: the leased slot changed under its lease");
	wimm_conn_delete(&rd);
	wimm_conn_delete(&r.c);
	wimm_mr_dereg(&r.mr);
	wimm_ctx_close(&r.ctx);
	return 0;
}
