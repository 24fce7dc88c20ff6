/* bmp.c - reads the headers of a Windows BMP image and checks that the pixel data is present.
 *
 * File header (14 bytes): "BM", file size, two reserved words, pixel data offset.
 * Info header (40 bytes): header size, width, height (negative = top-down), planes, bit
 * count, compression (only 0, uncompressed, is accepted), image size, resolution, colours.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct bmp_info {
    int32_t width, height;
    uint16_t planes, bpp;
    uint32_t compression, data_offset;
};

static uint32_t rd32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static int bmp_row_size(const struct bmp_info *bi)
{
    int bits = bi->width * bi->bpp;
    return (bits + 31) / 32 * 4;
}

static int parse_bmp(const uint8_t *buf, size_t n, struct bmp_info *bi)
{
    if (n < 54 || buf[0] != 'B' || buf[1] != 'M')
        return -1;
    bi->data_offset = rd32(buf + 10);
    if (rd32(buf + 14) != 40)
        return -1;
    bi->width = (int32_t)rd32(buf + 18);
    bi->height = (int32_t)rd32(buf + 22);
    bi->planes = rd16(buf + 26);
    bi->bpp = rd16(buf + 28);
    bi->compression = rd32(buf + 30);
    if (bi->planes != 1 || bi->compression != 0)
        return -1;
    if (bi->bpp != 1 && bi->bpp != 4 && bi->bpp != 8 && bi->bpp != 24 && bi->bpp != 32)
        return -1;
    if (bi->width <= 0 || bi->height == 0 || bi->height == INT32_MIN)
        return -1;
    if (bi->data_offset < 54 || bi->data_offset > n)
        return -1;
    int row = bmp_row_size(bi);
    if (row <= 0)
        return -1;
    long long rows = bi->height < 0 ? -(long long)bi->height : bi->height;
    if ((long long)row * rows > (long long)(n - bi->data_offset))
        return -2;
    return 0;
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
    struct bmp_info bi;
    int rc = parse_bmp(buf, n, &bi);
    free(buf);
    if (rc == -2) {
        fprintf(stderr, "pixel data truncated\n");
        return 1;
    }
    if (rc != 0) {
        fprintf(stderr, "not a supported BMP file\n");
        return 1;
    }
    printf("BMP %dx%d, %u bpp, %s, row %d bytes\n", (int)bi.width, (int)(bi.height < 0 ? -bi.height : bi.height),
           (unsigned)bi.bpp, bi.height < 0 ? "top-down" : "bottom-up", bmp_row_size(&bi));
    return 0;
}
