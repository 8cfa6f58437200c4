/*
 * pread_baseline: how fast plain C reads a whole file into memory with N
 * threads of pread(2): the baseline tensorfile's loaders are held to
 * (issue 30; `tensorfile-bench plans` runs it beside the read plans).
 *
 * Each round reads all of FILE, each of N threads a contiguous share (in
 * whole 2 MiB units, so that no huge page is shared), in calls of 8 MiB,
 * into memory that is either
 *   fresh:   a new anonymous mapping per round; its page faults land in
 *            the timed reads, which is the point (a loader that allocates
 *            its tensors pays them);
 *   touched: one mapping made and written once before the rounds (a
 *            loader that reuses its buffers): the copy bandwidth.
 * --pages huge advises the mapping MADV_HUGEPAGE (2 MiB pages where the
 * kernel grants them); --pages 4k advises MADV_NOHUGEPAGE, so that 4k means
 * 4 KiB pages whatever the system's default.
 *
 * It prints one JSON line per round, {"seconds": s, "bytes": n, "gbps": g}:
 * s is the time of the reads alone (CLOCK_MONOTONIC, from before the
 * threads start to after they are joined; mapping and unmapping are
 * outside it), n the bytes read, g = n / s / 1e9.
 *
 * Build: cc -O2 -pthread -o pread_baseline pread_baseline.c
 * Plain C11 and POSIX threads, no other dependency; Linux (madvise flags).
 * Exit status: 0 success, 1 an error (one line on stderr), 2 bad usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CALL_BYTES ((size_t)8 << 20)
#define HUGE_PAGE ((size_t)2 << 20)
#define MAX_THREADS 1024

static const char *usage =
    "usage: pread_baseline FILE --threads N --memory fresh|touched --pages 4k|huge --rounds R";

/* One thread's share: `len` bytes of the file at `offset` into `dest`. */
struct share {
    int fd;
    off_t offset;
    size_t len;
    unsigned char *dest;
    int error;       /* errno of the failed call, or 0 */
    int short_file;  /* the file ended before the share did */
};

static void *read_share(void *arg) {
    struct share *s = arg;
    size_t done = 0;
    while (done < s->len) {
        size_t want = s->len - done < CALL_BYTES ? s->len - done : CALL_BYTES;
        ssize_t got = pread(s->fd, s->dest + done, want, s->offset + (off_t)done);
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            s->error = errno;
            return NULL;
        }
        if (got == 0) {
            s->short_file = 1;
            return NULL;
        }
        done += (size_t)got;
    }
    return NULL;
}

/* Writes `text` to stderr with control bytes escaped (\xNN): a file name
 * never reaches the terminal raw. */
static void put_escaped(const char *text) {
    for (const unsigned char *c = (const unsigned char *)text; *c != '\0'; c++) {
        if (*c < 0x20 || *c == 0x7f || *c == '\\') {
            fprintf(stderr, "\\x%02x", *c);
        } else {
            fputc(*c, stderr);
        }
    }
}

/* Fails with one line naming the file as given; exit status 1. */
static void fail(const char *file, const char *what, int err) {
    fputs("pread_baseline: ", stderr);
    put_escaped(file);
    if (err != 0) {
        fprintf(stderr, ": %s: %s\n", what, strerror(err));
    } else {
        fprintf(stderr, ": %s\n", what);
    }
    exit(1);
}

/* A usage error: the problem (with `arg`, escaped, when not NULL) and the
 * usage line; exit status 2. */
static void bad_usage_at(const char *problem, const char *arg) {
    fprintf(stderr, "pread_baseline: %s", problem);
    if (arg != NULL) {
        put_escaped(arg);
    }
    fprintf(stderr, "\n%s\n", usage);
    exit(2);
}

static void bad_usage(const char *problem) {
    bad_usage_at(problem, NULL);
}

/* A whole number in [min, max], or a usage error. */
static long parse_count(const char *text, long min, long max, const char *option) {
    char *end = NULL;
    errno = 0;
    long n = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || n < min || n > max) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s wants a whole number from %ld to %ld", option, min, max);
        bad_usage(msg);
    }
    return n;
}

/* `len` bytes of anonymous memory aligned to 2 MiB, advised as `huge` says.
 * `*base` and `*mapped` receive what to unmap. */
static unsigned char *map_memory(const char *file, size_t len, int huge, void **base,
                                 size_t *mapped) {
    *mapped = len + HUGE_PAGE;
    void *p = mmap(NULL, *mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fail(file, "mmap of the destination", errno);
    }
    *base = p;
    uintptr_t at = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
    unsigned char *aligned = (unsigned char *)at;
    if (madvise(aligned, len, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0) {
        fail(file, huge ? "madvise(MADV_HUGEPAGE)" : "madvise(MADV_NOHUGEPAGE)", errno);
    }
    return aligned;
}

static double now_seconds(const char *file) {
    struct timespec t;
    if (clock_gettime(CLOCK_MONOTONIC, &t) != 0) {
        fail(file, "clock_gettime", errno);
    }
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    const char *file = NULL;
    long threads = -1, rounds = -1;
    int memory = -1; /* 0 fresh, 1 touched */
    int pages = -1;  /* 0 4k, 1 huge */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("%s\n", usage);
            return 0;
        }
        int takes_value = strcmp(a, "--threads") == 0 || strcmp(a, "--memory") == 0 ||
                          strcmp(a, "--pages") == 0 || strcmp(a, "--rounds") == 0;
        if (takes_value) {
            if (i + 1 >= argc) {
                char msg[64];
                snprintf(msg, sizeof msg, "%s wants a value", a);
                bad_usage(msg);
            }
            const char *v = argv[++i];
            if (strcmp(a, "--threads") == 0) {
                threads = parse_count(v, 1, MAX_THREADS, a);
            } else if (strcmp(a, "--rounds") == 0) {
                rounds = parse_count(v, 1, 1000000, a);
            } else if (strcmp(a, "--memory") == 0) {
                if (strcmp(v, "fresh") == 0) {
                    memory = 0;
                } else if (strcmp(v, "touched") == 0) {
                    memory = 1;
                } else {
                    bad_usage("--memory is fresh or touched");
                }
            } else {
                if (strcmp(v, "4k") == 0) {
                    pages = 0;
                } else if (strcmp(v, "huge") == 0) {
                    pages = 1;
                } else {
                    bad_usage("--pages is 4k or huge");
                }
            }
        } else if (a[0] == '-' && a[1] != '\0') {
            bad_usage_at("unknown option ", a);
        } else if (file == NULL) {
            file = a;
        } else {
            bad_usage("one FILE only");
        }
    }
    if (file == NULL || threads < 0 || rounds < 0 || memory < 0 || pages < 0) {
        bad_usage("FILE and every option are required");
    }

    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fail(file, "open", errno);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        fail(file, "fstat", errno);
    }
    if (!S_ISREG(st.st_mode)) {
        fail(file, "not a regular file", 0);
    }
    if (st.st_size <= 0) {
        fail(file, "empty, nothing to read", 0);
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX - HUGE_PAGE) {
        fail(file, "too large for the address space", 0);
    }
    size_t len = (size_t)st.st_size;

    /* Shares in whole 2 MiB units; the last takes the rest. */
    size_t units = (len + HUGE_PAGE - 1) / HUGE_PAGE;
    size_t per = (units + (size_t)threads - 1) / (size_t)threads * HUGE_PAGE;
    struct share shares[MAX_THREADS];
    pthread_t ids[MAX_THREADS];

    void *base = NULL;
    size_t mapped = 0;
    unsigned char *touched = NULL;
    if (memory == 1) {
        touched = map_memory(file, len, pages, &base, &mapped);
        memset(touched, 1, len);
    }

    for (long round = 0; round < rounds; round++) {
        unsigned char *dest = touched;
        if (memory == 0) {
            dest = map_memory(file, len, pages, &base, &mapped);
        }
        long started = 0;
        double start = now_seconds(file);
        for (long t = 0; t < threads; t++) {
            size_t from = (size_t)t * per;
            if (from >= len) {
                break;
            }
            size_t to = from + per < len ? from + per : len;
            shares[t] = (struct share){fd, (off_t)from, to - from, dest + from, 0, 0};
            int err = pthread_create(&ids[t], NULL, read_share, &shares[t]);
            if (err != 0) {
                fail(file, "pthread_create", err);
            }
            started++;
        }
        for (long t = 0; t < started; t++) {
            int err = pthread_join(ids[t], NULL);
            if (err != 0) {
                fail(file, "pthread_join", err);
            }
        }
        double seconds = now_seconds(file) - start;
        for (long t = 0; t < started; t++) {
            if (shares[t].error != 0) {
                fail(file, "pread", shares[t].error);
            }
            if (shares[t].short_file) {
                fail(file, "the file became shorter while being read", 0);
            }
        }
        if (memory == 0 && munmap(base, mapped) != 0) {
            fail(file, "munmap", errno);
        }
        double gbps = seconds > 0 ? (double)len / seconds / 1e9 : 0.0;
        if (printf("{\"seconds\": %.6f, \"bytes\": %zu, \"gbps\": %.3f}\n", seconds, len, gbps) < 0 ||
            fflush(stdout) != 0) {
            fail("stdout", "write", errno);
        }
    }
    if (memory == 1 && munmap(base, mapped) != 0) {
        fail(file, "munmap", errno);
    }
    if (close(fd) != 0) {
        fail(file, "close", errno);
    }
    return 0;
}
