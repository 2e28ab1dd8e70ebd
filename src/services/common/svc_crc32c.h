/* CRC32C (Castagnoli, reflected 0x82F63B78) for the services' integrity
 * checks: the SSE4.2 crc32 instruction where the CPU has it (about 8 bytes
 * a cycle), slice-by-8 tables elsewhere. Thread-safe. */
#ifndef WIMM_SVC_CRC32C_H
#define WIMM_SVC_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC32C of len bytes continuing from crc (0 to start): the result of
 * one call over a+b equals svc_crc32c(svc_crc32c(0, a), b). */
uint32_t svc_crc32c(uint32_t crc, const void *data, size_t len);
/* The same with the tables only, whatever the CPU: for tests that the two
 * agree. */
uint32_t svc_crc32c_portable(uint32_t crc, const void *data, size_t len);

#endif
