/* libFuzzer target for the handshake decoder, whose input comes from the
 * network. Properties beyond "no crash, no sanitizer report":
 * - decode either succeeds or returns PROTO / VERSION (or INVAL), nothing else;
 * - success implies the input re-encodes to exactly the same bytes (the
 *   decoder accepts only the canonical form the encoder writes);
 * - a decoded handshake satisfies the documented limits;
 * - the length a handshake says it has is never more than what is there;
 * - a reject message decodes only to a WIMM_E_* code. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/handshake.h"
#include "wimm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct wimm_handshake hs;
	uint8_t out[WIMM_HS_MAX_LEN];
	int why = 0;

	if (wimm_hs_wire_len(data, size) > size)
		abort();
	if (wimm_hs_decode_reject(data, size, &why) &&
	    (why >= 0 || strcmp(wimm_err_name(why), "WIMM_E_UNKNOWN") == 0))
		abort();
	int rc = wimm_hs_decode(data, size, &hs);

	if (rc != 0) {
		if (rc != WIMM_E_PROTO && rc != WIMM_E_VERSION)
			abort();
		return 0;
	}
	if (size < WIMM_HS_FIXED_LEN || size > WIMM_HS_MAX_LEN)
		abort();
	if (hs.version != WIMM_HS_VERSION || (hs.flags & ~WIMM_HS_F_ALL))
		abort();
	if (hs.rx_depth == 0 || hs.rx_depth > WIMM_HS_MAX_RX_DEPTH ||
	    hs.recv_size > WIMM_HS_MAX_RECV_SIZE || hs.addr_len > WIMM_HS_MAX_ADDR ||
	    hs.priv_len > WIMM_HS_MAX_PRIVATE)
		abort();
	if ((hs.flags != 0) != (hs.window_len != 0) || hs.window_addr > UINT64_MAX - hs.window_len)
		abort();
	if (size != WIMM_HS_FIXED_LEN + (size_t)hs.addr_len + (size_t)hs.priv_len)
		abort();

	int n = wimm_hs_encode(&hs, out, sizeof(out));

	if (n < 0 || (size_t)n != size || memcmp(out, data, size) != 0)
		abort();
	/* One byte short of room is refused, never overrun. */
	if (wimm_hs_encode(&hs, out, size - 1) != WIMM_E_NOMEM)
		abort();
	return 0;
}
