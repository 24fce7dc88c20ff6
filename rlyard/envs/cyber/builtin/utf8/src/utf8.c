/* utf8: transcodes a UTF-8 text file to UTF-16 and reports what it found. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>

static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0) {
        fclose(f);
        return NULL;
    }
    unsigned char *buf = malloc(n ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Decodes one code point at buf[*pos]; returns it, or -1 on a bad sequence. */
static long decode_utf8(const unsigned char *buf, size_t len, size_t *pos)
{
    unsigned char c = buf[*pos];
    int need;
    long cp;

    if (c < 0x80) {
        *pos += 1;
        return c;
    }
    if ((c & 0xE0) == 0xC0) {
        need = 2;
        cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        need = 3;
        cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        need = 4;
        cp = c & 0x07;
    } else {
        return -1;
    }
    for (int k = 1; k < need; k++) {
        unsigned char cc = buf[*pos + k];
        if ((cc & 0xC0) != 0x80)
            return -1;
        cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    *pos += need;
    return cp;
}

/* Writes the UTF-16 form of cp into out; returns the number of units. */
static int encode_utf16(long cp, uint16_t out[2])
{
    if (cp < 0x10000) {
        out[0] = (uint16_t)cp;
        return 1;
    }
    cp -= 0x10000;
    out[0] = (uint16_t)(0xD800 | (cp >> 10));
    out[1] = (uint16_t)(0xDC00 | (cp & 0x3FF));
    return 2;
}

int main(int argc, char **argv)
{
    size_t len = 0, pos = 0, points = 0, units = 0, astral = 0;
    uint32_t hash = 2166136261u;

    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    unsigned char *buf = read_file(argv[1], &len);
    if (!buf) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 2;
    }
    while (pos < len) {
        uint16_t u[2];
        long cp = decode_utf8(buf, len, &pos);
        if (cp < 0) {
            fprintf(stderr, "invalid UTF-8 at byte %zu\n", pos);
            free(buf);
            return 1;
        }
        int n = encode_utf16(cp, u);
        for (int i = 0; i < n; i++)
            hash = (hash ^ u[i]) * 16777619u;
        units += (size_t)n;
        astral += n == 2;
        points++;
    }
    printf("code points: %zu, utf-16 units: %zu, surrogate pairs: %zu, hash: %08x\n",
           points, units, astral, hash);
    free(buf);
    return 0;
}
