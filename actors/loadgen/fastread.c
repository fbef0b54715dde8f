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
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>

#define SS_FIELDS 6 /* per read: fd, offset, length (0: EOF, <0: -errno), stamp ns, scan,
                       * bytes the scan took (ss_scan_prefix) */

static const char CHOICE[] = "\"choices\":[{";
static const char KEY[] = "\"completion_tokens\":";
static const char IDS[] = "\"token_ids\":[";
static const char TEXT[] = "\"text\":\"";
static const char CONTENT[] = "\"content\":\"";
static const char FINISH[] = "\"finish_reason\":\"";
static const char USAGE[] = "\"usage\":{";

static long rfind(const char *s, long start, long end, const char *pat, long m) {
    for (long i = end - m; i >= start; i--)
        if (s[i] == pat[0] && memcmp(s + i, pat, m) == 0) return i;
    return -1;
}

static long find(const char *s, long start, long end, const char *pat, long m) {
    if (end - start < m) return -1;
    const char *p = memmem(s + start, end - start, pat, m);
    return p ? p - s : -1;
}

#define FIND(pat) find(data, c, end, pat, sizeof pat - 1)

/* ss_scan of the longest run of leading chunks it accepts (http1._scan_prefix): the code
 * of chunks data[0:*used]; it stops before the first chunk that is cut off, is not a token
 * event, is malformed or is of another kind than those before it ((-1, 0) at the first). */
long long ss_scan_prefix(const char *data, long n, long *used) {
    long pos = 0;
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
        long j = rfind(data, c, end, KEY, sizeof KEY - 1);
        if (j >= 0) { /* per-chunk usage: the count is the last event's */
            if (mode > 1) goto out;
            j += sizeof KEY - 1;
            long long v = 0;
            long k = j;
            for (; k < end && data[k] >= '0' && data[k] <= '9'; k++) {
                if (v > (1LL << 50)) goto out;
                v = v * 10 + (data[k] - '0');
            }
            if (k == j) goto out;
            mode = 1;
            last = v;
        } else if (mode == 1 || FIND(FINISH) >= 0 || FIND(USAGE) >= 0) {
            goto out;
        } else if ((j = FIND(IDS)) >= 0) { /* token ids: one per id */
            long close = find(data, j, end, "]", 1);
            if (close < 0 || close == j + (long)(sizeof IDS - 1) || mode == 3) goto out;
            mode = 2;
            tallied += 1;
            for (long k = j; k < close; k++) tallied += data[k] == ',';
        } else { /* text: one per event */
            long t = FIND(TEXT);
            if (t >= 0) t += sizeof TEXT - 1;
            else if ((t = FIND(CONTENT)) >= 0) t += sizeof CONTENT - 1;
            if (t < 0 || t >= end || data[t] == '"' || mode == 2) goto out;
            mode = 3;
            tallied += 1;
        }
        pos = end + 2;
    }
out:
    if (mode == 1) { *used = pos; return last; }
    if (!tallied) { *used = 0; return -1; }
    *used = pos;
    return -(2 + (tallied << 1 | (mode == 2))); /* http1.tally(tokens, exact) */
}

long long ss_scan(const char *data, long n) {
    long used = 0;
    long long code = ss_scan_prefix(data, n, &used);
    return used == n ? code : -1;
}

/* Read up to max_events ready sockets once each (at most per_read bytes each, one after
 * the other into buf[0:bufsize]); out gets SS_FIELDS int64 per read: fd, offset in buf,
 * length (0: the peer closed, <0: -errno of a failed read), kernel receive time in ns
 * of CLOCK_REALTIME (0: none), ss_scan_prefix of the bytes (-1: not the hot path) and
 * the bytes it took (from the read's start; 0 with -1).
 * Returns the number of reads, or -errno if epoll_wait failed. A socket that had nothing
 * after all (EAGAIN, EINTR) is left out; one that did not fit is read next time
 * (the epoll set is level-triggered). */
long ss_drain(int epfd, int max_events, char *buf, long bufsize, long per_read,
              long long *out) {
    struct epoll_event evs[256];
    if (max_events > 256) max_events = 256;
    int ready = epoll_wait(epfd, evs, max_events, 0);
    if (ready < 0) return errno == EINTR ? 0 : -errno;
    long used = 0, k = 0;
    union { char c[CMSG_SPACE(sizeof(struct timespec))]; struct cmsghdr align; } ctl;
    for (int e = 0; e < ready; e++) {
        int fd = evs[e].data.fd;
        long room = bufsize - used < per_read ? bufsize - used : per_read;
        if (room <= 0) break;
        struct iovec iov = {buf + used, (size_t)room};
        struct msghdr msg = {0};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = ctl.c;
        msg.msg_controllen = sizeof ctl.c;
        ssize_t got = recvmsg(fd, &msg, 0);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        long long *r = out + k * SS_FIELDS;
        r[0] = fd;
        r[1] = used;
        r[2] = got < 0 ? -errno : got;
        r[3] = 0;
        r[4] = -1;
        r[5] = 0;
        if (got > 0) {
            for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
                    struct timespec ts;
                    memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                    r[3] = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
                }
            long took = 0;
            r[4] = ss_scan_prefix(buf + used, got, &took);
            r[5] = took;
            used += got;
        }
        k++;
    }
    return k;
}
