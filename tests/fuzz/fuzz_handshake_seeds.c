/* Writes a small seed corpus for fuzz_handshake into the directory argv[1]:
 * valid handshakes of several shapes (made by the real encoder, so the
 * seeds follow the wire layout if it changes) and a few near misses. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/handshake.h"
#include "wimm.h"

static int write_seed(const char *dir, const char *name, const uint8_t *buf, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/seed-%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, len, f) != len) {
		perror(path);
		if (f)
			fclose(f);
		return 1;
	}
	return fclose(f) != 0;
}

int main(int argc, char **argv)
{
	uint8_t buf[WIMM_HS_MAX_LEN];
	struct wimm_handshake hs;
	int bad = 0, n;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	memset(&hs, 0, sizeof(hs));
	hs.version = WIMM_HS_VERSION;
	hs.rx_depth = 64;
	hs.credit_addr = 0x7f0000001000ull;
	hs.credit_key = 7;
	n = wimm_hs_encode(&hs, buf, sizeof(buf));
	bad |= n < 0 || write_seed(argv[1], "minimal", buf, (size_t)n);

	hs.flags = WIMM_HS_F_ALL;
	hs.window_addr = 0x7f0000100000ull;
	hs.window_len = 1 << 20;
	hs.window_key = 0x1234;
	hs.recv_size = 4096;
	n = wimm_hs_encode(&hs, buf, sizeof(buf));
	bad |= n < 0 || write_seed(argv[1], "window", buf, (size_t)n);

	hs.addr_len = 32;
	for (unsigned i = 0; i < hs.addr_len; i++)
		hs.addr[i] = (uint8_t)i;
	n = wimm_hs_encode(&hs, buf, sizeof(buf));
	bad |= n < 0 || write_seed(argv[1], "addr32", buf, (size_t)n);

	hs.addr_len = WIMM_HS_MAX_ADDR;
	hs.rx_depth = WIMM_HS_MAX_RX_DEPTH;
	hs.recv_size = WIMM_HS_MAX_RECV_SIZE;
	n = wimm_hs_encode(&hs, buf, sizeof(buf));
	bad |= n < 0 || write_seed(argv[1], "maxaddr", buf, (size_t)n);

	/* Near misses: another version, a cut-off message. */
	buf[2] = WIMM_HS_VERSION + 1;
	bad |= write_seed(argv[1], "version_next", buf, WIMM_HS_FIXED_LEN);
	buf[2] = WIMM_HS_VERSION;
	bad |= write_seed(argv[1], "truncated", buf, 40);
	return bad ? 1 : 0;
}
