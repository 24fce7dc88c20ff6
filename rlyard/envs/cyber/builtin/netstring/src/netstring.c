/* netstring: reads a sequence of netstrings ("5:hello,") and prints each payload. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>

#define MAX_ITEM 256

static char *read_file(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = *len >= 0 ? malloc((size_t)*len + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)*len, f) != (size_t)*len) {
        free(buf);
        buf = NULL;
    }
    if (buf)
        buf[*len] = '\0';
    fclose(f);
    return buf;
}

/* Parses one netstring at *pos; copies its payload into item; returns its length or -1. */
static long read_netstring(const char *buf, long len, long *pos, char *item)
{
    const char *start = buf + *pos;
    char *end;

    if (!isdigit((unsigned char)*start) && *start != '-')
        return -1;
    long n = strtol(start, &end, 10);
    if (end == start || *end != ':')
        return -1;
    long avail = len - (end + 1 - buf);
    if (n >= MAX_ITEM || n + 1 > avail)
        return -1;
    memmove(item, end + 1, n);
    item[n] = '\0';
    if (end[1 + n] != ',')
        return -1;
    *pos = (end + 2 + n) - buf;
    return n;
}

int main(int argc, char **argv)
{
    long len = 0, pos = 0;
    int count = 0;
    char item[MAX_ITEM];

    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    char *buf = read_file(argv[1], &len);
    if (!buf) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 2;
    }
    while (pos < len) {
        if (buf[pos] == '\n') {
            pos++;
            continue;
        }
        long n = read_netstring(buf, len, &pos, item);
        if (n < 0) {
            fprintf(stderr, "malformed netstring at offset %ld\n", pos);
            free(buf);
            return 1;
        }
        printf("item %d (%ld bytes): %s\n", ++count, n, item);
    }
    printf("%d netstrings\n", count);
    free(buf);
    return 0;
}
