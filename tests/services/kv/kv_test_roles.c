/* kv_test's roles: what each child process (kv_test --child ROLE ...) does
 * against the server: the server itself, the mixed and overwrite clients,
 * the crasher, the checkers, the expirer, evict, full and input; and the
 * self-verifying values they put and get. The scenarios that start them are
 * in kv_test.c, the hostile client and the leaser in kv_test_hostile.c. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv_test.h"

#define VHDR 16u

static volatile sig_atomic_t stop_flag;

static uint64_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 17;
}

static void le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t rd32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void make_value(unsigned char *v, uint32_t key, uint32_t writer, uint32_t seq, uint32_t len)
{
	uint64_t s = ((uint64_t)key << 40) ^ ((uint64_t)writer << 24) ^ seq;
	le32(v, key);
	le32(v + 4, writer);
	le32(v + 8, seq);
	le32(v + 12, len);
	for (uint32_t i = VHDR; i < len; i++)
		v[i] = (unsigned char)rnd(&s);
}

/* 0 if v is a whole value of key; its writer and seq. */
int check_value(const unsigned char *v, size_t len, uint32_t key, uint32_t *writer, uint32_t *seq)
{
	if (len < VHDR || rd32(v) != key || rd32(v + 12) != len)
		return -1;
	*writer = rd32(v + 4);
	*seq = rd32(v + 8);
	uint64_t s = ((uint64_t)key << 40) ^ ((uint64_t)*writer << 24) ^ *seq;
	for (size_t i = VHDR; i < len; i++)
		if (v[i] != (unsigned char)rnd(&s))
			return -1;
	return 0;
}

struct wimm_kv_client *kv_open(const char *fabric, const char *addr)
{
	struct wimm_kv_client_attr a = {.fabric = fabric, .timeout_ms = 10000 * scale()};
	struct wimm_kv_client *c;
	int rc = wimm_kv_connect(addr, &a, &c);
	if (rc < 0)
		die("connect %s on %s: %s", addr, fabric, wimm_kv_strerror(rc));
	return c;
}

/* --------------------------------------------------------------- roles */

static void on_term(int sig)
{
	(void)sig;
	stop_flag = 1;
}

/* server FABRIC MEMORY MAX_CLIENTS LEASE_MS GRANT_MS INDEX_BYTES: prints its
 * port, serves until SIGTERM, then prints "S" and its counters. */
static int role_server(char **a)
{
	struct wimm_kv_server_attr attr = {.fabric = a[0],
					   .addr = "127.0.0.1:0",
					   .memory = strtoull(a[1], NULL, 0),
					   .max_clients = (uint32_t)atoi(a[2]),
					   .lease_ms = (uint32_t)atoi(a[3]),
					   .grant_ms = (uint32_t)atoi(a[4]),
					   .index_bytes = strtoull(a[5], NULL, 0)};
	struct wimm_kv_server *s;
	struct wimm_kv_stats st;
	if (getenv("WIMM_TEST_HOST")) {
		static char addr[80];
		snprintf(addr, sizeof(addr), "%s:0", getenv("WIMM_TEST_HOST"));
		attr.addr = addr;
	}
	signal(SIGTERM, on_term);
	int rc = wimm_kv_server_new(&attr, &s);
	if (rc < 0)
		die("server on %s: %s", a[0], wimm_kv_strerror(rc));
	printf("%d\n", wimm_kv_server_port(s));
	fflush(stdout);
	while (!stop_flag) {
		rc = wimm_kv_server_run(s, 20);
		if (rc < 0)
			die("server: %s", wimm_kv_strerror(rc));
	}
	wimm_kv_server_stats(s, &st);
	printf("S %llu %llu %llu %llu %llu %llu %llu %llu %llu\n", (unsigned long long)st.keys,
	       (unsigned long long)st.puts, (unsigned long long)st.evictions,
	       (unsigned long long)st.grants_pending, (unsigned long long)st.grants_reclaimed,
	       (unsigned long long)st.bad_puts, (unsigned long long)st.clients,
	       (unsigned long long)st.index_pending, (unsigned long long)st.foreign_words);
	fflush(stdout);
	wimm_kv_server_delete(&s);
	return 0;
}

static void key_name(char *k, uint32_t id)
{
	snprintf(k, 16, "k%06u", id);
}

/* mixed FABRIC ADDR ID NCLIENTS NKEYS OPS: put/del its own keys (id mod
 * NCLIENTS), get any; its own must be exactly the last put or a miss after
 * a delete, others whole values of the right key or a miss. */
static int role_mixed(char **a)
{
	uint32_t id = (uint32_t)atoi(a[2]), n = (uint32_t)atoi(a[3]);
	uint32_t nkeys = (uint32_t)atoi(a[4]), ops = (uint32_t)atoi(a[5]);
	uint32_t *last = calloc(nkeys, sizeof(*last)), *lastlen = calloc(nkeys, sizeof(*last));
	unsigned char *v = malloc(65536), *g = malloc(65536);
	uint64_t seed = 0x1234 + id * 7919, own_gets = 0, other_gets = 0, misses = 0;
	char k[16];
	if (!last || !lastlen || !v || !g)
		die("out of memory");
	struct wimm_kv_client *c = kv_open(a[0], a[1]);
	/* First every own key once, so that others' gets find values. */
	for (uint32_t key = id; key < nkeys; key += n) {
		uint32_t len = VHDR + (uint32_t)(rnd(&seed) % 2000);
		key_name(k, key);
		make_value(v, key, id, ++last[key], len);
		int rc = wimm_kv_put(c, k, strlen(k), v, len, 0);
		if (rc < 0)
			die("mixed %u: put %s: %s", id, k, wimm_kv_strerror(rc));
		lastlen[key] = len;
	}
	for (uint32_t i = 0; i < ops; i++) {
		uint32_t r = (uint32_t)(rnd(&seed) % 100);
		uint32_t key = (uint32_t)(rnd(&seed) % nkeys);
		if (r < 75) /* puts, deletes and half the gets: own keys */
			key = key - key % n + id < nkeys ? key - key % n + id : id;
		int own = key % n == id;
		key_name(k, key);
		if (r < 35) {
			uint32_t len = VHDR + (uint32_t)(rnd(&seed) % 2000);
			if (rnd(&seed) % 50 == 0)
				len = 16000;
			make_value(v, key, id, ++last[key], len);
			int rc = wimm_kv_put(c, k, strlen(k), v, len, 0);
			if (rc < 0)
				die("mixed %u: put %s: %s", id, k, wimm_kv_strerror(rc));
			lastlen[key] = len;
		} else if (r < 45) {
			int rc = wimm_kv_del(c, k, strlen(k));
			int want = lastlen[key] ? 0 : WIMM_KV_E_NOTFOUND;
			if (rc != want)
				die("mixed %u: del %s: %s, expected %s", id, k,
				    wimm_kv_strerror(rc), wimm_kv_strerror(want));
			lastlen[key] = 0;
		} else {
			size_t len = 0;
			uint32_t w, s;
			int rc = wimm_kv_get(c, k, strlen(k), g, 65536, &len);
			if (rc == WIMM_KV_E_NOTFOUND) {
				misses++;
				if (own && lastlen[key])
					die("mixed %u: get %s: miss, last put seq %u", id, k,
					    last[key]);
				continue;
			}
			if (rc < 0)
				die("mixed %u: get %s: %s", id, k, wimm_kv_strerror(rc));
			if (check_value(g, len, key, &w, &s) < 0)
				die("mixed %u: get %s: torn or foreign value (%zu bytes)", id, k,
				    len);
			if (own) {
				own_gets++;
				if (!lastlen[key] || w != id || s != last[key] ||
				    len != lastlen[key])
					die("mixed %u: get %s: writer %u seq %u (%zu B), expected "
					    "seq %u (%u B)",
					    id, k, w, s, len, last[key], lastlen[key]);
			} else {
				other_gets++;
				if (w != key % n)
					die("mixed %u: get %s: written by %u, not its owner", id, k,
					    w);
			}
		}
	}
	fprintf(stderr,
		"mixed %u: %u ops, own gets %llu, other gets %llu, misses %llu, retries "
		"%llu\n",
		id, ops, (unsigned long long)own_gets, (unsigned long long)other_gets,
		(unsigned long long)misses, (unsigned long long)wimm_kv_client_retries(c));
	wimm_kv_close(&c);
	free(last);
	free(lastlen);
	free(v);
	free(g);
	return 0;
}

/* writer FABRIC ADDR COUNT: overwrite "hot" COUNT times, sizes across
 * classes. reader FABRIC ADDR COUNT: get it until seq COUNT is seen. */
static int role_hot(char **a, int writer)
{
	uint32_t count = (uint32_t)atoi(a[2]), prev = 0;
	unsigned char *v = malloc(1 << 17);
	uint64_t seed = 99, reads = 0;
	if (!v)
		die("out of memory");
	struct wimm_kv_client *c = kv_open(a[0], a[1]);
	double give_up = now_s() + 30.0 * scale();
	for (uint32_t i = 1; i <= count || !writer;) {
		size_t len = 0;
		uint32_t w, s;
		if (writer) {
			uint32_t l = VHDR + (uint32_t)(rnd(&seed) % 70000);
			make_value(v, 7, 0, i, l);
			int rc = wimm_kv_put(c, "hot", 3, v, l, 0);
			if (rc < 0)
				die("writer: put %u: %s", i, wimm_kv_strerror(rc));
			i++;
			continue;
		}
		if (now_s() > give_up)
			die("reader: gave up at seq %u after %llu reads", prev,
			    (unsigned long long)reads);
		int rc = wimm_kv_get(c, "hot", 3, v, 1 << 17, &len);
		if (rc == WIMM_KV_E_NOTFOUND)
			continue;
		if (rc < 0)
			die("reader: get: %s", wimm_kv_strerror(rc));
		reads++;
		if (check_value(v, len, 7, &w, &s) < 0)
			die("reader: torn value after seq %u (%zu bytes)", prev, len);
		if (s < prev)
			die("reader: seq %u after %u", s, prev);
		prev = s;
		if (s == count)
			break;
	}
	fprintf(stderr, "%s: done, %llu reads, %llu torn or stale reads caught and retried\n",
		writer ? "writer" : "reader", (unsigned long long)reads,
		(unsigned long long)wimm_kv_client_retries(c));
	wimm_kv_close(&c);
	free(v);
	return 0;
}

/* crasher FABRIC ADDR: publish "victim" seq 1, begin a put of seq 2, half
 * write its bytes into the staging buffer, say "G" and wait to be killed. */
static int role_crasher(char **a)
{
	unsigned char v[5000];
	void *dst;
	struct wimm_kv_client *c = kv_open(a[0], a[1]);
	make_value(v, 3, 9, 1, sizeof(v));
	int rc = wimm_kv_put(c, "victim", 6, v, sizeof(v), 0);
	if (rc == 0)
		rc = wimm_kv_put_begin(c, "victim", 6, sizeof(v), 0, &dst);
	if (rc < 0)
		die("crasher: %s", wimm_kv_strerror(rc));
	make_value(v, 3, 9, 2, sizeof(v));
	memcpy(dst, v, sizeof(v) / 2);
	printf("G\n");
	fflush(stdout);
	/* Killed outside any wimm call: a shm peer killed inside one can leave
	 * the provider's lock held (README, Fabrics). Idle meanwhile, without
	 * heartbeats: the checks take well under the server's 5 s liveness. */
	for (;;)
		pause();
}

struct wimm_kv_stats stat_of(struct wimm_kv_client *c)
{
	struct wimm_kv_stats st;
	int rc = wimm_kv_stat(c, &st);
	if (rc < 0)
		die("stat: %s", wimm_kv_strerror(rc));
	return st;
}

static void expect_value(struct wimm_kv_client *c, const char *k, uint32_t key, uint32_t seq)
{
	unsigned char g[8192];
	size_t len;
	uint32_t w, s;
	int rc = wimm_kv_get(c, k, strlen(k), g, sizeof(g), &len);
	if (rc < 0)
		die("get %s: %s", k, wimm_kv_strerror(rc));
	if (check_value(g, len, key, &w, &s) < 0 || s != seq)
		die("get %s: not the value of seq %u", k, seq);
}

/* checker FABRIC ADDR WHAT: the checks after the crasher (WHAT crash0:
 * its grant is pending; crash1: reclaimed, the key unchanged). */
static int role_checker(char **a)
{
	struct wimm_kv_client *c = kv_open(a[0], a[1]);
	struct wimm_kv_stats st = stat_of(c);
	if (strcmp(a[2], "safe0") == 0) {
		unsigned char v[3000];
		make_value(v, 11, 1, 1, sizeof(v));
		int rc = wimm_kv_put(c, "safe", 4, v, sizeof(v), 0);
		if (rc < 0)
			die("safe0: %s", wimm_kv_strerror(rc));
	} else if (strcmp(a[2], "safe1") == 0) {
		unsigned char v[256];
		size_t len;
		expect_value(c, "safe", 11, 1);
		int rc = wimm_kv_get(c, "h", 1, v, sizeof(v), &len);
		if (rc != WIMM_KV_E_NOTFOUND)
			die("safe1: a refused put is visible: %s", wimm_kv_strerror(rc));
		rc = wimm_kv_get(c, "mine", 4, v, sizeof(v), &len);
		if (rc != WIMM_KV_E_CORRUPT)
			die("safe1: a rewritten slot: %s, expected CORRUPT", wimm_kv_strerror(rc));
		if (st.bad_puts != 3 || st.keys != 2 || wimm_kv_client_retries(c) == 0)
			die("safe1: %llu bad puts, %llu keys", (unsigned long long)st.bad_puts,
			    (unsigned long long)st.keys);
	} else if (strcmp(a[2], "lease0") == 0 || strcmp(a[2], "lease1") == 0) {
		/* lease0: "L" v1; lease1: "L" v2, then 20 other keys. */
		unsigned char v[990];
		char k[16];
		uint32_t seq = a[2][5] == '0' ? 1 : 2;
		make_value(v, 21, 1, seq, sizeof(v));
		int rc = wimm_kv_put(c, "L", 1, v, sizeof(v), 0);
		for (uint32_t i = 0; rc == 0 && seq == 2 && i < 20; i++) {
			snprintf(k, sizeof(k), "churn%u", i);
			rc = wimm_kv_put(c, k, strlen(k), v, sizeof(v), 0);
		}
		if (rc < 0)
			die("%s: put: %s", a[2], wimm_kv_strerror(rc));
		if (seq == 2 && (st = stat_of(c)).retired != 1)
			die("lease1: %llu slots retired, expected v1's, held by the lease",
			    (unsigned long long)st.retired);
	} else if (strcmp(a[2], "lease2") == 0) {
		double give_up = now_s() + 10.0 * scale();
		while ((st = stat_of(c)).retired != 0) {
			if (now_s() > give_up)
				die("lease2: v1's slot still retired after its lease");
			usleep(20000);
		}
		expect_value(c, "L", 21, 2);
	} else if (strcmp(a[2], "crash0") == 0) {
		if (st.grants_pending != 1)
			die("crash0: %llu grants pending, expected 1",
			    (unsigned long long)st.grants_pending);
	} else {
		double give_up = now_s() + 10.0 * scale();
		while ((st = stat_of(c)).grants_reclaimed < 1 || st.grants_pending != 0 ||
		       st.clients != 1) {
			if (now_s() > give_up)
				die("crash1: grant of the killed client not reclaimed (pending "
				    "%llu, reclaimed %llu, clients %llu)",
				    (unsigned long long)st.grants_pending,
				    (unsigned long long)st.grants_reclaimed,
				    (unsigned long long)st.clients);
			usleep(20000);
		}
		expect_value(c, "victim", 3, 1);
	}
	wimm_kv_close(&c);
	return 0;
}

/* evict FABRIC ADDR: 16 pinned keys, then 400 unpinned in a 128 KiB arena. */
/* expirer FABRIC ADDR GRANT_MS: a put begun and committed only after the
 * server's grant time is refused with EXPIRED and publishes nothing; the
 * grant is counted as expired, not pending; the next put works. */
static int role_expirer(char **a)
{
	unsigned char v[500];
	void *buf;
	int rc;
	struct wimm_kv_client *c = kv_open(a[0], a[1]);
	make_value(v, 7, 1, 1, sizeof(v));
	if ((rc = wimm_kv_put(c, "E", 1, v, sizeof(v), 0)) < 0)
		die("expirer: first put: %s", wimm_kv_strerror(rc));
	if ((rc = wimm_kv_put_begin(c, "E", 1, sizeof(v), 0, &buf)) < 0)
		die("expirer: begin: %s", wimm_kv_strerror(rc));
	make_value(buf, 7, 1, 2, sizeof(v));
	/* Three grant times, well inside the liveness bound. */
	usleep((useconds_t)atoi(a[2]) * 3000u);
	if ((rc = wimm_kv_put_commit(c)) != WIMM_KV_E_EXPIRED)
		die("expirer: late commit: %s, expected EXPIRED", wimm_kv_strerror(rc));
	expect_value(c, "E", 7, 1);
	struct wimm_kv_stats st = stat_of(c);
	if (st.grants_expired != 1 || st.grants_pending != 0 || st.bad_puts != 0 || st.puts != 1)
		die("expirer: %llu expired, %llu pending, %llu bad, %llu puts",
		    (unsigned long long)st.grants_expired, (unsigned long long)st.grants_pending,
		    (unsigned long long)st.bad_puts, (unsigned long long)st.puts);
	make_value(v, 7, 1, 3, sizeof(v));
	if ((rc = wimm_kv_put(c, "E", 1, v, sizeof(v), 0)) < 0)
		die("expirer: put after the expiry: %s", wimm_kv_strerror(rc));
	expect_value(c, "E", 7, 3);
	wimm_kv_close(&c);
	return 0;
}

static int role_evict(char **a)
{
	unsigned char v[990]; /* + the 32-byte header: one 1 KiB slot */
	char k[16];
	size_t len;
	struct wimm_kv_client *c = kv_open(a[0], a[1]);
	for (uint32_t i = 0; i < 416; i++) {
		snprintf(k, sizeof(k), i < 16 ? "pin%u" : "u%u", i);
		make_value(v, i, 1, 1, sizeof(v));
		int rc = wimm_kv_put(c, k, strlen(k), v, sizeof(v), i < 16 ? WIMM_KV_PIN : 0);
		if (rc < 0)
			die("evict: put %s: %s", k, wimm_kv_strerror(rc));
	}
	for (uint32_t i = 0; i < 16; i++) {
		snprintf(k, sizeof(k), "pin%u", i);
		expect_value(c, k, i, 1);
	}
	for (uint32_t i = 416 - 50; i < 416; i++) {
		snprintf(k, sizeof(k), "u%u", i);
		expect_value(c, k, i, 1);
	}
	int rc = wimm_kv_get(c, "u16", 3, v, sizeof(v), &len);
	if (rc != WIMM_KV_E_NOTFOUND)
		die("evict: the oldest unpinned key: %s, expected a miss", wimm_kv_strerror(rc));
	struct wimm_kv_stats st = stat_of(c);
	if (st.evictions < 280 || st.pinned != 16)
		die("evict: %llu evictions, %llu pinned", (unsigned long long)st.evictions,
		    (unsigned long long)st.pinned);
	wimm_kv_close(&c);
	return 0;
}

/* full FABRIC ADDR: pinned 990-byte values fill the 128 KiB arena (128
 * slots of 1 KiB); the next is FULL; a delete makes room again. */
static int role_full(char **a)
{
	unsigned char v[990]; /* + the 32-byte header: one 1 KiB slot */
	char k[16];
	uint32_t i;
	int rc = 0;
	struct wimm_kv_client *c = kv_open(a[0], a[1]);
	for (i = 0; i < 1000; i++) {
		snprintf(k, sizeof(k), "p%u", i);
		make_value(v, i, 1, 1, sizeof(v));
		rc = wimm_kv_put(c, k, strlen(k), v, sizeof(v), WIMM_KV_PIN);
		if (rc < 0)
			break;
	}
	if (rc != WIMM_KV_E_FULL || i != 128)
		die("full: put %u: %s, expected FULL at 128", i, wimm_kv_strerror(rc));
	for (uint32_t j = 0; j < 128; j++) {
		snprintf(k, sizeof(k), "p%u", j);
		expect_value(c, k, j, 1);
	}
	rc = wimm_kv_del(c, "p5", 2);
	if (rc == 0)
		rc = wimm_kv_put(c, "again", 5, v, sizeof(v), WIMM_KV_PIN);
	if (rc < 0)
		die("full: delete then put: %s", wimm_kv_strerror(rc));
	static unsigned char big[200000];
	rc = wimm_kv_put(c, "big", 3, big, sizeof(big), 0);
	if (rc != WIMM_E_TOOBIG)
		die("full: a value above the arena: %s, expected TOOBIG", wimm_kv_strerror(rc));
	wimm_kv_close(&c);
	return 0;
}

/* input FABRIC ADDR: bad input gives clear errors; the third client of a
 * two-arena server is refused with AGAIN. */
static int role_input(char **a)
{
	char longkey[WIMM_KV_MAX_KEY + 2];
	unsigned char b[16];
	size_t len;
	memset(longkey, 'x', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = '\0';
	struct wimm_kv_client *c = kv_open(a[0], a[1]), *c2 = kv_open(a[0], a[1]), *c3;
	struct wimm_kv_client_attr ca = {.fabric = a[0], .timeout_ms = 5000 * scale()};
	int rc;
	if ((rc = wimm_kv_connect(a[1], &ca, &c3)) != WIMM_E_AGAIN)
		die("input: third client: %s, expected AGAIN", wimm_kv_strerror(rc));
	if ((rc = wimm_kv_put(c, longkey, strlen(longkey), b, 4, 0)) != WIMM_E_INVAL)
		die("input: long key: %s", wimm_kv_strerror(rc));
	if ((rc = wimm_kv_put(c, "", 0, b, 4, 0)) != WIMM_E_INVAL)
		die("input: empty key: %s", wimm_kv_strerror(rc));
	if ((rc = wimm_kv_get(c, "nothing", 7, b, sizeof(b), &len)) != WIMM_KV_E_NOTFOUND)
		die("input: get of a missing key: %s", wimm_kv_strerror(rc));
	if ((rc = wimm_kv_del(c, "nothing", 7)) != WIMM_KV_E_NOTFOUND)
		die("input: delete of a missing key: %s", wimm_kv_strerror(rc));
	if ((rc = wimm_kv_put(c, "k", 1, "0123456789abcdefXYZ", 19, 0)) < 0 ||
	    (rc = wimm_kv_get(c2, "k", 1, b, sizeof(b), &len)) != WIMM_E_TRUNC || len != 19)
		die("input: get into a short buffer: %s", wimm_kv_strerror(rc));
	if ((rc = wimm_kv_put_send(c2, "s", 1, "by send", 7, 0)) < 0 ||
	    (rc = wimm_kv_get(c, "s", 1, b, sizeof(b), &len)) < 0 || len != 7 ||
	    memcmp(b, "by send", 7) != 0)
		die("input: put by send: %s", wimm_kv_strerror(rc));
	if ((rc = wimm_kv_put_commit(c)) != WIMM_E_INVAL)
		die("input: commit without begin: %s", wimm_kv_strerror(rc));
	if ((rc = wimm_kv_client_poll(c)) != 0)
		die("input: poll of an idle client: %s", wimm_kv_strerror(rc));
	wimm_kv_close(&c2);
	wimm_kv_close(&c);
	/* Nothing listens on port 1. */
	char addr[64];
	snprintf(addr, sizeof(addr), "%.*s:1", (int)(strrchr(a[1], ':') - a[1]), a[1]);
	if ((rc = wimm_kv_connect(addr, &ca, &c3)) != WIMM_E_UNREACHABLE)
		die("input: connect to nothing: %s, expected UNREACHABLE", wimm_kv_strerror(rc));
	struct wimm_kv_server_attr sa = {.fabric = a[0], .memory = 1000, .max_clients = 1};
	struct wimm_kv_server *s;
	if ((rc = wimm_kv_server_new(&sa, &s)) != WIMM_E_INVAL)
		die("input: server with 1000 bytes: %s", wimm_kv_strerror(rc));
	sa.memory = 1u << 20;
	sa.index_bytes = 1000;
	if ((rc = wimm_kv_server_new(&sa, &s)) != WIMM_E_INVAL)
		die("input: an index of 1000 bytes: %s", wimm_kv_strerror(rc));
	sa.index_bytes = (1u << 30) + 1;
	if ((rc = wimm_kv_server_new(&sa, &s)) != WIMM_E_INVAL)
		die("input: an index above 1 GiB: %s", wimm_kv_strerror(rc));
	/* An index's words name slots of a pool of at most 64 GiB. */
	sa.memory = (size_t)65 << 30;
	sa.index_bytes = 1u << 20;
	if ((rc = wimm_kv_server_new(&sa, &s)) != WIMM_E_INVAL)
		die("input: an index beside 65 GiB: %s", wimm_kv_strerror(rc));
	return 0;
}

int child_main(int argc, char **argv)
{
	const char *role = argv[0];
	char **a = argv + 1;
	if (strcmp(role, "server") == 0 && argc == 7)
		return role_server(a);
	int rc = index_role(role, argc, a);
	if (rc >= 0)
		return rc;
	if (strcmp(role, "mixed") == 0 && argc == 7)
		return role_mixed(a);
	if ((strcmp(role, "writer") == 0 || strcmp(role, "reader") == 0) && argc == 4)
		return role_hot(a, role[0] == 'w');
	if (strcmp(role, "crasher") == 0 && argc == 3)
		return role_crasher(a);
	if (strcmp(role, "hostile") == 0 && argc == 3)
		return role_hostile(a);
	if (strcmp(role, "leaser") == 0 && argc == 3)
		return role_leaser(a);
	if (strcmp(role, "checker") == 0 && argc == 4)
		return role_checker(a);
	if (strcmp(role, "expirer") == 0 && argc == 4)
		return role_expirer(a);
	if (strcmp(role, "evict") == 0 && argc == 3)
		return role_evict(a);
	if (strcmp(role, "full") == 0 && argc == 3)
		return role_full(a);
	if (strcmp(role, "input") == 0 && argc == 3)
		return role_input(a);
	die("bad child arguments for %s", role);
}
