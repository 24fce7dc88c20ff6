/* gif.c - walks the block structure of a GIF image and reports its frames and comment.
 *
 * Layout: "GIF87a"/"GIF89a", logical screen descriptor (7 bytes), optional global colour
 * table, then blocks: 0x21 extension (label + data sub-blocks), 0x2C image descriptor
 * (9 bytes, optional local colour table, LZW minimum code size, data sub-blocks), 0x3B end.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COMMENT 1024

struct gif {
    unsigned width, height, frames;
    uint8_t *comment;
    size_t comment_len;
};

struct reader {
    const uint8_t *p;
    size_t n, pos;
};

static int skip(struct reader *r, size_t k)
{
    if (k > r->n - r->pos)
        return -1;
    r->pos += k;
    return 0;
}

static int skip_sub_blocks(struct reader *r)
{
    for (;;) {
        if (r->pos >= r->n)
            return -1;
        uint8_t len = r->p[r->pos++];
        if (len == 0)
            return 0;
        if (skip(r, len) != 0)
            return -1;
    }
}

static int read_comment(struct gif *g, struct reader *r)
{
    uint8_t *text = NULL;
    size_t len = 0;
    free(g->comment);
    g->comment = NULL;
    for (;;) {
        if (r->pos >= r->n)
            return -1;
        uint8_t k = r->p[r->pos++];
        if (k == 0)
            break;
        if (k > r->n - r->pos)
            return -1;
        uint8_t *grown = realloc(text, len + k + 1);
        if (!grown)
            return -1;
        text = grown;
        memcpy(text + len, r->p + r->pos, k);
        len += k;
        text[len] = '\0';
        r->pos += k;
        g->comment = text;
    }
    g->comment_len = len;
    if (len > MAX_COMMENT) {
        fprintf(stderr, "comment too long\n");
        free(text);
        return -1;
    }
    return 0;
}

static int parse_gif(struct gif *g, struct reader *r)
{
    if (r->n < 13 || (memcmp(r->p, "GIF87a", 6) && memcmp(r->p, "GIF89a", 6)))
        return -1;
    g->width = r->p[6] | r->p[7] << 8;
    g->height = r->p[8] | r->p[9] << 8;
    uint8_t flags = r->p[10];
    r->pos = 13;
    if ((flags & 0x80) && skip(r, 3u << ((flags & 7) + 1)) != 0)
        return -1;
    for (;;) {
        if (r->pos >= r->n)
            return -1;
        uint8_t block = r->p[r->pos++];
        if (block == 0x3B)
            return 0;
        if (block == 0x21) {
            if (r->pos >= r->n)
                return -1;
            uint8_t label = r->p[r->pos++];
            if ((label == 0xFE ? read_comment(g, r) : skip_sub_blocks(r)) != 0)
                return -1;
        } else if (block == 0x2C) {
            if (r->pos + 9 > r->n)
                return -1;
            uint8_t iflags = r->p[r->pos + 8];
            r->pos += 9;
            if ((iflags & 0x80) && skip(r, 3u << ((iflags & 7) + 1)) != 0)
                return -1;
            if (skip(r, 1) != 0 || skip_sub_blocks(r) != 0)
                return -1;
            g->frames++;
        } else {
            return -1;
        }
    }
}

static void gif_release(struct gif *g)
{
    free(g->comment);
    g->comment = NULL;
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
    static uint8_t buf[1 << 18];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    struct gif g = { 0, 0, 0, NULL, 0 };
    struct reader r = { buf, n, 0 };
    int rc = parse_gif(&g, &r);
    if (rc == 0)
        printf("GIF %ux%u, %u frame(s), comment: %s\n", g.width, g.height, g.frames,
               g.comment ? (const char *)g.comment : "(none)");
    else
        fprintf(stderr, "malformed GIF stream\n");
    gif_release(&g);
    return rc == 0 ? 0 : 1;
}
