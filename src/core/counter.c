/* Doorbell counters: the public object over the pure table of
 * counter_table.c, fed by the connections that use it (conn_rx.c). */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/counter_table.h"

struct wimm_counter {
	struct wimm_ctx *ctx;
	struct wimm_imm_layout layout;
	int key_f, epoch_f, source_f; /* field indexes; -1: none */
	void *user;
	struct wimm_count_table t;
	int users; /* connections and listeners using it */
	/* Source numbers of connections, when no field names the source. */
	uint8_t used[WIMM_COUNTER_MAX_SOURCES / 8];
};

static int field(const struct wimm_imm_layout *l, const char *name, int *out)
{
	*out = -1;
	if (!name)
		return 0;
	int i = wimm_imm_field_index(l, name);
	if (i < 0)
		return WIMM_E_INVAL;
	*out = i;
	return 0;
}

int wimm_counter_new(struct wimm_ctx *ctx, const struct wimm_counter_attr *attr,
		     struct wimm_counter **out)
{
	struct wimm_counter *k;

	if (!out)
		return WIMM_E_INVAL;
	*out = NULL;
	if (!ctx || !attr || !attr->layout || !attr->key_field)
		return WIMM_E_INVAL;
	k = calloc(1, sizeof(*k));
	if (!k)
		return WIMM_E_NOMEM;
	k->layout = *attr->layout;
	if (field(&k->layout, attr->key_field, &k->key_f) ||
	    field(&k->layout, attr->epoch_field, &k->epoch_f) ||
	    field(&k->layout, attr->source_field, &k->source_f)) {
		free(k);
		return WIMM_E_INVAL;
	}
	k->ctx = ctx;
	k->user = attr->user;
	wimm_count_init(&k->t, k->epoch_f >= 0 ? k->layout.field[k->epoch_f].bits : 0);
	wimm_ctx_count_object(ctx, 1);
	*out = k;
	return 0;
}

int wimm_counter_delete(struct wimm_counter **pk)
{
	if (!pk || !*pk)
		return 0;
	struct wimm_counter *k = *pk;
	if (k->users > 0)
		return WIMM_E_BUSY;
	wimm_count_free(&k->t);
	wimm_ctx_count_object(k->ctx, -1);
	free(k);
	*pk = NULL;
	return 0;
}

static void raise_count(struct wimm_counter *k, uint32_t key, uint32_t epoch, uint32_t count,
			struct wimm_event *ev)
{
	*ev = (struct wimm_event){
	    .type = WIMM_EV_COUNT,
	    .user = k->user,
	    .imm = key,
	    .len = count,
	    .op_seq = epoch,
	    .counter = k,
	};
}

int wimm_counter_expect(struct wimm_counter *k, uint32_t key, uint32_t epoch, uint32_t count)
{
	int reached = 0;

	if (!k)
		return WIMM_E_INVAL;
	int ret = wimm_count_expect(&k->t, key, epoch, count, &reached);
	if (ret || !reached)
		return ret;
	/* Everything was here already: the event comes at the next poll. */
	struct wimm_event ev;
	raise_count(k, key, epoch, count, &ev);
	return wimm_ctx_push_event(k->ctx, &ev);
}

int wimm_counter_stats(const struct wimm_counter *k, struct wimm_counter_stats *out)
{
	if (!k || !out)
		return WIMM_E_INVAL;
	*out = (struct wimm_counter_stats){
	    .counted = k->t.counted,
	    .reached = k->t.reached,
	    .stale = k->t.stale,
	    .duplicates = k->t.duplicates,
	    .bad_sources = k->t.bad_sources,
	};
	return 0;
}

int wimm_counter_state(const struct wimm_counter *k, uint32_t key, uint32_t *epoch,
		       uint32_t *arrived, uint32_t *expected)
{
	if (!k || !epoch || !arrived || !expected)
		return WIMM_E_INVAL;
	return wimm_count_state(&k->t, key, epoch, arrived, expected);
}

/* ------------------------------------------------ used by the core only */

struct wimm_ctx *wimm_counter_ctx(const struct wimm_counter *k)
{
	return k->ctx;
}

int wimm_counter_attach(struct wimm_counter *k, int add, uint32_t *source)
{
	if (!add) {
		k->users--;
		if (source && *source < WIMM_COUNTER_MAX_SOURCES)
			k->used[*source / 8] &= (uint8_t) ~(1u << (*source % 8));
		return 0;
	}
	if (source) {
		/* Only connections need a number, and only without a field. */
		*source = WIMM_COUNTER_MAX_SOURCES;
		if (k->source_f < 0) {
			for (uint32_t i = 0; i < WIMM_COUNTER_MAX_SOURCES; i++) {
				if (k->used[i / 8] & (1u << (i % 8)))
					continue;
				k->used[i / 8] |= (uint8_t)(1u << (i % 8));
				*source = i;
				break;
			}
			if (*source == WIMM_COUNTER_MAX_SOURCES)
				return WIMM_E_AGAIN; /* 4096 connections count already */
		}
	}
	k->users++;
	return 0;
}

int wimm_counter_doorbell(struct wimm_counter *k, uint32_t imm, uint32_t conn_source,
			  struct wimm_event *count_ev)
{
	uint32_t v[WIMM_IMM_MAX_FIELDS];

	wimm_imm_unpack(&k->layout, imm, v);
	uint32_t key = v[k->key_f];
	uint32_t epoch = k->epoch_f >= 0 ? v[k->epoch_f] : 0;
	uint32_t source = k->source_f >= 0 ? v[k->source_f] : conn_source;
	int verdict = wimm_count_feed(&k->t, key, epoch, source);
	if (verdict == WIMM_COUNT_REACHED) {
		uint32_t e, arrived, expected;
		wimm_count_state(&k->t, key, &e, &arrived, &expected);
		raise_count(k, key, epoch, expected, count_ev);
	}
	return verdict;
}
