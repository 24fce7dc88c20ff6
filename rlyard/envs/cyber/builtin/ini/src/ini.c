/* ini: reads an INI configuration file and lists its sections and keys. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>

#define MAX_LINE 512

struct stats {
    char section[32];
    int sections;
    int keys;
    int comments;
};

static char *trim(char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Parses "[name]" and makes it the current section. */
static int parse_section_header(const char *line, struct stats *st)
{
    char name[32];
    char *q = name;
    const char *p = line + 1;

    while (*p && *p != ']')
        *q++ = *p++;
    if (*p != ']')
        return -1;
    *q = '\0';
    snprintf(st->section, sizeof st->section, "%s", name);
    st->sections++;
    printf("[%s]\n", st->section);
    return 0;
}

static int parse_key_value(char *line, struct stats *st)
{
    char *eq = strchr(line, '=');
    if (!eq || eq == line)
        return -1;
    *eq = '\0';
    char *key = trim(line);
    char *value = trim(eq + 1);
    if (!*key)
        return -1;
    if (value[0] == '"') {
        size_t n = strlen(value);
        if (n < 2 || value[n - 1] != '"')
            return -1;
        value[n - 1] = '\0';
        value++;
    }
    printf("  %s.%s = %s\n", st->section[0] ? st->section : "(global)", key, value);
    st->keys++;
    return 0;
}

int main(int argc, char **argv)
{
    char buf[MAX_LINE];
    struct stats st = {{0}, 0, 0, 0};
    int lineno = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", argv[1]);
        return 2;
    }
    while (fgets(buf, sizeof buf, f)) {
        lineno++;
        char *line = trim(buf);
        int rc = 0;
        if (!*line)
            continue;
        if (*line == ';' || *line == '#')
            st.comments++;
        else if (*line == '[')
            rc = parse_section_header(line, &st);
        else
            rc = parse_key_value(line, &st);
        if (rc < 0) {
            fprintf(stderr, "syntax error on line %d\n", lineno);
            fclose(f);
            return 1;
        }
    }
    fclose(f);
    printf("%d sections, %d keys, %d comments\n", st.sections, st.keys, st.comments);
    return 0;
}
