/* Doorbell counting (src/core/counter_table.c): one completion per key
 * whatever the arrival order, duplicates and stale epochs dropped and
 * counted, epochs that wrap, expectations set early or late. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/counter_table.h"
#include "wimm.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

struct feed {
	uint32_t key, epoch, source;
};

static void shuffle(struct feed *f, size_t n)
{
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = rnd((uint32_t)(i + 1));
		struct feed t = f[i];
		f[i] = f[j];
		f[j] = t;
	}
}

/* Keys x sources in random order, with duplicates mixed in: each key
 * completes exactly once, exactly at its last distinct source. */
static void test_random_order(void)
{
	enum { KEYS = 40, SOURCES = 33, DUPS = 200 };
	static struct feed f[KEYS * SOURCES + DUPS];
	struct wimm_count_table t;
	uint32_t seen[KEYS] = {0};
	int reached[KEYS] = {0}, r;
	size_t n = 0;

	wimm_count_init(&t, 20);
	for (uint32_t k = 0; k < KEYS; k++) {
		/* Half the keys are expected before anything arrives. */
		if (k % 2 == 0) {
			CHECK_EQ(wimm_count_expect(&t, k, 7, SOURCES, &r), 0);
			CHECK_EQ(r, 0);
		}
		for (uint32_t s = 0; s < SOURCES; s++)
			f[n++] = (struct feed){k, 7, s * 97 % 4096};
	}
	for (int d = 0; d < DUPS; d++)
		f[n++] = f[rnd(KEYS * SOURCES)];
	shuffle(f, n);
	uint64_t dups = 0;
	/* Remember which (key, source) came already, to know what is a dup. */
	static uint8_t came[KEYS][4096];
	memset(came, 0, sizeof(came));
	for (size_t i = 0; i < n; i++) {
		int v = wimm_count_feed(&t, f[i].key, f[i].epoch, f[i].source);
		if (came[f[i].key][f[i].source]) {
			CHECK_EQ(v, WIMM_COUNT_DUPLICATE);
			dups++;
			continue;
		}
		came[f[i].key][f[i].source] = 1;
		seen[f[i].key]++;
		if (f[i].key % 2 == 0 && seen[f[i].key] == SOURCES) {
			CHECK_EQ(v, WIMM_COUNT_REACHED);
			reached[f[i].key]++;
		} else {
			CHECK_EQ(v, WIMM_COUNT_NEW);
		}
	}
	/* The other half expected late: complete at once, exactly once. */
	for (uint32_t k = 1; k < KEYS; k += 2) {
		CHECK_EQ(wimm_count_expect(&t, k, 7, SOURCES, &r), 0);
		CHECK_EQ(r, 1);
		reached[k]++;
	}
	for (uint32_t k = 0; k < KEYS; k++)
		CHECK_EQ(reached[k], 1);
	CHECK_EQ(t.duplicates, dups);
	CHECK_EQ(t.counted, KEYS * SOURCES);
	CHECK_EQ(t.reached, KEYS);
	uint32_t e, a, x;
	CHECK_EQ(wimm_count_state(&t, 3, &e, &a, &x), 0);
	CHECK_EQ(e, 7);
	CHECK_EQ(a, SOURCES);
	CHECK_EQ(x, SOURCES);
	CHECK_EQ(wimm_count_state(&t, 9999, &e, &a, &x), WIMM_E_INVAL);
	wimm_count_free(&t);
}

/* Older epochs are stale; a newer one abandons what the older counted. */
static void test_epochs(void)
{
	struct wimm_count_table t;
	int r;

	wimm_count_init(&t, 20);
	CHECK_EQ(wimm_count_expect(&t, 1, 10, 3, &r), 0);
	CHECK_EQ(wimm_count_feed(&t, 1, 10, 0), WIMM_COUNT_NEW);
	CHECK_EQ(wimm_count_feed(&t, 1, 9, 1), WIMM_COUNT_STALE);
	CHECK_EQ(wimm_count_feed(&t, 1, 10, 1), WIMM_COUNT_NEW);
	/* Epoch 11 arrives before 10 completed: the key moves on. */
	CHECK_EQ(wimm_count_feed(&t, 1, 11, 0), WIMM_COUNT_NEW);
	CHECK_EQ(wimm_count_feed(&t, 1, 10, 2), WIMM_COUNT_STALE);
	CHECK_EQ(t.stale, 2);
	/* An expectation for the past is refused; for 11 it counts what came. */
	CHECK_EQ(wimm_count_expect(&t, 1, 10, 3, &r), WIMM_E_INVAL);
	CHECK_EQ(wimm_count_expect(&t, 1, 11, 2, &r), 0);
	CHECK_EQ(r, 0);
	CHECK_EQ(wimm_count_feed(&t, 1, 11, 5), WIMM_COUNT_REACHED);
	/* Complete: a later doorbell of the epoch counts, fires no more. */
	CHECK_EQ(wimm_count_feed(&t, 1, 11, 6), WIMM_COUNT_NEW);
	/* Re-arming the same epoch starts a new round. */
	CHECK_EQ(wimm_count_expect(&t, 1, 11, 1, &r), 0);
	CHECK_EQ(r, 0);
	CHECK_EQ(wimm_count_feed(&t, 1, 11, 0), WIMM_COUNT_REACHED);
	CHECK_EQ(wimm_count_expect(&t, 1, 11, 0, &r), WIMM_E_INVAL);
	CHECK_EQ(wimm_count_expect(&t, 1, 11, WIMM_COUNTER_MAX_SOURCES + 1, &r), WIMM_E_INVAL);
	CHECK_EQ(wimm_count_feed(&t, 1, 11, WIMM_COUNTER_MAX_SOURCES), WIMM_COUNT_BADSOURCE);
	CHECK_EQ(t.bad_sources, 1);
	wimm_count_free(&t);
}

/* A 4-bit epoch wraps: 15 -> 0 is newer, 0 -> 15 is older; half the
 * circle ahead is newer, half behind older. */
static void test_wrap(void)
{
	struct wimm_count_table t;

	wimm_count_init(&t, 4);
	CHECK_EQ(wimm_count_feed(&t, 2, 15, 0), WIMM_COUNT_NEW);
	CHECK_EQ(wimm_count_feed(&t, 2, 0, 0), WIMM_COUNT_NEW); /* newer: source 0 again is fine */
	CHECK_EQ(wimm_count_feed(&t, 2, 15, 1), WIMM_COUNT_STALE);
	CHECK_EQ(wimm_count_feed(&t, 2, 8, 1), WIMM_COUNT_STALE); /* 8 behind */
	CHECK_EQ(wimm_count_feed(&t, 2, 7, 1), WIMM_COUNT_NEW);	  /* 7 ahead */
	/* Without epochs nothing is ever stale. */
	struct wimm_count_table u;
	wimm_count_init(&u, 0);
	CHECK_EQ(wimm_count_feed(&u, 2, 0, 0), WIMM_COUNT_NEW);
	CHECK_EQ(wimm_count_feed(&u, 2, 0, 0), WIMM_COUNT_DUPLICATE);
	wimm_count_free(&t);
	wimm_count_free(&u);
}

/* Many keys: the table grows, nothing is lost. */
static void test_many_keys(void)
{
	struct wimm_count_table t;
	int r;

	wimm_count_init(&t, 8);
	for (uint32_t k = 0; k < 20000; k++)
		CHECK_EQ(wimm_count_expect(&t, k * 7919u, 1, 2, &r), 0);
	for (uint32_t k = 0; k < 20000; k++) {
		CHECK_EQ(wimm_count_feed(&t, k * 7919u, 1, 1), WIMM_COUNT_NEW);
		CHECK_EQ(wimm_count_feed(&t, k * 7919u, 1, 4095), WIMM_COUNT_REACHED);
	}
	CHECK_EQ(t.reached, 20000);
	wimm_count_free(&t);
}

int main(void)
{
	for (int round = 0; round < 20; round++)
		test_random_order();
	test_epochs();
	test_wrap();
	test_many_keys();
	printf("unit.counter: ok\n");
	return 0;
}
