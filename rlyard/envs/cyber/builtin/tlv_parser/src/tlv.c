/* tlv.c - reads a device configuration stored as type-length-value records.
 *
 * Record layout: one type byte, one length byte, then `length` value bytes.
 * Types: 0 end, 1 device name, 2 port (2 bytes, big endian), 3 firmware blob.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_END = 0, T_NAME = 1, T_PORT = 2, T_BLOB = 3 };

struct config {
    char name[32];
    unsigned port;
    unsigned blobs;
    uint32_t blob_sum;
};

static uint32_t blob_checksum(const uint8_t *v, size_t len)
{
    uint32_t s = 0;
    for (size_t i = 0; i < len; i++)
        s = ((s << 1) | (s >> 31)) ^ v[i];
    return s;
}

static int parse_tlv(const uint8_t *buf, size_t n, struct config *cfg)
{
    size_t pos = 0;
    while (pos + 2 <= n) {
        uint8_t type = buf[pos], len = buf[pos + 1];
        const uint8_t *v = buf + pos + 2;
        pos += 2;
        switch (type) {
        case T_END:
            return 0;
        case T_NAME:
            if (len > n - pos || len >= sizeof cfg->name)
                return -1;
            memcpy(cfg->name, v, len);
            cfg->name[len] = '\0';
            break;
        case T_PORT:
            if (len != 2 || n - pos < 2)
                return -1;
            cfg->port = (unsigned)v[0] << 8 | v[1];
            break;
        case T_BLOB:
            cfg->blob_sum ^= blob_checksum(v, len);
            cfg->blobs++;
            break;
        default:
            return -1;
        }
        pos += len;
    }
    return pos == n ? 0 : -1;
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
    uint8_t *buf = malloc(4096);
    size_t n = buf ? fread(buf, 1, 4096, f) : 0;
    fclose(f);
    if (!buf)
        return 2;
    uint8_t *data = malloc(n ? n : 1);
    if (!data)
        return 2;
    memcpy(data, buf, n);
    free(buf);

    struct config cfg = { "unnamed", 0, 0, 0 };
    if (parse_tlv(data, n, &cfg) != 0) {
        fprintf(stderr, "invalid configuration record\n");
        free(data);
        return 1;
    }
    printf("device %s port %u, %u blob(s), checksum %08x\n", cfg.name, cfg.port, cfg.blobs,
           (unsigned)cfg.blob_sum);
    free(data);
    return 0;
}
