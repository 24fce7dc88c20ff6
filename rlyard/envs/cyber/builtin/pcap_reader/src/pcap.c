/* pcap.c - summarises a packet capture in the classic pcap file format.
 *
 * Global header (24 bytes, little endian): magic 0xa1b2c3d4, version 2.4, timezone,
 * accuracy, snapshot length, link type. Each packet: ts_sec, ts_usec, captured length,
 * original length (u32 each), then the captured bytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct pcap_stats {
    unsigned packets, truncated;
    uint64_t bytes;
    unsigned min_percent;
};

static uint32_t rd32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

static void account_packet(struct pcap_stats *st, uint32_t incl_len, uint32_t orig_len)
{
    unsigned percent = (unsigned)((uint64_t)incl_len * 100 / orig_len);
    if (percent < 100)
        st->truncated++;
    if (percent < st->min_percent)
        st->min_percent = percent;
    st->packets++;
    st->bytes += incl_len;
}

static int read_capture(const uint8_t *buf, size_t n, struct pcap_stats *st)
{
    if (n < 24 || rd32(buf) != 0xa1b2c3d4u)
        return -1;
    if ((buf[4] | buf[5] << 8) != 2 || (buf[6] | buf[7] << 8) != 4)
        return -1;
    uint32_t snaplen = rd32(buf + 16);
    uint32_t linktype = rd32(buf + 20);
    if (snaplen == 0 || snaplen > 262144 || linktype > 300)
        return -1;
    size_t pos = 24;
    while (pos < n) {
        if (n - pos < 16)
            return -1;
        uint32_t usec = rd32(buf + pos + 4);
        uint32_t incl_len = rd32(buf + pos + 8);
        uint32_t orig_len = rd32(buf + pos + 12);
        if (usec >= 1000000 || incl_len > snaplen || incl_len > n - pos - 16)
            return -1;
        account_packet(st, incl_len, orig_len);
        pos += 16 + incl_len;
    }
    return 0;
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
    uint8_t *buf = malloc(1 << 20);
    if (!buf)
        return 2;
    size_t n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    struct pcap_stats st = { 0, 0, 0, 100 };
    int rc = read_capture(buf, n, &st);
    free(buf);
    if (rc != 0) {
        fprintf(stderr, "malformed capture file\n");
        return 1;
    }
    printf("%u packet(s), %llu byte(s), %u truncated, smallest capture %u%%\n", st.packets,
           (unsigned long long)st.bytes, st.truncated, st.min_percent);
    return 0;
}
