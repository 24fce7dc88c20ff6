/* lzss: decompressor for a small LZSS container.
 * Header: "LZSS", u32le decompressed size, u16le sum of the payload bytes.
 * Payload: a flag byte, then 8 items, low bit first: 1 = literal byte, 0 = match of two
 * bytes b0 b1 with distance (b0 | (b1 & 0xF0) << 4) + 1 and length (b1 & 0x0F) + 3. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#define MAX_SIZE (1u << 20)

static uint16_t payload_sum(const uint8_t *p, size_t n)
{
    uint16_t s = 0;
    while (n--)
        s = (uint16_t)(s + *p++);
    return s;
}

/* Returns the decompressed data (size in *outlen), or NULL on a bad stream. */
static uint8_t *lzss_decompress(const uint8_t *in, size_t len, size_t *outlen)
{
    if (len < 10 || memcmp(in, "LZSS", 4) != 0)
        return NULL;
    size_t size = in[4] | in[5] << 8 | in[6] << 16 | (size_t)in[7] << 24;
    uint16_t sum = (uint16_t)(in[8] | in[9] << 8);
    const uint8_t *ip = in + 10, *end = in + len;
    if (size == 0 || size > MAX_SIZE || payload_sum(ip, len - 10) != sum)
        return NULL;
    uint8_t *out = malloc(size);
    size_t o = 0;
    if (!out)
        return NULL;
    while (ip < end && o < size) {
        unsigned flags = *ip++;
        for (int k = 0; k < 8 && ip < end && o < size; k++, flags >>= 1) {
            if (flags & 1) {
                out[o++] = *ip++;
                continue;
            }
            if (end - ip < 2)
                goto bad;
            size_t dist = (ip[0] | (ip[1] & 0xF0) << 4) + 1;
            size_t n = (ip[1] & 0x0F) + 3;
            ip += 2;
            if (dist > o)
                goto bad;
            while (n--) {
                out[o] = out[o - dist];
                o++;
            }
        }
    }
    if (o != size)
        goto bad;
    *outlen = size;
    return out;
bad:
    free(out);
    return NULL;
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
    uint8_t *out = lzss_decompress(buf, len, &outlen);
    if (!out) {
        fprintf(stderr, "corrupt or unsupported LZSS stream\n");
        return 1;
    }
    size_t shown = outlen < 48 ? outlen : 48;
    printf("decompressed %zu bytes: ", outlen);
    for (size_t i = 0; i < shown; i++)
        putchar(out[i] >= 32 && out[i] < 127 ? out[i] : '.');
    putchar('\n');
    free(out);
    return 0;
}
