/* json: a small JSON parser (objects, arrays, strings, integers, true/false/null)
 * that builds a tree and prints how many values of each kind the document holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>

enum kind { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };
struct value {
    enum kind kind;
    char *str;
    long num;
    int n;
    char *keys[32];
    struct value *items[32];
};
struct parser { const char *p; int depth; };
static int counts[6];

static void free_value(struct value *v)
{
    if (!v) return;
    for (int i = 0; i < v->n; i++) {
        if (v->kind == J_OBJ)
            free(v->keys[i]);
        free_value(v->items[i]);
    }
    free(v->str);
    free(v);
}

static void ws(struct parser *ps) { while (isspace((unsigned char)*ps->p)) ps->p++; }

static char *parse_string(struct parser *ps)
{
    if (*ps->p != '"') return NULL;
    const char *s = ++ps->p;
    while (*ps->p && *ps->p != '"')
        ps->p += (*ps->p == '\\' && ps->p[1]) ? 2 : 1;
    if (*ps->p != '"') return NULL;
    return strndup(s, (size_t)(ps->p++ - s));
}

static struct value *parse_value(struct parser *ps);
static struct value *parse_container(struct parser *ps, struct value *v, char close)
{
    ps->p++;
    ws(ps);
    if (*ps->p == close && ps->p++)
        return v;
    for (;;) {
        char *key = NULL;
        ws(ps);
        if (v->kind == J_OBJ) {
            if (!(key = parse_string(ps)))
                goto fail;
            ws(ps);
            if (*ps->p++ != ':') {
                free(key);
                goto fail;
            }
        }
        struct value *item = parse_value(ps);
        if (!item || v->n == 32) {
            free(key);
            free_value(item);
            goto fail;
        }
        v->keys[v->n] = key;
        v->items[v->n++] = item;
        ws(ps);
        if (*ps->p == ',' && ps->p++)
            continue;
        if (*ps->p++ == close)
            return v;
        free(key);
        goto fail;
    }
fail:
    free_value(v);
    return NULL;
}

static struct value *parse_value(struct parser *ps)
{
    struct value *v = calloc(1, sizeof *v);
    if (!v || ps->depth > 32)
        return (free(v), NULL);
    ws(ps);
    char c = *ps->p;
    if (c == '{' || c == '[') {
        v->kind = c == '{' ? J_OBJ : J_ARR;
        ps->depth++;
        v = parse_container(ps, v, c == '{' ? '}' : ']');
        ps->depth--;
    } else if (c == '"') {
        v->kind = J_STR;
        if (!(v->str = parse_string(ps)))
            v = (free(v), NULL);
    } else if (c == '-' || isdigit((unsigned char)c)) {
        char *end;
        if (!isdigit((unsigned char)ps->p[c == '-']))
            return (free(v), NULL);
        v->kind = J_NUM;
        v->num = strtol(ps->p, &end, 10);
        ps->p = end;
    } else if (!strncmp(ps->p, "true", 4) || !strncmp(ps->p, "null", 4)) {
        v->kind = c == 't' ? J_BOOL : J_NULL;
        ps->p += 4;
    } else if (!strncmp(ps->p, "false", 5)) {
        v->kind = J_BOOL;
        ps->p += 5;
    } else {
        v = (free(v), NULL);
    }
    if (v)
        counts[v->kind]++;
    return v;
}

int main(int argc, char **argv)
{
    static char buf[65536];
    static const char *names[] = {"null", "bool", "number", "string", "array", "object"};
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (!f) {
        fprintf(stderr, "cannot open %s\n", argv[1]);
        return 2;
    }
    fclose(f);
    buf[n] = '\0';
    struct parser ps = {buf, 0};
    struct value *root = parse_value(&ps);
    if (root)
        ws(&ps);
    if (!root || *ps.p) {
        fprintf(stderr, "invalid JSON\n");
        free_value(root);
        return 1;
    }
    for (int k = 0; k < 6; k++)
        printf("%s: %d\n", names[k], counts[k]);
    free_value(root);
    return 0;
}
