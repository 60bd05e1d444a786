/* util.h - small helpers shared by the integration tests. */
#ifndef AX_TEST_UTIL_H
#define AX_TEST_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* usleep, clock_gettime under -std=c11 */
#endif

#include "ax.h"
#include "check.h"

#include <stdatomic.h>
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

static inline ax_stats test_stats(ax_sched *s)
{
    ax_stats st;
    CHECK_EQ(ax_stats_get(s, &st), 0);
    return st;
}

#endif
