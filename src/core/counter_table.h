/* Doorbell counting, the pure part: per key (an imm field, e.g. a shard) the
 * epoch it is at (another field, e.g. an iteration), which sources (a
 * third field, or the connection) have rung for it, and how many are
 * expected. Arrival order and connections do not matter: "all shards are
 * here" is a count (the source article's section 5.3: writes on different
 * connections have no order).
 *
 * Epochs compare as serial numbers modulo 2^bits (RFC 1982): e is newer than
 * the current epoch c when (e - c) mod 2^bits lies in (0, 2^(bits-1)), so an
 * iteration field wraps without ever looking old. A newer epoch moves the
 * key forward (what was counted for the older one is abandoned); an older
 * one is stale. */
#ifndef WIMM_COUNTER_TABLE_H
#define WIMM_COUNTER_TABLE_H

#include <stdint.h>

/* Sources per key the duplicate check can tell apart. */
#define WIMM_COUNTER_MAX_SOURCES 4096u

enum wimm_count_verdict {
	WIMM_COUNT_NEW = 0,	  /* counted: deliver it */
	WIMM_COUNT_REACHED = 1,	  /* counted, and the key's count is now complete */
	WIMM_COUNT_STALE = 2,	  /* an epoch older than the key's: drop it */
	WIMM_COUNT_DUPLICATE = 3, /* this source already rang for key/epoch: drop */
	WIMM_COUNT_BADSOURCE = 4, /* source beyond WIMM_COUNTER_MAX_SOURCES: drop */
};

struct wimm_count_key; /* private to counter_table.c */

struct wimm_count_table {
	uint32_t epoch_bits; /* 0: no epochs (every doorbell is epoch 0) */
	struct wimm_count_key **slots;
	uint32_t size, used; /* open addressing, size a power of two */
	uint64_t counted, reached, stale, duplicates, bad_sources;
};

/* epoch_bits 0..32. */
void wimm_count_init(struct wimm_count_table *t, uint32_t epoch_bits);
void wimm_count_free(struct wimm_count_table *t);

/* Expect `count` distinct sources for key at epoch. A newer epoch than the
 * key's moves it there (its arrivals so far are forgotten); the same epoch
 * keeps what already arrived, so an expectation set late still fires
 * (*reached = 1 when it is already complete); after a completed count the
 * key starts a new round. 0, or WIMM_E_NOMEM, or WIMM_E_INVAL (count 0 or
 * above the sources, or an epoch older than the key's). */
int wimm_count_expect(struct wimm_count_table *t, uint32_t key, uint32_t epoch, uint32_t count,
		      int *reached);

/* A doorbell of source for key at epoch: the verdict, or WIMM_E_NOMEM. */
int wimm_count_feed(struct wimm_count_table *t, uint32_t key, uint32_t epoch, uint32_t source);

/* Where a key is: its epoch, arrivals and expectation (0 if unknown).
 * 0, or WIMM_E_INVAL when the key was never seen. */
int wimm_count_state(const struct wimm_count_table *t, uint32_t key, uint32_t *epoch,
		     uint32_t *arrived, uint32_t *expected);

#endif
