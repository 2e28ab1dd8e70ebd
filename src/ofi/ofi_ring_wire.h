/* The doorbell ring of libfabric's tcp provider: its wire format.
 *
 * Why it exists: libfabric 1.17's tcp provider raises its CQ's wait object
 * on every completion it writes (tcpx_report_success), a write(2) on a
 * socketpair, and reads the byte back at the next progress pass: a remote
 * write with CQ data costs the receiver two system calls that a plain write
 * does not. So between two wimm peers on tcp a write-with-imm is one
 * fi_writemsg of two segments and no CQ data: the payload into the window,
 * then a 16-byte entry into a ring the receiver registered and offered in
 * its handshake. tcp places a connection's bytes in order, and the
 * provider copies a write's segments in order inside the receiver's own
 * fi_cq_read, so an entry whose last byte (the seal) is there is whole and
 * its payload landed before it.
 *
 * The offer, in the handshake's transport address (24 bytes, big-endian):
 *
 *   off size field
 *     0   4  magic     OFI_RING_MAGIC ("WRG1")
 *     4   4  entries   ring slots, at least the offer's rx_depth, <= 2^20
 *     8   8  addr      the ring's address
 *    16   8  key       its remote key (remote write only)
 *
 * A handshake with no transport address offers no ring: doorbells to that
 * peer go as remote CQ data (fi_writedata), as any libfabric peer sends
 * them. One entry (little-endian words):
 *
 *   off size field
 *     0   4  imm           the doorbell
 *     4   4  len           bytes written with it (at most the window's)
 *     8   4  sends_before  send-with-imms the writer posted before it,
 *                          mod 2^32: they come through the CQ, and the
 *                          receiver puts the entry after exactly that many
 *    12   3  zero
 *    15   1  seal          1 + ((n / entries) & 1) for the n-th entry
 *
 * The writer may write entry n only once the receiver has handed doorbell
 * n - entries to the application: wimm's credits (one per doorbell, at most
 * rx_depth outstanding) give that. A peer that ignores them, or writes an
 * entry the order or the window does not allow, is dropped. */
#ifndef WIMM_OFI_RING_WIRE_H
#define WIMM_OFI_RING_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define OFI_RING_MAGIC 0x57524731u /* "WRG1" */
#define OFI_RING_OFFER_LEN 24u
#define OFI_RING_ENTRY_LEN 16u
#define OFI_RING_MAX_ENTRIES (1u << 20)

struct ofi_ring_entry {
	uint32_t imm, len, sends_before; /* little-endian */
	uint8_t zero[3];
	uint8_t seal;
};
_Static_assert(sizeof(struct ofi_ring_entry) == OFI_RING_ENTRY_LEN, "16-byte ring entries");

/* An offer's fields (the magic aside). */
struct ofi_ring_offer {
	uint32_t entries;
	uint64_t addr, key;
};

static inline void ofi_ring_put_be(uint8_t *p, uint64_t v, int n)
{
	for (int i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static inline uint64_t ofi_ring_get_be(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/* The offer's OFI_RING_OFFER_LEN bytes. */
static inline void ofi_ring_offer_encode(uint8_t *buf, const struct ofi_ring_offer *o)
{
	ofi_ring_put_be(buf, OFI_RING_MAGIC, 4);
	ofi_ring_put_be(buf + 4, o->entries, 4);
	ofi_ring_put_be(buf + 8, o->addr, 8);
	ofi_ring_put_be(buf + 16, o->key, 8);
}

/* 0 and *o when buf[0..len) has an offer's length and magic, else -1 (the
 * slot count is the receiver's to judge against the peer's window). */
static inline int ofi_ring_offer_decode(const uint8_t *buf, size_t len, struct ofi_ring_offer *o)
{
	if (len != OFI_RING_OFFER_LEN || ofi_ring_get_be(buf, 4) != OFI_RING_MAGIC)
		return -1;
	o->entries = (uint32_t)ofi_ring_get_be(buf + 4, 4);
	o->addr = ofi_ring_get_be(buf + 8, 8);
	o->key = ofi_ring_get_be(buf + 16, 8);
	return 0;
}

/* The seal of the first lap's entries (1 + ((n / entries) & 1) above): never
 * 0, so a ring's fresh (zeroed) memory holds no entry. */
#define OFI_RING_FIRST_SEAL 1u

/* From entry n's slot and seal to entry n + 1's, both sides keeping the two
 * rather than dividing n by the slot count per doorbell: the seal flips
 * between 1 and 2 when the slot wraps. */
static inline void ofi_ring_advance(uint32_t *slot, uint8_t *seal, uint32_t entries)
{
	if (++*slot == entries) {
		*slot = 0;
		*seal ^= 3u;
	}
}

#endif
