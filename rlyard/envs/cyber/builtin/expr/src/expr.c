/* expr: evaluates one integer arithmetic expression per line (+ - * / and parentheses). */
#include <stdio.h>
#include <stdlib.h>
#include <ctype.h>
#include <limits.h>

struct parser {
    const char *p;
    int depth;
    int error;
};

static long parse_expr(struct parser *ps);

static void skip_ws(struct parser *ps)
{
    while (*ps->p == ' ' || *ps->p == '\t')
        ps->p++;
}

static long parse_atom(struct parser *ps)
{
    long v = 0;
    skip_ws(ps);
    if (*ps->p == '(') {
        if (++ps->depth > 64) {
            ps->error = 1;
            return 0;
        }
        ps->p++;
        v = parse_expr(ps);
        skip_ws(ps);
        if (*ps->p != ')')
            ps->error = 1;
        else
            ps->p++;
        ps->depth--;
        return v;
    }
    if (!isdigit((unsigned char)*ps->p)) {
        ps->error = 1;
        return 0;
    }
    while (isdigit((unsigned char)*ps->p)) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *ps->p - '0', &v))
            ps->error = 1;
        ps->p++;
    }
    return v;
}

static long eval_term(struct parser *ps)
{
    long v = parse_atom(ps);
    for (;;) {
        skip_ws(ps);
        char op = *ps->p;
        if (ps->error || (op != '*' && op != '/'))
            return v;
        ps->p++;
        long rhs = parse_atom(ps);
        if (ps->error)
            return 0;
        if (op == '*') {
            if (__builtin_mul_overflow(v, rhs, &v))
                ps->error = 1;
        } else {
            if (v == LONG_MIN && rhs == -1)
                ps->error = 1;
            else
                v = v / rhs;
        }
    }
}

static long parse_expr(struct parser *ps)
{
    long v = eval_term(ps);
    for (;;) {
        skip_ws(ps);
        char op = *ps->p;
        if (ps->error || (op != '+' && op != '-'))
            return v;
        ps->p++;
        long rhs = eval_term(ps);
        if (op == '+' ? __builtin_add_overflow(v, rhs, &v) : __builtin_sub_overflow(v, rhs, &v))
            ps->error = 1;
    }
}

int main(int argc, char **argv)
{
    char line[1024];
    int n = 0;
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", argv[1]);
        return 2;
    }
    while (fgets(line, sizeof line, f)) {
        struct parser ps = {line, 0, 0};
        skip_ws(&ps);
        if (*ps.p == '\n' || *ps.p == '\0' || *ps.p == '#')
            continue;
        long v = parse_expr(&ps);
        skip_ws(&ps);
        if (ps.error || (*ps.p != '\n' && *ps.p != '\0')) {
            fprintf(stderr, "bad expression on line %d\n", n + 1);
            fclose(f);
            return 1;
        }
        printf("%d: %ld\n", ++n, v);
    }
    fclose(f);
    printf("%d expressions\n", n);
    return 0;
}
