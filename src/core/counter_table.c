/* Doorbell counting, the pure part. See counter_table.h. */
#include "core/counter_table.h"

#include <stdlib.h>
#include <string.h>

#include "wimm.h"

struct wimm_count_key {
	uint32_t key;
	uint32_t epoch;
	uint32_t arrived;
	uint32_t expected; /* 0: not yet expected */
	int fired;
	/* One bit per source that rang for this epoch; grown on demand. */
	uint64_t *seen;
	uint32_t seen_words;
};

void wimm_count_init(struct wimm_count_table *t, uint32_t epoch_bits)
{
	memset(t, 0, sizeof(*t));
	t->epoch_bits = epoch_bits > 32 ? 32 : epoch_bits;
}

void wimm_count_free(struct wimm_count_table *t)
{
	for (uint32_t i = 0; i < t->size; i++) {
		if (!t->slots[i])
			continue;
		free(t->slots[i]->seen);
		free(t->slots[i]);
	}
	free(t->slots);
	t->slots = NULL;
	t->size = t->used = 0;
}

static uint32_t hash(uint32_t k, uint32_t size)
{
	return (k * 2654435761u) & (size - 1);
}

static int grow(struct wimm_count_table *t)
{
	uint32_t nsize = t->size ? t->size * 2 : 64;
	struct wimm_count_key **ns = calloc(nsize, sizeof(*ns));

	if (!ns)
		return WIMM_E_NOMEM;
	for (uint32_t i = 0; i < t->size; i++) {
		struct wimm_count_key *k = t->slots[i];
		if (!k)
			continue;
		uint32_t h = hash(k->key, nsize);
		while (ns[h])
			h = (h + 1) & (nsize - 1);
		ns[h] = k;
	}
	free(t->slots);
	t->slots = ns;
	t->size = nsize;
	return 0;
}

static struct wimm_count_key *find(const struct wimm_count_table *t, uint32_t key)
{
	if (!t->size)
		return NULL;
	for (uint32_t h = hash(key, t->size); t->slots[h]; h = (h + 1) & (t->size - 1))
		if (t->slots[h]->key == key)
			return t->slots[h];
	return NULL;
}

/* The key's state, made at epoch when it is new. */
static struct wimm_count_key *get(struct wimm_count_table *t, uint32_t key, uint32_t epoch)
{
	struct wimm_count_key *k = find(t, key);

	if (k)
		return k;
	if ((t->used + 1) * 2 > t->size && grow(t))
		return NULL;
	k = calloc(1, sizeof(*k));
	if (!k)
		return NULL;
	k->key = key;
	k->epoch = epoch;
	uint32_t h = hash(key, t->size);
	while (t->slots[h])
		h = (h + 1) & (t->size - 1);
	t->slots[h] = k;
	t->used++;
	return k;
}

/* -1 older, 0 same, 1 newer than the key's epoch (serial arithmetic). */
static int compare(const struct wimm_count_table *t, uint32_t epoch, uint32_t current)
{
	if (t->epoch_bits == 0 || epoch == current)
		return 0;
	uint32_t mask = t->epoch_bits == 32 ? UINT32_MAX : (1u << t->epoch_bits) - 1;
	uint32_t d = (epoch - current) & mask;
	return d < (mask >> 1) + 1 ? 1 : -1;
}

static void restart(struct wimm_count_key *k, uint32_t epoch)
{
	k->epoch = epoch;
	k->arrived = 0;
	k->expected = 0;
	k->fired = 0;
	if (k->seen)
		memset(k->seen, 0, k->seen_words * sizeof(*k->seen));
}

/* Returns 1 when the count is complete now (and not reported before). */
static int check_fire(struct wimm_count_key *k)
{
	if (k->fired || !k->expected || k->arrived < k->expected)
		return 0;
	k->fired = 1;
	return 1;
}

int wimm_count_expect(struct wimm_count_table *t, uint32_t key, uint32_t epoch, uint32_t count,
		      int *reached)
{
	*reached = 0;
	if (count == 0 || count > WIMM_COUNTER_MAX_SOURCES)
		return WIMM_E_INVAL;
	struct wimm_count_key *k = get(t, key, epoch);
	if (!k)
		return WIMM_E_NOMEM;
	int cmp = compare(t, epoch, k->epoch);
	if (cmp < 0)
		return WIMM_E_INVAL;
	/* A newer epoch, or a new round of one already complete. */
	if (cmp > 0 || k->fired)
		restart(k, epoch);
	k->expected = count;
	*reached = check_fire(k);
	if (*reached)
		t->reached++;
	return 0;
}

static int mark_seen(struct wimm_count_key *k, uint32_t source)
{
	uint32_t word = source / 64;

	if (word >= k->seen_words) {
		uint32_t n = word + 1 > 2 * k->seen_words ? word + 1 : 2 * k->seen_words;
		uint64_t *s = realloc(k->seen, n * sizeof(*s));
		if (!s)
			return WIMM_E_NOMEM;
		memset(s + k->seen_words, 0, (n - k->seen_words) * sizeof(*s));
		k->seen = s;
		k->seen_words = n;
	}
	uint64_t bit = 1ull << (source % 64);
	if (k->seen[word] & bit)
		return 1;
	k->seen[word] |= bit;
	return 0;
}

int wimm_count_feed(struct wimm_count_table *t, uint32_t key, uint32_t epoch, uint32_t source)
{
	if (source >= WIMM_COUNTER_MAX_SOURCES) {
		t->bad_sources++;
		return WIMM_COUNT_BADSOURCE;
	}
	struct wimm_count_key *k = get(t, key, epoch);
	if (!k)
		return WIMM_E_NOMEM;
	int cmp = compare(t, epoch, k->epoch);
	if (cmp < 0) {
		t->stale++;
		return WIMM_COUNT_STALE;
	}
	if (cmp > 0)
		restart(k, epoch);
	int dup = mark_seen(k, source);
	if (dup < 0)
		return dup;
	if (dup) {
		t->duplicates++;
		return WIMM_COUNT_DUPLICATE;
	}
	k->arrived++;
	t->counted++;
	if (check_fire(k)) {
		t->reached++;
		return WIMM_COUNT_REACHED;
	}
	return WIMM_COUNT_NEW;
}

int wimm_count_state(const struct wimm_count_table *t, uint32_t key, uint32_t *epoch,
		     uint32_t *arrived, uint32_t *expected)
{
	const struct wimm_count_key *k = find(t, key);

	if (!k)
		return WIMM_E_INVAL;
	*epoch = k->epoch;
	*arrived = k->arrived;
	*expected = k->expected;
	return 0;
}
