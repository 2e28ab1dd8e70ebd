/* wimm_kv's pure parts: CRC32C against known vectors, size classes, the
 * slot header, the value write's imm, and the buddy allocator under random
 * allocation and freeing (no overlap, everything coalesces back). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_internal.h"
#include "svc_crc32c.h"

static int fails;

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond);                 \
			fails++;                                                                   \
		}                                                                                  \
	} while (0)

static void test_crc(void)
{
	unsigned char zeros[32] = {0}, ones[32], inc[32];
	memset(ones, 0xff, sizeof(ones));
	for (int i = 0; i < 32; i++)
		inc[i] = (unsigned char)i;
	/* RFC 3720 (iSCSI) B.4 and the classic check value. */
	CHECK(wimm_kv_crc32c("123456789", 9) == 0xe3069283u);
	CHECK(wimm_kv_crc32c(zeros, 32) == 0x8a9136aau);
	CHECK(wimm_kv_crc32c(ones, 32) == 0x62a8ab43u);
	CHECK(wimm_kv_crc32c(inc, 32) == 0x46dd794eu);
	CHECK(wimm_kv_crc32c("", 0) == 0);
	/* The 8-byte path and the byte path agree at every split. */
	for (size_t n = 0; n < 32; n++) {
		uint32_t whole = wimm_kv_crc32c(inc, n);
		unsigned char copy[40];
		memcpy(copy + 1, inc, n); /* misaligned */
		CHECK(wimm_kv_crc32c(copy + 1, n) == whole);
	}
	/* The hardware path (where the CPU has one) and the tables agree on
	 * random data of every length up to 4 KiB, and a CRC continued over
	 * two pieces is the CRC of the whole. */
	static unsigned char rnd[4096 + 8];
	uint64_t x = 88172645463325252ull;
	for (size_t i = 0; i < sizeof(rnd); i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		rnd[i] = (unsigned char)x;
	}
	for (size_t n = 0; n <= 4096; n += 1 + n / 64) {
		uint32_t hw = svc_crc32c(0, rnd + n % 8, n);
		CHECK(hw == svc_crc32c_portable(0, rnd + n % 8, n));
		CHECK(svc_crc32c(svc_crc32c(0, rnd, n / 3), rnd + n / 3, n - n / 3) ==
		      svc_crc32c(0, rnd, n));
	}
}

static void test_classes(void)
{
	CHECK(kv_class_of(0) == 0);
	CHECK(kv_class_of(WIMM_KV_MIN_SLOT - WIMM_KV_HEADER) == 0);
	CHECK(kv_class_of(WIMM_KV_MIN_SLOT - WIMM_KV_HEADER + 1) == 1);
	CHECK(kv_class_of(990) == 2);
	CHECK(kv_class_of(16384) == 7); /* 16 KiB + header: a 32 KiB slot */
	CHECK(kv_class_of(WIMM_KV_MAX_SLOT - WIMM_KV_HEADER) == 12);
	CHECK(kv_class_of(WIMM_KV_MAX_SLOT - WIMM_KV_HEADER + 1) == -1);
}

static void test_header_and_imm(void)
{
	unsigned char slot[WIMM_KV_HEADER + 100];
	struct kv_hdr h = {.len = 100, .version = 0x1122334455667788ull, .khash = 0xdeadbeef}, o;
	memset(slot + WIMM_KV_HEADER, 'v', 100);
	kv_hdr_encode(slot, &h, slot + WIMM_KV_HEADER);
	CHECK(kv_hdr_decode(slot, &o) == 0);
	CHECK(o.len == 100 && o.version == h.version && o.khash == h.khash);
	CHECK(o.vcrc == wimm_kv_crc32c(slot + WIMM_KV_HEADER, 100));
	slot[9] ^= 1; /* a torn header */
	CHECK(kv_hdr_decode(slot, &o) == WIMM_KV_E_CORRUPT);
	uint32_t imm = KV_WIMM(4095, 0x7fff, 31);
	CHECK(imm == 0xffffffffu);
	imm = KV_WIMM(63, 0x12345, 12);
	CHECK(KV_WIMM_GRANT(imm) == 63 && KV_WIMM_HASH(imm) == (0x12345 & 0x7fff) &&
	      KV_WIMM_CLASS(imm) == 12);
	CHECK(KV_IMM_OP(KV_IMM(KV_OP_STAT, 0x1ffffff)) == KV_OP_STAT);
}

static void test_buddy(void)
{
	enum { UNITS = 1024, N = 4000 };
	struct kv_buddy b;
	static unsigned char owner[UNITS];
	struct {
		int32_t unit;
		unsigned order;
	} held[N];
	int nheld = 0;
	uint64_t seed = 42;
	CHECK(kv_buddy_init(&b, 1000) == WIMM_E_INVAL);
	CHECK(kv_buddy_init(&b, UNITS) == 0);
	CHECK(kv_buddy_alloc(&b, 11) == -1); /* larger than the arena */
	for (int step = 0; step < 20000; step++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		unsigned r = (unsigned)(seed >> 33);
		if (nheld < N && (r % 3 != 0 || nheld == 0)) {
			unsigned order = (r >> 4) % 6;
			int32_t u = kv_buddy_alloc(&b, order);
			if (u < 0)
				continue;
			CHECK(u % (1 << order) == 0 && u + (1 << order) <= UNITS);
			for (int i = 0; i < (1 << order); i++) {
				CHECK(owner[u + i] == 0); /* no overlap */
				owner[u + i] = 1;
			}
			held[nheld].unit = u;
			held[nheld++].order = order;
		} else {
			int k = (int)((r >> 4) % (unsigned)nheld);
			for (int i = 0; i < (1 << held[k].order); i++)
				owner[held[k].unit + i] = 0;
			kv_buddy_free(&b, held[k].unit, held[k].order);
			held[k] = held[--nheld];
		}
	}
	while (nheld > 0) {
		nheld--;
		kv_buddy_free(&b, held[nheld].unit, held[nheld].order);
	}
	/* Everything coalesced: the whole arena is one block again. */
	CHECK(b.free_units == UNITS);
	CHECK(kv_buddy_alloc(&b, 10) == 0);
	kv_buddy_fini(&b);
}

/* The shared index's word: every field round-trips at its limits, 0 is
 * never a word, the two buckets differ and lie in the index. */
static void test_index_word(void)
{
	uint64_t w = kv_ix_word(0xffff, 12, KV_IX_MAX_POOL - WIMM_KV_MIN_SLOT, 0x12345fffull);
	CHECK(kv_ix_fp(w) == 0xffff && kv_ix_order(w) == 12);
	CHECK(kv_ix_pool_off(w) == KV_IX_MAX_POOL - WIMM_KV_MIN_SLOT);
	CHECK(kv_ix_version(w) == 0x5fff);
	w = kv_ix_word(1, 0, 0, 0);
	CHECK(w != 0 && kv_ix_fp(w) == 1 && kv_ix_pool_off(w) == 0 && kv_ix_version(w) == 0);
	for (uint32_t nb = 2; nb <= (1u << 24); nb <<= 3) {
		unsigned same_b2 = 0;
		for (uint32_t k = 0; k < 20000; k++) {
			struct kv_ix_place p = kv_ix_place_of(kv_key_hash(&k, sizeof(k)), nb);
			CHECK(p.fp != 0 && p.b1 != p.b2 && p.b1 < nb && p.b2 < nb);
			struct kv_ix_place q = kv_ix_place_of(kv_key_hash(&k, sizeof(k)) ^ 1, nb);
			same_b2 += nb > 64 && q.b2 == p.b2;
		}
		/* The second bucket does not follow from the first's bits. */
		CHECK(same_b2 < 200);
	}
}

int main(void)
{
	test_index_word();
	test_crc();
	test_classes();
	test_header_and_imm();
	test_buddy();
	printf("kv unit: %s\n", fails ? "FAIL" : "pass");
	return fails ? 1 : 0;
}
