/* error.c - error codes, their names, and the per-thread detail message.
 *
 * Every public entry point returns a negative AX_E* code; the detail message
 * ("spec.timeout_ms must be > 0") lives in thread-local storage so that
 * reporting it costs no allocation and no lock. Overload rejections (full,
 * shed, rate) store a static string only: they are on the hot path of an
 * incident and must stay cheap.
 */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char detail_buf[256];
static _Thread_local const char *detail = "";

/* NULL for a code that is not ax's (a task function's own return). */
static const char *error_name(int code)
{
    switch (code) {
    case AX_OK: return "success";
    case AX_EINVAL: return "invalid argument";
    case AX_ENOMEM: return "out of memory";
    case AX_EFULL: return "priority bucket full";
    case AX_ESHED: return "shed: scheduler overloaded";
    case AX_ERATE: return "submission rate limit exceeded";
    case AX_ESHUTDOWN: return "scheduler shutting down";
    case AX_ETIMEDOUT: return "timed out";
    case AX_ECANCELED: return "task cancelled";
    case AX_ENOTFOUND: return "not found (no such task, class or registration)";
    case AX_ESTATE: return "not allowed in this state";
    case AX_ESYS: return "system call failed";
    case AX_EPANIC: return "task panicked";
    case AX_EBUSY: return "resource busy";
    case AX_ENET: return "network transfer failed";
    case AX_EOPEN: return "circuit breaker open";
    case AX_EEXPIRED: return "queue-time budget exceeded";
    default: return NULL;
    }
}

const char *ax_strerror(int code)
{
    const char *name = error_name(code);
    return name ? name : "unknown error code";
}

bool error_is_ax(int code)
{
    return error_name(code) != NULL;
}

const char *ax_error_detail(void)
{
    return detail;
}

int ax_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail_buf, sizeof detail_buf, fmt, ap);
    va_end(ap);
    detail = detail_buf;
    return code;
}

int ax_fail_static(int code, const char *msg)
{
    detail = msg;
    return code;
}

void ax_clear_error(void)
{
    detail = "";
}

const char *ax_priority_name(ax_priority p)
{
    switch (p) {
    case AX_PRIO_HIGH: return "high";
    case AX_PRIO_NORMAL: return "normal";
    case AX_PRIO_LOW: return "low";
    }
    return "invalid";
}

const char *ax_state_name(ax_state s)
{
    switch (s) {
    case AX_STATE_PENDING: return "pending";
    case AX_STATE_RUNNING: return "running";
    case AX_STATE_SUCCEEDED: return "succeeded";
    case AX_STATE_FAILED: return "failed";
    case AX_STATE_TIMED_OUT: return "timed_out";
    case AX_STATE_RETRYING: return "retrying";
    case AX_STATE_CANCELLED: return "cancelled";
    case AX_STATE_REJECTED: return "rejected";
    }
    return "invalid";
}

uint64_t ax_now_ns(void)
{
    return now_ns();
}
