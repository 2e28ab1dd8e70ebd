/* kv_test's roles beside a shared index (wimm_kv_server_attr.index_bytes):
 * contending writers of one key, a client that dies between its checked
 * write and its swap or between its swap and its note, a hostile client
 * that swaps words by hand, a full index. The raw clients speak the
 * protocol by hand (kv_internal.h) over raw wimm connections. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv_internal.h"
#include "kv_test.h"

/* Get k and check it is the value of key id `key`, seq `seq` (any seq for
 * 0); its length. */
static size_t expect(struct wimm_kv_client *c, const char *k, uint32_t key, uint32_t seq)
{
	static unsigned char g[1 << 17];
	size_t len;
	uint32_t w, s;
	int rc = wimm_kv_get(c, k, strlen(k), g, sizeof(g), &len);
	if (rc < 0)
		die("get %s: %s", k, wimm_kv_strerror(rc));
	if (check_value(g, len, key, &w, &s) < 0 || (seq && s != seq))
		die("get %s: not the value of key %u seq %u (seq %u)", k, key, seq, s);
	return len;
}

static void expect_rc(struct wimm_kv_client *c, const char *k, int want)
{
	unsigned char g[4096];
	size_t len;
	int rc = wimm_kv_get(c, k, strlen(k), g, sizeof(g), &len);
	if (rc != want)
		die("get %s: %s, expected %s", k, wimm_kv_strerror(rc), wimm_kv_strerror(want));
}

/* Bytes of the slot a value of len under a key of klen takes. */
static uint64_t slot_of(size_t len, size_t klen)
{
	return (uint64_t)WIMM_KV_MIN_SLOT << kv_class_of(len + klen);
}

/* Wait until the server has freed what it retired and resolved every
 * written value. */
static struct wimm_kv_stats settled(struct wimm_kv_client *c, const char *who)
{
	double give_up = now_s() + 10.0 * scale();
	struct wimm_kv_stats st;
	while ((st = stat_of(c)).retired || st.index_pending || st.grants_pending) {
		if (now_s() > give_up)
			die("%s: not settled: %llu retired, %llu written pending, %llu grants", who,
			    (unsigned long long)st.retired, (unsigned long long)st.index_pending,
			    (unsigned long long)st.grants_pending);
		usleep(20000);
	}
	return st;
}

/* contender FABRIC ADDR ID COUNT: put "hot" COUNT times as writer ID (sizes
 * across classes), a get after each: always a whole value of some writer. */
static int role_contender(char **a)
{
	uint32_t id = (uint32_t)atoi(a[2]), count = (uint32_t)atoi(a[3]);
	static unsigned char v[1 << 17];
	uint64_t seed = 77 + id;
	struct wimm_kv_client *c = kv_open(a[0], a[1]);
	for (uint32_t i = 1; i <= count; i++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t len = 16 + (uint32_t)((seed >> 33) % 40000);
		make_value(v, 7, id, i, len);
		int rc = wimm_kv_put(c, "hot", 3, v, len, 0);
		if (rc < 0)
			die("contender %u: put %u: %s", id, i, wimm_kv_strerror(rc));
		expect(c, "hot", 7, 0);
	}
	fprintf(stderr, "contender %u: %u puts, %llu reads retried\n", id, count,
		(unsigned long long)wimm_kv_client_retries(c));
	wimm_kv_close(&c);
	return 0;
}

/* ------------------------------------------------------------ raw client */

struct ixraw {
	struct raw r;
	struct wimm_conn *ix;
	uint32_t buckets, flags;
	uint64_t arena;
	uint32_t seq;
};

static void ix_open(struct ixraw *x, char **a, const char *who)
{
	char addr[96];
	raw_open(&x->r, a, who);
	x->arena = kv_get64(x->r.reply + 16);
	x->buckets = kv_get32(x->r.reply + 36);
	x->flags = kv_get32(x->r.reply + 40);
	snprintf(addr, sizeof(addr), "%.*s:%u", (int)(strrchr(a[1], ':') - a[1]), a[1],
		 kv_get32(x->r.reply + 32));
	int rc = wimm_connect(x->r.ctx, addr, &(struct wimm_conn_attr){.rx_depth = 4},
			      10000 * scale(), &x->ix);
	if (rc < 0)
		die("%s: connect the index: %s", who, wimm_kv_strerror(rc));
	x->seq = 100;
}

/* Wait for the one read or swap posted on the index connection. */
static void ix_wait_op(struct ixraw *x, const char *who)
{
	struct wimm_event ev[16];
	double give_up = now_s() + 10.0 * scale();
	while (now_s() < give_up) {
		int n = wimm_wait(x->r.ctx, ev, 16, WIMM_WAIT_ADAPTIVE, 100);
		for (int i = 0; i < n; i++) {
			if (ev[i].type == WIMM_EV_ERROR || ev[i].type == WIMM_EV_DISCONNECT)
				die("%s: index operation: %s", who, wimm_kv_strerror(ev[i].status));
			if (ev[i].type == WIMM_EV_SEND_DONE && ev[i].conn == x->ix)
				return;
		}
	}
	die("%s: an index operation never completed", who);
}

/* Word `word` now (read one-sided). */
static uint64_t ix_read(struct ixraw *x, uint32_t word)
{
	int rc = wimm_read(x->ix, x->r.mr, 60000, (size_t)word * 8, 8, WIMM_F_SIGNAL | WIMM_F_WAIT);
	if (rc < 0)
		die("raw: read word %u: %s", word, wimm_kv_strerror(rc));
	ix_wait_op(x, "raw");
	return kv_get64(x->r.buf + 60000);
}

/* The word of key k: the one in its buckets with its fingerprint. */
static uint32_t ix_find(struct ixraw *x, const char *k)
{
	struct kv_ix_place p = kv_ix_place_of(kv_key_hash(k, strlen(k)), x->buckets);
	for (int b = 0; b < 2; b++)
		for (uint32_t way = 0; way < KV_IX_WAYS; way++) {
			uint32_t word = (b ? p.b2 : p.b1) * KV_IX_WAYS + way;
			uint64_t w = ix_read(x, word);
			if (w && kv_ix_fp(w) == p.fp)
				return word;
		}
	die("raw: no word of %s", k);
}

/* Compare-and-swap as a client does: by atomics, or by request. *old the
 * word before; the status of the request (0 with atomics). */
static int ix_swap(struct ixraw *x, uint32_t word, uint64_t cmp, uint64_t val, uint64_t *old,
		   int by_request)
{
	if (by_request) {
		kv_put32(x->r.buf, word);
		kv_put32(x->r.buf + 4, 0);
		kv_put64(x->r.buf + 8, cmp);
		kv_put64(x->r.buf + 16, val);
		uint32_t imm = KV_IMM(KV_OP_CAS, ++x->seq);
		int rc = wimm_send_imm(x->r.c, x->r.mr, 0, 24, imm, WIMM_F_WAIT);
		if (rc < 0)
			die("raw: swap request: %s", wimm_kv_strerror(rc));
		rc = raw_wait(&x->r, imm);
		*old = rc == 0 ? kv_get64(x->r.reply + 8) : 0;
		return rc;
	}
	int rc = wimm_cmp_swap(x->ix, x->r.mr, 60008, (size_t)word * 8, cmp, val, WIMM_F_WAIT);
	if (rc < 0)
		die("raw: swap: %s", wimm_kv_strerror(rc));
	ix_wait_op(x, "raw");
	*old = kv_get64(x->r.buf + 60008);
	return 0;
}

static void ix_note(struct ixraw *x, uint32_t word, uint32_t gid)
{
	kv_put32(x->r.buf + 61000, word);
	kv_put32(x->r.buf + 61004, gid);
	int rc =
	    wimm_send_imm(x->r.c, x->r.mr, 61000, 8, KV_IMM(KV_OP_NOTE, ++x->seq), WIMM_F_WAIT);
	if (rc < 0)
		die("raw: note: %s", wimm_kv_strerror(rc));
}

/* A grant for k and its checked write of [header | key | value of key id
 * `key`, seq, len]; the server's verdict. With `badkey`, the key in the
 * slot is another one (the CRC matches). Out: the grant's id, word, the
 * word the grant saw and the value's word. */
static int ix_put_written(struct ixraw *x, const char *k, uint32_t key, uint32_t seq, uint32_t len,
			  int badkey, uint32_t *gid, uint32_t *word, uint64_t *hint, uint64_t *val)
{
	uint64_t off, version;
	size_t klen = strlen(k);
	uint32_t hash = kv_key_hash(k, klen);
	raw_grant(&x->r, k, len, ++x->seq, gid, &off, &version);
	*word = kv_get32(x->r.reply + 24);
	*hint = kv_get64(x->r.reply + 32);
	uint64_t pool_off = kv_get64(x->r.reply + 40);
	int order = kv_class_of(len + klen);
	*val = kv_ix_word(kv_ix_place_of(hash, x->buckets).fp, (unsigned)order, pool_off, version);
	unsigned char *slot = x->r.buf;
	memcpy(slot + WIMM_KV_HEADER, k, klen);
	if (badkey)
		slot[WIMM_KV_HEADER] ^= 0x20;
	make_value(slot + WIMM_KV_HEADER + klen, key, 9, seq, len);
	struct kv_hdr h = {.len = (uint32_t)(len + klen), .version = version, .khash = hash};
	kv_hdr_encode(slot, &h, slot + WIMM_KV_HEADER);
	kv_put32(slot + KV_HDR_KLEN, (uint32_t)klen);
	uint32_t imm = KV_WIMM(*gid, hash, (unsigned)order);
	int rc =
	    wimm_write_imm(x->r.c, x->r.mr, 0, off, WIMM_KV_HEADER + klen + len, imm, WIMM_F_WAIT);
	if (rc < 0)
		die("raw: write_imm: %s", wimm_kv_strerror(rc));
	return raw_wait(&x->r, KV_IMM(KV_OP_DONE, *gid));
}

/* ix_crasher FABRIC ADDR: "c1" written and checked but never swapped in,
 * "c2" swapped in but never noted; says "G" and waits to be killed. */
static int role_ix_crasher(char **a)
{
	static struct ixraw x;
	uint32_t gid, word;
	uint64_t hint, val, old;
	int by_request = 0, rc;
	ix_open(&x, a, "ix_crasher");
	by_request = (x.flags & KV_IX_BY_REQUEST) != 0;
	if ((rc = ix_put_written(&x, "c1", 31, 1, 700, 0, &gid, &word, &hint, &val)) != 0)
		die("ix_crasher: c1: %s", wimm_kv_strerror(rc));
	if ((rc = ix_put_written(&x, "c2", 32, 1, 100, 0, &gid, &word, &hint, &val)) != 0 ||
	    (rc = ix_swap(&x, word, hint, val, &old, by_request)) != 0 || old != hint)
		die("ix_crasher: c2: %s", wimm_kv_strerror(rc));
	printf("G\n");
	fflush(stdout);
	/* Killed outside any wimm call (see the crasher in kv_test_roles.c). */
	for (;;)
		pause();
}

/* ix_hostile FABRIC ADDR: with "J" and "K" put by the checker: lookups and
 * puts by send refused, a slot with the wrong key refused, a swap request
 * where the fabric has atomics refused (or, by request, one naming no
 * word), K's word pointed at J's slot, J's word at a place with no slot,
 * a note for a word no key holds, each swap noted. */
static int role_ix_hostile(char **a)
{
	static struct ixraw x;
	uint32_t gid, word;
	uint64_t hint, val, old;
	int rc;
	ix_open(&x, a, "ix_hostile");
	int by_request = (x.flags & KV_IX_BY_REQUEST) != 0;
	kv_put16(x.r.buf, 1);
	x.r.buf[2] = 'J';
	uint32_t imm = KV_IMM(KV_OP_GET, ++x.seq);
	if ((rc = wimm_send_imm(x.r.c, x.r.mr, 0, 3, imm, WIMM_F_WAIT)) < 0 ||
	    (rc = raw_wait(&x.r, imm)) != WIMM_E_NOTSUP)
		die("ix_hostile: a lookup: %s, expected NOTSUP", wimm_kv_strerror(rc));
	kv_put32(x.r.buf, 4);
	kv_put32(x.r.buf + 4, 0);
	kv_put16(x.r.buf + 8, 1);
	memcpy(x.r.buf + 10, "Sabcd", 5);
	imm = KV_IMM(KV_OP_SPUT, ++x.seq);
	if ((rc = wimm_send_imm(x.r.c, x.r.mr, 0, 15, imm, WIMM_F_WAIT)) < 0 ||
	    (rc = raw_wait(&x.r, imm)) != WIMM_E_NOTSUP)
		die("ix_hostile: a put by send: %s, expected NOTSUP", wimm_kv_strerror(rc));
	if ((rc = ix_put_written(&x, "h", 40, 1, 300, 1, &gid, &word, &hint, &val)) !=
	    WIMM_KV_E_CORRUPT)
		die("ix_hostile: a slot holding another key: %s", wimm_kv_strerror(rc));
	if (by_request) {
		rc = ix_swap(&x, UINT32_MAX / 2, 0, 1, &old, 1);
		if (rc != WIMM_E_INVAL)
			die("ix_hostile: a swap of no word: %s", wimm_kv_strerror(rc));
	} else if ((rc = ix_swap(&x, 0, 0, 1, &old, 1)) != WIMM_E_NOTSUP) {
		die("ix_hostile: a swap request beside atomics: %s", wimm_kv_strerror(rc));
	}
	uint32_t wj = ix_find(&x, "J"), wk = ix_find(&x, "K");
	uint64_t vj = ix_read(&x, wj), vk = ix_read(&x, wk);
	/* K's fingerprint, J's slot. */
	uint64_t forged = (vk & 0xffff000000000000ull) | (vj & 0x0000ffffffffffffull);
	if (ix_swap(&x, wk, vk, forged, &old, by_request) != 0 || old != vk)
		die("ix_hostile: swap K's word");
	ix_note(&x, wk, 0);
	/* J's fingerprint, a place in the middle of its own arena (no slot). */
	forged = kv_ix_word(kv_ix_fp(vj), 0, kv_ix_pool_off(vj) ^ (x.arena / 2), kv_ix_version(vj));
	if (ix_swap(&x, wj, vj, forged, &old, by_request) != 0 || old != vj)
		die("ix_hostile: swap J's word");
	ix_note(&x, wj, 0);
	for (uint32_t w = 0; w < 64; w++)
		if (w != wj && w != wk && ix_read(&x, w) == 0) {
			ix_note(&x, w, 3);
			break;
		}
	wimm_conn_delete(&x.ix);
	if ((rc = wimm_conn_close(&x.r.c, 5000)) < 0)
		die("ix_hostile: close: %s", wimm_kv_strerror(rc));
	wimm_mr_dereg(&x.r.mr);
	wimm_ctx_close(&x.r.ctx);
	return 0;
}

/* Put k: the value of key id `key`, seq, len bytes (dies on error). */
static void put_value(struct wimm_kv_client *c, const char *who, const char *k, uint32_t key,
		      uint32_t seq, uint32_t len)
{
	static unsigned char v[4096];
	make_value(v, key, 1, seq, len);
	int rc = wimm_kv_put(c, k, strlen(k), v, len, 0);
	if (rc < 0)
		die("%s: put %s: %s", who, k, wimm_kv_strerror(rc));
}

/* ix_check FABRIC ADDR WHAT: the checks around the raw clients. */
static int role_ix_check(char **a)
{
	struct wimm_kv_client *c = kv_open(a[0], a[1]);
	struct wimm_kv_stats st;
	const char *what = a[2];
	if (strcmp(what, "safe0") == 0) {
		put_value(c, what, "J", 11, 1, 2000);
		put_value(c, what, "K", 12, 1, 100);
	} else if (strcmp(what, "safe1") == 0) {
		/* K names J's slot: not K's, so a miss, never J's bytes; J names
		 * no slot: every read fails its checks. */
		expect_rc(c, "K", WIMM_KV_E_NOTFOUND);
		expect_rc(c, "J", WIMM_KV_E_CORRUPT);
		st = settled(c, "safe1");
		if (st.foreign_words != 2 || st.bad_puts != 1 || wimm_kv_client_retries(c) == 0)
			die("safe1: %llu foreign words, %llu bad puts, %llu retries",
			    (unsigned long long)st.foreign_words, (unsigned long long)st.bad_puts,
			    (unsigned long long)wimm_kv_client_retries(c));
		/* A put swaps a forged word out like any other. */
		put_value(c, what, "J", 11, 2, 1500);
		put_value(c, what, "K", 12, 2, 90);
		expect(c, "J", 11, 2);
		expect(c, "K", 12, 2);
		st = settled(c, "safe1");
		if (st.keys != 2 || st.used != slot_of(1500, 1) + slot_of(90, 1))
			die("safe1: %llu keys, %llu bytes used", (unsigned long long)st.keys,
			    (unsigned long long)st.used);
	} else if (strcmp(what, "crash0") == 0) {
		/* c2 is visible from its swap on; c1 was never swapped in. */
		expect(c, "c2", 32, 1);
		expect_rc(c, "c1", WIMM_KV_E_NOTFOUND);
		if ((st = stat_of(c)).index_pending != 2)
			die("crash0: %llu written values pending, expected 2",
			    (unsigned long long)st.index_pending);
	} else if (strcmp(what, "crash1") == 0) {
		/* Its client gone, the server read the words: c2 adopted, c1's
		 * slot freed; nothing else held. */
		st = settled(c, "crash1");
		expect(c, "c2", 32, 1);
		expect_rc(c, "c1", WIMM_KV_E_NOTFOUND);
		if (st.keys != 1 || st.used != slot_of(100, 2) || st.clients != 1)
			die("crash1: %llu keys, %llu bytes used, %llu clients",
			    (unsigned long long)st.keys, (unsigned long long)st.used,
			    (unsigned long long)st.clients);
	} else if (strcmp(what, "contend") == 0) {
		/* Every writer's last put is its seq COUNT: the last swap of all
		 * is one of them, and only its slot is held. */
		size_t len = expect(c, "hot", 7, (uint32_t)atoi(a[3]));
		st = settled(c, "contend");
		if (st.keys != 1 || st.used != slot_of(len, 3) || st.bad_puts)
			die("contend: %llu keys, %llu bytes used (the value %zu B), %llu bad puts",
			    (unsigned long long)st.keys, (unsigned long long)st.used, len,
			    (unsigned long long)st.bad_puts);
	} else {
		die("ix_check: unknown check %s", what);
	}
	wimm_kv_close(&c);
	return 0;
}

/* ix_full FABRIC ADDR: a 4 KiB index (64 buckets): distinct keys until both
 * buckets of one are full (FULL), every earlier key still whole; deletes
 * free words for new keys. */
static int role_ix_full(char **a)
{
	static unsigned char v[512];
	char k[16];
	struct wimm_kv_client *c = kv_open(a[0], a[1]);
	uint32_t n = 0;
	int rc = 0;
	for (; n < 1000; n++) {
		snprintf(k, sizeof(k), "f%u", n);
		make_value(v, n, 1, 1, 100);
		if ((rc = wimm_kv_put(c, k, strlen(k), v, 100, 0)) < 0)
			break;
	}
	if (rc != WIMM_KV_E_FULL || n < 128 || n > 512)
		die("ix_full: %s after %u keys, expected FULL after 128..512", wimm_kv_strerror(rc),
		    n);
	for (uint32_t i = 0; i < n; i++) {
		snprintf(k, sizeof(k), "f%u", i);
		expect(c, k, i, 1);
	}
	if ((rc = wimm_kv_put_send(c, "s", 1, v, 10, 0)) != WIMM_E_NOTSUP)
		die("ix_full: put by send: %s, expected NOTSUP", wimm_kv_strerror(rc));
	for (uint32_t i = 0; i < n; i++) {
		snprintf(k, sizeof(k), "f%u", i);
		if ((rc = wimm_kv_del(c, k, strlen(k))) < 0)
			die("ix_full: del %s: %s", k, wimm_kv_strerror(rc));
	}
	if ((rc = wimm_kv_del(c, "f0", 2)) != WIMM_KV_E_NOTFOUND)
		die("ix_full: del again: %s", wimm_kv_strerror(rc));
	struct wimm_kv_stats st = settled(c, "ix_full");
	if (st.keys != 0 || st.used != 0 || st.deletes != n)
		die("ix_full: after deleting all: %llu keys, %llu used, %llu deletes",
		    (unsigned long long)st.keys, (unsigned long long)st.used,
		    (unsigned long long)st.deletes);
	/* The words are free again: as many new keys fit. */
	uint32_t again = 0;
	for (; again < 1000; again++) {
		snprintf(k, sizeof(k), "g%u", again);
		make_value(v, again, 1, 2, 100);
		if ((rc = wimm_kv_put(c, k, strlen(k), v, 100, 0)) < 0)
			break;
	}
	if (rc != WIMM_KV_E_FULL || again < 128)
		die("ix_full: %s after %u new keys", wimm_kv_strerror(rc), again);
	fprintf(stderr, "ix_full: %u keys fitted 512 words, then %u new ones\n", n, again);
	wimm_kv_close(&c);
	return 0;
}

int index_role(const char *role, int argc, char **a)
{
	if (strcmp(role, "contender") == 0 && argc == 5)
		return role_contender(a);
	if (strcmp(role, "ix_crasher") == 0 && argc == 3)
		return role_ix_crasher(a);
	if (strcmp(role, "ix_hostile") == 0 && argc == 3)
		return role_ix_hostile(a);
	if (strcmp(role, "ix_check") == 0 && (argc == 4 || argc == 5))
		return role_ix_check(a);
	if (strcmp(role, "ix_full") == 0 && argc == 3)
		return role_ix_full(a);
	return -1;
}
