/* png.c - walks the chunks of a PNG file and reports the image header and palette.
 *
 * After the 8-byte signature each chunk is: u32 BE data length, 4-byte type, data, u32 BE
 * CRC-32 of type and data. IHDR must come first; PLTE holds 1..256 RGB entries; tRNS holds
 * one alpha value per palette entry for colour type 3 (indexed); IEND ends the file.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32.h"

struct png_state {
    uint32_t width, height;
    uint8_t depth, colour_type;
    unsigned palette_len;
    uint8_t *palette, *alpha;
    unsigned alpha_len;
};

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }

static int read_plte(struct png_state *st, const uint8_t *d, uint32_t len)
{
    if (st->palette || len == 0 || len % 3 || len / 3 > 256)
        return -1;
    st->palette_len = len / 3;
    st->palette = malloc(len);
    st->alpha = malloc(st->palette_len);
    if (!st->palette || !st->alpha)
        return -1;
    memcpy(st->palette, d, len);
    memset(st->alpha, 0xFF, st->palette_len);
    return 0;
}

static int read_trns(struct png_state *st, const uint8_t *d, uint32_t len)
{
    if (st->colour_type != 3 || !st->palette || len > 256)
        return -1;
    for (uint32_t i = 0; i < len; i++)
        st->alpha[i] = d[i];
    st->alpha_len = len;
    return 0;
}

static int walk_chunks(struct png_state *st, const uint8_t *buf, size_t n)
{
    static const uint8_t sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n' };
    if (n < 8 || memcmp(buf, sig, 8) != 0)
        return -1;
    size_t pos = 8;
    int seen_ihdr = 0;
    while (n - pos >= 12) {
        uint32_t len = be32(buf + pos);
        const uint8_t *type = buf + pos + 4, *data = buf + pos + 8;
        if (len > n - pos - 12)
            return -1;
        if (crc32_update(0, type, 4 + (size_t)len) != be32(data + len))
            return -1;
        pos += 12 + (size_t)len;
        if (!memcmp(type, "IHDR", 4)) {
            if (seen_ihdr || len != 13)
                return -1;
            st->width = be32(data);
            st->height = be32(data + 4);
            st->depth = data[8];
            st->colour_type = data[9];
            seen_ihdr = 1;
        } else if (!seen_ihdr) {
            return -1;
        } else if (!memcmp(type, "PLTE", 4)) {
            if (read_plte(st, data, len) != 0)
                return -1;
        } else if (!memcmp(type, "tRNS", 4)) {
            if (read_trns(st, data, len) != 0)
                return -1;
        } else if (!memcmp(type, "IEND", 4)) {
            return 0;
        } else if (!(type[0] & 0x20)) {
            return -1;
        }
    }
    return -1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 2;
    }
    uint8_t *buf = malloc(1 << 20);
    if (!buf)
        return 2;
    size_t n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    struct png_state st;
    memset(&st, 0, sizeof st);
    int rc = walk_chunks(&st, buf, n);
    free(buf);
    if (rc == 0)
        printf("PNG %ux%u depth %u type %u, %u palette entr%s, %u alpha value(s)\n",
               (unsigned)st.width, (unsigned)st.height, st.depth, st.colour_type, st.palette_len,
               st.palette_len == 1 ? "y" : "ies", st.alpha_len);
    else
        fprintf(stderr, "invalid PNG stream\n");
    free(st.palette);
    free(st.alpha);
    return rc == 0 ? 0 : 1;
}
