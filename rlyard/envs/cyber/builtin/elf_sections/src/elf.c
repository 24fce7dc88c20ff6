/* elf.c - lists the section table of a small ELF-like object file.
 *
 * Header (16 bytes): "\x7f" "ELF", class (1), version (1), two reserved bytes, section table
 * offset (u32 LE), section count (u16), index of the section-name string table (u16).
 * Section header (16 bytes): name offset into the string table, type, file offset, size.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct shdr {
    uint32_t name, type, offset, size;
};

static uint32_t rd32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

static void read_shdr(const uint8_t *p, struct shdr *sh)
{
    sh->name = rd32(p);
    sh->type = rd32(p + 4);
    sh->offset = rd32(p + 8);
    sh->size = rd32(p + 12);
}

static void section_name(const uint8_t *strtab, uint32_t off, char *out, size_t cap)
{
    const char *s = (const char *)strtab + off;
    size_t i = 0;
    while (i + 1 < cap && s[i] != '\0') {
        out[i] = s[i];
        i++;
    }
    out[i] = '\0';
}

static int list_sections(const uint8_t *buf, size_t n)
{
    if (n < 16 || memcmp(buf, "\x7f" "ELF", 4) != 0 || buf[4] != 1 || buf[5] != 1)
        return -1;
    uint32_t shoff = rd32(buf + 8);
    unsigned shnum = buf[12] | buf[13] << 8;
    unsigned shstrndx = buf[14] | buf[15] << 8;
    if (shnum == 0 || shstrndx >= shnum || shoff > n || (size_t)shnum * 16 > n - shoff)
        return -1;
    struct shdr strsec;
    read_shdr(buf + shoff + 16 * shstrndx, &strsec);
    if (strsec.offset > n || strsec.size > n - strsec.offset || strsec.size == 0)
        return -1;
    const uint8_t *strtab = buf + strsec.offset;
    if (strtab[strsec.size - 1] != '\0')
        return -1;
    for (unsigned i = 0; i < shnum; i++) {
        struct shdr sh;
        char name[64];
        read_shdr(buf + shoff + 16 * i, &sh);
        if (sh.offset > n || sh.size > n - sh.offset)
            return -1;
        section_name(strtab, sh.name, name, sizeof name);
        printf("[%2u] %-16s type %u offset 0x%x size %u\n", i, name, (unsigned)sh.type,
               (unsigned)sh.offset, (unsigned)sh.size);
    }
    return (int)shnum;
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
    int count = list_sections(buf, n);
    free(buf);
    if (count < 0) {
        fprintf(stderr, "not a valid object file\n");
        return 1;
    }
    printf("%d section(s)\n", count);
    return 0;
}
