/* class_common.h - shared helpers of the test_class_*
 * tests (written by the review of d6c7f43, task classes wired into the scheduler; each test's header describes the defect as it was, fixed since). */
#ifndef CLASS_COMMON_H
#define CLASS_COMMON_H

#include "util.h"

#include <stdlib.h>
#include <string.h>

static atomic_int rc_done_n;
static ax_result rc_last[256];

static inline void rc_on_done(const ax_result *r, void *arg)
{
    (void)arg;
    int i = atomic_load(&rc_done_n);
    if (i < 256)
        rc_last[i] = *r;
    atomic_fetch_add(&rc_done_n, 1);
}

/* A class with every control off but the ones a test switches on. */
static inline ax_class_config rc_plain(const char *name)
{
    ax_class_config c;
    ax_class_config_default(&c);
    c.name = name;
    c.timeout_ms = 10000;
    c.queue_budget = false;
    c.adaptive = false;
    c.retry_budget = false;
    c.breaker = false;
    c.protect_high = false; /* HIGH is held back like the others */
    return c;
}

/* rc_plain with an adaptive limit in [1, limit_max]. */
static inline ax_class_config rc_adaptive(const char *name, unsigned limit_max)
{
    ax_class_config c = rc_plain(name);
    c.adaptive = true;
    c.limit_min = 1;
    c.limit_max = limit_max;
    return c;
}

/* rc_plain with a breaker that one failure opens, open for open_ms, then
 * half-open with `probes` permits. */
static inline ax_class_config rc_breaker(const char *name, uint32_t open_ms, unsigned probes)
{
    ax_class_config c = rc_plain(name);
    c.breaker = true;
    c.breaker_min_calls = 1;
    c.breaker_failure_rate = 0.5;
    c.breaker_window_ms = 10000;
    c.breaker_open_ms = open_ms;
    c.breaker_half_open_calls = probes;
    return c;
}

static inline int rc_noop(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static inline int rc_fail(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 7;
}

/* Runs until *arg (an atomic_int) is set or the task is cancelled / timed
 * out; counts itself in rc_running while it runs. */
static atomic_int rc_running;
static inline int rc_block(ax_task *t, void *arg)
{
    atomic_int *release = arg;
    atomic_fetch_add(&rc_running, 1);
    int rc = 0;
    while (!atomic_load(release)) {
        rc = ax_sleep(t, 5);
        if (rc)
            break;
    }
    atomic_fetch_sub(&rc_running, 1);
    return rc;
}

static inline ax_class_stats rc_cstats(ax_sched *s, unsigned id)
{
    ax_class_stats st;
    CHECK_EQ(ax_class_stats_get(s, id, &st), AX_OK);
    return st;
}

/* One failing task of class id (an rc_breaker class): the breaker opens.
 * The first task of the test (rc_done_n goes to 1). */
static inline void rc_open_breaker(ax_sched *s, unsigned id)
{
    ax_spec f = {.fn = rc_fail, .class_id = id, .on_done = rc_on_done};
    CHECK_EQ(ax_submit(s, &f, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&rc_done_n) == 1, 5000));
    CHECK_EQ(rc_cstats(s, id).breaker, AX_BREAKER_OPEN);
}

#endif
