/* The connection handshake: a small, versioned, fixed-layout message each
 * side sends once. It comes from the network, so the decoder trusts nothing:
 * every field is range-checked and the total length must match exactly.
 *
 * Wire layout (version 1, all integers big-endian), 56 bytes fixed so it fits
 * librdmacm's connect private data (56 bytes on IB/RoCE), then an optional
 * transport address:
 *
 *   off size field
 *     0   2  magic        0x5749 ("WI")
 *     2   1  version      WIMM_HS_VERSION
 *     3   1  flags        WIMM_HS_F_* (unknown bits refused)
 *     4   4  rx_depth     receive window = the peer's initial credits, 1..2^20
 *     8   4  recv_size    bytes per receive buffer for send-with-imm, <= 2^30
 *    12   8  window_addr  address of the exposed window (0 if none)
 *    20   8  window_len   its length (0 iff no window flag)
 *    28   8  window_key   its remote key
 *    36   8  credit_addr  where the peer writes returned credits (u64 word)
 *    44   8  credit_key   remote key of that word
 *    52   2  addr_len     bytes of transport address that follow, <= 192
 *    54   2  reserved     must be 0
 *    56   n  addr         e.g. a libfabric RDM endpoint name
 */
#ifndef WIMM_HANDSHAKE_H
#define WIMM_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#define WIMM_HS_MAGIC 0x5749u
#define WIMM_HS_VERSION 1u
#define WIMM_HS_FIXED_LEN 56u
#define WIMM_HS_MAX_ADDR 192u
#define WIMM_HS_MAX_LEN (WIMM_HS_FIXED_LEN + WIMM_HS_MAX_ADDR)
#define WIMM_HS_MAX_RX_DEPTH (1u << 20)
#define WIMM_HS_MAX_RECV_SIZE (1u << 30)

enum wimm_hs_flags {
	WIMM_HS_F_WINDOW_WRITE = 1u << 0, /* window accepts remote writes */
	WIMM_HS_F_WINDOW_READ = 1u << 1,  /* window accepts remote reads */
};
#define WIMM_HS_F_ALL (WIMM_HS_F_WINDOW_WRITE | WIMM_HS_F_WINDOW_READ)

struct wimm_handshake {
	uint8_t version;
	uint8_t flags;
	uint32_t rx_depth;
	uint32_t recv_size;
	uint64_t window_addr;
	uint64_t window_len;
	uint64_t window_key;
	uint64_t credit_addr;
	uint64_t credit_key;
	uint16_t addr_len;
	uint8_t addr[WIMM_HS_MAX_ADDR];
};

/* Encode into buf (capacity cap). Returns the encoded length, or
 * WIMM_E_INVAL if hs is not itself valid or WIMM_E_NOMEM if cap is short. */
int wimm_hs_encode(const struct wimm_handshake *hs, uint8_t *buf, size_t cap);

/* Decode len bytes strictly. Returns 0, WIMM_E_PROTO (bad magic, length,
 * field out of range, reserved bits set) or WIMM_E_VERSION (well-formed
 * header of another version). *hs is fully written only on success. */
int wimm_hs_decode(const uint8_t *buf, size_t len, struct wimm_handshake *hs);

#endif
