/* tar.c - lists the members of a POSIX ustar archive.
 *
 * Each member is a 512-byte header (name[100], mode, uid, gid, size[12] in octal, mtime,
 * chksum[8], typeflag, linkname[100], "ustar\0" "00", uname, gname, devmajor, devminor,
 * prefix[155]) followed by the data rounded up to 512 bytes; two zero blocks end the archive.
 * The header checksum is the sum of all header bytes with the chksum field read as spaces.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 512
#define PATH_MAX_USTAR 256

static int parse_octal(const uint8_t *p, size_t len, unsigned long long *out)
{
    unsigned long long v = 0;
    size_t i = 0;
    while (i < len && p[i] == ' ')
        i++;
    if (i == len || p[i] < '0' || p[i] > '7')
        return -1;
    for (; i < len && p[i] >= '0' && p[i] <= '7'; i++) {
        if (v >> 60)
            return -1;
        v = v * 8 + (p[i] - '0');
    }
    for (; i < len; i++)
        if (p[i] != ' ' && p[i] != '\0')
            return -1;
    *out = v;
    return 0;
}

static int verify_checksum(const uint8_t *h)
{
    unsigned long long stored;
    unsigned sum = 0;
    if (parse_octal(h + 148, 8, &stored) != 0)
        return -1;
    for (int i = 0; i < BLOCK; i++)
        sum += (i >= 148 && i < 156) ? ' ' : h[i];
    return stored == sum ? 0 : -1;
}

static void join_path(char *out, const uint8_t *h)
{
    char *o = out;
    const uint8_t *prefix = h + 345, *name = h;
    if (prefix[0] != '\0') {
        for (size_t i = 0; i < 155 && prefix[i] != '\0'; i++)
            *o++ = (char)prefix[i];
        *o++ = '/';
    }
    for (size_t i = 0; i < 100 && name[i] != '\0'; i++)
        *o++ = (char)name[i];
    *o = '\0';
}

static int list_archive(const uint8_t *buf, size_t n)
{
    size_t pos = 0;
    int members = 0;
    while (n - pos >= BLOCK) {
        const uint8_t *h = buf + pos;
        if (h[0] == '\0')
            return members;
        if (memcmp(h + 257, "ustar\0" "00", 8) != 0 || verify_checksum(h) != 0)
            return -1;
        unsigned long long size;
        if (parse_octal(h + 124, 12, &size) != 0)
            return -1;
        char path[PATH_MAX_USTAR];
        join_path(path, h);
        printf("%c %10llu %s\n", h[156] == '5' ? 'd' : '-', size, path);
        pos += BLOCK;
        unsigned long long padded = (size + BLOCK - 1) / BLOCK * BLOCK;
        if (padded > n - pos)
            return -1;
        pos += padded;
        members++;
    }
    return pos == n ? members : -1;
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
    int members = list_archive(buf, n);
    free(buf);
    if (members <= 0) {
        fprintf(stderr, "not a valid ustar archive\n");
        return 1;
    }
    printf("%d member(s)\n", members);
    return 0;
}
