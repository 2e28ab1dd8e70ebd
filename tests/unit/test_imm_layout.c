/* Unit tests of the typed imm layouts: init validation, pack/unpack round
 * trips, exact bit positions, range checks that leave the output untouched. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "wimm.h"

static void test_init_validation(void)
{
	struct wimm_imm_layout l;

	/* A width outside 1..32 is a range error like a total above 32. */
	CHECK_EQ(wimm_imm_layout_init(&l, (struct wimm_imm_field[]){{"a", 0}}, 1), WIMM_E_RANGE);
	CHECK_EQ(wimm_imm_layout_init(&l, (struct wimm_imm_field[]){{"a", 33}}, 1), WIMM_E_RANGE);
	CHECK_EQ(wimm_imm_layout_init(&l, (struct wimm_imm_field[]){{"a", 4}, {"b", 0}}, 2),
		 WIMM_E_RANGE);
	CHECK_EQ(wimm_imm_layout_init(&l, (struct wimm_imm_field[]){{"a", 16}, {"b", 17}}, 2),
		 WIMM_E_RANGE);
	CHECK_EQ(
	    wimm_imm_layout_init(
		&l, (struct wimm_imm_field[]){{"a", 8}, {"b", 8}, {"c", 8}, {"d", 8}, {"e", 1}}, 5),
	    WIMM_E_RANGE);
	CHECK_EQ(wimm_imm_layout_init(&l, (struct wimm_imm_field[]){{"a", 4}, {"a", 4}}, 2),
		 WIMM_E_INVAL);
	CHECK_EQ(wimm_imm_layout_init(&l, (struct wimm_imm_field[]){{"a", 4}, {NULL, 4}}, 2),
		 WIMM_E_INVAL);
	CHECK_EQ(wimm_imm_layout_init(&l, (struct wimm_imm_field[]){{NULL, 4}}, 1), WIMM_E_INVAL);
	CHECK_EQ(wimm_imm_layout_init(NULL, (struct wimm_imm_field[]){{"a", 4}}, 1), WIMM_E_INVAL);
	CHECK_EQ(wimm_imm_layout_init(&l, NULL, 1), WIMM_E_INVAL);
	CHECK_EQ(wimm_imm_layout_init(&l, (struct wimm_imm_field[]){{"a", 4}}, 0), WIMM_E_INVAL);

	/* Nine 1-bit fields fit in 32 bits but exceed the field limit. */
	{
		struct wimm_imm_field f[WIMM_IMM_MAX_FIELDS + 1];
		static const char *const names[] = {"f0", "f1", "f2", "f3", "f4",
						    "f5", "f6", "f7", "f8"};

		for (unsigned i = 0; i < WIMM_IMM_MAX_FIELDS + 1; i++) {
			f[i].name = names[i];
			f[i].bits = 1;
		}
		CHECK_EQ(wimm_imm_layout_init(&l, f, WIMM_IMM_MAX_FIELDS + 1), WIMM_E_INVAL);
		/* Exactly the limit is fine. */
		CHECK_EQ(wimm_imm_layout_init(&l, f, WIMM_IMM_MAX_FIELDS), 0);
		CHECK_EQ(l.nfields, WIMM_IMM_MAX_FIELDS);
	}

	/* Boundary values that must be accepted. */
	CHECK_EQ(wimm_imm_layout_init(&l, (struct wimm_imm_field[]){{"a", 32}}, 1), 0);
	CHECK_EQ(wimm_imm_layout_init(&l, (struct wimm_imm_field[]){{"a", 1}}, 1), 0);
	CHECK_EQ(wimm_imm_layout_init(&l, (struct wimm_imm_field[]){{"a", 16}, {"b", 16}}, 2), 0);
}

/* A single 32-bit field is the identity, including the top bit. */
static void test_full_width(void)
{
	static const uint32_t vals[] = {0, 1, 0x11223344u, 0x80000000u, 0xFFFFFFFFu};
	struct wimm_imm_layout l;
	uint32_t imm, out;

	CHECK_EQ(wimm_imm_layout_init(&l, (struct wimm_imm_field[]){{"all", 32}}, 1), 0);
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		CHECK_EQ(wimm_imm_pack(&l, &vals[i], &imm), 0);
		CHECK_EQ(imm, vals[i]);
		out = ~vals[i];
		CHECK_EQ(wimm_imm_unpack(&l, imm, &out), 0);
		CHECK_EQ(out, vals[i]);
	}
}

/* A tiny deterministic PRNG so a failure reproduces. */
static uint32_t rng_state = 0x2545F491u;

static uint32_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 17;
	rng_state ^= rng_state << 5;
	return rng_state;
}

static uint32_t field_max(unsigned bits)
{
	return bits == 32 ? 0xFFFFFFFFu : (1u << bits) - 1;
}

/* Random values within each width round-trip; the maximum and zero too. */
static void round_trip(const struct wimm_imm_field *f, unsigned n)
{
	struct wimm_imm_layout l;
	uint32_t in[WIMM_IMM_MAX_FIELDS], out[WIMM_IMM_MAX_FIELDS], imm;

	CHECK_EQ(wimm_imm_layout_init(&l, f, n), 0);
	CHECK_EQ(l.nfields, n);
	for (int iter = 0; iter < 10000; iter++) {
		for (unsigned i = 0; i < n; i++) {
			if (iter == 0)
				in[i] = 0;
			else if (iter == 1)
				in[i] = field_max(f[i].bits);
			else
				in[i] = rnd() & field_max(f[i].bits);
		}
		CHECK_EQ(wimm_imm_pack(&l, in, &imm), 0);
		memset(out, 0xA5, sizeof(out));
		CHECK_EQ(wimm_imm_unpack(&l, imm, out), 0);
		for (unsigned i = 0; i < n; i++)
			CHECK_EQ(out[i], in[i]);
	}
	for (unsigned i = 0; i < n; i++)
		CHECK_EQ(wimm_imm_field_index(&l, f[i].name), (int)i);
	CHECK_EQ(wimm_imm_field_index(&l, "no-such-field"), WIMM_E_INVAL);
}

/* The article's layouts, with exact bit positions where the fields fill all
 * 32 bits (most significant field first). */
static void test_article_layouts(void)
{
	static const struct wimm_imm_field log[] = {{"len", 16}, {"seq", 12}, {"flag", 4}};
	static const struct wimm_imm_field kv[] = {{"hash", 20}, {"len", 12}};
	static const struct wimm_imm_field ps[] = {{"worker", 8}, {"shard", 12}, {"iter", 12}};
	static const struct wimm_imm_field partial[] = {{"type", 4}, {"seq", 12}};
	struct wimm_imm_layout l;
	uint32_t imm, v[3];

	round_trip(log, 3);
	round_trip(kv, 2);
	round_trip(ps, 3);
	round_trip(partial, 2);

	CHECK_EQ(wimm_imm_layout_init(&l, log, 3), 0);
	CHECK_EQ(wimm_imm_pack(&l, (uint32_t[]){0xABCD, 0x123, 0x5}, &imm), 0);
	CHECK_EQ(imm, 0xABCD1235u);
	CHECK_EQ(wimm_imm_unpack(&l, 0x0004FFF1u, v), 0);
	CHECK_EQ(v[0], 0x0004);
	CHECK_EQ(v[1], 0xFFF);
	CHECK_EQ(v[2], 0x1);

	CHECK_EQ(wimm_imm_layout_init(&l, kv, 2), 0);
	CHECK_EQ(wimm_imm_pack(&l, (uint32_t[]){0xFEDCB, 0xA98}, &imm), 0);
	CHECK_EQ(imm, 0xFEDCBA98u);

	CHECK_EQ(wimm_imm_layout_init(&l, ps, 3), 0);
	CHECK_EQ(wimm_imm_pack(&l, (uint32_t[]){0x7F, 0x001, 0x800}, &imm), 0);
	CHECK_EQ(imm, 0x7F001800u);
	CHECK_EQ(wimm_imm_unpack(&l, 0x80FFF000u, v), 0);
	CHECK_EQ(v[0], 0x80);
	CHECK_EQ(v[1], 0xFFF);
	CHECK_EQ(v[2], 0x000);
}

/* A value one above its width is refused and *imm is left as it was. */
static void test_pack_range(void)
{
	static const struct wimm_imm_field log[] = {{"len", 16}, {"seq", 12}, {"flag", 4}};
	struct wimm_imm_layout l;
	uint32_t imm;

	CHECK_EQ(wimm_imm_layout_init(&l, log, 3), 0);
	imm = 0xDEADBEEFu;
	CHECK_EQ(wimm_imm_pack(&l, (uint32_t[]){0x10000, 0, 0}, &imm), WIMM_E_RANGE);
	CHECK_EQ(imm, 0xDEADBEEFu);
	CHECK_EQ(wimm_imm_pack(&l, (uint32_t[]){0, 0x1000, 0}, &imm), WIMM_E_RANGE);
	CHECK_EQ(imm, 0xDEADBEEFu);
	CHECK_EQ(wimm_imm_pack(&l, (uint32_t[]){0, 0, 0x10}, &imm), WIMM_E_RANGE);
	CHECK_EQ(imm, 0xDEADBEEFu);
	CHECK_EQ(wimm_imm_pack(&l, (uint32_t[]){0xFFFF, 0xFFF, 0xFFFFFFFFu}, &imm), WIMM_E_RANGE);
	CHECK_EQ(imm, 0xDEADBEEFu);
	CHECK_EQ(wimm_imm_pack(&l, (uint32_t[]){0xFFFF, 0xFFF, 0xF}, &imm), 0);
	CHECK_EQ(imm, 0xFFFFFFFFu);

	/* A 1-bit field takes 0 and 1 only. */
	CHECK_EQ(wimm_imm_layout_init(&l, (struct wimm_imm_field[]){{"bit", 1}}, 1), 0);
	imm = 7;
	CHECK_EQ(wimm_imm_pack(&l, (uint32_t[]){2}, &imm), WIMM_E_RANGE);
	CHECK_EQ(imm, 7);
	CHECK_EQ(wimm_imm_pack(&l, (uint32_t[]){1}, &imm), 0);
	CHECK_EQ(wimm_imm_unpack(&l, imm, &imm), 0);
	CHECK_EQ(imm, 1);
}

/* Bits no field covers do not leak into any field: pack/unpack of a layout
 * that leaves bits free is stable whatever those bits hold. */
static void test_unpack_ignores_free_bits(void)
{
	static const struct wimm_imm_field partial[] = {{"type", 4}, {"seq", 12}};
	struct wimm_imm_layout l;
	uint32_t ref[2], v[2], imm;

	CHECK_EQ(wimm_imm_layout_init(&l, partial, 2), 0);
	CHECK_EQ(wimm_imm_pack(&l, (uint32_t[]){0x9, 0xABC}, &imm), 0);
	CHECK_EQ(wimm_imm_unpack(&l, imm, ref), 0);
	CHECK_EQ(ref[0], 0x9);
	CHECK_EQ(ref[1], 0xABC);
	/* Exactly 16 bits are used, so exactly 16 bits of the packed word can
	 * be set for all-ones values. */
	CHECK_EQ(wimm_imm_pack(&l, (uint32_t[]){0xF, 0xFFF}, &imm), 0);
	CHECK_EQ(__builtin_popcount(imm), 16);
	/* Flipping every bit outside the used ones changes nothing. */
	CHECK_EQ(wimm_imm_pack(&l, (uint32_t[]){0x9, 0xABC}, &imm), 0);
	{
		uint32_t used;

		CHECK_EQ(wimm_imm_pack(&l, (uint32_t[]){0xF, 0xFFF}, &used), 0);
		CHECK_EQ(wimm_imm_unpack(&l, imm | ~used, v), 0);
	}
	CHECK_EQ(v[0], ref[0]);
	CHECK_EQ(v[1], ref[1]);
}

static void test_null_args(void)
{
	struct wimm_imm_layout l;
	uint32_t v = 0, imm = 0;

	CHECK_EQ(wimm_imm_layout_init(&l, (struct wimm_imm_field[]){{"a", 8}}, 1), 0);
	CHECK_EQ(wimm_imm_pack(NULL, &v, &imm), WIMM_E_INVAL);
	CHECK_EQ(wimm_imm_pack(&l, NULL, &imm), WIMM_E_INVAL);
	CHECK_EQ(wimm_imm_pack(&l, &v, NULL), WIMM_E_INVAL);
	CHECK_EQ(wimm_imm_unpack(NULL, 0, &v), WIMM_E_INVAL);
	CHECK_EQ(wimm_imm_unpack(&l, 0, NULL), WIMM_E_INVAL);
	CHECK_EQ(wimm_imm_field_index(&l, NULL), WIMM_E_INVAL);
	CHECK_EQ(wimm_imm_field_index(NULL, "a"), WIMM_E_INVAL);
}

int main(void)
{
	test_init_validation();
	test_full_width();
	test_article_layouts();
	test_pack_range();
	test_unpack_ignores_free_bits();
	test_null_args();
	printf("unit.imm_layout: ok\n");
	return 0;
}
