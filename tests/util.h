/* util.h - small helpers shared by the integration tests. */
#ifndef AX_TEST_UTIL_H
#define AX_TEST_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* usleep, clock_gettime under -std=c11 */
#endif

#include "ax.h"
#include "check.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static inline uint64_t test_now_ms(void)
{
    return ax_now_ns() / 1000000u;
}

/* Poll cond every millisecond for up to ms; true if it became true. */
#define WAIT_UNTIL(cond, ms)                                                   \
    ({                                                                         \
        uint64_t wu_end_ = test_now_ms() + (ms);                               \
        bool wu_ok_ = false;                                                   \
        while (!(wu_ok_ = (cond)) && test_now_ms() < wu_end_)                  \
            usleep(1000);                                                      \
        wu_ok_;                                                                \
    })

/* A scheduler from a config; aborts (naming the field) if it is refused. */
static inline ax_sched *test_sched_cfg(const ax_config *c)
{
    ax_sched *s = NULL;
    int rc = ax_new(c, &s);
    if (rc) {
        fprintf(stderr, "ax_new: %s: %s\n", ax_strerror(rc), ax_error_detail());
        abort();
    }
    return s;
}

static inline ax_sched *test_sched(unsigned workers, unsigned cap)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = workers;
    c.max_concurrency = cap;
    return test_sched_cfg(&c);
}

/* A small fast PRNG for tests (xorshift64). */
static inline uint64_t xorshift(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* This process's CPU time so far (all threads, user + system), in clock
 * ticks (sysconf(_SC_CLK_TCK)), from /proc/self/stat: what "idle" and "does
 * not spin" tests measure instead of wall time. */
static inline long test_cpu_ticks(void)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    CHECK(f != NULL);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may contain spaces */
    CHECK(p != NULL);
    unsigned long utime = 0, stime = 0;
    /* After ")": state ppid pgrp session tty_nr tpgid flags minflt cminflt
     * majflt cmajflt utime stime (fields 3..15 of proc(5)). */
    int got = sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime);
    CHECK_EQ(got, 2);
    return (long)(utime + stime);
}

static inline ax_stats test_stats(ax_sched *s)
{
    ax_stats st;
    CHECK_EQ(ax_stats_get(s, &st), 0);
    return st;
}

#endif
