#ifndef CRC32_H
#define CRC32_H
#include <stddef.h>
#include <stdint.h>

/* CRC-32 (ISO-HDLC, the one PNG uses) of `len` bytes, continuing from `crc` (start with 0). */
uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t len);

#endif
