/* A minimal OpenAI-style streaming server in C, for loopback client benchmarks only.
 *
 * Why: the Python test server (loadgen_sse_server.py) spends ~5 us of interpreter time
 * per token on top of the kernel's TCP path, ~15-17 us per token in all, so on its one
 * core it offered at most ~60k tok/s and the capacity benchmarks measured it, not the
 * clients. This server's own work is ~1 us per token; the rest (~8 us per one-token write
 * here) is the kernel's: on loopback a write() also runs the receiver's TCP input on
 * this core. One core then offers ~100k tok/s at one token per write.
 *
 * Speaks just enough HTTP/1.1: keep-alive, many connections, one epoll loop, no threads.
 *   POST /v1/completions, /v1/chat/completions -> text/event-stream, chunked, vLLM-shaped
 *     chunks, byte for byte those of loadgen_sse_server.py: per-chunk "usage" when the
 *     request asks continuous_usage_stats, a final usage chunk, then "data: [DONE]".
 *     "stream": false gets one JSON body instead.
 *   GET /v1/models, /health, /ping, /metrics (an empty Prometheus text); else 404.
 * The JSON body is only scanned for max_tokens (or max_completion_tokens), stream,
 * continuous_usage_stats and the prompt's length (ids in a "prompt" list, else words).
 *
 * Pacing: STEP_US > 0 writes one token to every active stream every STEP_US us (one
 * global timer, like an engine iteration; late ticks are dropped, not caught up in a
 * burst). STEP_US = 0 writes as fast as the sockets take: 16 tokens per write,
 * round-robin over the streams whose sockets have room.
 *
 *   gcc -O2 -o sse_server benchmarks/sse_server.c
 *   ./sse_server PORT STEP_US [PROMPT_TOKENS [FORMAT]]  (PORT 0 = any; binds 127.0.0.1)
 * FORMAT: "asked" (default: per-chunk usage when the request asks continuous_usage_stats,
 * token ids when it asks return_token_ids), "text" (text-only chunks and a final usage,
 * whatever is asked: what TensorRT-LLM sends), "ids" (each chunk lists its token id, no
 * per-chunk usage).
 * Prints the bound port as the first line of stdout; on SIGTERM/SIGINT prints one JSON
 * line {"tokens": N, "cpu_s": ..., "sys_s": ..., "wall_s": ...} and exits.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAXFD 65536
#define BURST 16 /* tokens per write when unpaced */

typedef struct { char *p; size_t len, cap; } buf_t;

typedef struct {
    int fd, want_out;      /* EPOLLOUT is armed: output is waiting for room */
    int streaming, queued; /* a response is streaming / the conn is in `active` */
    int dead;              /* closed while queued: step() frees it */
    int n, i, usage, prompt; /* tokens asked, sent; per-chunk usage; prompt length */
    int ids;               /* token ids in each chunk */
    buf_t in, out;
    char head[256];        /* 'data: {"id":...,"choices":[{...,"finish_reason":' */
} conn_t;

static conn_t *conns[MAXFD];  /* by fd */
static conn_t **active;       /* the streams being written, in arrival order */
static int nactive, capactive, ep, tfd, prompt_opt = -1;
static long step_us, rid;
enum { FMT_ASKED, FMT_TEXT, FMT_IDS };
static int fmt = FMT_ASKED; /* what the chunks carry (FORMAT) */
static unsigned long long tokens;

static void put(buf_t *b, const char *s, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 4096;
        if (!(b->p = realloc(b->p, b->cap))) { perror("realloc"); exit(1); }
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void close_conn(conn_t *c) {
    conns[c->fd] = NULL;
    close(c->fd); /* also leaves the epoll set */
    free(c->in.p);
    free(c->out.p);
    if (c->queued) c->dead = 1; else free(c);
}

static int flush(conn_t *c) { /* write what the socket takes; -1: the conn is gone */
    size_t off = 0;
    while (off < c->out.len) {
        ssize_t w = write(c->fd, c->out.p + off, c->out.len - off);
        if (w > 0) off += w;
        else if (w < 0 && errno == EAGAIN) break;
        else if (!(w < 0 && errno == EINTR)) { close_conn(c); return -1; }
    }
    memmove(c->out.p, c->out.p + off, c->out.len - off);
    c->out.len -= off;
    int out = c->out.len > 0; /* level-triggered: always EPOLLIN, EPOLLOUT while waiting */
    struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.fd = c->fd};
    if (c->want_out != out) epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = out;
    return 0;
}

static void put_chunk(buf_t *o, const char *ev, int len) { /* one HTTP chunk */
    char hex[16];
    put(o, hex, snprintf(hex, sizeof hex, "%x\r\n", len));
    put(o, ev, len);
    put(o, "\r\n", 2);
}

static void token(conn_t *c) { /* the next token's SSE event */
    char ev[512];
    int i = ++c->i, len = snprintf(ev, sizeof ev, "%s%s,\"stop_reason\":null}]", c->head,
                                   i == c->n ? "\"length\"" : "null");
    if (c->ids) /* the token's id inside the choice, as vLLM's return_token_ids does */
        len += snprintf(ev + len - 2, sizeof ev - len + 2, ",\"token_ids\":[%d]}]",
                        1000 + i % 30000) - 2;
    if (c->usage)
        len += snprintf(ev + len, sizeof ev - len, ",\"usage\":{\"prompt_tokens\":%d,"
                        "\"total_tokens\":%d,\"completion_tokens\":%d}", c->prompt,
                        c->prompt + i, i);
    len += snprintf(ev + len, sizeof ev - len, "}\n\n");
    put_chunk(&c->out, ev, len);
    tokens++;
}

static void tail(conn_t *c) { /* the usage-only event, [DONE], the last chunk */
    char ev[512];
    int head = strstr(c->head, "\"choices\":") + 10 - c->head;
    int len = snprintf(ev, sizeof ev, "%.*s[],\"usage\":{\"prompt_tokens\":%d,\"total_tokens\""
                       ":%d,\"completion_tokens\":%d}}\n\ndata: [DONE]\n\n", head, c->head,
                       c->prompt, c->prompt + c->n, c->n);
    put_chunk(&c->out, ev, len);
    put(&c->out, "0\r\n\r\n", 5);
    c->streaming = 0;
}

static void reply(conn_t *c, const char *status, const char *ctype, const char *body) {
    char h[256];
    put(&c->out, h, snprintf(h, sizeof h, "HTTP/1.1 %s\r\nContent-Type: %s\r\n"
                             "Content-Length: %zu\r\n\r\n", status, ctype, strlen(body)));
    put(&c->out, body, strlen(body));
}

static const char *key(const char *s, const char *k) { /* the value after "k": or NULL */
    /* a quote inside a JSON string is escaped, so "k" can only match a key */
    const char *p = strstr(s, k);
    if (!p) return NULL;
    for (p += strlen(k); *p == ' ' || *p == ':'; p++) {}
    return p;
}

static int words(const char *p) { /* whitespace-separated words of the JSON string at p */
    int n = 0, in = 0;
    for (p++; *p && *p != '"'; p++) {
        if (*p == '\\' && p[1]) p++;
        int space = *p == ' ' || *p == '\t' || *p == '\n';
        n += !space && !in;
        in = !space;
    }
    return n;
}

static int prompt_len(const char *body, int chat) { /* what the Python server counts */
    const char *p;
    int n = 0;
    if (prompt_opt >= 0) return prompt_opt;
    if (chat) { /* words of every message's content */
        for (p = body; (p = key(p, "\"content\"")); p++) n += *p == '"' ? words(p) : 0;
        return n;
    }
    if (!(p = key(body, "\"prompt\""))) return 0;
    if (*p == '"') return words(p);
    for (p++; *p == ' '; p++) {}
    for (n = *p != ']'; *p && *p != ']'; p++) n += *p == ','; /* token ids */
    return n;
}

static void whole(conn_t *c, int chat) { /* "stream": false: one JSON body, n x " tok" */
    char *js = malloc(4 * c->n + 512), *p = js;
    p += sprintf(p, "{\"id\":\"cmpl-%ld\",\"object\":\"%s\",\"created\":%ld,\"model\":\"m\","
                 "\"choices\":[{\"index\":0,%s\"", ++rid, chat ? "chat.completion" :
                 "text_completion", (long)time(NULL),
                 chat ? "\"message\":{\"role\":\"assistant\",\"content\":" : "\"text\":");
    for (int k = 0; k < c->n; k++, p += 4) memcpy(p, " tok", 4);
    sprintf(p, "\"%s,\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}],"
            "\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d,\"completion_tokens\":%d}}",
            chat ? "}" : "", c->prompt, c->prompt + c->n, c->n);
    tokens += c->n;
    reply(c, "200 OK", "application/json", js);
    free(js);
}

static void handle(conn_t *c, const char *method, const char *path, const char *body) {
    int chat = !strcmp(path, "/v1/chat/completions");
    if (!strcmp(path, "/health") || !strcmp(path, "/ping"))
        return reply(c, "200 OK", "text/plain", "ok");
    if (!strcmp(path, "/metrics"))
        return reply(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", "");
    if (!strcmp(path, "/v1/models"))
        return reply(c, "200 OK", "application/json",
                     "{\"object\":\"list\",\"data\":[{\"id\":\"m\",\"object\":\"model\"}]}");
    if (strcmp(method, "POST") || (!chat && strcmp(path, "/v1/completions")))
        return reply(c, "404 Not Found", "text/plain", "not found");
    const char *v = key(body, "\"max_tokens\"");
    if (!v) v = key(body, "\"max_completion_tokens\"");
    c->n = v && atoi(v) > 0 ? atoi(v) : 16;
    c->i = 0;
    c->prompt = prompt_len(body, chat);
    v = key(body, "\"continuous_usage_stats\"");
    c->usage = fmt == FMT_ASKED && v && !strncmp(v, "true", 4);
    v = key(body, "\"return_token_ids\"");
    c->ids = fmt == FMT_IDS || (fmt == FMT_ASKED && v && !strncmp(v, "true", 4));
    v = key(body, "\"stream\"");
    if (v && !strncmp(v, "false", 5)) return whole(c, chat);
    snprintf(c->head, sizeof c->head, "data: {\"id\":\"cmpl-%ld\",\"object\":\"%s\",\"created\""
             ":%ld,\"model\":\"m\",\"choices\":[{\"index\":0,%s,\"logprobs\":null,"
             "\"finish_reason\":", ++rid, chat ? "chat.completion.chunk" : "text_completion",
             (long)time(NULL), chat ? "\"delta\":{\"content\":\" tok\"}" : "\"text\":\" tok\"");
    static const char h[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                            "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";
    put(&c->out, h, sizeof h - 1); /* the headers go out now, the tokens at the steps */
    c->streaming = c->queued = 1;
    if (nactive == capactive) {
        capactive = capactive ? 2 * capactive : 1024;
        if (!(active = realloc(active, capactive * sizeof *active))) exit(1);
    }
    active[nactive++] = c;
    if (nactive == 1 && step_us > 0) { /* idle -> busy: a step now, then every step_us */
        struct itimerspec t = {{step_us / 1000000, step_us % 1000000 * 1000}, {0, 1}};
        timerfd_settime(tfd, 0, &t, NULL);
    }
}

static void requests(conn_t *c) { /* serve what is buffered; one stream at a time */
    while (!c->streaming && c->in.len) {
        char *end = memmem(c->in.p, c->in.len, "\r\n\r\n", 4), method[16], path[256];
        if (!end) break;
        size_t hlen = end + 4 - c->in.p, blen = 0;
        *end = 0; /* the headers as one string */
        for (char *l = strstr(c->in.p, "\r\n"); l; l = strstr(l + 2, "\r\n"))
            if (!strncasecmp(l + 2, "content-length:", 15)) blen = strtoul(l + 17, NULL, 10);
        if (c->in.len < hlen + blen) { *end = '\r'; break; } /* the body is not all here */
        if (sscanf(c->in.p, "%15s %255s", method, path) != 2) { close_conn(c); return; }
        char *body = strndup(c->in.p + hlen, blen);
        memmove(c->in.p, c->in.p + hlen + blen, c->in.len - hlen - blen);
        c->in.len -= hlen + blen;
        handle(c, method, path, body);
        free(body);
    }
    if (c->out.len) flush(c);
}

/* Paced: one token to every active stream (a decode step). Unpaced: BURST tokens to each
 * stream whose socket took the last write. Finished and closed streams leave the list.
 * Returns how many streams can take more now (unpaced: poll again without waiting). */
static int step(int unpaced) {
    int keep = 0, end = nactive, ready = 0;
    for (int k = 0; k < end; k++) {
        conn_t *c = active[k];
        if (c->dead) { free(c); continue; }
        if (!unpaced || !c->out.len) {
            for (int b = 0; b < (unpaced ? BURST : 1) && c->i < c->n; b++) token(c);
            if (c->i >= c->n) tail(c);
            /* a conn waiting for EPOLLOUT is flushed when its socket has room */
            if (!c->want_out && flush(c) < 0) { free(c); continue; }
        }
        if (c->streaming) { active[keep++] = c; ready += !c->out.len; continue; }
        c->queued = 0;
        requests(c); /* a pipelined request waited for the stream's end */
    }
    /* streams that requests() started meanwhile were appended after `end` */
    memmove(active + keep, active + end, (nactive - end) * sizeof *active);
    ready += nactive - end;
    nactive = keep + nactive - end;
    return ready;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s PORT STEP_US [PROMPT_TOKENS [asked|text|ids]]\n", argv[0]);
        return 2;
    }
    step_us = atol(argv[2]);
    if (argc > 3) prompt_opt = atoi(argv[3]);
    if (argc > 4) fmt = !strcmp(argv[4], "text") ? FMT_TEXT : !strcmp(argv[4], "ids") ? FMT_IDS
                      : FMT_ASKED;
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl)) { rl.rlim_cur = rl.rlim_max; setrlimit(RLIMIT_NOFILE, &rl); }
    signal(SIGPIPE, SIG_IGN);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1])),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    if (bind(lfd, (void *)&a, sizeof a) || listen(lfd, 4096) || getsockname(lfd, (void *)&a, &alen)) {
        perror("sse_server: bind/listen");
        return 1;
    }
    printf("%d\n", ntohs(a.sin_port));
    fflush(stdout);
    sigset_t sigs; /* SIGTERM/SIGINT arrive as events, so the stats line is always printed */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    int sfd = signalfd(-1, &sigs, SFD_NONBLOCK), fds[] = {lfd, sfd, 0};
    fds[2] = tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN}, evs[512];
    for (int k = 0; k < 3; k++) { ev.data.fd = fds[k]; epoll_ctl(ep, EPOLL_CTL_ADD, fds[k], &ev); }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int running = 1, ready = 0; running;) {
        int n = epoll_wait(ep, evs, 512, ready ? 0 : -1); /* unpaced, room: don't wait */
        for (int k = 0; k < n; k++) {
            int fd = evs[k].data.fd, cfd;
            conn_t *c = conns[fd];
            if (fd == sfd) running = 0;
            else if (fd == tfd) {
                unsigned long long ticks;
                if (read(tfd, &ticks, sizeof ticks) > 0) step(0); /* one step, whatever ticks */
                if (!nactive) timerfd_settime(tfd, 0, &(struct itimerspec){0}, NULL);
            } else if (fd == lfd) {
                while ((cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (cfd >= MAXFD) { close(cfd); continue; }
                    /* every token its own segment: Nagle would merge them */
                    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conns[cfd] = calloc(1, sizeof(conn_t));
                    conns[cfd]->fd = ev.data.fd = cfd;
                    epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ev);
                }
            } else if (c) {
                if (evs[k].events & EPOLLOUT && flush(c) < 0) continue;
                if (!(evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
                char b[65536];
                ssize_t r = read(fd, b, sizeof b);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) close_conn(c);
                else if (r > 0) { put(&c->in, b, r); requests(c); }
            }
        }
        ready = step_us == 0 && nactive ? step(1) : 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double sys = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    printf("{\"tokens\": %llu, \"cpu_s\": %.3f, \"sys_s\": %.3f, \"wall_s\": %.3f}\n", tokens,
           ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + sys, sys,
           t1.tv_sec - t0.tv_sec + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    return 0;
}
