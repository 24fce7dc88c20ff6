/* pgm: reads a binary PGM (P5) image and prints its size and pixel statistics. */
#include <stdio.h>
#include <stdlib.h>
#include <ctype.h>

struct pgm {
    int width, height, maxval;
};

/* Skips whitespace and '#' comments, then reads a decimal number of at most 8 digits. */
static int read_number(FILE *f, int *out)
{
    int c = fgetc(f), v = 0, digits = 0;
    for (;;) {
        while (c != EOF && isspace(c))
            c = fgetc(f);
        if (c != '#')
            break;
        while (c != EOF && c != '\n')
            c = fgetc(f);
    }
    while (c != EOF && isdigit(c) && digits < 8) {
        v = v * 10 + (c - '0');
        digits++;
        c = fgetc(f);
    }
    if (digits == 0 || (c != EOF && !isspace(c)))
        return -1;
    *out = v;
    return 0;
}

static int read_header(FILE *f, struct pgm *img)
{
    if (fgetc(f) != 'P' || fgetc(f) != '5')
        return -1;
    if (read_number(f, &img->width) || read_number(f, &img->height) ||
        read_number(f, &img->maxval))
        return -1;
    if (img->width < 1 || img->height < 1 || img->maxval < 1 || img->maxval > 65535)
        return -1;
    return 0;
}

/* Number of raster bytes the header announces. */
static int pgm_raster_size(const struct pgm *img)
{
    int bytes_per_sample = img->maxval > 255 ? 2 : 1;
    int stride = img->width * bytes_per_sample;
    return stride * img->height;
}

int main(int argc, char **argv)
{
    struct pgm img;
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", argv[1]);
        return 2;
    }
    if (read_header(f, &img) < 0) {
        fprintf(stderr, "not a P5 image\n");
        fclose(f);
        return 1;
    }
    int size = pgm_raster_size(&img);
    unsigned char *raster = malloc((size_t)size);
    if (!raster || fread(raster, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "truncated raster (%d bytes expected)\n", size);
        free(raster);
        fclose(f);
        return 1;
    }
    fclose(f);
    long sum = 0;
    int lo = 65535, hi = 0, wide = img.maxval > 255;
    for (int i = 0; i < size; i += 1 + wide) {
        int v = wide ? raster[i] << 8 | raster[i + 1] : raster[i];
        sum += v;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    long pixels = (long)img.width * img.height;
    printf("%dx%d maxval %d: min %d max %d mean %ld\n", img.width, img.height, img.maxval,
           lo, hi, sum / pixels);
    free(raster);
    return 0;
}
