/* kv_slots: the put path of a key-value store over a pool of fixed slots.
 *
 * The server owns NSLOTS slots of SLOT_SIZE bytes in its window. The client
 * keeps the list of free slots (at first all), writes a value into one with a
 * write-with-imm whose imm is {slot:8, key_hash:12, len:12}, and leaves the
 * slot alone until the server hands it back. The server learns the slot from
 * the imm, not from the completion: the receiver of a write gets no address
 * (a verbs receive completion has only the imm and the length). It checks the
 * value against the key hash, applies it to its table and frees the slot with
 * a zero-length doorbell whose imm is the slot number.
 *
 * Why write-with-imm fits: the value lands in place, with no copy out of a
 * receive buffer, and the notice names the slot. Where it does not: the
 * client chooses what lands in the pool; a server that must vet a put before
 * it touches its memory would rather take send_imm into receive buffers.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define NSLOTS 64
#define SLOT_SIZE 256
#define NKEYS 1024
#define HEADER 8 /* key and version, then the value bytes */
#define HASH_MASK 0xfffu

enum { F_SLOT, F_HASH, F_LEN };
static const struct wimm_imm_field kv_fields[] = {{"slot", 8}, {"key_hash", 12}, {"len", 12}};
static struct wimm_imm_layout kv_layout;

struct entry {
	uint32_t version, len;
};

struct kv_run {
	const char *fabric;
	unsigned puts;
	uint64_t bytes;
	double secs;
	struct entry server_table[NKEYS], client_table[NKEYS];
};

static uint32_t key_hash(uint32_t key)
{
	return ex_fnv1a(&key, sizeof(key)) & HASH_MASK;
}

static unsigned char value_byte(uint32_t key, uint32_t version, size_t k)
{
	return (unsigned char)(key * 7 + version * 13 + k);
}

/* Check one put and apply it; returns the slot to free. */
static uint32_t apply(struct kv_run *run, const unsigned char *pool, const struct wimm_event *ev)
{
	uint32_t f[3], key, version;
	wimm_imm_unpack(&kv_layout, ev->imm, f);
	/* 8 bits could name 256 slots; only NSLOTS exist. The layout checks
	 * widths, the application checks meaning. */
	if (f[F_SLOT] >= NSLOTS || f[F_LEN] < HEADER || f[F_LEN] > SLOT_SIZE)
		ex_fatal("server: bad put: slot %u, %u bytes", f[F_SLOT], f[F_LEN]);
	if (ev->len != 0 && ev->len != f[F_LEN])
		ex_fatal("server: imm says %u bytes, the event %u", f[F_LEN], ev->len);
	const unsigned char *slot = pool + (size_t)f[F_SLOT] * SLOT_SIZE;
	memcpy(&key, slot, 4);
	memcpy(&version, slot + 4, 4);
	if (key >= NKEYS || key_hash(key) != f[F_HASH])
		ex_fatal("server: slot %u: key %u does not match hash %03x", f[F_SLOT], key,
			 f[F_HASH]);
	for (size_t k = HEADER; k < f[F_LEN]; k++)
		if (slot[k] != value_byte(key, version, k))
			ex_fatal("server: slot %u: key %u v%u: byte %zu is wrong", f[F_SLOT], key,
				 version, k);
	/* One connection delivers in post order: versions only grow. */
	if (version <= run->server_table[key].version)
		ex_fatal("server: key %u: v%u after v%u", key, version,
			 run->server_table[key].version);
	run->server_table[key] = (struct entry){version, f[F_LEN]};
	return f[F_SLOT];
}

static void *server_main(void *arg)
{
	struct kv_run *run = arg;
	struct wimm_ctx *ctx = ex_open(run->fabric, "server");
	unsigned char *pool = calloc(NSLOTS, SLOT_SIZE);
	struct wimm_mr *pool_mr;
	if (pool == NULL)
		ex_fatal("server: out of memory");
	int rc = wimm_mr_reg(ctx, pool, NSLOTS * SLOT_SIZE, WIMM_REMOTE_WRITE, &pool_mr);
	if (rc < 0)
		ex_fail(ctx, rc, "server: register the slot pool");
	/* A receive window smaller than the pool: credits, not slots, are what
	 * the client runs out of first (WIMM_E_AGAIN, see put()). */
	struct wimm_conn_attr attr = {.window = pool_mr, .rx_depth = 32};
	struct wimm_listener *l = ex_listen(ctx, &attr);
	struct wimm_conn *conn = ex_accept(ctx, l, "server");
	ex_unlisten(ctx, &l);

	struct wimm_event ev[32];
	for (unsigned applied = 0; applied < run->puts;) {
		int n = ex_wait(ctx, ev, 32, "server", "a put");
		for (int i = 0; i < n; i++) {
			if (ev[i].type == WIMM_EV_DISCONNECT)
				ex_fatal("server: the client left after %u puts", applied);
			if (ev[i].type != WIMM_EV_WRITE_IMM)
				continue;
			uint32_t slot = apply(run, pool, &ev[i]);
			applied++;
			/* The client's window for these exceeds the pool, so
			 * this finds credit; ex_write_imm only guards. */
			ex_write_imm(ctx, conn, NULL, 0, 0, 0, slot, "server", "free a slot");
		}
	}
	ex_wait_disconnect(ctx, "server", 1);
	ex_close(&ctx, &conn, &pool_mr, NULL, "server");
	free(pool);
	return NULL;
}

struct client {
	struct wimm_ctx *ctx;
	uint32_t free_slot[NSLOTS];
	unsigned nfree;
	struct wimm_event ev[16];
};

static void take_frees(struct client *c, int n)
{
	for (int i = 0; i < n; i++) {
		if (c->ev[i].type == WIMM_EV_DISCONNECT)
			ex_fatal("client: the server left early");
		if (c->ev[i].type != WIMM_EV_WRITE_IMM)
			continue;
		if (c->ev[i].imm >= NSLOTS || c->nfree == NSLOTS)
			ex_fatal("client: bogus free of slot %u", c->ev[i].imm);
		c->free_slot[c->nfree++] = c->ev[i].imm;
	}
}

static void *client_main(void *arg)
{
	struct kv_run *run = arg;
	struct client c = {.ctx = ex_open(run->fabric, "client"), .nfree = NSLOTS};
	for (uint32_t s = 0; s < NSLOTS; s++)
		c.free_slot[s] = s;
	/* A mirror of the pool: a slot's source is rewritten only after the
	 * server freed the slot, i.e. after the previous write landed. */
	unsigned char *src = calloc(NSLOTS, SLOT_SIZE);
	struct wimm_mr *src_mr;
	if (src == NULL)
		ex_fatal("client: out of memory");
	int rc = wimm_mr_reg(c.ctx, src, NSLOTS * SLOT_SIZE, WIMM_LOCAL, &src_mr);
	if (rc < 0)
		ex_fail(c.ctx, rc, "client: register the source slots");
	/* Room for a free notice per slot plus credit batches in flight. */
	struct wimm_conn_attr attr = {.rx_depth = 2 * NSLOTS};
	struct wimm_conn *conn = ex_connect(c.ctx, &attr, "client");

	double start = ex_now();
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	for (unsigned i = 0; i < run->puts; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t key = (uint32_t)(seed >> 33) % NKEYS;
		uint32_t len = HEADER + (uint32_t)(seed >> 20) % (SLOT_SIZE - HEADER + 1);
		while (c.nfree == 0)
			take_frees(&c, ex_wait(c.ctx, c.ev, 16, "client", "a free slot"));
		uint32_t slot = c.free_slot[--c.nfree], imm;
		struct entry *e = &run->client_table[key];
		e->version++;
		e->len = len;
		unsigned char *v = src + (size_t)slot * SLOT_SIZE;
		memcpy(v, &key, 4);
		memcpy(v + 4, &e->version, 4);
		for (size_t k = HEADER; k < len; k++)
			v[k] = value_byte(key, e->version, k);
		rc = wimm_imm_pack(&kv_layout, (uint32_t[]){slot, key_hash(key), len}, &imm);
		if (rc < 0)
			ex_fail(c.ctx, rc, "client: pack the imm of put %u", i);
		/* Out of credit (WIMM_E_AGAIN): take the server's frees while
		 * the credit comes back. WIMM_F_WAIT would wait in the library
		 * instead, but without a timeout: two peers that both stop
		 * polling would wait for each other forever. */
		size_t off = (size_t)slot * SLOT_SIZE;
		double give_up = 0;
		while ((rc = wimm_write_imm(conn, src_mr, off, off, len, imm, 0)) == WIMM_E_AGAIN) {
			ex_again(&give_up, "client", "put a value");
			take_frees(&c, ex_poll(c.ctx, c.ev, 16, "client"));
		}
		if (rc < 0)
			ex_fail(c.ctx, rc, "client: put key %u into slot %u", key, slot);
		run->bytes += len;
	}
	/* Every slot back means every put was applied. */
	while (c.nfree < NSLOTS)
		take_frees(&c, ex_wait(c.ctx, c.ev, 16, "client", "the last free slots"));
	run->secs = ex_now() - start;
	ex_close(&c.ctx, &conn, &src_mr, NULL, "client");
	free(src);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s FABRIC [PUTS]   e.g. %s ofi:tcp\n", argv[0], argv[0]);
		return 2;
	}
	int rc = wimm_imm_layout_init(&kv_layout, kv_fields, 3);
	if (rc < 0)
		ex_fail(NULL, rc, "imm layout");
	struct kv_run *run = calloc(1, sizeof(*run));
	if (run == NULL)
		ex_fatal("out of memory");
	run->fabric = argv[1];
	run->puts = ex_count(argc, argv, 20000);
	pthread_t server, client;
	if (pthread_create(&server, NULL, server_main, run) != 0 ||
	    pthread_create(&client, NULL, client_main, run) != 0)
		ex_fatal("cannot start threads");
	pthread_join(client, NULL);
	pthread_join(server, NULL);

	/* The server's table must be exactly the client's last puts. */
	unsigned keys = 0;
	for (unsigned k = 0; k < NKEYS; k++) {
		const struct entry *s = &run->server_table[k], *cl = &run->client_table[k];
		if (s->version != cl->version || s->len != cl->len)
			ex_fatal("kv_slots: key %u: server has v%u (%u B), client put v%u (%u B)",
				 k, s->version, s->len, cl->version, cl->len);
		keys += cl->version > 0;
	}
	printf("kv_slots: %s: %u puts (%llu bytes, %u keys) through %d slots x %d B in %.3f s:"
	       " %.0f puts/s; hashes, values and final table OK\n",
	       run->fabric, run->puts, (unsigned long long)run->bytes, keys, NSLOTS, SLOT_SIZE,
	       run->secs, run->puts / run->secs);
	free(run);
	return 0;
}
