/* ihex: loads an Intel HEX file into a 32 KiB flash image and prints what it covers.
 * Records: ":LLAAAATT<data>CC"; types 00 (data) and 01 (end of file); CC makes the byte
 * sum of the record zero. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#define FLASH_SIZE 0x8000

static uint8_t flash[FLASH_SIZE];
static unsigned lowest = FLASH_SIZE, highest;

static int hexbyte(const char *s)
{
    int v = 0;
    for (int i = 0; i < 2; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else return -1;
    }
    return v;
}

/* Parses and applies one record; returns 1 at end of file, 0 to go on, -1 on error. */
static int load_record(const char *line)
{
    uint8_t rec[262];
    size_t n = strlen(line);
    if (line[0] != ':' || n < 11 || n % 2 == 0 || (n - 1) / 2 > sizeof rec)
        return -1;
    uint8_t sum = 0;
    for (size_t i = 0; i < (n - 1) / 2; i++) {
        int b = hexbyte(line + 1 + 2 * i);
        if (b < 0)
            return -1;
        rec[i] = (uint8_t)b;
        sum = (uint8_t)(sum + b);
    }
    unsigned count = rec[0], addr = (unsigned)rec[1] << 8 | rec[2], type = rec[3];
    if ((n - 1) / 2 != count + 5 || sum != 0)
        return -1;
    if (type == 1)
        return 1;
    if (type != 0 || addr >= FLASH_SIZE)
        return -1;
    uint8_t *dst = flash + addr;
    for (unsigned i = 0; i < count; i++)
        *dst++ = rec[4 + i];
    if (addr < lowest)
        lowest = addr;
    if (addr + count > highest)
        highest = addr + count;
    return 0;
}

int main(int argc, char **argv)
{
    char line[600];
    int records = 0, rc = 0;
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", argv[1]);
        return 2;
    }
    memset(flash, 0xFF, sizeof flash);
    while (rc == 0 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0])
            continue;
        rc = load_record(line);
        records++;
    }
    fclose(f);
    if (rc != 1) {
        fprintf(stderr, "bad or missing record near record %d\n", records);
        return 1;
    }
    uint32_t crc = 0;
    for (unsigned i = lowest; i < highest; i++)
        crc = (crc << 5 | crc >> 27) ^ flash[i];
    if (lowest > highest)
        lowest = highest = 0;
    printf("%d records, image 0x%04x-0x%04x, hash %08x\n", records, lowest, highest, crc);
    return 0;
}
