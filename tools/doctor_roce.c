/* RoCEv2 decoder; see doctor_roce.h. Every read is bounds-checked against
 * the captured length: frames come from the wire. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "doctor_roce.h"

#define BTH_LEN 12
#define RETH_LEN 16
#define IMM_LEN 4
#define AETH_LEN 4
#define ICRC_LEN 4

static uint32_t be(const uint8_t *p, int n)
{
	uint32_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/* Extended headers after the BTH for each RC opcode (UC reuses the
 * numbering + 0x20 for the opcodes it has). */
struct op_desc {
	const char *name;
	unsigned reth : 1, imm : 1, aeth : 1, known : 1;
};

static const struct op_desc ops[0x20] = {
    [ROCE_SEND_FIRST] = {"SEND First", 0, 0, 0, 1},
    [ROCE_SEND_MIDDLE] = {"SEND Middle", 0, 0, 0, 1},
    [ROCE_SEND_LAST] = {"SEND Last", 0, 0, 0, 1},
    [ROCE_SEND_LAST_IMM] = {"SEND Last with Immediate", 0, 1, 0, 1},
    [ROCE_SEND_ONLY] = {"SEND Only", 0, 0, 0, 1},
    [ROCE_SEND_ONLY_IMM] = {"SEND Only with Immediate", 0, 1, 0, 1},
    [ROCE_WRITE_FIRST] = {"RDMA WRITE First", 1, 0, 0, 1},
    [ROCE_WRITE_MIDDLE] = {"RDMA WRITE Middle", 0, 0, 0, 1},
    [ROCE_WRITE_LAST] = {"RDMA WRITE Last", 0, 0, 0, 1},
    [ROCE_WRITE_LAST_IMM] = {"RDMA WRITE Last with Immediate", 0, 1, 0, 1},
    [ROCE_WRITE_ONLY] = {"RDMA WRITE Only", 1, 0, 0, 1},
    [ROCE_WRITE_ONLY_IMM] = {"RDMA WRITE Only with Immediate", 1, 1, 0, 1},
    [ROCE_READ_REQUEST] = {"RDMA READ Request", 1, 0, 0, 1},
    [ROCE_READ_RESP_FIRST] = {"RDMA READ Response First", 0, 0, 1, 1},
    [ROCE_READ_RESP_MIDDLE] = {"RDMA READ Response Middle", 0, 0, 0, 1},
    [ROCE_READ_RESP_LAST] = {"RDMA READ Response Last", 0, 0, 1, 1},
    [ROCE_READ_RESP_ONLY] = {"RDMA READ Response Only", 0, 0, 1, 1},
    [ROCE_ACK] = {"Acknowledge", 0, 0, 1, 1},
};

static const struct op_desc *op_lookup(uint8_t opcode)
{
	unsigned cls = opcode >> 5, op = opcode & 0x1f;

	/* RC (0) carries all of the above; UC (1) only sends and writes. */
	if (cls == 0 && ops[op].known)
		return &ops[op];
	if (cls == 1 && ops[op].known && op <= ROCE_WRITE_ONLY_IMM)
		return &ops[op];
	return NULL;
}

const char *roce_opcode_name(uint8_t opcode)
{
	const struct op_desc *d = op_lookup(opcode);

	return d ? d->name : "unknown opcode";
}

const char *roce_aeth_name(uint8_t syndrome)
{
	static const char *const nak[] = {"NAK PSN sequence error", "NAK invalid request",
					  "NAK remote access error", "NAK remote operational error",
					  "NAK invalid RD request"};

	switch (syndrome >> 5) {
	case 0:
		return "ACK";
	case 1:
		return "RNR NAK";
	case 3:
		return (syndrome & 0x1f) < 5 ? nak[syndrome & 0x1f] : "NAK (reserved code)";
	default:
		return "reserved AETH syndrome";
	}
}

int roce_decode(const uint8_t *f, size_t len, struct roce_pkt *out)
{
	size_t off = 14, udp_len, hdrs;
	const struct op_desc *d;
	uint16_t type;

	memset(out, 0, sizeof(*out));
	if (len < off)
		return -1;
	type = (uint16_t)be(f + 12, 2);
	if (type == 0x8100) { /* one 802.1Q tag */
		if (len < off + 4)
			return -1;
		type = (uint16_t)be(f + 16, 2);
		off += 4;
	}
	if (type == 0x0800) {
		size_t ihl;

		if (len < off + 20 || (f[off] >> 4) != 4)
			return -1;
		ihl = (size_t)(f[off] & 0x0f) * 4;
		if (ihl < 20 || len < off + ihl || f[off + 9] != 17)
			return -1;
		inet_ntop(AF_INET, f + off + 12, out->src, sizeof(out->src));
		inet_ntop(AF_INET, f + off + 16, out->dst, sizeof(out->dst));
		off += ihl;
	} else if (type == 0x86dd) {
		/* RoCEv2 puts UDP right after the fixed header. */
		if (len < off + 40 || f[off + 6] != 17)
			return -1;
		inet_ntop(AF_INET6, f + off + 8, out->src, sizeof(out->src));
		inet_ntop(AF_INET6, f + off + 24, out->dst, sizeof(out->dst));
		off += 40;
	} else {
		return -1;
	}
	if (len < off + 8 || be(f + off + 2, 2) != ROCE_UDP_PORT)
		return -1;
	udp_len = be(f + off + 4, 2);
	off += 8;
	if (len < off + BTH_LEN)
		return -1;
	out->opcode = f[off];
	out->pad = (f[off + 1] >> 4) & 3;
	out->pkey = (uint16_t)be(f + off + 2, 2);
	out->dqpn = be(f + off + 5, 3);
	out->ack_req = f[off + 8] >> 7;
	out->psn = be(f + off + 9, 3);
	d = op_lookup(out->opcode);
	if (!d)
		return -1;
	hdrs =
	    BTH_LEN + (d->reth ? RETH_LEN : 0) + (d->imm ? IMM_LEN : 0) + (d->aeth ? AETH_LEN : 0);
	if (len < off + hdrs)
		return -1;
	off += BTH_LEN;
	/* Order on the wire: RETH, then ImmDt (Write Only with Immediate
	 * has both); AETH comes alone or first (read responses). */
	if (d->aeth) {
		out->has_aeth = 1;
		out->syndrome = f[off];
		out->msn = be(f + off + 1, 3);
		off += AETH_LEN;
	}
	if (d->reth) {
		out->has_reth = 1;
		out->va = (uint64_t)be(f + off, 4) << 32 | be(f + off + 4, 4);
		out->rkey = be(f + off + 8, 4);
		out->dma_len = be(f + off + 12, 4);
		off += RETH_LEN;
	}
	if (d->imm) {
		out->has_imm = 1;
		out->imm = be(f + off, 4);
	}
	if (udp_len >= 8 + hdrs + out->pad + ICRC_LEN)
		out->payload_len = (uint32_t)(udp_len - 8 - hdrs - out->pad - ICRC_LEN);
	return 0;
}
