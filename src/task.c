/* task.c - the API a task calls on itself (seed §3.4, DESIGN.md §7).
 *
 * Every call checks that it runs on the task's own coroutine (AX_ESTATE
 * otherwise: a task handle leaked to another thread must not corrupt a
 * worker), then whether the attempt is still its own: once the job timed out
 * or was cancelled every blocking call returns AX_ETIMEDOUT / AX_ECANCELED at
 * once, so a task that checks its return codes stops promptly, and one that
 * does not is at least never parked again.
 *
 * Waits park the coroutine, never the thread: the worker goes on with other
 * tasks, and the wheel, the reactor or another thread's wake-up resumes it.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "utf8.h"

#include <setjmp.h>

#include <errno.h>
#include <execinfo.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

static int check_current(const ax_task *t, const char *fn)
{
    if (AX_UNLIKELY(!t))
        return ax_fail(AX_EINVAL, "%s: task is NULL", fn);
    if (AX_UNLIKELY(t != ax_current_run))
        return ax_fail(AX_ESTATE, "%s: called outside the task's own coroutine", fn);
    return AX_OK;
}

uint64_t ax_task_id(const ax_task *t)
{
    return t ? t->id : 0;
}

const char *ax_task_trace_id(const ax_task *t)
{
    if (!t)
        return "";
    ax_task *m = (ax_task *)t;
    if (!m->trace[0])
        trace_format(t->job, m->trace);
    return m->trace;
}

ax_priority ax_task_priority(const ax_task *t)
{
    return t ? (ax_priority)t->prio : AX_PRIO_NORMAL;
}

unsigned ax_task_attempt(const ax_task *t)
{
    return t ? t->attempt : 0;
}

uint64_t ax_task_deadline_ns(const ax_task *t)
{
    return t ? t->deadline_ns : 0;
}

ax_task *ax_task_current(void)
{
    return ax_current_run;
}

ax_sched *ax_task_sched(const ax_task *t)
{
    return t ? t->s : NULL;
}

int ax_cancelled(const ax_task *t)
{
    int rc = check_current(t, "ax_cancelled");
    return rc ? rc : run_detached_rc(t);
}

int ax_yield(ax_task *t)
{
    int rc = check_current(t, "ax_yield");
    if (AX_UNLIKELY(rc || (rc = run_blocking_entry(t, "ax_yield"))))
        return rc;
    struct worker *w = t->w;
    t->rs = RS_PARK_YIELD;
    if (run_switch_direct(t)) {
        t->rs = RS_ACTIVE;
        return AX_LIKELY(!run_detached_rc(t)) ? 0 : run_detached_named(t, "ax_yield");
    }
    /* To the back of the ready queue: everything else ready runs first. */
    ready_push(w, t);
    t->wake_rc = 0;
    run_park(t);
    t->rs = RS_ACTIVE;
    return AX_LIKELY(!run_detached_rc(t)) ? 0 : run_detached_named(t, "ax_yield");
}

/* What a wait returns: the wake-up's code, else whether the attempt ended
 * meanwhile; a failure says so in ax_error_detail(). */
static int wait_result(ax_task *t, const char *fn, int rc)
{
    if (!rc)
        return run_detached_named(t, fn);
    if (rc == AX_ETIMEDOUT) {
        /* Which one (as ax_join): the caller may wait again after its own
         * bound, not after the attempt's end. The code is the same. */
        int ended = run_detached_rc(t);
        /* Past the deadline: the deadline's, its attempt about to end
         * (its tick may come after the bound's: join.c). */
        if (!ended && now_ns() < t->deadline_ns)
            return ax_fail(rc, "%s: its own bound passed (the task's attempt goes on)", fn);
        if (ended == AX_ECANCELED)
            return ax_fail(rc, "%s: timed out, and the task was cancelled meanwhile", fn);
        return ax_fail(rc, "%s: the task's deadline passed while it waited", fn);
    }
    if (rc == AX_ECANCELED)
        return ax_fail(rc, "%s: the task was cancelled", fn);
    return rc;
}

int ax_sleep(ax_task *t, uint64_t ms)
{
    int rc = check_current(t, "ax_sleep");
    if (rc || (rc = run_blocking_entry(t, "ax_sleep")))
        return rc;
    if (ms == 0)
        return ax_yield(t);
    struct worker *w = t->w;
    if (ms > 365ull * 24 * 3600 * 1000)
        ms = 365ull * 24 * 3600 * 1000;
    worker_timer_add(w, &t->wait_timer.node, now_ns() + ms * 1000000u);
    t->rs = RS_PARK_SLEEP;
    return wait_result(t, "ax_sleep", run_park(t));
}

int task_wait_fd(ax_task *t, const char *who, int fd, unsigned events, int64_t timeout_ms)
{
    int rc = check_current(t, who);
    if (rc)
        return rc;
    if (fd < 0)
        return ax_fail(AX_EINVAL, "%s: fd %d is negative", who, fd);
    if (events == 0 || (events & ~(AX_READ | AX_WRITE)))
        return ax_fail(AX_EINVAL, "%s: events must be AX_READ and/or AX_WRITE", who);
    if ((rc = run_blocking_entry(t, who)))
        return rc;
    struct worker *w = t->w;
    if ((rc = reactor_fd_wait(w, t, who, fd, events)))
        return rc;
    if (timeout_ms >= 0)
        worker_timer_add(w, &t->wait_timer.node, now_ns() + ms_to_ns_capped(timeout_ms));
    t->rs = RS_PARK_FD;
    return wait_result(t, who, run_park(t));
}

int ax_wait_fd(ax_task *t, int fd, unsigned events, int64_t timeout_ms)
{
    return task_wait_fd(t, "ax_wait_fd", fd, events, timeout_ms);
}

int ax_defer(ax_task *t, void (*fn)(void *), void *arg)
{
    int rc = check_current(t, "ax_defer");
    if (rc)
        return rc;
    if (!fn)
        return ax_fail(AX_EINVAL, "ax_defer: fn is NULL");
    if (t->ndefers == t->defer_cap) {
        unsigned cap = t->defer_cap * 2;
        struct defer_entry *d = malloc(cap * sizeof *d);
        if (!d)
            return ax_fail(AX_ENOMEM, "ax_defer: out of memory for %u cleanups", cap);
        memcpy(d, t->defers, t->ndefers * sizeof *d);
        if (t->defers != t->defer_inline)
            free(t->defers);
        t->defers = d;
        t->defer_cap = cap;
    }
    t->defers[t->ndefers++] = (struct defer_entry){fn, arg};
    return AX_OK;
}

/* After a printf of n bytes into buf[cap]: a text cut to the buffer ends
 * between characters, not inside one (ax_result.error stays UTF-8). */
static void err_fit(char *buf, size_t cap, int n)
{
    if (n >= 0 && (size_t)n >= cap && cap > 0)
        buf[utf8_cut(buf, cap - 1)] = 0;
}

int ax_panic(ax_task *t, const char *fmt, ...)
{
    int rc = check_current(t, "ax_panic");
    if (rc)
        return rc;
    if (t->panicked) {
        /* A defer panicked while the task unwound from a panic: the first
         * message is the cause and stays, with its backtrace; the second is
         * added to it. run_exit goes on with the defers still registered. */
        size_t n = strlen(t->err);
        char second[AX_ERROR_MAX];
        if (fmt) {
            va_list ap;
            va_start(ap, fmt);
            err_fit(second, sizeof second, vsnprintf(second, sizeof second, fmt, ap));
            va_end(ap);
        } else {
            memcpy(second, "panic", 6);
        }
        err_fit(t->err + n, sizeof t->err - n,
                snprintf(t->err + n, sizeof t->err - n, "; then a defer panicked: %s", second));
        if (t->unwind)
            longjmp(*(jmp_buf *)t->unwind, 1); /* back to run_exit's loop: no deeper */
        run_exit(t);
    }
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        err_fit(t->err, sizeof t->err, vsnprintf(t->err, sizeof t->err, fmt, ap));
        va_end(ap);
    } else {
        memcpy(t->err, "panic", 6);
    }
    t->bt_n = backtrace(t->bt, AX_BT_MAX); /* for the report: where it panicked */
    t->panicked = 1;
    t->code = AX_EPANIC;
    run_exit(t);
}

int ax_task_set_error(ax_task *t, const char *fmt, ...)
{
    int rc = check_current(t, "ax_task_set_error");
    if (rc)
        return rc;
    if (!fmt) {
        t->err[0] = 0;
        return AX_OK;
    }
    va_list ap;
    va_start(ap, fmt);
    err_fit(t->err, sizeof t->err, vsnprintf(t->err, sizeof t->err, fmt, ap));
    va_end(ap);
    return AX_OK;
}
