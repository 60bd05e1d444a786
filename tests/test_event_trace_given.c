/* test_event_trace_given.c - the trace id a task was submitted with is the
 * one its events carry, also in the events made without a job of its own:
 * a refusal (REJECTED: the spec's trace id, or "-" when it has none) and
 * the watchdog's LINGERING report of a hog (a copy of the hog's job).
 * Both build a `struct job` on the stack; when the trace id moved behind
 * a has_trace bit (0a76cb1), they reported "ax-0000000000000000" and
 * "ax-<the hog's id>" (review of 0a76cb1). */
#include "util.h"

static char rej_trace[AX_TRACE_ID_MAX], rej_none_trace[AX_TRACE_ID_MAX],
    ling_trace[AX_TRACE_ID_MAX], to_trace[AX_TRACE_ID_MAX];
static atomic_int nrej, nling, nto;

static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind == AX_EV_REJECTED) {
        if (atomic_fetch_add(&nrej, 1) == 0)
            snprintf(rej_trace, sizeof rej_trace, "%s", e->trace_id);
        else
            snprintf(rej_none_trace, sizeof rej_none_trace, "%s", e->trace_id);
    } else if (e->kind == AX_EV_LINGERING) {
        snprintf(ling_trace, sizeof ling_trace, "%s", e->trace_id);
        atomic_fetch_add(&nling, 1);
    } else if (e->kind == AX_EV_TIMED_OUT) {
        snprintf(to_trace, sizeof to_trace, "%s", e->trace_id);
        atomic_fetch_add(&nto, 1);
    }
}

static int spin(ax_task *t, void *arg)
{
    (void)t;
    uint64_t until = ax_now_ns() + (uint64_t)(uintptr_t)arg * 1000000u;
    while (ax_now_ns() < until)
        __asm__ __volatile__("" ::: "memory");
    return 0;
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.grace_ms = 100;
    ax_sched *s = test_sched_cfg(&c);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), AX_OK);
    /* A refusal: timeout_ms 0 is invalid. */
    ax_spec bad = {.fn = spin, .timeout_ms = 0, .trace_id = "refused-7"};
    CHECK(ax_submit(s, &bad, NULL) == AX_EINVAL);
    CHECK_EQ(ax_events_flush(s), AX_OK);
    ax_spec bad2 = {.fn = spin, .timeout_ms = 0};
    CHECK(ax_submit(s, &bad2, NULL) == AX_EINVAL);
    /* A hog: 50 ms timeout, spins 500 ms: timed out by the watchdog, then
     * LINGERING ~150 ms in. */
    ax_spec hog = {.fn = spin, .arg = (void *)(uintptr_t)500, .timeout_ms = 50,
                   .trace_id = "hog-trace"};
    CHECK_EQ(ax_submit(s, &hog, NULL), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&nling) == 1 && atomic_load(&nto) == 1, 5000));
    CHECK_EQ(ax_events_flush(s), AX_OK);
    CHECK_EQ(ax_shutdown(s, 5000), AX_OK);
    ax_free(s);
    fprintf(stderr, "REJECTED trace (given \"refused-7\"): \"%s\"\n", rej_trace);
    fprintf(stderr, "REJECTED trace (none given): \"%s\"\n", rej_none_trace);
    fprintf(stderr, "TIMED_OUT trace of the hog: \"%s\"\n", to_trace);
    fprintf(stderr, "LINGERING trace of the hog: \"%s\"\n", ling_trace);
    CHECK_STR(rej_trace, "refused-7");
    CHECK_STR(rej_none_trace, "-");
    CHECK_STR(to_trace, "hog-trace");
    CHECK_STR(ling_trace, "hog-trace");
    return 0;
}
