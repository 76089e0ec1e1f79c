/*
 * A lean batched-send load: keeps INFLIGHT SEND_BATCH_MESSAGE requests outstanding on one
 * connection per broker and counts the answers, spending a few microseconds a batch.
 *
 * Why it exists: on a two-core machine the official Java BatchProducer needs 3-4 us of CPU a
 * message, so it takes most of the core a second broker process would use. To see whether
 * broker processes themselves scale across cores, the load must cost next to nothing; this
 * one sends frames the bench encoded ahead of time (bench/side_by_side.py, through the SDK's
 * own batch encoder) and only rewrites each frame's opaque.
 *
 * usage: batch_load SECONDS WARMUP INFLIGHT BATCH host:port frames.bin [host:port frames.bin...]
 * frames.bin: whole remoting frames back to back (JSON headers whose opaque is written as
 * 1000000000, ten digits, which this program overwrites in place).
 * Prints one JSON line: messages and requests per second in the window after WARMUP, average
 * and p99 round trip, failed answers (any code other than 0).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 16
#define RING 65536
#define BUCKETS 100000 /* 10 us each: up to 1 s */

typedef struct {
    int fd;
    char **frames;
    size_t *lens;
    size_t *opaque_at;
    int nframes, next;
    int inflight;
    char *in;
    size_t inlen, incap;
    char *out;
    size_t outlen, outoff, outcap;
    uint32_t opaque;
    uint64_t sent_ns[RING];
} Conn;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
    perror(what);
    exit(2);
}

static void load_frames(Conn *c, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die(path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *all = malloc((size_t)size);
    if (!all || fread(all, 1, (size_t)size, f) != (size_t)size)
        die("read frames");
    fclose(f);
    int cap = 64;
    c->frames = malloc(sizeof(char *) * cap);
    c->lens = malloc(sizeof(size_t) * cap);
    c->opaque_at = malloc(sizeof(size_t) * cap);
    for (long pos = 0; pos + 4 <= size;) {
        uint32_t body;
        memcpy(&body, all + pos, 4);
        size_t len = 4 + ntohl(body);
        if (c->nframes == cap) {
            cap *= 2;
            c->frames = realloc(c->frames, sizeof(char *) * cap);
            c->lens = realloc(c->lens, sizeof(size_t) * cap);
            c->opaque_at = realloc(c->opaque_at, sizeof(size_t) * cap);
        }
        char *frame = all + pos;
        char *mark = memmem(frame, len, "\"opaque\":1000000000", 19);
        if (!mark) {
            fprintf(stderr, "%s: a frame without the opaque placeholder\n", path);
            exit(2);
        }
        c->frames[c->nframes] = frame;
        c->lens[c->nframes] = len;
        c->opaque_at[c->nframes] = (size_t)(mark - frame) + 9;
        c->nframes++;
        pos += (long)len;
    }
    if (!c->nframes) {
        fprintf(stderr, "%s: no frames\n", path);
        exit(2);
    }
}

static int connect_to(const char *hostport)
{
    char host[256];
    const char *colon = strrchr(hostport, ':');
    if (!colon || (size_t)(colon - hostport) >= sizeof host)
        die("host:port");
    memcpy(host, hostport, (size_t)(colon - hostport));
    host[colon - hostport] = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        die("address");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
        die("connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Append the next frame, with a fresh opaque, to the connection's output. */
static void queue_request(Conn *c, uint64_t t)
{
    int i = c->next;
    c->next = (c->next + 1) % c->nframes;
    size_t len = c->lens[i];
    if (c->outlen + len > c->outcap) {
        c->outcap = (c->outlen + len) * 2;
        c->out = realloc(c->out, c->outcap);
    }
    char *dst = c->out + c->outlen;
    memcpy(dst, c->frames[i], len);
    uint32_t opaque = 1000000000u + (c->opaque++ % 1000000000u);
    char digits[11];
    snprintf(digits, sizeof digits, "%010u", opaque);
    memcpy(dst + c->opaque_at[i], digits, 10);
    c->outlen += len;
    c->sent_ns[opaque % RING] = t;
    c->inflight++;
}

static long json_int(const char *header, size_t len, const char *key)
{
    char *at = memmem(header, len, key, strlen(key));
    return at ? strtol(at + strlen(key), NULL, 10) : -1;
}

int main(int argc, char **argv)
{
    if (argc < 7 || (argc - 5) % 2) {
        fprintf(stderr, "usage: %s SECONDS WARMUP INFLIGHT BATCH host:port frames.bin [...]\n", argv[0]);
        return 2;
    }
    double seconds = atof(argv[1]), warmup = atof(argv[2]);
    int inflight = atoi(argv[3]), batch = atoi(argv[4]);
    int n = (argc - 5) / 2;
    if (n > MAX_CONNS)
        die("too many brokers");
    static Conn conns[MAX_CONNS];
    static uint32_t hist[BUCKETS];
    struct pollfd pfd[MAX_CONNS];
    for (int k = 0; k < n; k++) {
        Conn *c = &conns[k];
        load_frames(c, argv[6 + 2 * k]);
        c->fd = connect_to(argv[5 + 2 * k]);
        c->incap = 1 << 20;
        c->in = malloc(c->incap);
        c->outcap = 1 << 20;
        c->out = malloc(c->outcap);
    }
    uint64_t start = now_ns();
    uint64_t window_from = start + (uint64_t)(warmup * 1e9);
    uint64_t window_to = window_from + (uint64_t)(seconds * 1e9);
    uint64_t requests = 0, failed = 0, rt_sum = 0;
    for (;;) {
        uint64_t t = now_ns();
        if (t >= window_to)
            break;
        for (int k = 0; k < n; k++) {
            Conn *c = &conns[k];
            while (c->inflight < inflight)
                queue_request(c, t);
            if (c->outoff < c->outlen) {
                ssize_t w = send(c->fd, c->out + c->outoff, c->outlen - c->outoff, MSG_DONTWAIT);
                if (w < 0 && errno != EAGAIN)
                    die("send");
                if (w > 0)
                    c->outoff += (size_t)w;
                if (c->outoff == c->outlen)
                    c->outoff = c->outlen = 0;
            }
            pfd[k].fd = c->fd;
            pfd[k].events = POLLIN | (c->outoff < c->outlen ? POLLOUT : 0);
        }
        if (poll(pfd, (nfds_t)n, 100) < 0 && errno != EINTR)
            die("poll");
        t = now_ns();
        for (int k = 0; k < n; k++) {
            Conn *c = &conns[k];
            if (!(pfd[k].revents & (POLLIN | POLLERR | POLLHUP)))
                continue;
            ssize_t r = recv(c->fd, c->in + c->inlen, c->incap - c->inlen, MSG_DONTWAIT);
            if (r == 0) {
                fprintf(stderr, "broker %s closed the connection\n", argv[5 + 2 * k]);
                return 1;
            }
            if (r < 0) {
                if (errno == EAGAIN || errno == EINTR)
                    continue;
                die("recv");
            }
            c->inlen += (size_t)r;
            size_t pos = 0;
            while (c->inlen - pos >= 8) {
                uint32_t be, hbe;
                memcpy(&be, c->in + pos, 4);
                size_t len = 4 + ntohl(be);
                if (len > c->incap)
                    die("frame larger than the buffer");
                if (c->inlen - pos < len)
                    break;
                memcpy(&hbe, c->in + pos + 4, 4);
                size_t hlen = ntohl(hbe) & 0xFFFFFF;
                const char *header = c->in + pos + 8;
                long code = json_int(header, hlen, "\"code\":");
                long opaque = json_int(header, hlen, "\"opaque\":");
                c->inflight--;
                if (t >= window_from && t < window_to) {
                    requests++;
                    if (code != 0)
                        failed++;
                    if (opaque >= 0) {
                        uint64_t rt = t - c->sent_ns[(uint32_t)opaque % RING];
                        rt_sum += rt;
                        uint64_t b = rt / 10000;
                        hist[b < BUCKETS ? b : BUCKETS - 1]++;
                    }
                }
                pos += len;
            }
            memmove(c->in, c->in + pos, c->inlen - pos);
            c->inlen -= pos;
        }
    }
    uint64_t p99_at = requests - requests / 100, seen = 0;
    double p99 = 0;
    for (int b = 0; b < BUCKETS; b++) {
        seen += hist[b];
        if (seen >= p99_at && requests) {
            p99 = (b + 1) * 0.01;
            break;
        }
    }
    uint64_t ok = requests - failed;
    printf("{\"mps\": %.0f, \"requests_per_s\": %.0f, \"count\": %llu, \"failed\": %llu, "
           "\"avg_rt_ms\": %.3f, \"p99_ms\": %.2f, \"seconds\": %.3f}\n",
           ok * (double)batch / seconds, requests / seconds, (unsigned long long)(ok * batch),
           (unsigned long long)failed, requests ? rt_sum / 1e6 / requests : 0.0, p99, seconds);
    return 0;
}
