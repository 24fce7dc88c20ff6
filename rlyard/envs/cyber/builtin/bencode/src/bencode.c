/* bencode: decodes a .torrent-style bencoded file and prints the torrent's summary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B_INT, B_STR, B_LIST, B_DICT };
struct entry;
struct bnode {
    int type;
    long ival, slen, nkids;
    const char *s;
    struct bnode **kids;
    struct entry **buckets;
    unsigned nbuckets, count;
};
struct entry { const char *key; long klen; struct bnode *val; struct entry *next; };
struct parser { const char *p, *end; int depth; };

static unsigned hash(const char *k, long n)
{
    unsigned h = 2166136261u;
    while (n--)
        h = (h ^ (unsigned char)*k++) * 16777619u;
    return h;
}

static int dict_put(struct bnode *d, const char *k, long klen, struct bnode *v)
{
    if (d->count * 2 >= d->nbuckets) {
        unsigned nb = d->nbuckets ? d->nbuckets * 2 : 8;
        struct entry **t = calloc(nb, sizeof *t);
        if (!t)
            return -1;
        for (unsigned i = 0; i < d->nbuckets; i++)
            for (struct entry *e = d->buckets[i], *next; e; e = next) {
                next = e->next;
                e->next = t[hash(e->key, e->klen) & (nb - 1)];
                t[hash(e->key, e->klen) & (nb - 1)] = e;
            }
        free(d->buckets);
        d->buckets = t;
        d->nbuckets = nb;
    }
    struct entry *e = malloc(sizeof *e);
    if (!e)
        return -1;
    unsigned h = hash(k, klen) & (d->nbuckets - 1);
    *e = (struct entry){k, klen, v, d->buckets[h]};
    d->buckets[h] = e;
    d->count++;
    return 0;
}

static struct bnode *dict_get(const struct bnode *d, const char *key)
{
    long n = (long)strlen(key);
    unsigned h = hash(key, n) & (d->nbuckets - 1);
    for (struct entry *e = d->buckets[h]; e; e = e->next)
        if (e->klen == n && memcmp(e->key, key, (size_t)n) == 0)
            return e->val;
    return NULL;
}

static int parse_long(struct parser *ps, char stop, long *out)
{
    long v = 0;
    int neg = ps->p < ps->end && *ps->p == '-' && stop == 'e', digits = 0;
    ps->p += neg;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9' && digits++ < 15)
        v = v * 10 + (*ps->p++ - '0');
    if (!digits || ps->p >= ps->end || *ps->p++ != stop)
        return -1;
    *out = neg ? -v : v;
    return 0;
}

static struct bnode *parse(struct parser *ps)
{
    struct bnode *n = calloc(1, sizeof *n);
    if (!n || ps->p >= ps->end || ++ps->depth > 32)
        return NULL;
    char c = *ps->p;
    if (c == 'i') {
        ps->p++;
        n->type = B_INT;
        if (parse_long(ps, 'e', &n->ival) < 0)
            return NULL;
    } else if (c >= '0' && c <= '9') {
        n->type = B_STR;
        if (parse_long(ps, ':', &n->slen) < 0 || n->slen > ps->end - ps->p)
            return NULL;
        n->s = ps->p;
        ps->p += n->slen;
    } else if (c == 'l' || c == 'd') {
        n->type = c == 'l' ? B_LIST : B_DICT;
        for (ps->p++; ps->p < ps->end && *ps->p != 'e';) {
            struct bnode *k = n->type == B_DICT ? parse(ps) : NULL, *v;
            if ((n->type == B_DICT && (!k || k->type != B_STR)) || !(v = parse(ps)))
                return NULL;
            if (k ? dict_put(n, k->s, k->slen, v) < 0 : 0)
                return NULL;
            if (!k) {
                struct bnode **kids = realloc(n->kids, (size_t)(n->nkids + 1) * sizeof *kids);
                if (!kids)
                    return NULL;
                (n->kids = kids)[n->nkids++] = v;
            }
        }
        if (ps->p++ >= ps->end)
            return NULL;
    } else {
        return NULL;
    }
    ps->depth--;
    return n;
}

int main(int argc, char **argv)
{
    static char buf[1 << 20];
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    size_t len = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    struct parser ps = {buf, buf + len, 0};
    struct bnode *root = parse(&ps), *info, *name, *plen, *pieces, *size, *files;
    if (!root || ps.p != ps.end || root->type != B_DICT ||
        !(info = dict_get(root, "info")) || info->type != B_DICT ||
        !(name = dict_get(info, "name")) || name->type != B_STR ||
        !(plen = dict_get(info, "piece length")) || plen->type != B_INT || plen->ival <= 0 ||
        !(pieces = dict_get(info, "pieces")) || pieces->type != B_STR || pieces->slen % 20) {
        fprintf(stderr, "not a valid torrent file\n");
        return 1;
    }
    long total = 0;
    if ((size = dict_get(info, "length")) && size->type == B_INT)
        total = size->ival;
    else if ((files = dict_get(info, "files")) && files->type == B_LIST)
        for (long i = 0; i < files->nkids; i++)
            if (files->kids[i]->type == B_DICT && (size = dict_get(files->kids[i], "length")) &&
                size->type == B_INT && size->ival > 0 && size->ival < (1L << 40))
                total += size->ival;
    printf("name: %.*s, %ld bytes, %ld pieces of %ld bytes\n", (int)name->slen, name->s, total,
           pieces->slen / 20, plen->ival);
    return 0;
}
