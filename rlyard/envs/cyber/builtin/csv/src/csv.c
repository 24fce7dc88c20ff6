/* csv: parses RFC 4180-style CSV (quoted fields, "" escapes, quoted newlines),
 * prints the shape of the table and flags cells that look like spreadsheet formulas. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct record {
    char *buf;
    size_t len, cap;
    size_t start[64];
    int nfields;
};

static int put(struct record *r, char c)
{
    if (r->len + 1 >= r->cap) {
        char *nb = realloc(r->buf, r->cap * 2);
        if (!nb)
            return -1;
        r->buf = nb;
        r->cap *= 2;
    }
    r->buf[r->len++] = c;
    return 0;
}

static int begin_field(struct record *r)
{
    if (r->nfields == 64)
        return -1;
    r->start[r->nfields++] = r->len;
    return 0;
}

/* Reads a quoted field after its opening quote; returns the char after the closing quote. */
static int parse_quoted(FILE *f, struct record *r, int *formulas)
{
    size_t from = r->len;
    char *field = r->buf + from;
    int c;
    for (;;) {
        c = fgetc(f);
        if (c == EOF)
            return -2;
        if (c == '"') {
            c = fgetc(f);
            if (c != '"')
                break;
        }
        if (put(r, (char)c) < 0)
            return -2;
    }
    if (r->len > from && strchr("=+-@", field[0]))
        (*formulas)++;
    return c;
}

int main(int argc, char **argv)
{
    struct record r = {NULL, 0, 64, {0}, 0};
    int rows = 0, cols = -1, formulas = 0, c;

    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    r.buf = malloc(r.cap);
    if (!f || !r.buf) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 2;
    }
    c = fgetc(f);
    while (c != EOF) {
        r.len = 0;
        r.nfields = 0;
        for (;;) {
            if (begin_field(&r) < 0)
                goto bad;
            if (c == '"') {
                c = parse_quoted(f, &r, &formulas);
                if (c == -2)
                    goto bad;
            } else {
                while (c != ',' && c != '\n' && c != '\r' && c != EOF) {
                    if (put(&r, (char)c) < 0)
                        goto bad;
                    c = fgetc(f);
                }
            }
            if (put(&r, '\0') < 0)
                goto bad;
            if (c != ',')
                break;
            c = fgetc(f);
        }
        if (c == '\r')
            c = fgetc(f);
        if (c != '\n' && c != EOF)
            goto bad;
        if (cols >= 0 && r.nfields != cols)
            goto bad;
        cols = r.nfields;
        if (rows == 0)
            printf("header: %s (%d columns)\n", r.buf + r.start[0], cols);
        rows++;
        c = fgetc(f);
    }
    printf("%d rows, %d columns, %d formula-like cells\n", rows, cols < 0 ? 0 : cols, formulas);
    fclose(f);
    free(r.buf);
    return 0;
bad:
    fprintf(stderr, "malformed CSV at row %d\n", rows + 1);
    fclose(f);
    free(r.buf);
    return 1;
}
