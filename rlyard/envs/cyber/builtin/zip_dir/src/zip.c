/* zip.c - lists the central directory of a ZIP archive.
 *
 * The end-of-central-directory record ("PK\5\6", 22 bytes plus a comment) is searched from
 * the end of the file; it gives the entry count, the directory size and its offset. Each
 * directory entry is "PK\1\2", 42 more fixed bytes (sizes at 20 and 24, name length at 28,
 * extra length at 30, comment length at 32), then the name, extra field and comment.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    const char *name;
    uint32_t csize, usize;
};

struct name_pool {
    char *data;
    size_t used, cap;
};

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

static const char *pool_add(struct name_pool *pool, const uint8_t *s, size_t len)
{
    if (pool->used + len + 1 > pool->cap) {
        size_t cap = pool->cap ? pool->cap : 64;
        while (pool->used + len + 1 > cap)
            cap *= 2;
        char *grown = realloc(pool->data, cap);
        if (!grown)
            return NULL;
        pool->data = grown;
        pool->cap = cap;
    }
    char *dst = pool->data + pool->used;
    memcpy(dst, s, len);
    dst[len] = '\0';
    pool->used += len + 1;
    return dst;
}

static long find_eocd(const uint8_t *buf, size_t n)
{
    if (n < 22)
        return -1;
    for (size_t i = n - 22 + 1; i-- > 0;)
        if (memcmp(buf + i, "PK\5\6", 4) == 0 && i + 22 + rd16(buf + i + 20) == n)
            return (long)i;
    return -1;
}

static void print_entry(const struct entry *e)
{
    printf("%10u %10u  ", (unsigned)e->usize, (unsigned)e->csize);
    for (const char *s = e->name; *s; s++)
        putchar(*s >= 32 && *s < 127 ? *s : '?');
    putchar('\n');
}

static int list_zip(const uint8_t *buf, size_t n)
{
    long eocd = find_eocd(buf, n);
    if (eocd < 0)
        return -1;
    unsigned count = rd16(buf + eocd + 10);
    uint32_t cd_size = rd32(buf + eocd + 12), cd_off = rd32(buf + eocd + 16);
    if (count == 0 || count > 1024 || cd_off > (size_t)eocd || cd_size != (size_t)eocd - cd_off)
        return -1;
    struct entry *entries = calloc(count, sizeof *entries);
    struct name_pool pool = { NULL, 0, 0 };
    int rc = (int)count;
    size_t pos = cd_off;
    for (unsigned i = 0; i < count && rc > 0; i++) {
        const uint8_t *e = buf + pos;
        if (!entries || (size_t)eocd - pos < 46 || memcmp(e, "PK\1\2", 4) != 0) {
            rc = -1;
            break;
        }
        size_t nlen = rd16(e + 28), xlen = rd16(e + 30), clen = rd16(e + 32);
        if (nlen == 0 || 46 + nlen + xlen + clen > (size_t)eocd - pos) {
            rc = -1;
            break;
        }
        entries[i].csize = rd32(e + 20);
        entries[i].usize = rd32(e + 24);
        entries[i].name = pool_add(&pool, e + 46, nlen);
        if (!entries[i].name)
            rc = -1;
        pos += 46 + nlen + xlen + clen;
    }
    if (rc > 0 && pos != (size_t)eocd)
        rc = -1;
    for (unsigned i = 0; rc > 0 && i < count; i++)
        print_entry(&entries[i]);
    free(pool.data);
    free(entries);
    return rc;
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
    int count = list_zip(buf, n);
    free(buf);
    if (count < 0) {
        fprintf(stderr, "not a valid zip archive\n");
        return 1;
    }
    printf("%d entr%s\n", count, count == 1 ? "y" : "ies");
    return 0;
}
