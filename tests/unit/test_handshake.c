/* Unit tests of the handshake codec (src/core/handshake.c): the documented
 * wire layout, round trips, and every strict check of the decoder, since its
 * input comes from the network. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "core/handshake.h"
#include "wimm.h"

static struct wimm_handshake sample(uint16_t addr_len)
{
	struct wimm_handshake hs;

	memset(&hs, 0, sizeof(hs));
	hs.version = WIMM_HS_VERSION;
	hs.flags = WIMM_HS_F_WINDOW_WRITE | WIMM_HS_F_WINDOW_READ;
	hs.rx_depth = 64;
	hs.recv_size = 4096;
	hs.window_addr = 0x00007F0012345000ull;
	hs.window_len = 1u << 20;
	hs.window_key = 0x1122334455667788ull;
	hs.credit_addr = 0x00007F00ABCDE000ull;
	hs.credit_key = 0x8877665544332211ull;
	hs.addr_len = addr_len;
	for (unsigned i = 0; i < addr_len; i++)
		hs.addr[i] = (uint8_t)(i * 7 + 3);
	return hs;
}

static void same(const struct wimm_handshake *a, const struct wimm_handshake *b)
{
	CHECK_EQ(a->version, b->version);
	CHECK_EQ(a->flags, b->flags);
	CHECK_EQ(a->rx_depth, b->rx_depth);
	CHECK_EQ(a->recv_size, b->recv_size);
	CHECK(a->window_addr == b->window_addr);
	CHECK(a->window_len == b->window_len);
	CHECK(a->window_key == b->window_key);
	CHECK(a->credit_addr == b->credit_addr);
	CHECK(a->credit_key == b->credit_key);
	CHECK_EQ(a->addr_len, b->addr_len);
	CHECK(memcmp(a->addr, b->addr, a->addr_len) == 0);
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static int encode(const struct wimm_handshake *hs, uint8_t *buf)
{
	int n = wimm_hs_encode(hs, buf, WIMM_HS_MAX_LEN + 16);

	CHECK(n >= (int)WIMM_HS_FIXED_LEN);
	return n;
}

static int decode(const uint8_t *buf, size_t len)
{
	struct wimm_handshake hs;

	return wimm_hs_decode(buf, len, &hs);
}

/* The bytes are the documented big-endian layout, field by field. */
static void test_wire_layout(void)
{
	struct wimm_handshake hs = sample(3);
	uint8_t buf[WIMM_HS_MAX_LEN + 16], ref[WIMM_HS_FIXED_LEN + 3];

	memset(ref, 0, sizeof(ref));
	put16(ref + 0, WIMM_HS_MAGIC);
	ref[2] = WIMM_HS_VERSION;
	ref[3] = hs.flags;
	put32(ref + 4, hs.rx_depth);
	put32(ref + 8, hs.recv_size);
	put64(ref + 12, hs.window_addr);
	put64(ref + 20, hs.window_len);
	put64(ref + 28, hs.window_key);
	put64(ref + 36, hs.credit_addr);
	put64(ref + 44, hs.credit_key);
	put16(ref + 52, 3);
	memcpy(ref + 56, hs.addr, 3);
	CHECK_EQ(encode(&hs, buf), (int)sizeof(ref));
	CHECK(memcmp(buf, ref, sizeof(ref)) == 0);
	CHECK_EQ(buf[0], 0x57);
	CHECK_EQ(buf[1], 0x49);
}

static void test_round_trip(void)
{
	static const uint16_t lens[] = {0, 1, 16, 37, WIMM_HS_MAX_ADDR};
	uint8_t buf[WIMM_HS_MAX_LEN + 16], again[WIMM_HS_MAX_LEN + 16];

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		struct wimm_handshake in = sample(lens[i]), out;
		int n = encode(&in, buf);

		CHECK_EQ(n, (int)(WIMM_HS_FIXED_LEN + lens[i]));
		memset(&out, 0xEE, sizeof(out));
		CHECK_EQ(wimm_hs_decode(buf, (size_t)n, &out), 0);
		same(&in, &out);
		CHECK_EQ(encode(&out, again), n);
		CHECK(memcmp(buf, again, (size_t)n) == 0);
	}

	/* No window at all, no receive buffers: the minimal handshake. */
	struct wimm_handshake in = sample(0), out;

	in.flags = 0;
	in.window_addr = in.window_len = in.window_key = 0;
	in.recv_size = 0;
	in.rx_depth = 1;
	int n = encode(&in, buf);

	CHECK_EQ(wimm_hs_decode(buf, (size_t)n, &out), 0);
	same(&in, &out);

	/* Limits themselves are valid. */
	in = sample(0);
	in.rx_depth = WIMM_HS_MAX_RX_DEPTH;
	in.recv_size = WIMM_HS_MAX_RECV_SIZE;
	in.flags = WIMM_HS_F_WINDOW_READ;
	in.window_addr = UINT64_MAX - in.window_len;
	n = encode(&in, buf);
	CHECK_EQ(wimm_hs_decode(buf, (size_t)n, &out), 0);
	same(&in, &out);
}

/* Every length short of the fixed part, and every length short of the full
 * message with an address, is refused. */
static void test_truncated(void)
{
	uint8_t buf[WIMM_HS_MAX_LEN + 16];
	struct wimm_handshake hs = sample(0);
	int n = encode(&hs, buf);

	for (int len = 0; len < n; len++)
		CHECK_EQ(decode(buf, (size_t)len), WIMM_E_PROTO);
	CHECK_EQ(decode(NULL, 0), WIMM_E_INVAL);
	CHECK_EQ(wimm_hs_decode(buf, (size_t)n, NULL), WIMM_E_INVAL);

	hs = sample(40);
	n = encode(&hs, buf);
	for (int len = 0; len < n; len++)
		CHECK_EQ(decode(buf, (size_t)len), WIMM_E_PROTO);
	CHECK_EQ(decode(buf, (size_t)n), 0);
}

static void test_bad_header(void)
{
	uint8_t buf[WIMM_HS_MAX_LEN + 16];
	struct wimm_handshake hs = sample(8);
	int n = encode(&hs, buf);

	/* Trailing byte. */
	buf[n] = 0;
	CHECK_EQ(decode(buf, (size_t)n + 1), WIMM_E_PROTO);

	/* Wrong magic, either byte. */
	buf[0] ^= 0x01;
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);
	buf[0] ^= 0x01;
	buf[1] ^= 0x80;
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);
	buf[1] ^= 0x80;
	CHECK_EQ(decode(buf, (size_t)n), 0);

	/* Another version of a well-formed header, older and newer. */
	buf[2] = WIMM_HS_VERSION - 1;
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_VERSION);
	buf[2] = WIMM_HS_VERSION + 1;
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_VERSION);
	buf[2] = 0xFF;
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_VERSION);
	buf[2] = WIMM_HS_VERSION;

	/* Unknown flag bits, one at a time. */
	for (int bit = 3; bit < 8; bit++) {
		buf[3] = (uint8_t)(hs.flags | (1u << bit));
		CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);
	}
	buf[3] = hs.flags;

	/* priv_len must match the bytes present, either byte of it. */
	buf[54] = 1;
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);
	buf[54] = 0;
	buf[55] = 0x80;
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);
	buf[55] = 0;
	CHECK_EQ(decode(buf, (size_t)n), 0);
}

static void test_private(void)
{
	uint8_t buf[WIMM_HS_MAX_LEN + 16];
	struct wimm_handshake hs = sample(12), out;

	hs.priv_len = WIMM_HS_MAX_PRIVATE;
	for (unsigned i = 0; i < hs.priv_len; i++)
		hs.priv[i] = (uint8_t)(0xA0 ^ i);
	int n = encode(&hs, buf);
	CHECK_EQ(n, (int)(WIMM_HS_FIXED_LEN + 12 + WIMM_HS_MAX_PRIVATE));
	CHECK_EQ(wimm_hs_decode(buf, (size_t)n, &out), 0);
	CHECK_EQ(out.priv_len, WIMM_HS_MAX_PRIVATE);
	CHECK(memcmp(out.priv, hs.priv, hs.priv_len) == 0);
	CHECK(memcmp(out.addr, hs.addr, hs.addr_len) == 0);
	/* The transport may pad; the handshake says its own length. */
	memset(buf + n, 0, 8);
	CHECK_EQ(wimm_hs_wire_len(buf, (size_t)n + 8), (size_t)n);
	CHECK_EQ(wimm_hs_wire_len(buf, 10), 10);
	/* One more byte of private data than allowed, lengths agreeing. */
	put16(buf + 54, WIMM_HS_MAX_PRIVATE + 1);
	CHECK_EQ(decode(buf, (size_t)n + 1), WIMM_E_PROTO);
	/* The encoder refuses what the decoder would. */
	hs.priv_len = WIMM_HS_MAX_PRIVATE + 1;
	CHECK_EQ(wimm_hs_encode(&hs, buf, sizeof(buf)), WIMM_E_INVAL);
}

static void test_reject(void)
{
	uint8_t buf[WIMM_HS_REJECT_LEN + 4];
	int why = 0;

	wimm_hs_encode_reject(WIMM_E_PERM, buf);
	CHECK_EQ(wimm_hs_decode_reject(buf, WIMM_HS_REJECT_LEN, &why), 1);
	CHECK_EQ(why, WIMM_E_PERM);
	CHECK_EQ(wimm_hs_decode_reject(buf, WIMM_HS_REJECT_LEN - 1, &why), 0);
	/* Not a WIMM_E_* code (positive, zero, unknown): REFUSED. */
	static const int odd[] = {0, 5, -1000, INT32_MIN};
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		wimm_hs_encode_reject(odd[i], buf);
		CHECK_EQ(wimm_hs_decode_reject(buf, WIMM_HS_REJECT_LEN, &why), 1);
		CHECK_EQ(why, WIMM_E_REFUSED);
	}
	/* A handshake is no reject, and a reject no handshake. */
	struct wimm_handshake hs = sample(0);
	uint8_t hb[WIMM_HS_MAX_LEN];
	int n = encode(&hs, hb);
	CHECK_EQ(wimm_hs_decode_reject(hb, (size_t)n, &why), 0);
	wimm_hs_encode_reject(WIMM_E_AGAIN, buf);
	CHECK_EQ(decode(buf, WIMM_HS_REJECT_LEN), WIMM_E_PROTO);
}

static void test_addr_len(void)
{
	uint8_t buf[WIMM_HS_MAX_LEN + 64];
	struct wimm_handshake hs = sample(WIMM_HS_MAX_ADDR);
	int n = encode(&hs, buf);

	/* addr_len above the maximum, with the length matching it. */
	put16(buf + 52, WIMM_HS_MAX_ADDR + 1);
	buf[n] = 0;
	CHECK_EQ(decode(buf, (size_t)n + 1), WIMM_E_PROTO);
	put16(buf + 52, 0xFFFF);
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);

	/* addr_len disagreeing with the bytes present, both ways. */
	put16(buf + 52, 10);
	CHECK_EQ(decode(buf, WIMM_HS_FIXED_LEN + 9), WIMM_E_PROTO);
	CHECK_EQ(decode(buf, WIMM_HS_FIXED_LEN + 11), WIMM_E_PROTO);
	CHECK_EQ(decode(buf, WIMM_HS_FIXED_LEN), WIMM_E_PROTO);
	CHECK_EQ(decode(buf, WIMM_HS_FIXED_LEN + 10), 0);
	put16(buf + 52, 0);
	CHECK_EQ(decode(buf, WIMM_HS_FIXED_LEN + 1), WIMM_E_PROTO);
	CHECK_EQ(decode(buf, WIMM_HS_FIXED_LEN), 0);
}

static void test_ranges(void)
{
	uint8_t buf[WIMM_HS_MAX_LEN + 16];
	struct wimm_handshake hs = sample(0);
	int n = encode(&hs, buf);

	put32(buf + 4, 0);
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);
	put32(buf + 4, WIMM_HS_MAX_RX_DEPTH + 1);
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);
	put32(buf + 4, UINT32_MAX);
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);
	put32(buf + 4, WIMM_HS_MAX_RX_DEPTH);
	CHECK_EQ(decode(buf, (size_t)n), 0);
	put32(buf + 4, 1);
	CHECK_EQ(decode(buf, (size_t)n), 0);

	put32(buf + 8, WIMM_HS_MAX_RECV_SIZE + 1);
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);
	put32(buf + 8, UINT32_MAX);
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);
	put32(buf + 8, WIMM_HS_MAX_RECV_SIZE);
	CHECK_EQ(decode(buf, (size_t)n), 0);
	put32(buf + 8, 0);
	CHECK_EQ(decode(buf, (size_t)n), 0);
}

static void test_window(void)
{
	uint8_t buf[WIMM_HS_MAX_LEN + 16];
	struct wimm_handshake hs = sample(0);
	int n = encode(&hs, buf);
	static const uint8_t flags[] = {WIMM_HS_F_WINDOW_WRITE, WIMM_HS_F_WINDOW_READ,
					WIMM_HS_F_WINDOW_ATOMIC, WIMM_HS_F_ALL};

	/* Window flags but no length. */
	for (size_t i = 0; i < sizeof(flags); i++) {
		buf[3] = flags[i];
		put64(buf + 20, 0);
		CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);
		put64(buf + 20, 4096);
		CHECK_EQ(decode(buf, (size_t)n), 0);
	}
	/* A length but no flags. */
	buf[3] = 0;
	put64(buf + 20, 4096);
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);
	put64(buf + 20, 0);
	put64(buf + 12, 0);
	put64(buf + 28, 0);
	CHECK_EQ(decode(buf, (size_t)n), 0);

	/* addr + len wraps around. */
	buf[3] = WIMM_HS_F_WINDOW_WRITE;
	put64(buf + 12, UINT64_MAX - 100);
	put64(buf + 20, 102);
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);
	put64(buf + 12, UINT64_MAX);
	put64(buf + 20, UINT64_MAX);
	CHECK_EQ(decode(buf, (size_t)n), WIMM_E_PROTO);
	put64(buf + 12, UINT64_MAX - 100);
	put64(buf + 20, 100);
	CHECK_EQ(decode(buf, (size_t)n), 0);
}

/* The encoder refuses what the decoder would refuse, and a short buffer. */
static void test_encode_checks(void)
{
	uint8_t buf[WIMM_HS_MAX_LEN + 16];
	struct wimm_handshake hs = sample(20);

	CHECK_EQ(wimm_hs_encode(&hs, buf, WIMM_HS_FIXED_LEN + 19), WIMM_E_NOMEM);
	CHECK_EQ(wimm_hs_encode(&hs, buf, 0), WIMM_E_NOMEM);
	CHECK_EQ(wimm_hs_encode(&hs, buf, WIMM_HS_FIXED_LEN + 20), (int)WIMM_HS_FIXED_LEN + 20);

	hs = sample(0);
	hs.rx_depth = 0;
	CHECK_EQ(wimm_hs_encode(&hs, buf, sizeof(buf)), WIMM_E_INVAL);
	hs = sample(0);
	hs.addr_len = WIMM_HS_MAX_ADDR + 1;
	CHECK_EQ(wimm_hs_encode(&hs, buf, sizeof(buf)), WIMM_E_INVAL);
	hs = sample(0);
	hs.flags = 0x80;
	CHECK_EQ(wimm_hs_encode(&hs, buf, sizeof(buf)), WIMM_E_INVAL);
	hs = sample(0);
	hs.window_len = 0;
	CHECK_EQ(wimm_hs_encode(&hs, buf, sizeof(buf)), WIMM_E_INVAL);
	hs = sample(0);
	hs.recv_size = WIMM_HS_MAX_RECV_SIZE + 1;
	CHECK_EQ(wimm_hs_encode(&hs, buf, sizeof(buf)), WIMM_E_INVAL);
}

int main(void)
{
	test_wire_layout();
	test_round_trip();
	test_truncated();
	test_bad_header();
	test_addr_len();
	test_private();
	test_reject();
	test_ranges();
	test_window();
	test_encode_checks();
	printf("unit.handshake: ok\n");
	return 0;
}
