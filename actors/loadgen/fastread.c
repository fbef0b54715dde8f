/* servesweep's native read pass (optional; actors/loadgen/fastread.py builds and loads it).
 *
 * One call does what the lean transport's Python drain does per loop callback, minus
 * the interpreter: epoll_wait(0) on the pool's epoll set, then one recvmsg per ready
 * socket with its kernel receive time (SCM_TIMESTAMPNS), and the hot-path scan of what
 * was read. Python gets one flat int64 record per read and the bytes in one buffer;
 * it still owns every decision (which reads take the fast path, all HTTP and SSE state).
 *
 * Contract of ss_scan (must equal http1._scan, and ss_scan_prefix http1._scan_prefix, or return -1 where that one would accept
 * something odd such as a "+" in a chunk size; -1 only sends the read to the general
 * parser): if data[0:n] is whole HTTP chunks, each exactly one one-line event
 * 'data: {...}\n\n' containing '"choices":[{', all of one kind: with
 * '"completion_tokens":<digits>' after it, the last event's completion_tokens; without
 * usage, with '"token_ids":[...]', -(2 + (ids << 1 | 1)); without either, with non-empty
 * '"text":"' or '"content":"', -(2 + (events << 1)) (http1.tally); an event without usage
 * that has a finish reason or a usage object, or a mix of kinds, gives -1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The two system calls of a pass, made directly: glibc's wrappers are thread cancellation
 * points, and switching cancellation on and off around each call was a tenth of the pass's
 * user time at one token per read (perf). Nothing here is ever cancelled. epoll_pwait with
 * no signal mask is epoll_wait (and the one of the two that arm64 has too). */
#define EPOLL_WAIT(fd, evs, n) ((int)syscall(SYS_epoll_pwait, (fd), (evs), (n), 0, NULL, 8))
#define RECVMSG(fd, msg) ((ssize_t)syscall(SYS_recvmsg, (fd), (msg), 0))

#define SS_FIELDS 7 /* per read: fd, offset, length (0: EOF, <0: -errno), stamp ns, scan,
                       * bytes the scan took (ss_scan_prefix), and 1 when the socket's
                       * kept reads (below) precede this one */

static const char CHOICE[] = "\"choices\":[{";
static const char KEY[] = "\"completion_tokens\":";
static const char IDS[] = "\"token_ids\":[";
static const char TEXT[] = "\"text\":\"";
static const char CONTENT[] = "\"content\":\"";
static const char FINISH[] = "\"finish_reason\":\"";
static const char USAGE[] = "\"usage\":{";

static long find(const char *s, long start, long end, const char *pat, long m) {
    if (end - start < m) return -1;
    const char *p = memmem(s + start, end - start, pat, m);
    return p ? p - s : -1;
}

/* Where the keys the scan decides by lie in data[c:end]: the last "completion_tokens"
 * (as rfind) and the first of each other key (as find), or -1. One pass over the quotes
 * (every key starts with one) instead of a search per key: at one token per read, five
 * searches of each event were a third of the C pass. */
typedef struct { long key, finish, usage, ids, text, content; } ss_keys;

#define AT(pat) (left >= (long)sizeof pat - 1 && memcmp(q, pat, sizeof pat - 1) == 0)

static void keys_of(const char *data, long c, long end, ss_keys *k) {
    k->key = k->finish = k->usage = k->ids = k->text = k->content = -1;
    const char *q = data + c, *stop = data + end;
    while (q < stop && (q = memchr(q, '"', stop - q)) != NULL) {
        long at = q - data, left = stop - q;
        if (left < 2) break;
        switch (q[1]) {
        case 'c':
            if (AT(KEY)) k->key = at;
            else if (k->content < 0 && AT(CONTENT)) k->content = at;
            break;
        case 'f': if (k->finish < 0 && AT(FINISH)) k->finish = at; break;
        case 'u': if (k->usage < 0 && AT(USAGE)) k->usage = at; break;
        case 't':
            if (k->ids < 0 && AT(IDS)) k->ids = at;
            else if (k->text < 0 && AT(TEXT)) k->text = at;
            break;
        }
        q++;
    }
}

/* ss_scan of the longest run of leading chunks it accepts (http1._scan_prefix): the code
 * of chunks data[0:*used]; it stops before the first chunk that is cut off, is not a token
 * event, is malformed or is of another kind than those before it ((-1, 0) at the first).
 * *events: the chunks taken (each is one event). */
static long long scan_prefix(const char *data, long n, long *used, long *events) {
    long pos = 0, taken = 0;
    long long last = -1, tallied = 0;
    int mode = 0; /* 1: per-chunk usage, 2: token ids, 3: text */
    while (pos < n) {
        long nl = -1, size = 0;
        for (long i = pos; i < n && i < pos + 10; i++)
            if (data[i] == '\r' && i + 1 < n && data[i + 1] == '\n') { nl = i; break; }
        if (nl <= pos) goto out;
        for (long i = pos; i < nl; i++) {
            char c = data[i];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0 || size > (1L << 40)) goto out;
            size = size * 16 + d;
        }
        long start = nl + 2, end = start + size;
        if (size < 10 || end + 2 > n || memcmp(data + start, "data: {", 7) != 0) goto out;
        const char *first_nl = memchr(data + start, '\n', size);
        if (first_nl != data + end - 2 || memcmp(data + end - 1, "\n\r\n", 3) != 0) goto out;
        long c = find(data, start, end, CHOICE, sizeof CHOICE - 1);
        if (c < 0) goto out;
        ss_keys k;
        keys_of(data, c, end, &k);
        long j = k.key;
        if (j >= 0) { /* per-chunk usage: the count is the last event's */
            if (mode > 1) goto out;
            j += sizeof KEY - 1;
            long long v = 0;
            long d = j;
            for (; d < end && data[d] >= '0' && data[d] <= '9'; d++) {
                if (v > (1LL << 50)) goto out;
                v = v * 10 + (data[d] - '0');
            }
            if (d == j) goto out;
            mode = 1;
            last = v;
        } else if (mode == 1 || k.finish >= 0 || k.usage >= 0) {
            goto out;
        } else if ((j = k.ids) >= 0) { /* token ids: one per id */
            long close = find(data, j, end, "]", 1);
            if (close < 0 || close == j + (long)(sizeof IDS - 1) || mode == 3) goto out;
            mode = 2;
            tallied += 1;
            for (long d = j; d < close; d++) tallied += data[d] == ',';
        } else { /* text: one per event */
            long t = k.text;
            if (t >= 0) t += sizeof TEXT - 1;
            else if ((t = k.content) >= 0) t += sizeof CONTENT - 1;
            if (t < 0 || t >= end || data[t] == '"' || mode == 2) goto out;
            mode = 3;
            tallied += 1;
        }
        pos = end + 2;
        taken++;
    }
out:
    *events = taken;
    if (mode == 1) { *used = pos; return last; }
    if (!tallied) { *used = 0; *events = 0; return -1; }
    *used = pos;
    return -(2 + (tallied << 1 | (mode == 2))); /* http1.tally(tokens, exact) */
}

long long ss_scan_prefix(const char *data, long n, long *used) {
    long events;
    return scan_prefix(data, n, used, &events);
}

long long ss_scan(const char *data, long n) {
    long used = 0;
    long long code = ss_scan_prefix(data, n, &used);
    return used == n ? code : -1;
}

/* Kept reads. Python arms a socket (ss_arm) once its response is between token events
 * and the first token is counted; from then on a read whose every byte is whole token
 * chunks of the armed kind (ss_scan_prefix took it all) is kept here instead of being
 * handed to Python: its bytes appended, its tokens and arrival time logged (one entry per
 * arrival time, as StreamCounter._arrived merges them), its "\n\n" counted. The first read
 * that is anything else (the stream's end, a cut chunk, another kind, EOF, an error)
 * disarms the socket and goes to Python flagged, and Python takes the kept reads first
 * (ss_kept, ss_take), so both see one stream in order. Python owns every decision; this
 * only spares it one call per token. */
typedef struct {
    int armed, mode;              /* mode: 1 per-chunk usage, 2 token ids, 3 text */
    long long last;               /* mode 1: the last completion_tokens */
    char *bytes;
    long nbytes, cap;
    long long *ts, *cnt;          /* arrival (CLOCK_REALTIME ns), tokens */
    long narr, arrcap;
    long long events, tokens;
    long long last_ns;            /* the last read's arrival: kept, or the one before ss_arm */
} ss_stream;

static ss_stream *streams;
static long nstreams;

static ss_stream *stream_of(int fd, int grow) {
    if (fd < 0) return NULL;
    if (fd >= nstreams) {
        if (!grow) return NULL;
        long n = nstreams ? nstreams : 64;
        while (n <= fd) n *= 2;
        ss_stream *p = realloc(streams, n * sizeof *p);
        if (!p) return NULL;
        memset(p + nstreams, 0, (n - nstreams) * sizeof *p);
        streams = p;
        nstreams = n;
    }
    return streams + fd;
}

static void clear(ss_stream *s) { s->nbytes = s->narr = 0; s->events = s->tokens = 0; }

/* Keep fd's whole token reads of `mode` from now on; `last`: the completion_tokens counted
 * so far (mode 1); `prev_ns`: the arrival of the stream's last read (CLOCK_REALTIME ns, 0:
 * none), from which the first kept read's gap is measured. 0, or -ENOMEM. Kept reads not
 * yet taken are dropped. */
int ss_arm(int fd, int mode, long long last, long long prev_ns) {
    ss_stream *s = stream_of(fd, 1);
    if (!s) return -ENOMEM;
    clear(s);
    s->armed = 1;
    s->mode = mode;
    s->last = last;
    s->last_ns = prev_ns;
    return 0;
}

/* Stop keeping fd's reads and free what it held (the socket is closing). */
void ss_forget(int fd) {
    ss_stream *s = stream_of(fd, 0);
    if (!s) return;
    free(s->bytes);
    free(s->ts);
    free(s->cnt);
    memset(s, 0, sizeof *s);
}

/* What fd keeps: out = {armed, bytes, arrivals, events, tokens, last, last_ns, where the
 * bytes are (valid until the next ss_take, ss_arm, ss_forget or ss_drain)}. */
void ss_kept(int fd, long long *out) {
    ss_stream *s = stream_of(fd, 0);
    memset(out, 0, 8 * sizeof *out);
    if (!s) return;
    out[0] = s->armed;
    out[1] = s->nbytes;
    out[2] = s->narr;
    out[3] = s->events;
    out[4] = s->tokens;
    out[5] = s->last;
    out[6] = s->last_ns;
    out[7] = (long long)(intptr_t)s->bytes;
}

/* Copy fd's kept arrivals (and bytes, unless `bytes` is NULL: the caller copied them from
 * where ss_kept said) out, sizes from ss_kept, and forget them (the socket stays armed or
 * not as it was); each arrival as Python computes it from a stamp, ns * 1e-9 - offset
 * (the pool's perf_counter clock). */
void ss_take(int fd, char *bytes, double *times, long long *cnt, double offset) {
    ss_stream *s = stream_of(fd, 0);
    if (!s) return;
    if (bytes) memcpy(bytes, s->bytes, s->nbytes);
    for (long i = 0; i < s->narr; i++) times[i] = (double)s->ts[i] * 1e-9 - offset;
    memcpy(cnt, s->cnt, s->narr * sizeof *cnt);
    clear(s);
}

static int grow(void **p, long *cap, long need, long size) {
    if (need <= *cap) return 0;
    long n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * size);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* Keep one read of s (its scan code `code`, all `got` bytes whole token chunks: `events`
 * events) that arrived at t, and move *gap (seconds: the running mean gap between a stream's tokens) as
 * http1.Connection._counted does per read; 0, or -1 when it is not of the armed kind or
 * memory ran out (then it goes to Python). */
static int keep(ss_stream *s, const char *data, long got, long events, long long code,
                long long t, double *gap) {
    long long k;
    if (code >= 0) {
        if (s->mode != 1) return -1;
        k = code - s->last;
    } else {
        long long c = -code - 2;
        if (s->mode != ((c & 1) ? 2 : 3)) return -1;
        k = c >> 1;
    }
    long arrcap = s->arrcap;
    if (grow((void **)&s->bytes, &s->cap, s->nbytes + got, 1) ||
        grow((void **)&s->ts, &arrcap, s->narr + 1, sizeof *s->ts) ||
        grow((void **)&s->cnt, &s->arrcap, s->narr + 1, sizeof *s->cnt))
        return -1;
    memcpy(s->bytes + s->nbytes, data, got);
    s->nbytes += got;
    s->events += events;
    if (code >= 0) s->last = code;
    if (k > 0) {
        if (s->narr && s->ts[s->narr - 1] == t) s->cnt[s->narr - 1] += k;
        else { s->ts[s->narr] = t; s->cnt[s->narr] = k; s->narr++; }
        s->tokens += k;
        if (s->last_ns > 0) *gap += 0.01 * ((double)(t - s->last_ns) * 1e-9 / k - *gap);
    }
    s->last_ns = t;
    return 0;
}

/* Read up to max_events ready sockets once each, handing at most max_handed of the reads to
 * Python (kept reads are cheap; a handed one can mean a stream's end and the next request:
 * the cap bounds the Python work one pass leaves for its loop turn). Each read takes at most
 * per_read bytes; handed ones lie one after the other in buf[0:bufsize]. out gets SS_FIELDS
 * int64 per read handed to Python: fd,
 * offset in buf, length (0: the peer closed, <0: -errno of a failed read), kernel receive
 * time in ns of CLOCK_REALTIME (0: none), ss_scan_prefix of the bytes (-1: not the hot
 * path), the bytes it took (from the read's start; 0 with -1), and 1 when the socket had
 * kept reads (it is disarmed: Python takes them before this read). A read an armed socket
 * keeps is not handed over; *kept counts those, and each moves *gap (see keep).
 * *more is 1 when sockets were left ready (more than max_events, max_handed handed over, buf
 * full, or one became ready during the pass): the drain goes on; 0 when none is ready.
 * Returns the number of reads handed over, or -errno if epoll_wait failed. A socket that
 * had nothing after all (EAGAIN, EINTR) is left out; one that did not fit is read next
 * time (the epoll set is level-triggered). */
long ss_drain(int epfd, int max_events, int max_handed, char *buf, long bufsize, long per_read,
              long long *out, long *kept, double *gap, int *more) {
    struct epoll_event evs[257];
    if (max_events > 256) max_events = 256;
    *kept = 0;
    *more = 0;
    int ready = EPOLL_WAIT(epfd, evs, max_events + 1);  /* one more: is any left? */
    if (ready < 0) return errno == EINTR ? 0 : -errno;
    if (ready > max_events) {
        *more = 1;
        ready = max_events;
    }
    long used = 0, k = 0;
    long long now = -1;
    long events = 0;
    union { char c[CMSG_SPACE(sizeof(struct timespec))]; struct cmsghdr align; } ctl;
    for (int e = 0; e < ready; e++) {
        int fd = evs[e].data.fd;
        long room = bufsize - used < per_read ? bufsize - used : per_read;
        if (room <= 0 || k >= max_handed) {
            *more = 1;
            break;
        }
        struct iovec iov = {buf + used, (size_t)room};
        struct msghdr msg = {0};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctl.c;
        msg.msg_controllen = sizeof ctl.c;
        ssize_t got = RECVMSG(fd, &msg);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        long long *r = out + k * SS_FIELDS;
        r[0] = fd;
        r[1] = used;
        r[2] = got < 0 ? -errno : got;
        r[3] = 0;
        r[4] = -1;
        r[5] = 0;
        r[6] = 0;
        if (got > 0) {
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
                    struct timespec ts;
                    memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                    r[3] = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
                }
            long took = 0;
            r[4] = scan_prefix(buf + used, got, &took, &events);
            r[5] = took;
        }
        ss_stream *s = stream_of(fd, 0);
        if (s && s->armed) {
            if (got > 0 && r[5] == got) {
                /* the read's arrival as pool._pass_native takes it (http1.arrival): its
                 * stamp when that is sane (within the second before now), else now */
                if (now < 0) {
                    struct timespec tn;
                    clock_gettime(CLOCK_REALTIME, &tn);
                    now = (long long)tn.tv_sec * 1000000000LL + tn.tv_nsec;
                }
                long long t = r[3] && r[3] <= now && r[3] > now - 1000000000LL ? r[3] : now;
                if (keep(s, buf + used, got, events, r[4], t, gap) == 0) { (*kept)++; continue; }
            }
            s->armed = 0;
            r[6] = 1;
        }
        if (got > 0) used += got;
        k++;
    }
    /* a socket that became ready while this pass read the others (a lock-step server's
     * step still arriving): the drain goes on at once, with no second coalescing wait */
    if (!*more && ready > 0 && EPOLL_WAIT(epfd, evs, 1) > 0) *more = 1;
    return k;
}
