/* record.c - replays a telemetry log made of checksummed binary records.
 *
 * File: "TLM1" then records. Record: u16 LE total length (header included), u8 type,
 * u8 checksum, payload. The checksum makes the sum of all record bytes, length field and
 * type included, equal to 0xFF modulo 256. Type 1 sample (payload: u16 sensor, i16 value),
 * type 2 text note.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HDR 4

struct record {
    unsigned type;
    int len;
    uint8_t data[512];
};

static int record_checksum_ok(const uint8_t *r, int plen)
{
    unsigned sum = r[0] + r[1] + r[2] + r[3];
    for (int i = 0; i < plen; i++)
        sum += r[HDR + i];
    return (sum & 0xFF) == 0xFF;
}

static int read_record(const uint8_t *p, size_t avail, struct record *rec)
{
    if (avail < 2)
        return -1;
    int total = p[0] | p[1] << 8;
    if ((size_t)total > avail || avail < HDR)
        return -1;
    int plen = total - HDR;
    if (plen > (int)sizeof rec->data)
        return -1;
    if (!record_checksum_ok(p, plen))
        return -1;
    rec->type = p[2];
    rec->len = plen;
    memcpy(rec->data, p + HDR, plen);
    return total;
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
    uint8_t *buf = malloc(1 << 16);
    if (!buf)
        return 2;
    size_t n = fread(buf, 1, 1 << 16, f);
    fclose(f);
    if (n < 4 || memcmp(buf, "TLM1", 4) != 0) {
        fprintf(stderr, "not a telemetry log\n");
        free(buf);
        return 1;
    }
    struct record rec;
    unsigned samples = 0, notes = 0;
    long total = 0;
    for (size_t pos = 4; pos < n;) {
        int used = read_record(buf + pos, n - pos, &rec);
        if (used <= 0) {
            fprintf(stderr, "corrupt record at offset %zu\n", pos);
            free(buf);
            return 1;
        }
        if (rec.type == 1 && rec.len == 4) {
            samples++;
            total += (int16_t)(rec.data[2] | rec.data[3] << 8);
        } else if (rec.type == 2) {
            notes++;
            printf("note: %.*s\n", rec.len, (const char *)rec.data);
        }
        pos += (size_t)used;
    }
    printf("%u sample(s), sum %ld, %u note(s)\n", samples, total, notes);
    free(buf);
    return 0;
}
