/* kv_slots: a key-value store over a pool of slots, with the wimm_kv
 * building block (include/wimm/kv.h).
 *
 * A put asks the server for a slot (a small send_imm), writes the value
 * into it with ONE write-with-imm (imm = grant, key hash, size class) and
 * is published when the server has checked that completion against the
 * grant and the value's CRC32C. A get looks the key up (send_imm), then
 * reads the slot one-sided (wimm_read) and checks what it read. An
 * overwrite goes into a new slot; the old one is freed once no reader
 * lease can still be reading it.
 *
 * Here the server runs in a thread with its own context and the client in
 * main; `wimm kv serve` and `wimm kv put|get|del` are the same as separate
 * processes.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <wimm/kv.h>

#include "common.h"

static atomic_int stop;

static void *serve(void *arg)
{
	struct wimm_kv_server *s = arg;
	while (!atomic_load(&stop)) {
		int rc = wimm_kv_server_run(s, 20);
		if (rc < 0)
			ex_fail(NULL, rc, "server");
	}
	return NULL;
}

static void fill(unsigned char *v, size_t len, unsigned key, unsigned version)
{
	for (size_t i = 0; i < len; i++)
		v[i] = (unsigned char)(key * 7 + version * 13 + i);
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s FABRIC [PUTS]   e.g. %s ofi:tcp\n", argv[0], argv[0]);
		return 2;
	}
	unsigned puts = ex_count(argc, argv, 2000), nkeys = 256;
	char addr[96], key[32];
	snprintf(addr, sizeof(addr), "%s:0", ex_host());
	/* 4 arenas (clients) of 4 MiB: room for every key and for old slots
	 * still leased to readers (200 ms), so nothing is evicted here. */
	struct wimm_kv_server_attr sa = {.fabric = argv[1],
					 .addr = addr,
					 .memory = 16u << 20,
					 .max_clients = 4,
					 .lease_ms = 200};
	struct wimm_kv_server *s;
	int rc = wimm_kv_server_new(&sa, &s);
	if (rc < 0)
		ex_fatal("server on %s: %s", argv[1], wimm_kv_strerror(rc));
	snprintf(addr, sizeof(addr), "%s:%d", ex_host(), wimm_kv_server_port(s));
	pthread_t server;
	if (pthread_create(&server, NULL, serve, s) != 0)
		ex_fatal("cannot start the server thread");

	struct wimm_kv_client *c;
	struct wimm_kv_client_attr ca = {.fabric = argv[1]};
	if ((rc = wimm_kv_connect(addr, &ca, &c)) < 0)
		ex_fatal("connect to %s: %s", addr, wimm_kv_strerror(rc));
	unsigned *version = calloc(nkeys, sizeof(*version));
	unsigned char *v = malloc(4096), *g = malloc(4096);
	if (!version || !v || !g)
		ex_fatal("out of memory");
	double start = ex_now();
	for (unsigned i = 0; i < puts; i++) {
		unsigned k = (unsigned)(i * 2654435761u) % nkeys;
		size_t len = 1 + (i * 37) % 2000, got;
		snprintf(key, sizeof(key), "key-%u", k);
		fill(v, len, k, ++version[k]);
		if ((rc = wimm_kv_put(c, key, strlen(key), v, len, 0)) < 0)
			ex_fatal("put %s: %s", key, wimm_kv_strerror(rc));
		/* Read it straight back: the value just published, whole. */
		if ((rc = wimm_kv_get(c, key, strlen(key), g, 4096, &got)) < 0)
			ex_fatal("get %s: %s", key, wimm_kv_strerror(rc));
		if (got != len || memcmp(g, v, len) != 0)
			ex_fatal("get %s: not the value just put", key);
	}
	double secs = ex_now() - start;
	/* A delete is a clear miss afterwards. */
	size_t got;
	if ((rc = wimm_kv_del(c, "key-0", 5)) < 0 ||
	    (rc = wimm_kv_get(c, "key-0", 5, g, 4096, &got)) != WIMM_KV_E_NOTFOUND)
		ex_fatal("delete then get: %s", wimm_kv_strerror(rc));
	struct wimm_kv_stats st;
	if ((rc = wimm_kv_stat(c, &st)) < 0)
		ex_fatal("stat: %s", wimm_kv_strerror(rc));
	wimm_kv_close(&c);
	atomic_store(&stop, 1);
	pthread_join(server, NULL);
	wimm_kv_server_delete(&s);
	printf("kv_slots: %s: %u puts + gets in %.3f s (%.0f pairs/s); %llu keys, %llu B of "
	       "slots; every value read back whole, a deleted key a miss\n",
	       argv[1], puts, secs, puts / secs, (unsigned long long)st.keys,
	       (unsigned long long)st.used);
	free(version);
	free(v);
	free(g);
	return 0;
}
