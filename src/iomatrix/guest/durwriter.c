/* iomx-durwriter: the durability tier's guest writer (built static, shipped in the initramfs).
 *
 * Writes sequence-numbered, checksummed 4 KiB records to several targets, in groups of GROUP records per
 * target, then flushes every target, then acknowledges the group on the result port:
 *
 *     for g = 0, 1, ...:   write records g*GROUP .. g*GROUP+GROUP-1 to each target
 *                          print "@@IOMX:DUR:W:<g>@@"      (written, not yet flushed)
 *                          fdatasync (raw) / fsync (file) each target
 *                          print "@@IOMX:DUR:ACK:<g>@@"    (every record of groups 0..g is durable, if the
 *                                                            stack below honours flushes)
 *
 * Targets: raw:DEVICE:OFFSET:STREAM  (O_DIRECT pwrite at OFFSET + seq*4096 on the block device)
 *          file:PATH:STREAM          (buffered pwrite at seq*4096 in PATH, created, then fsync)
 *
 * Record layout (little endian), checked by iomatrix.durability.records on the host:
 *   0 magic "IOMXDUR1" | 8 nonce u64 | 16 stream u32 | 20 zero u32 | 24 seq u64 | 32..4092 filler |
 *   4092 crc32 (zlib's) of bytes 0..4092
 *
 * Usage: iomx-durwriter NONCE GROUP MAX_RECORDS RESULT_TTY TARGET...
 * Stops after MAX_RECORDS per target ("@@IOMX:DUR:END:<records>@@") or at the first I/O error
 * ("@@IOMX:DUR:ERROR:<text>@@"); normally the host cuts it first.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REC 4096
#define MAXT 8

static uint32_t table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
}

static uint32_t crc32(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    while (n--) c = table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static void put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static void put64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i)); }

static void fill(unsigned char *r, uint64_t nonce, uint32_t stream, uint64_t seq) {
    memcpy(r, "IOMXDUR1", 8);
    put64(r + 8, nonce);
    put32(r + 16, stream);
    put32(r + 20, 0);
    put64(r + 24, seq);
    uint64_t s = nonce ^ ((uint64_t)stream << 48) ^ (seq * 0x9E3779B97F4A7C15ull);
    for (int i = 32; i < REC - 4; i += 4) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        put32(r + i, (uint32_t)(s >> 32));
    }
    put32(r + REC - 4, crc32(r, REC - 4));
}

struct target { int fd; int raw; uint64_t offset; uint32_t stream; };

static int out_fd = -1;

static void say(const char *fmt, unsigned long long v, const char *text) {
    char line[256];
    int n = text ? snprintf(line, sizeof line, fmt, text) : snprintf(line, sizeof line, fmt, v);
    if (n > 0 && write(out_fd, line, (size_t)n) < 0) { /* nothing to do: the host sees the gap */ }
}

static void die(const char *what) {
    char msg[200];
    snprintf(msg, sizeof msg, "%s: %s", what, strerror(errno));
    say("@@IOMX:DUR:ERROR:%s@@\n", 0, msg);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: iomx-durwriter NONCE GROUP MAX_RECORDS RESULT_TTY TARGET...\n");
        return 2;
    }
    crc_init();
    uint64_t nonce = strtoull(argv[1], NULL, 10);
    long group = strtol(argv[2], NULL, 10), maxrec = strtol(argv[3], NULL, 10);
    out_fd = open(argv[4], O_WRONLY | O_NOCTTY);
    if (out_fd < 0 || group < 1 || maxrec < group) return 2;
    struct target t[MAXT];
    int nt = 0;
    for (int i = 5; i < argc && nt < MAXT; i++, nt++) {
        char *spec = argv[i], *a = strchr(spec, ':'), *last = strrchr(spec, ':');
        if (!a || a == last) return 2;
        *a = 0;
        *last = 0;
        t[nt].stream = (uint32_t)strtoul(last + 1, NULL, 10);
        t[nt].raw = strcmp(spec, "raw") == 0;
        t[nt].offset = 0;
        if (t[nt].raw) {
            char *o = strrchr(a + 1, ':');
            if (!o) return 2;
            *o = 0;
            t[nt].offset = strtoull(o + 1, NULL, 10);
            t[nt].fd = open(a + 1, O_WRONLY | O_DIRECT);
        } else {
            t[nt].fd = open(a + 1, O_WRONLY | O_CREAT, 0644);
        }
        if (t[nt].fd < 0) die(a + 1);
    }
    unsigned char *buf;
    if (posix_memalign((void **)&buf, REC, REC)) return 3;
    for (long g = 0; (g + 1) * group <= maxrec; g++) {
        for (int k = 0; k < nt; k++)
            for (long j = 0; j < group; j++) {
                uint64_t seq = (uint64_t)(g * group + j);
                fill(buf, nonce, t[k].stream, seq);
                if (pwrite(t[k].fd, buf, REC, (off_t)(t[k].offset + seq * REC)) != REC) die("write");
            }
        say("@@IOMX:DUR:W:%llu@@\n", (unsigned long long)g, NULL);
        for (int k = 0; k < nt; k++)
            if ((t[k].raw ? fdatasync(t[k].fd) : fsync(t[k].fd)) != 0) die("flush");
        say("@@IOMX:DUR:ACK:%llu@@\n", (unsigned long long)g, NULL);
    }
    say("@@IOMX:DUR:END:%llu@@\n", (unsigned long long)maxrec, NULL);
    return 0;
}
