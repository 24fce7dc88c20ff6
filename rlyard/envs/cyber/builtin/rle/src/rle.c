/* rle: decoder for a bit-packed run-length format.
 * Header: "RLE1", count width in bits, u32le decoded size, header check byte (xor of the 9
 * bytes before it). Body, MSB-first bits: runs of <count:width> [<extra:16> when count is
 * all ones] <byte:8>, each run emitting count + 1 copies of byte. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

struct bitreader {
    const uint8_t *p;
    size_t len, bit;
};

static int read_bits(struct bitreader *br, unsigned n, uint32_t *out)
{
    uint32_t v = 0;
    if (br->bit + n > br->len * 8)
        return -1;
    for (unsigned i = 0; i < n; i++, br->bit++)
        v = (v << 1) | ((br->p[br->bit / 8] >> (7 - br->bit % 8)) & 1);
    *out = v;
    return 0;
}

/* Decodes the stream in buf; returns the decoded bytes (size in *outlen) or NULL. */
static uint8_t *decode_rle(const uint8_t *buf, size_t len, size_t *outlen)
{
    uint8_t check = 0;
    if (len < 10 || memcmp(buf, "RLE1", 4) != 0)
        return NULL;
    for (int i = 0; i < 9; i++)
        check ^= buf[i];
    unsigned bits = buf[4];
    size_t size = buf[5] | buf[6] << 8 | buf[7] << 16 | (size_t)buf[8] << 24;
    if (check != buf[9] || bits == 0 || bits > 32 || size == 0 || size > (1u << 20))
        return NULL;
    uint32_t escape = (1u << bits) - 1;
    uint8_t *out = malloc(size);
    struct bitreader br = {buf + 10, len - 10, 0};
    size_t o = 0;
    while (out && o < size) {
        uint32_t count, extra = 0, byte;
        if (read_bits(&br, bits, &count) < 0 ||
            (count == escape && read_bits(&br, 16, &extra) < 0) ||
            read_bits(&br, 8, &byte) < 0 ||
            (uint64_t)count + extra + 1 > size - o) {
            free(out);
            return NULL;
        }
        memset(out + o, (int)byte, (size_t)count + extra + 1);
        o += (size_t)count + extra + 1;
    }
    *outlen = size;
    return out;
}

int main(int argc, char **argv)
{
    static uint8_t buf[1 << 16];
    size_t outlen = 0;
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", argv[1]);
        return 2;
    }
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    uint8_t *out = decode_rle(buf, len, &outlen);
    if (!out) {
        fprintf(stderr, "not a valid RLE1 stream\n");
        return 1;
    }
    uint32_t sum = 0;
    for (size_t i = 0; i < outlen; i++)
        sum = sum * 31 + out[i];
    printf("decoded %zu bytes, first byte 0x%02x, checksum %08x\n", outlen, out[0], sum);
    free(out);
    return 0;
}
