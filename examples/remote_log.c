/* remote_log: appends to a ring in the server's memory, one operation each.
 *
 * The server exposes a 64 KiB ring as its window. The client appends entries
 * (a 1..2000-byte body and its 4-byte FNV-1a checksum) with ONE write-with-imm
 * each, imm = {len:16, seq:12, flag:4}. Write-with-imm fits: data and notice
 * travel in one operation, and the notice is raised only after every byte
 * landed, so the server never reads a half-written entry.
 *
 * What the server is not told is where an entry landed: a verbs receive
 * completion carries no address. It needs none: events of one connection
 * arrive in post order, so the server's own tail follows the client's. An
 * entry never straddles the ring's end; one that would carries FLAG_WRAP:
 * "I start at 0, the rest of the ring is padding".
 *
 * Flow control: the client must not overwrite what the server has not read.
 * Every NOTICE_BYTES the server rings a zero-length doorbell whose imm is its
 * running total of consumed bytes (mod 2^32); the client may fill the ring up
 * to that total plus RING_SIZE. A total, unlike a delta, survives coalescing.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define RING_SIZE (64 * 1024)
#define MAX_BODY 2000
#define SUM_BYTES 4
#define NOTICE_BYTES (RING_SIZE / 8)
#define SEQ_MASK 0xfffu
#define FLAG_WRAP 1u
#define FLAG_LAST 2u

enum { F_LEN, F_SEQ, F_FLAG };
static const struct wimm_imm_field log_fields[] = {{"len", 16}, {"seq", 12}, {"flag", 4}};
static struct wimm_imm_layout log_layout;

struct log_run {
	const char *fabric;
	unsigned entries;
	uint32_t client_digest, server_digest; /* folded checksums of all entries */
	unsigned committed, wraps;
	uint64_t bytes;
	double secs;
};

static uint32_t fold(uint32_t digest, uint32_t sum)
{
	return (digest ^ sum) * 16777619u;
}

static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void *server_main(void *arg)
{
	struct log_run *run = arg;
	struct wimm_ctx *ctx = ex_open(run->fabric, "server");
	unsigned char *ring = calloc(1, RING_SIZE);
	struct wimm_mr *ring_mr;
	if (ring == NULL)
		ex_fatal("server: out of memory");
	/* Only the ring is remotely writable, never the rest of the heap. */
	int rc = wimm_mr_reg(ctx, ring, RING_SIZE, WIMM_REMOTE_WRITE, &ring_mr);
	if (rc < 0)
		ex_fail(ctx, rc, "server: register the ring");
	struct wimm_conn_attr attr = {.window = ring_mr, .rx_depth = 64};
	struct wimm_listener *l = ex_listen(ctx, &attr);
	struct wimm_conn *conn = ex_accept(ctx, l, "server");
	ex_unlisten(ctx, &l);

	uint32_t consumed = 0, announced = 0, f[3];
	size_t tail = 0;
	int done = 0;
	struct wimm_event ev[32];
	while (!done) {
		int n = ex_wait(ctx, ev, 32, "server", "an entry");
		for (int i = 0; i < n; i++) {
			if (ev[i].type == WIMM_EV_DISCONNECT)
				ex_fatal("server: the client left after %u entries",
					 run->committed);
			if (ev[i].type != WIMM_EV_WRITE_IMM)
				continue;
			wimm_imm_unpack(&log_layout, ev[i].imm, f);
			if (f[F_FLAG] & FLAG_WRAP) {
				consumed += RING_SIZE - tail;
				tail = 0;
				run->wraps++;
			}
			/* The imm carries the length because some fabrics report 0
			 * (docs/errata.md E3); where both exist they must agree. */
			if (ev[i].len != 0 && ev[i].len != f[F_LEN])
				ex_fatal("server: imm says %u bytes, the event %u", f[F_LEN],
					 ev[i].len);
			if (f[F_SEQ] != (run->committed & SEQ_MASK))
				ex_fatal("server: entry %u has seq %u", run->committed, f[F_SEQ]);
			if (f[F_LEN] <= SUM_BYTES || tail + f[F_LEN] > RING_SIZE)
				ex_fatal("server: entry %u: bad length %u at %zu", run->committed,
					 f[F_LEN], tail);
			const unsigned char *entry = ring + tail;
			size_t body = f[F_LEN] - SUM_BYTES;
			uint32_t sum;
			memcpy(&sum, entry + body, SUM_BYTES);
			if (ex_fnv1a(entry, body) != sum)
				ex_fatal("server: entry %u at %zu: bad checksum", run->committed,
					 tail);
			/* "Commit": a real log would persist the entry here. */
			run->server_digest = fold(run->server_digest, sum);
			run->committed++;
			run->bytes += f[F_LEN];
			tail += f[F_LEN];
			consumed += f[F_LEN];
			done = (f[F_FLAG] & FLAG_LAST) != 0;
		}
		if (consumed - announced >= NOTICE_BYTES || done) {
			/* The client cannot leave more than a ring's worth of
			 * notices unread, far below its window of 64: this
			 * doorbell finds credit, ex_write_imm only guards. */
			ex_write_imm(ctx, conn, NULL, 0, 0, 0, consumed, "server",
				     "announce the consumed bytes");
			announced = consumed;
		}
	}
	ex_wait_disconnect(ctx, "server", 1);
	ex_close(&ctx, &conn, &ring_mr, NULL, "server");
	free(ring);
	return NULL;
}

struct client {
	struct wimm_ctx *ctx;
	struct wimm_conn *conn;
	struct wimm_mr *src_mr;
	uint32_t consumed; /* the server's last notice */
	struct wimm_event ev[16];
};

static void take_notices(struct client *c, int n)
{
	for (int i = 0; i < n; i++) {
		if (c->ev[i].type == WIMM_EV_DISCONNECT)
			ex_fatal("client: the server left early");
		/* In post order: the last notice is the newest total. */
		if (c->ev[i].type == WIMM_EV_WRITE_IMM)
			c->consumed = c->ev[i].imm;
	}
}

/* One entry, one operation. AGAIN means no credit (the server's receive
 * window is full) or a full send queue: poll, which drives progress, picks up
 * returned credit and our notices, and retry. Credit returns raise no event,
 * so this spins rather than sleeps, bounded by ex_again. */
static void append(struct client *c, size_t off, size_t len, uint32_t imm)
{
	double give_up = 0;
	for (;;) {
		int rc = wimm_write_imm(c->conn, c->src_mr, off, off, len, imm, 0);
		if (rc == 0)
			return;
		if (rc != WIMM_E_AGAIN)
			ex_fail(c->ctx, rc, "client: append %zu bytes at %zu", len, off);
		ex_again(&give_up, "client", "append an entry");
		take_notices(c, ex_poll(c->ctx, c->ev, 16, "client"));
	}
}

static void *client_main(void *arg)
{
	struct log_run *run = arg;
	struct client c = {.ctx = ex_open(run->fabric, "client")};
	/* A mirror of the ring: an entry is built where it will land, so its
	 * source is reused only once the server consumed what was there, i.e.
	 * after that write landed: unsignaled writes need no completion. */
	unsigned char *src = calloc(1, RING_SIZE);
	if (src == NULL)
		ex_fatal("client: out of memory");
	int rc = wimm_mr_reg(c.ctx, src, RING_SIZE, WIMM_LOCAL, &c.src_mr);
	if (rc < 0)
		ex_fail(c.ctx, rc, "client: register the source ring");
	/* No window: the server only rings zero-length doorbells. */
	struct wimm_conn_attr attr = {.rx_depth = 64};
	c.conn = ex_connect(c.ctx, &attr, "client");

	double start = ex_now();
	uint64_t seed = 88172645463325252ull;
	uint32_t written = 0, digest = 0;
	size_t tail = 0;
	for (unsigned i = 0; i < run->entries; i++) {
		size_t body = 1 + next_rand(&seed) % MAX_BODY, len = body + SUM_BYTES, pad = 0;
		uint32_t flag = i + 1 == run->entries ? FLAG_LAST : 0;
		if (tail + len > RING_SIZE) {
			pad = RING_SIZE - tail;
			flag |= FLAG_WRAP;
		}
		/* Free room: the ring minus what the server has not consumed. */
		while (RING_SIZE - (written - c.consumed) < pad + len)
			take_notices(&c, ex_wait(c.ctx, c.ev, 16, "client", "ring space"));
		if (flag & FLAG_WRAP) {
			written += (uint32_t)pad;
			tail = 0;
		}
		for (size_t k = 0; k < body; k++)
			src[tail + k] = (unsigned char)next_rand(&seed);
		uint32_t sum = ex_fnv1a(src + tail, body), imm;
		memcpy(src + tail + body, &sum, SUM_BYTES);
		/* seq wraps at 4096 on purpose: masked here, checked there. */
		rc = wimm_imm_pack(&log_layout, (uint32_t[]){len, i & SEQ_MASK, flag}, &imm);
		if (rc < 0)
			ex_fail(c.ctx, rc, "client: pack the imm of entry %u", i);
		append(&c, tail, len, imm);
		digest = fold(digest, sum);
		tail += len;
		written += (uint32_t)len;
	}
	/* Finished only when the server consumed (verified) everything. */
	while (c.consumed != written)
		take_notices(&c, ex_wait(c.ctx, c.ev, 16, "client", "the last notice"));
	run->secs = ex_now() - start;
	run->client_digest = digest;
	ex_close(&c.ctx, &c.conn, &c.src_mr, NULL, "client");
	free(src);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s FABRIC [ENTRIES]   e.g. %s ofi:tcp\n", argv[0], argv[0]);
		return 2;
	}
	int rc = wimm_imm_layout_init(&log_layout, log_fields, 3);
	if (rc < 0)
		ex_fail(NULL, rc, "imm layout");
	/* The range check: a 70000-byte entry cannot be described in len:16,
	 * and pack refuses it rather than send a truncated length. */
	uint32_t imm;
	rc = wimm_imm_pack(&log_layout, (uint32_t[]){70000, 0, 0}, &imm);
	if (rc != WIMM_E_RANGE)
		ex_fatal("imm layout: a 70000-byte len was not refused (%s)", wimm_err_name(rc));

	struct log_run run = {.fabric = argv[1], .entries = ex_count(argc, argv, 5000)};
	pthread_t server, client;
	if (pthread_create(&server, NULL, server_main, &run) != 0 ||
	    pthread_create(&client, NULL, client_main, &run) != 0)
		ex_fatal("cannot start threads");
	pthread_join(client, NULL);
	pthread_join(server, NULL);

	if (run.committed != run.entries || run.client_digest != run.server_digest)
		ex_fatal("remote_log: %u of %u entries committed, digests %08x / %08x",
			 run.committed, run.entries, run.client_digest, run.server_digest);
	printf("remote_log: %s: %u entries (%llu bytes, %u wraps of a %d KiB ring) in %.3f s:"
	       " %.0f entries/s, %.1f MB/s; checksums, sequence and digest OK\n",
	       run.fabric, run.entries, (unsigned long long)run.bytes, run.wraps, RING_SIZE / 1024,
	       run.secs, run.entries / run.secs, run.bytes / run.secs / 1e6);
	return 0;
}
