/* url: parses a URL (scheme://[user@]host[:port]/path[?query]), percent-decodes it
 * and prints the components with the path normalised ("." and ".." removed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>

#define MAX_SEGMENTS 16

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Decodes src[0..n) into dst (capacity cap, NUL-terminated); returns length or -1. */
static long percent_decode(char *dst, size_t cap, const char *src, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)src[i];
        if (c == '%') {
            if (i + 2 >= n)
                return -1;
            int hi = hexval(src[i + 1]), lo = hexval(src[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = hi * 16 + lo;
            i += 2;
        }
        if (c == 0 || o + 1 >= cap)
            return -1;
        dst[o++] = (char)c;
    }
    dst[o] = '\0';
    return (long)o;
}

/* Removes "." and ".." segments in place. */
static void normalize_path(char *path)
{
    char *seg[MAX_SEGMENTS];
    char **top = seg;
    char *save = NULL;
    char out[1024];
    size_t o = 0;

    for (char *s = strtok_r(path, "/", &save); s; s = strtok_r(NULL, "/", &save)) {
        if (strcmp(s, ".") == 0)
            continue;
        if (strcmp(s, "..") == 0) {
            if (top > seg)
                top--;
            continue;
        }
        if (top - seg > MAX_SEGMENTS)
            return;
        *top++ = s;
    }
    for (char **p = seg; p < top; p++)
        o += (size_t)snprintf(out + o, sizeof out - o, "/%s", *p);
    if (o == 0)
        strcpy(out, "/");
    strcpy(path, out);
}

int main(int argc, char **argv)
{
    char line[1024], host[256], path[1024], user[128] = "";
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f || !fgets(line, sizeof line, f)) {
        fprintf(stderr, "cannot read a URL from %s\n", argv[1]);
        if (f) fclose(f);
        return 2;
    }
    fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    char *sep = strstr(line, "://");
    if (!sep || sep == line) {
        fprintf(stderr, "missing scheme\n");
        return 1;
    }
    *sep = '\0';
    char *auth = sep + 3;
    char *query = strchr(auth, '?');
    if (query)
        *query++ = '\0';
    char *slash = strchr(auth, '/');
    const char *rawpath = slash ? slash : "/";
    size_t alen = slash ? (size_t)(slash - auth) : strlen(auth);
    char *at = memchr(auth, '@', alen);
    if (at) {
        if (percent_decode(user, sizeof user, auth, (size_t)(at - auth)) < 0)
            goto bad;
        alen -= (size_t)(at + 1 - auth);
        auth = at + 1;
    }
    long port = -1;
    char *colon = memchr(auth, ':', alen);
    if (colon) {
        char *end;
        port = strtol(colon + 1, &end, 10);
        if (end != auth + alen || end == colon + 1 || port < 1 || port > 65535)
            goto bad;
        alen = (size_t)(colon - auth);
    }
    if (alen == 0 || percent_decode(host, sizeof host, auth, alen) < 0)
        goto bad;
    if (percent_decode(path, sizeof path, rawpath, strlen(rawpath)) < 0)
        goto bad;
    normalize_path(path);
    printf("scheme=%s user=%s host=%s port=%ld path=%s query=%s\n",
           line, user, host, port, path, query ? query : "");
    return 0;
bad:
    fprintf(stderr, "malformed URL\n");
    return 1;
}
