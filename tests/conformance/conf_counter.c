/* Doorbell counters across connections: 16 workers ring for 4 shards over
 * 5 iterations in a random order across their connections, with a
 * duplicate and stale doorbells mixed in. Each (shard, iteration) raises
 * exactly one WIMM_EV_COUNT, after its 16th distinct doorbell; stale and
 * duplicate doorbells are never delivered, and are counted. */
#include <string.h>

#include "conf.h"

enum { WORKERS = 16, SHARDS = 4, ITERS = 5 };

static void t_counter_connections(const char *uri)
{
	struct wimm_imm_layout lay;
	static const struct wimm_imm_field fields[] = {{"worker", 8}, {"shard", 8}, {"iter", 16}};
	struct wimm_counter *k = NULL;
	struct wimm_conn *s[WORKERS] = {0}, *c[WORKERS] = {0};
	struct pair p;
	char addr[300];
	int made = 0, delivered[SHARDS][ITERS], counts[SHARDS][ITERS];
	uint64_t seed = 12345, stale_sent = 0, dups_sent = 0;

	memset(delivered, 0, sizeof(delivered));
	memset(counts, 0, sizeof(counts));
	if (pair_open(&p, uri))
		goto out;
	CHECK_OK(wimm_imm_layout_init(&lay, fields, 3));
	struct wimm_counter_attr ka = {
	    .layout = &lay, .key_field = "shard", .epoch_field = "iter", .source_field = "worker"};
	CHECK_OK(wimm_counter_new(p.sctx, &ka, &k));
	struct wimm_conn_attr sattr = {.counter = k, .rx_depth = 128};
	if (conf_listen(p.sctx, &sattr, &p.l, addr, sizeof(addr)))
		goto out;
	CHECK_RC(wimm_counter_delete(&k), WIMM_E_BUSY); /* the listener uses it */
	for (made = 0; made < WORKERS; made++) {
		if (pair_connect_on(&p, addr, NULL))
			goto out;
		s[made] = p.s;
		c[made] = p.c;
		p.s = p.c = NULL;
	}
	for (uint32_t it = 0; it < ITERS; it++) {
		for (uint32_t sh = 0; sh < SHARDS; sh++)
			CHECK_OK(wimm_counter_expect(k, sh, it, WORKERS));
		/* Every (worker, shard) once, in a random order. */
		uint32_t order[WORKERS * SHARDS];
		for (uint32_t i = 0; i < WORKERS * SHARDS; i++)
			order[i] = i;
		for (uint32_t i = WORKERS * SHARDS - 1; i > 0; i--) {
			uint32_t j = (uint32_t)(conf_rand(&seed) % (i + 1)), t = order[i];
			order[i] = order[j];
			order[j] = t;
		}
		for (uint32_t i = 0; i < WORKERS * SHARDS; i++) {
			uint32_t w = order[i] % WORKERS, sh = order[i] / WORKERS, imm;
			CHECK_OK(wimm_imm_pack(&lay, (uint32_t[]){w, sh, it}, &imm));
			CHECK_OK(wimm_write_imm(c[w], NULL, 0, 0, 0, imm, WIMM_F_WAIT));
			/* A duplicate and a late one of the previous iteration. */
			if (i == 7) {
				CHECK_OK(wimm_write_imm(c[w], NULL, 0, 0, 0, imm, WIMM_F_WAIT));
				dups_sent++;
			}
			if (i == 11 && it > 0) {
				CHECK_OK(wimm_imm_pack(&lay, (uint32_t[]){w, sh, it - 1}, &imm));
				CHECK_OK(wimm_write_imm(c[w], NULL, 0, 0, 0, imm, WIMM_F_WAIT));
				stale_sent++;
			}
		}
		/* Until every shard of this iteration is complete. */
		int done = 0;
		int64_t deadline = conf_now_ms() + 10000;
		while (done < SHARDS && conf_now_ms() < deadline) {
			struct wimm_event ev;
			if (next_event(p.sctx, p.cctx, &ev, 50) != 1)
				continue;
			if (ev.type == WIMM_EV_WRITE_IMM) {
				uint32_t v[3];
				wimm_imm_unpack(&lay, ev.imm, v);
				CHECKF(v[2] == it, "a doorbell of iteration %u delivered in %u",
				       v[2], it);
				delivered[v[1]][v[2]]++;
				CHECKF(delivered[v[1]][v[2]] <= WORKERS,
				       "shard %u iter %u: %d delivered", v[1], v[2],
				       delivered[v[1]][v[2]]);
			}
			if (ev.type == WIMM_EV_COUNT) {
				CHECK(ev.counter == k && ev.conn == NULL);
				CHECKF(ev.imm < SHARDS && ev.op_seq == it,
				       "COUNT for shard %u iter %llu", ev.imm,
				       (unsigned long long)ev.op_seq);
				CHECK_EQ(ev.len, WORKERS);
				/* After all of its doorbells, never before. */
				CHECK_EQ(delivered[ev.imm][it], WORKERS);
				counts[ev.imm][it]++;
				done++;
			}
		}
		CHECKF(done == SHARDS, "iteration %u: %d of %d shards complete", it, done, SHARDS);
	}
	CHECK_EQ(drain_events(p.sctx, p.cctx, 200), 0);
	for (int sh = 0; sh < SHARDS; sh++)
		for (int it = 0; it < ITERS; it++)
			CHECK_EQ(counts[sh][it], 1);
	struct wimm_counter_stats st;
	CHECK_OK(wimm_counter_stats(k, &st));
	conf_diag("counted %llu, reached %llu, stale %llu, duplicates %llu",
		  (unsigned long long)st.counted, (unsigned long long)st.reached,
		  (unsigned long long)st.stale, (unsigned long long)st.duplicates);
	CHECK_EQ(st.counted, WORKERS * SHARDS * ITERS);
	CHECK_EQ(st.reached, SHARDS * ITERS);
	CHECK_EQ(st.stale, stale_sent);
	CHECK_EQ(st.duplicates, dups_sent);
	/* Dropped doorbells gave their credit back: all of it is here. */
	struct wimm_conn_info ci;
	for (int w = 0; w < WORKERS; w++) {
		CHECK_OK(wimm_conn_info(c[w], &ci));
		CHECK(ci.credits > 0);
	}
out:
	for (int i = 0; i < made; i++) {
		wimm_conn_delete(&c[i]);
		wimm_conn_delete(&s[i]);
	}
	wimm_listener_delete(&p.l);
	wimm_counter_delete(&k);
	pair_close(&p);
}

const struct conf_test conf_tests_counter[] = {
    {"counter_connections", t_counter_connections, 120},
    {NULL, NULL, 0},
};
