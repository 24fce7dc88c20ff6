/* leb128.c - decodes a delta-encoded list of unsigned LEB128 integers.
 *
 * Layout: ULEB128 count, then `count` ULEB128 deltas; the values are the running sums.
 * Prints the decoded values (at most 8 of them) and their number.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct cursor {
    const uint8_t *p;
    size_t n;
    size_t pos;
};

static int uleb_decode(struct cursor *c, uint64_t *out)
{
    uint64_t result = 0;
    unsigned shift = 0;
    for (;;) {
        if (c->pos >= c->n)
            return -1;
        uint8_t b = c->p[c->pos++];
        result |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
    }
    *out = result;
    return 0;
}

static int decode_list(struct cursor *c)
{
    uint64_t count, value = 0, delta;
    if (uleb_decode(c, &count) != 0 || count > c->n - c->pos)
        return -1;
    for (uint64_t i = 0; i < count; i++) {
        if (uleb_decode(c, &delta) != 0)
            return -1;
        value += delta;
        if (i < 8)
            printf("value[%llu] = %llu\n", (unsigned long long)i, (unsigned long long)value);
    }
    if (c->pos != c->n)
        return -1;
    printf("%llu value(s)\n", (unsigned long long)count);
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
    static uint8_t buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    struct cursor c = { buf, n, 0 };
    if (decode_list(&c) != 0) {
        fprintf(stderr, "malformed varint list\n");
        return 1;
    }
    return 0;
}
