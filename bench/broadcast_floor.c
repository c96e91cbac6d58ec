/*
 * broadcast_floor: the fastest a naive epoll program delivers one small
 * message to every held loopback TCP connection on this machine; the
 * floor megaconn's push bench is compared against (bench/push.sh).
 *
 * Usage: broadcast_floor N ROUNDS INTERVAL_MS PORT_BASE [PAYLOAD]
 *
 * The per-process fd limit is 20000 here, so it forks ceil(N/15000) server
 * processes (SO_REUSEPORT on PORT_BASE..PORT_BASE+9 of 127.0.0.1) and as
 * many client processes (sources 127.0.0.2-127.0.0.17, connecting with
 * IP_BIND_ADDRESS_NO_PORT). Once all N are established, each round the
 * servers write PAYLOAD bytes to every socket with one write() each, at an
 * announced CLOCK_REALTIME instant; clients count whole messages and their
 * receive times in shared memory. Prints one JSON line. Every wait is
 * bounded; children die with the parent (PR_SET_PDEATHSIG).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PER_PROC 15000
#define PORTS 10
#define SOURCES 16
#define MAX_ROUNDS 1000
#define HIST_MS 120000 /* 1 ms buckets up to 120 s */

struct shared {
    _Atomic long established;
    _Atomic long ready_servers;
    _Atomic int stop;
    _Atomic long publish_us[MAX_ROUNDS]; /* 0: not announced yet */
    _Atomic long deliveries[MAX_ROUNDS];
    _Atomic long last_rx_us[MAX_ROUNDS];
    _Atomic long hist[HIST_MS + 1];
};

static struct shared *sh;
static long n_total, rounds, interval_ms, payload = 64;
static int port_base;

static long now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}

static void die(const char *what) {
    fprintf(stderr, "broadcast_floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void child_setup(void) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0) {
        r.rlim_cur = r.rlim_max;
        setrlimit(RLIMIT_NOFILE, &r);
    }
}

static void atomic_max(_Atomic long *a, long v) {
    long cur = atomic_load(a);
    while (v > cur && !atomic_compare_exchange_weak(a, &cur, v)) {
    }
}

static void server(void) {
    child_setup();
    int ep = epoll_create1(0);
    if (ep < 0) die("epoll_create1");
    for (int p = 0; p < PORTS; p++) {
        int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
        if (l < 0) die("socket");
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        setsockopt(l, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port_base + p), .sin_addr.s_addr = htonl(0x7f000001)};
        if (bind(l, (struct sockaddr *)&a, sizeof a) < 0) die("bind");
        if (listen(l, 65535) < 0) die("listen");
        struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)l | (1ULL << 32)};
        epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev);
    }
    atomic_fetch_add(&sh->ready_servers, 1);
    int *fds = malloc(sizeof(int) * (PER_PROC + 5000));
    long nfds = 0, sent = 0;
    char *msg = calloc(1, payload);
    struct epoll_event evs[256];
    while (!atomic_load(&sh->stop)) {
        long r = sent;
        if (r < rounds) {
            long at = atomic_load(&sh->publish_us[r]);
            if (at && now_us() >= at) {
                memcpy(msg, &at, payload >= 8 ? 8 : payload);
                for (long i = 0; i < nfds; i++)
                    if (write(fds[i], msg, payload) < 0 && errno != EAGAIN) { /* a lost peer: counted as missing */ }
                sent++;
                continue;
            }
        }
        int n = epoll_wait(ep, evs, 256, 1);
        for (int i = 0; i < n; i++) {
            int l = (int)(evs[i].data.u64 & 0xffffffff);
            for (;;) {
                int c = accept4(l, NULL, NULL, SOCK_NONBLOCK);
                if (c < 0) break;
                if (nfds < PER_PROC + 5000) fds[nfds++] = c; else close(c);
            }
        }
    }
    exit(0);
}

static void client(long first, long count) {
    child_setup();
    int ep = epoll_create1(0);
    if (ep < 0) die("epoll_create1");
    long *got = calloc(count, sizeof(long)); /* bytes received per connection */
    long opened = 0, inflight = 0, up = 0;
    struct epoll_event evs[512];
    long deadline = now_us() + 120000000L;
    while (!atomic_load(&sh->stop)) {
        while (opened < count && inflight < 2000) {
            long g = first + opened;
            int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
            if (s < 0) die("socket (client)");
            setsockopt(s, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
            struct sockaddr_in src = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000002 + (uint32_t)((g / PORTS) % SOURCES))};
            if (bind(s, (struct sockaddr *)&src, sizeof src) < 0) die("bind (client)");
            struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(port_base + (int)(g % PORTS)), .sin_addr.s_addr = htonl(0x7f000001)};
            if (connect(s, (struct sockaddr *)&dst, sizeof dst) < 0 && errno != EINPROGRESS) die("connect");
            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.u64 = ((uint64_t)opened << 32) | (uint32_t)s};
            epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
            opened++;
            inflight++;
        }
        if (up < count && now_us() > deadline) {
            fprintf(stderr, "broadcast_floor: client: only %ld of %ld connected within 120 s\n", up, count);
            exit(1);
        }
        int n = epoll_wait(ep, evs, 512, 1);
        for (int i = 0; i < n; i++) {
            int s = (int)(evs[i].data.u64 & 0xffffffff);
            long k = (long)(evs[i].data.u64 >> 32);
            if (evs[i].events & EPOLLOUT) {
                int err = 0;
                socklen_t len = sizeof err;
                getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err) { fprintf(stderr, "broadcast_floor: connect: %s\n", strerror(err)); exit(1); }
                struct epoll_event ev = {.events = EPOLLIN, .data.u64 = evs[i].data.u64};
                epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev);
                inflight--;
                up++;
                atomic_fetch_add(&sh->established, 1);
            }
            if (evs[i].events & EPOLLIN) {
                char buf[65536];
                ssize_t m;
                while ((m = read(s, buf, sizeof buf)) > 0) {
                    long t = now_us();
                    long before = got[k] / payload;
                    got[k] += m;
                    for (long r = before; r < got[k] / payload && r < rounds; r++) {
                        long at = atomic_load(&sh->publish_us[r]);
                        atomic_fetch_add(&sh->deliveries[r], 1);
                        atomic_max(&sh->last_rx_us[r], t);
                        long ms = (t - at) / 1000;
                        atomic_fetch_add(&sh->hist[ms < 0 ? 0 : ms > HIST_MS ? HIST_MS : ms], 1);
                    }
                }
            }
        }
    }
    exit(0);
}

static int cmp_long(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static double pct(double q, long total) {
    long want = (long)(q * total), seen = 0;
    for (long ms = 0; ms <= HIST_MS; ms++) {
        seen += atomic_load(&sh->hist[ms]);
        if (seen > want || (seen == total && seen > 0)) return (double)ms;
    }
    return (double)HIST_MS;
}

int main(int argc, char **argv) {
    if (argc < 5 || (n_total = atol(argv[1])) <= 0 || (rounds = atol(argv[2])) <= 0 || rounds > MAX_ROUNDS || (interval_ms = atol(argv[3])) <= 0 ||
        (port_base = atoi(argv[4])) <= 0 || port_base > 65535 - PORTS || (argc > 5 && ((payload = atol(argv[5])) < 8 || payload > 65536))) {
        fprintf(stderr, "usage: broadcast_floor N ROUNDS(1-%d) INTERVAL_MS PORT_BASE [PAYLOAD(8-65536)], e.g. broadcast_floor 200000 10 1000 23000 64\n", MAX_ROUNDS);
        return 2;
    }
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) die("mmap");
    long procs = (n_total + PER_PROC - 1) / PER_PROC;
    pid_t kids[2 * 1024];
    int nk = 0;
    for (long i = 0; i < procs; i++) {
        pid_t p = fork();
        if (p == 0) server();
        kids[nk++] = p;
    }
    while (atomic_load(&sh->ready_servers) < procs) usleep(1000);
    for (long i = 0; i < procs; i++) {
        long first = n_total * i / procs, last = n_total * (i + 1) / procs;
        pid_t p = fork();
        if (p == 0) client(first, last - first);
        kids[nk++] = p;
    }
    long t0 = now_us(), fail = 0;
    while (atomic_load(&sh->established) < n_total) {
        if (now_us() - t0 > 120000000L) { fprintf(stderr, "broadcast_floor: %ld of %ld established in 120 s\n", atomic_load(&sh->established), n_total); fail = 1; break; }
        usleep(10000);
    }
    double connect_s = (now_us() - t0) / 1e6;
    fprintf(stderr, "broadcast_floor: %ld connections in %.1f s over %ld+%ld processes\n", atomic_load(&sh->established), connect_s, procs, procs);
    sleep(1); /* let the servers accept the last ones */
    for (long r = 0; r < rounds && !fail; r++) {
        long at = now_us() + 20000;
        atomic_store(&sh->publish_us[r], at);
        long end = at + 60000000L;
        while (atomic_load(&sh->deliveries[r]) < n_total && now_us() < end) usleep(1000);
        if (atomic_load(&sh->deliveries[r]) < n_total) { fprintf(stderr, "broadcast_floor: round %ld incomplete after 60 s\n", r); fail = 1; }
        fprintf(stderr, "broadcast_floor: round %ld: %.1f ms to all\n", r, (atomic_load(&sh->last_rx_us[r]) - at) / 1000.0);
        long next = at + interval_ms * 1000L;
        while (now_us() < next) usleep(1000);
    }
    atomic_store(&sh->stop, 1);
    for (int i = 0; i < nk; i++) waitpid(kids[i], NULL, 0);
    long tta[MAX_ROUNDS], total = 0;
    printf("{\"connections\":%ld,\"established\":%ld,\"connect_s\":%.3f,\"connects_per_s\":%.0f,\"rounds\":%ld,\"payload\":%ld,\"per_round\":[", n_total,
           atomic_load(&sh->established), connect_s, atomic_load(&sh->established) / connect_s, rounds, payload);
    for (long r = 0; r < rounds; r++) {
        tta[r] = atomic_load(&sh->last_rx_us[r]) - atomic_load(&sh->publish_us[r]);
        total += atomic_load(&sh->deliveries[r]);
        printf("%s{\"deliveries\":%ld,\"time_to_all_ms\":%.3f}", r ? "," : "", atomic_load(&sh->deliveries[r]), tta[r] / 1000.0);
    }
    qsort(tta, rounds, sizeof(long), cmp_long);
    double median = tta[rounds / 2] / 1000.0;
    printf("],\"time_to_all_ms\":{\"min\":%.3f,\"median\":%.3f,\"max\":%.3f},", tta[0] / 1000.0, median, tta[rounds - 1] / 1000.0);
    printf("\"delivery_ms\":{\"p50\":%.0f,\"p99\":%.0f,\"max\":%.0f},\"deliveries\":%ld,\"deliveries_per_s\":%.0f}\n", pct(0.5, total), pct(0.99, total),
           pct(1.0, total), total, median > 0 ? n_total / (median / 1000.0) : 0.0);
    return fail;
}
