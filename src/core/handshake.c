/* Handshake codec. See handshake.h for the wire layout. */
#include "core/handshake.h"

#include <string.h>

#include "wimm.h"

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)(v >> 32));
	put32(p + 4, (uint32_t)v);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return ((uint32_t)get16(p) << 16) | get16(p + 2);
}

static uint64_t get64(const uint8_t *p)
{
	return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

/* The field checks both sides share: the encoder refuses what the decoder
 * would refuse, so a wimm peer never sends what another wimm rejects. */
static int hs_fields_valid(const struct wimm_handshake *hs)
{
	if (hs->flags & ~WIMM_HS_F_ALL)
		return 0;
	if (hs->rx_depth == 0 || hs->rx_depth > WIMM_HS_MAX_RX_DEPTH)
		return 0;
	if (hs->recv_size > WIMM_HS_MAX_RECV_SIZE)
		return 0;
	if ((hs->flags != 0) != (hs->window_len != 0))
		return 0;
	if (hs->window_addr > UINT64_MAX - hs->window_len)
		return 0;
	if (hs->addr_len > WIMM_HS_MAX_ADDR || hs->priv_len > WIMM_HS_MAX_PRIVATE)
		return 0;
	return 1;
}

int wimm_hs_encode(const struct wimm_handshake *hs, uint8_t *buf, size_t cap)
{
	if (!hs || !buf || hs->version != WIMM_HS_VERSION || !hs_fields_valid(hs))
		return WIMM_E_INVAL;
	size_t len = WIMM_HS_FIXED_LEN + hs->addr_len + hs->priv_len;
	if (cap < len)
		return WIMM_E_NOMEM;

	put16(buf + 0, WIMM_HS_MAGIC);
	buf[2] = hs->version;
	buf[3] = hs->flags;
	put32(buf + 4, hs->rx_depth);
	put32(buf + 8, hs->recv_size);
	put64(buf + 12, hs->window_addr);
	put64(buf + 20, hs->window_len);
	put64(buf + 28, hs->window_key);
	put64(buf + 36, hs->credit_addr);
	put64(buf + 44, hs->credit_key);
	put16(buf + 52, hs->addr_len);
	put16(buf + 54, hs->priv_len);
	memcpy(buf + WIMM_HS_FIXED_LEN, hs->addr, hs->addr_len);
	memcpy(buf + WIMM_HS_FIXED_LEN + hs->addr_len, hs->priv, hs->priv_len);
	return (int)len;
}

int wimm_hs_decode(const uint8_t *buf, size_t len, struct wimm_handshake *out)
{
	struct wimm_handshake hs;

	if (!buf || !out)
		return WIMM_E_INVAL;
	/* Magic and version first: a newer peer's longer message must read
	 * as "version not supported", not as garbage. */
	if (len < 3 || get16(buf) != WIMM_HS_MAGIC)
		return WIMM_E_PROTO;
	if (buf[2] != WIMM_HS_VERSION)
		return WIMM_E_VERSION;
	if (len < WIMM_HS_FIXED_LEN || len > WIMM_HS_MAX_LEN)
		return WIMM_E_PROTO;

	memset(&hs, 0, sizeof(hs));
	hs.version = buf[2];
	hs.flags = buf[3];
	hs.rx_depth = get32(buf + 4);
	hs.recv_size = get32(buf + 8);
	hs.window_addr = get64(buf + 12);
	hs.window_len = get64(buf + 20);
	hs.window_key = get64(buf + 28);
	hs.credit_addr = get64(buf + 36);
	hs.credit_key = get64(buf + 44);
	hs.addr_len = get16(buf + 52);
	hs.priv_len = get16(buf + 54);
	if (!hs_fields_valid(&hs) ||
	    len != WIMM_HS_FIXED_LEN + (size_t)hs.addr_len + (size_t)hs.priv_len)
		return WIMM_E_PROTO;
	memcpy(hs.addr, buf + WIMM_HS_FIXED_LEN, hs.addr_len);
	memcpy(hs.priv, buf + WIMM_HS_FIXED_LEN + hs.addr_len, hs.priv_len);
	*out = hs;
	return 0;
}

size_t wimm_hs_wire_len(const uint8_t *buf, size_t len)
{
	if (!buf || len < WIMM_HS_FIXED_LEN)
		return len;
	size_t want = WIMM_HS_FIXED_LEN + (size_t)get16(buf + 52) + (size_t)get16(buf + 54);
	return want < len ? want : len;
}

void wimm_hs_encode_reject(int reason, uint8_t *buf)
{
	put32(buf, WIMM_HS_REJECT_MAGIC);
	put32(buf + 4, (uint32_t)reason);
}

int wimm_hs_decode_reject(const uint8_t *buf, size_t len, int *reason)
{
	if (!buf || len < WIMM_HS_REJECT_LEN || get32(buf) != WIMM_HS_REJECT_MAGIC)
		return 0;
	int why = (int)(int32_t)get32(buf + 4);
	/* Only codes of the error table pass through: a peer's garbage
	 * must not turn into success or an unknown value. */
	if (why >= 0 || strcmp(wimm_strerror(why), "unknown error") == 0)
		why = WIMM_E_REFUSED;
	*reason = why;
	return 1;
}
