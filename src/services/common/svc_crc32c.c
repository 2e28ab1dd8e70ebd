/* CRC32C for the services: hardware when the CPU has it, tables otherwise. */
#include <pthread.h>
#include <string.h>

#include "svc_crc32c.h"

static uint32_t crc_tab[8][256];
static uint32_t (*crc_impl)(uint32_t c, const unsigned char *b, size_t len);
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static uint32_t load32le(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Slice-by-8 over the inverted running value c. */
static uint32_t crc_tables(uint32_t c, const unsigned char *b, size_t len)
{
	while (len >= 8) {
		uint32_t lo = c ^ load32le(b), hi = load32le(b + 4);
		c = crc_tab[7][lo & 0xff] ^ crc_tab[6][(lo >> 8) & 0xff] ^
		    crc_tab[5][(lo >> 16) & 0xff] ^ crc_tab[4][lo >> 24] ^ crc_tab[3][hi & 0xff] ^
		    crc_tab[2][(hi >> 8) & 0xff] ^ crc_tab[1][(hi >> 16) & 0xff] ^
		    crc_tab[0][hi >> 24];
		b += 8;
		len -= 8;
	}
	while (len--)
		c = (c >> 8) ^ crc_tab[0][(c ^ *b++) & 0xff];
	return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SVC_HAVE_SSE42 1
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const unsigned char *b,
							    size_t len)
{
	uint64_t c64 = c;
	while (len >= 8) {
		uint64_t v;
		memcpy(&v, b, 8); /* x86 is little-endian, as the CRC's byte order */
		c64 = __builtin_ia32_crc32di(c64, v);
		b += 8;
		len -= 8;
	}
	c = (uint32_t)c64;
	while (len--)
		c = __builtin_ia32_crc32qi(c, *b++);
	return c;
}
#endif

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_tab[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int s = 1; s < 8; s++)
			crc_tab[s][i] =
			    (crc_tab[s - 1][i] >> 8) ^ crc_tab[0][crc_tab[s - 1][i] & 0xff];
	crc_impl = crc_tables;
#ifdef SVC_HAVE_SSE42
	__builtin_cpu_init();
	if (__builtin_cpu_supports("sse4.2"))
		crc_impl = crc_sse42;
#endif
}

uint32_t svc_crc32c(uint32_t crc, const void *data, size_t len)
{
	pthread_once(&crc_once, crc_init);
	return crc_impl(crc ^ 0xffffffffu, data, len) ^ 0xffffffffu;
}

uint32_t svc_crc32c_portable(uint32_t crc, const void *data, size_t len)
{
	pthread_once(&crc_once, crc_init);
	return crc_tables(crc ^ 0xffffffffu, data, len) ^ 0xffffffffu;
}
