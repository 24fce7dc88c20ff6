/* base64.c - decodes a base64 text file (standard or URL-safe alphabet) and prints a digest.
 *
 * The first line may be "alphabet: url" to select the URL-safe alphabet; whitespace is
 * skipped; '=' padding ends the data.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static signed char rev_std[128];
static signed char rev_url[128];

static void build_table(signed char *rev, const char *alphabet)
{
    memset(rev, -1, 128);
    for (int i = 0; i < 64; i++)
        rev[(unsigned char)alphabet[i]] = (signed char)i;
}

static long b64_decode(const unsigned char *in, size_t n, const signed char *rev, uint8_t *out)
{
    uint32_t acc = 0;
    int bits = 0;
    long len = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = in[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
            continue;
        if (c == '=')
            break;
        int v = rev[c];
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[len++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return len;
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
    unsigned char *text = malloc(1 << 16);
    uint8_t *out = malloc(1 << 16);
    if (!text || !out)
        return 2;
    size_t n = fread(text, 1, 1 << 16, f);
    fclose(f);

    build_table(rev_std, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");
    build_table(rev_url, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_");
    const signed char *rev = rev_std;
    const char *tag = "alphabet: url\n";
    size_t skip = 0;
    if (n >= strlen(tag) && memcmp(text, tag, strlen(tag)) == 0) {
        rev = rev_url;
        skip = strlen(tag);
    }
    long len = b64_decode(text + skip, n - skip, rev, out);
    if (len < 0) {
        fprintf(stderr, "invalid base64 character\n");
        free(text);
        free(out);
        return 1;
    }
    uint32_t h = 2166136261u;
    for (long i = 0; i < len; i++)
        h = (h ^ out[i]) * 16777619u;
    printf("decoded %ld byte(s), fnv1a %08x\n", len, (unsigned)h);
    free(text);
    free(out);
    return 0;
}
