/* oid.c - prints the DER-encoded OBJECT IDENTIFIERs found in a file in dotted form.
 *
 * Each element is tag 0x06, a length (short form, or 0x81 followed by one byte), then the
 * base-128 encoded arcs; the first byte packs the first two arcs as 40 * a + b.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_ARCS 16

static int decode_oid(const uint8_t *p, size_t len, uint32_t *arcs)
{
    int count = 0;
    uint32_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (v > (UINT32_MAX >> 7))
            return -1;
        v = (v << 7) | (p[i] & 0x7f);
        if (p[i] & 0x80)
            continue;
        if (count == 0) {
            uint32_t first = v < 80 ? v / 40 : 2;
            arcs[count++] = first;
            arcs[count++] = v - first * 40;
        } else {
            arcs[count++] = v;
        }
        v = 0;
    }
    if (len == 0 || (p[len - 1] & 0x80))
        return -1;
    return count;
}

static int print_oids(const uint8_t *buf, size_t n)
{
    size_t pos = 0;
    int seen = 0;
    while (pos < n) {
        if (n - pos < 2 || buf[pos] != 0x06)
            return -1;
        size_t len = buf[pos + 1];
        pos += 2;
        if (len == 0x81) {
            if (pos >= n)
                return -1;
            len = buf[pos++];
        } else if (len & 0x80) {
            return -1;
        }
        if (len > n - pos)
            return -1;
        uint32_t arcs[MAX_ARCS];
        int count = decode_oid(buf + pos, len, arcs);
        if (count < 0)
            return -1;
        for (int i = 0; i < count && i < MAX_ARCS; i++)
            printf(i ? ".%u" : "%u", (unsigned)arcs[i]);
        printf("\n");
        pos += len;
        seen++;
    }
    return seen;
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
    uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    int seen = print_oids(buf, n);
    if (seen <= 0) {
        fprintf(stderr, "no valid OBJECT IDENTIFIER\n");
        return 1;
    }
    printf("%d identifier(s)\n", seen);
    return 0;
}
