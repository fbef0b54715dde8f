/* The kernel's floor: what reading one token per recvmsg costs a process that does nothing
 * else (benchmarks/loadgen_floor.py --native builds and runs it).
 *
 * N keep-alive connections to the C SSE server, one epoll set, recvmsg with a kernel
 * receive timestamp per read (as the lean transport does), token events counted by their
 * chunk ("choices":[{ ... ); the next request sent on a response's last chunk. No
 * interpreter, no records, no error handling: CPU per token here is the system calls and
 * the TCP receive path (on loopback, also the receive side of every ACK it sends), what
 * any client on this machine pays at one token per read, whatever its language.
 *
 *   floor_client PORT STREAMS TOKENS REQUESTS_PER_STREAM   -> one JSON line on stdout
 */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct { int fd, head, done; } conn_t;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double secs(struct timeval t) { return t.tv_sec + t.tv_usec * 1e-6; }

/* Token events among whole chunks; *end set on the terminating 0-size chunk. */
static long count(const char *p, long n, int *end) {
    long pos = 0, tokens = 0;
    while (pos < n) {
        char *stop;
        long size = strtol(p + pos, &stop, 16);
        if (stop == p + pos) break;               /* not a chunk size: give up on this read */
        if (size == 0) { *end = 1; break; }
        const char *start = stop + 2;
        if (memmem(start, size, "\"choices\":[{", 12)) tokens++;
        pos = (start - p) + size + 2;
    }
    return tokens;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s PORT STREAMS TOKENS REQUESTS_PER_STREAM\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]), streams = atoi(argv[2]), tokens = atoi(argv[3]);
    int per_stream = atoi(argv[4]);
    char body[512], req[1024];
    int blen = snprintf(body, sizeof body,
        "{\"model\":\"m\",\"prompt\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
        "1,1,1,1],\"max_tokens\":%d,\"min_tokens\":%d,\"ignore_eos\":true,\"stream\":true}",
        tokens, tokens);
    int rlen = snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                        "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                        blen, body);
    int ep = epoll_create1(0), one = 1;
    conn_t *c = calloc(streams, sizeof *c);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    for (int i = 0; i < streams; i++) {
        c[i].fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c[i].fd, (struct sockaddr *)&a, sizeof a)) { perror("connect"); return 1; }
        setsockopt(c[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(c[i].fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (unsigned)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ev);
    }
    static char buf[65536], ctl[CMSG_SPACE(sizeof(struct timespec))];
    struct epoll_event evs[512];
    struct rusage r0, r1;
    long got = 0, reads = 0, stamps = 0;
    int active = streams;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = now();
    for (int i = 0; i < streams; i++) { c[i].head = 1; send(c[i].fd, req, rlen, 0); }
    while (active) {
        int n = epoll_wait(ep, evs, 512, -1);
        for (int k = 0; k < n; k++) {
            conn_t *s = &c[evs[k].data.u32];
            struct iovec iov = {buf, sizeof buf};
            struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                               .msg_controllen = sizeof ctl};
            long len = recvmsg(s->fd, &m, 0);
            if (len <= 0) { fprintf(stderr, "connection lost\n"); return 1; }
            reads++;
            if (m.msg_controllen > 0) stamps++;
            char *p = buf;
            if (s->head) {                          /* the response head comes first */
                char *e = memmem(buf, len, "\r\n\r\n", 4);
                if (!e) continue;
                p = e + 4;
                s->head = 0;
            }
            int end = 0;
            got += count(p, len - (p - buf), &end);
            if (end && ++s->done < per_stream) { s->head = 1; send(s->fd, req, rlen, 0); }
            else if (end) active--;
        }
    }
    double wall = now() - t0;
    getrusage(RUSAGE_SELF, &r1);
    double user = secs(r1.ru_utime) - secs(r0.ru_utime), sys = secs(r1.ru_stime) - secs(r0.ru_stime);
    printf("{\"tok_s\": %.0f, \"tokens\": %ld, \"reads\": %ld, \"stamped\": %ld, "
           "\"tokens_per_read\": %.3f, \"user_us_per_token\": %.2f, \"sys_us_per_token\": %.2f, "
           "\"us_per_token\": %.2f, \"cpu_frac\": %.3f, \"wakeups\": %ld}\n",
           got / wall, got, reads, stamps, (double)got / (reads ? reads : 1), 1e6 * user / got,
           1e6 * sys / got, 1e6 * (user + sys) / got, (user + sys) / wall,
           r1.ru_nvcsw - r0.ru_nvcsw);
    return 0;
}
