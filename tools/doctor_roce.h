/* A RoCEv2 decoder: Ethernet (802.1Q too) / IPv4 or IPv6 / UDP 4791 / BTH
 * and the extended headers the doctor shows (RETH, ImmDt, AETH). Pure: no
 * I/O, so unit tests feed it captured frames. Field layout per the
 * InfiniBand Architecture Specification vol. 1, ch. 9 and annex A17. */
#ifndef WIMM_DOCTOR_ROCE_H
#define WIMM_DOCTOR_ROCE_H

#include <stddef.h>
#include <stdint.h>

#define ROCE_UDP_PORT 4791

/* RC opcodes (UC ones are these + 0x20). */
enum roce_op {
	ROCE_SEND_FIRST = 0x00,
	ROCE_SEND_MIDDLE = 0x01,
	ROCE_SEND_LAST = 0x02,
	ROCE_SEND_LAST_IMM = 0x03,
	ROCE_SEND_ONLY = 0x04,
	ROCE_SEND_ONLY_IMM = 0x05,
	ROCE_WRITE_FIRST = 0x06,
	ROCE_WRITE_MIDDLE = 0x07,
	ROCE_WRITE_LAST = 0x08,
	ROCE_WRITE_LAST_IMM = 0x09,
	ROCE_WRITE_ONLY = 0x0a,
	ROCE_WRITE_ONLY_IMM = 0x0b,
	ROCE_READ_REQUEST = 0x0c,
	ROCE_READ_RESP_FIRST = 0x0d,
	ROCE_READ_RESP_MIDDLE = 0x0e,
	ROCE_READ_RESP_LAST = 0x0f,
	ROCE_READ_RESP_ONLY = 0x10,
	ROCE_ACK = 0x11,
};

struct roce_pkt {
	char src[48], dst[48]; /* IP addresses as text */
	uint8_t opcode;
	uint8_t pad;
	uint16_t pkey;
	uint32_t dqpn;
	uint32_t psn;
	int ack_req;
	int has_reth;
	uint64_t va;
	uint32_t rkey;
	uint32_t dma_len;
	int has_imm;
	uint32_t imm; /* host order: the value the sender put in */
	int has_aeth;
	uint8_t syndrome;
	uint32_t msn;
	uint32_t payload_len; /* from the UDP length, not the captured bytes */
};

/* 0 and *out filled for a RoCEv2 packet; -1 for anything else (not UDP
 * 4791, truncated headers, an opcode this decoder does not know). */
int roce_decode(const uint8_t *frame, size_t len, struct roce_pkt *out);
/* "RDMA WRITE Last with Immediate", "Acknowledge", ... */
const char *roce_opcode_name(uint8_t opcode);
/* For an Acknowledge: "ACK", "RNR NAK", "NAK remote access error", ... */
const char *roce_aeth_name(uint8_t syndrome);

#endif
