/* The connection handshake: a small, versioned, fixed-layout message each
 * side sends once. It comes from the network, so the decoder trusts nothing:
 * every field is range-checked and the total length must match exactly.
 *
 * Wire layout (version 2, all integers big-endian), 56 bytes fixed so it fits
 * librdmacm's connect private data (56 bytes on IB/RoCE), then an optional
 * transport address and the connector's private data:
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
 *    36   8  credit_addr  the peer's control words: returned credits at
 *                         +0, heartbeats at +64 (u64 each, running totals)
 *    44   8  credit_key   remote key of those words
 *    52   2  addr_len     bytes of transport address that follow, <= 192
 *    54   2  priv_len     bytes of private data after the address, <= 64
 *    56   n  addr         e.g. a libfabric RDM endpoint name
 *  56+n   m  private      the connector's blob for the acceptor's decision
 *
 * A rejected connector gets the reject message instead of a handshake:
 *
 *     0   4  magic        0x57524a31 ("WRJ1")
 *     4   4  reason       a WIMM_E_* code (negative, two's complement)
 */
#ifndef WIMM_HANDSHAKE_H
#define WIMM_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#define WIMM_HS_MAGIC 0x5749u
#define WIMM_HS_VERSION 2u
#define WIMM_HS_FIXED_LEN 56u
#define WIMM_HS_MAX_ADDR 192u
#define WIMM_HS_MAX_PRIVATE 64u
#define WIMM_HS_MAX_LEN (WIMM_HS_FIXED_LEN + WIMM_HS_MAX_ADDR + WIMM_HS_MAX_PRIVATE)
#define WIMM_HS_REJECT_MAGIC 0x57524a31u
#define WIMM_HS_REJECT_LEN 8u
/* Byte offsets in the peer's control region named by credit_addr. */
#define WIMM_HS_CREDIT_OFF 0u
#define WIMM_HS_HEARTBEAT_OFF 64u
#define WIMM_HS_MAX_RX_DEPTH (1u << 20)
#define WIMM_HS_MAX_RECV_SIZE (1u << 30)

enum wimm_hs_flags {
	WIMM_HS_F_WINDOW_WRITE = 1u << 0,  /* window accepts remote writes */
	WIMM_HS_F_WINDOW_READ = 1u << 1,   /* window accepts remote reads */
	WIMM_HS_F_WINDOW_ATOMIC = 1u << 2, /* window accepts remote atomics */
};
#define WIMM_HS_F_ALL (WIMM_HS_F_WINDOW_WRITE | WIMM_HS_F_WINDOW_READ | WIMM_HS_F_WINDOW_ATOMIC)

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
	uint16_t priv_len;
	uint8_t addr[WIMM_HS_MAX_ADDR];
	uint8_t priv[WIMM_HS_MAX_PRIVATE];
};

/* Encode into buf (capacity cap). Returns the encoded length, or
 * WIMM_E_INVAL if hs is not itself valid or WIMM_E_NOMEM if cap is short. */
int wimm_hs_encode(const struct wimm_handshake *hs, uint8_t *buf, size_t cap);

/* Decode len bytes strictly. Returns 0, WIMM_E_PROTO (bad magic, length,
 * field out of range, reserved bits set) or WIMM_E_VERSION (well-formed
 * header of another version). *hs is fully written only on success. */
int wimm_hs_decode(const uint8_t *buf, size_t len, struct wimm_handshake *hs);

/* The length a handshake in buf says it has (fixed part + addr_len +
 * priv_len), for transports that pad what they carry (rdma_cm); len when
 * buf is too short to tell. Never more than len. */
size_t wimm_hs_wire_len(const uint8_t *buf, size_t len);

/* The reject message: encode reason (a WIMM_E_* code) into
 * buf[WIMM_HS_REJECT_LEN]; decode returns 1 and sets *reason when buf
 * holds one (a reason that is no WIMM_E_* code reads as WIMM_E_REFUSED),
 * else 0. */
void wimm_hs_encode_reject(int reason, uint8_t *buf);
int wimm_hs_decode_reject(const uint8_t *buf, size_t len, int *reason);

#endif
