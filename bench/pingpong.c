/* bench/pingpong.c: the time one cache line takes to go from core A to core B and back.
 * Two threads pinned to the two cores take turns writing one 64-byte-aligned word: A writes
 * an odd value and waits for B's even reply, B waits for A's value and answers. Prints the
 * median over ROUNDS rounds of ITERS round trips, in ns per round trip (wall clock).
 *
 *   cc -O2 -pthread -o /tmp/pingpong bench/pingpong.c && /tmp/pingpong 0 1
 *   /tmp/pingpong A B [ITERS] [ROUNDS]     (defaults: 200000 round trips, 7 rounds)
 *
 * With STREAM=SLOTS in the environment it measures instead the most a descriptor ring can carry
 * from core A to core B with no packet work at all: the cluster queue's protocol (32-byte
 * descriptors, two to a line, a ring of SLOTS; A writes a batch of 64 and stores head once, reads
 * tail only when short of room; B reads head only when it ran out, reads each descriptor, and
 * stores tail every 256 or when it found nothing). Prints million descriptors per second
 * (median of ROUNDS rounds of ITERS batches, default 100000).
 *
 *   STREAM=4096 /tmp/pingpong 0 1
 *   STREAM=4096 STREAM_DESC=16 STREAM_REL=1024 /tmp/pingpong 0 1   # other shapes
 *   STREAM=4096 STREAM_WORK=4 /tmp/pingpong 0 1   # A also works after each batch (4 dependent
 *     multiply-adds a descriptor, ~5.5 ns here, printed alone first): does the ring's cost add to
 *     the work or hide in it?
 *   STREAM=4096 STREAM_WORK=4 STREAM_IDLE=32 ...  # B pauses 32 times before each new look at
 *     an unchanged head (how much B's polling of A's lines costs A)
 *
 * Built and run by bench/cluster-mode.sh; no peer code. Never run in CI. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static struct {
    _Alignas(64) volatile uint64_t word;
    char pad[56];
} line;
static long iters;
static volatile int stop;

static void pin(int core) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(core, &s);
    if (pthread_setaffinity_np(pthread_self(), sizeof s, &s) != 0) {
        perror("pthread_setaffinity_np");
        exit(2);
    }
}

static void *answer(void *arg) {
    pin(*(int *)arg);
    uint64_t expect = 1;
    while (!stop) {
        while (line.word != expect)
            if (stop) return NULL;
        line.word = expect + 1;
        expect += 2;
    }
    return NULL;
}

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The stream mode: the ring's cursors on lines of their own, as the cluster's. A descriptor is
 * DESC bytes (STREAM_DESC: 32 as the cluster's, or 16), the consumer gives back every REL
 * (STREAM_REL, 256 as the cluster's consumer) or when it found nothing. */
static struct {
    _Alignas(128) volatile uint64_t head;
    _Alignas(128) volatile uint64_t tail;
} cur;
static uint64_t *ring;
static uint64_t slots, dw = 4, rel = 256, work, idle_pause;
static volatile uint64_t sink;

static void *drain(void *arg) {
    pin(*(int *)arg);
    uint64_t read = 0, head = 0, released = 0, sum = 0;
    while (!stop) {
        if (read == head) {
            if (read != released) {
                __atomic_store_n(&cur.tail, read, __ATOMIC_RELEASE);
                released = read;
            }
            for (uint64_t k = 0; k < idle_pause; k++) __builtin_ia32_pause();
            head = __atomic_load_n(&cur.head, __ATOMIC_ACQUIRE);
            continue;
        }
        for (; read < head; read++) {
            const uint64_t *d = &ring[(read & (slots - 1)) * dw];
            sum += d[0] + d[1];
        }
        if (read - released >= rel) {
            __atomic_store_n(&cur.tail, read, __ATOMIC_RELEASE);
            released = read;
        }
    }
    sink = sum;
    return NULL;
}

static int stream(int a, int b, int rounds) {
    ring = aligned_alloc(4096, slots * dw * 8);
    for (uint64_t i = 0; i < slots * dw; i++) ring[i] = i;
    pthread_t t;
    pthread_create(&t, NULL, drain, &b);
    pin(a);
    double mpps[64];
    uint64_t head = 0, tail = 0, x = 1;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_ns();
        for (long i = 0; i < iters; i++) {
            while (slots - (head - tail) < 64) tail = __atomic_load_n(&cur.tail, __ATOMIC_ACQUIRE);
            for (int k = 0; k < 64; k++) {
                uint64_t *d = &ring[((head + k) & (slots - 1)) * dw];
                for (uint64_t w = 0; w < dw; w++) d[w] = head + k + w;
            }
            head += 64;
            __atomic_store_n(&cur.head, head, __ATOMIC_RELEASE);
            for (uint64_t w = 0; w < work * 64; w++) x = x * 6364136223846793005ULL + 1;
        }
        mpps[r] = iters * 64 / (now_ns() - t0) * 1e3;
    }
    stop = 1;
    pthread_join(t, NULL);
    if (work) {
        /* The same work alone on core A (no ring): its own rate, to compare. */
        double t0 = now_ns();
        for (long i = 0; i < iters; i++)
            for (uint64_t w = 0; w < work * 64; w++) x = x * 6364136223846793005ULL + 1;
        printf("work alone %.1f Mpps, ", iters * 64 / (now_ns() - t0) * 1e3);
    }
    sink = x;
    qsort(mpps, rounds, sizeof mpps[0], cmp);
    printf("%.1f\n", mpps[rounds / 2]);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: pingpong CORE_A CORE_B [ITERS] [ROUNDS]\n");
        return 2;
    }
    int a = atoi(argv[1]), b = atoi(argv[2]);
    iters = argc > 3 ? atol(argv[3]) : 200000;
    int rounds = argc > 4 ? atoi(argv[4]) : 7;
    if (rounds < 1 || rounds > 64 || iters < 1) return 2;
    const char *st = getenv("STREAM");
    if (st) {
        slots = strtoull(st, NULL, 0);
        if (slots < 128 || (slots & (slots - 1))) return 2;
        if (argc <= 3) iters = 100000;
        if (getenv("STREAM_DESC")) dw = strtoull(getenv("STREAM_DESC"), NULL, 0) / 8;
        if (getenv("STREAM_REL")) rel = strtoull(getenv("STREAM_REL"), NULL, 0);
        if (getenv("STREAM_WORK")) work = strtoull(getenv("STREAM_WORK"), NULL, 0);
        if (getenv("STREAM_IDLE")) idle_pause = strtoull(getenv("STREAM_IDLE"), NULL, 0);
        if ((dw != 2 && dw != 4) || rel < 1) return 2;
        return stream(a, b, rounds);
    }
    pthread_t t;
    pthread_create(&t, NULL, answer, &b);
    pin(a);
    double ns[64];
    uint64_t v = 1;
    for (int r = 0; r < rounds; r++) {
        double t0 = now_ns();
        for (long i = 0; i < iters; i++) {
            line.word = v;
            while (line.word != v + 1) {
            }
            v += 2;
        }
        ns[r] = (now_ns() - t0) / iters;
    }
    stop = 1;
    pthread_join(t, NULL);
    qsort(ns, rounds, sizeof ns[0], cmp);
    printf("%.1f\n", ns[rounds / 2]);
    return 0;
}
