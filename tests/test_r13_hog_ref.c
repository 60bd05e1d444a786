/* test_r13_hog_ref.c - the LINGERING event of a hog (a task that spins past
 * its timeout without yielding, reported by the watchdog) carries no ref.
 *
 * Defect (ax_spec.ref, 729dfd2): "every lifecycle event of the task carries
 * [its ref]". src/obs/linger.c:linger_hog_check (around line 202) copies
 * what the report needs into a stack `struct job snap` -- id, prio,
 * trace_id -- because the watchdog holds no hold on the job; it never
 * copies the ref, so snap.has_ref stays 0 and report() ->
 * ev_emit_attempt(..., &snap, AX_EV_LINGERING, ...) -> job_reflen() sees no
 * ref: ax_event.ref is "" and the JSON line has no "ref" key, while the
 * same task's SUBMITTED / STARTED / TIMED_OUT events carry it. (The
 * worker's own report for a parked lingering task, linger_check, passes
 * the real job and does carry it.) For libax_redis this is exactly the
 * event an operator greps a message id for.
 *
 * Deterministic (fails every run): one task with ref "hog-ref", timeout
 * 100 ms, spinning 800 ms on its worker; grace_ms 200: the watchdog reports
 * it ~300 ms in. Expected: the LINGERING event's ref is "hog-ref", and its
 * JSON line has "ref":"hog-ref".
 *
 * Fix: copy the ref into the snapshot too, e.g. a struct job_ext on the
 * stack beside snap, memcpy j->ext->ref when j->has_ref (read before the
 * final pub_seq re-check, as the other fields), set snap.ext / has_ref. */
#include "util.h"

#include <string.h>

static atomic_int lingering_events;
static char lingering_ref[AX_REF_MAX];
static char timed_out_ref[AX_REF_MAX];
static atomic_int timed_out_events;

static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind == AX_EV_LINGERING) {
        snprintf(lingering_ref, sizeof lingering_ref, "%s", e->ref);
        atomic_fetch_add(&lingering_events, 1);
    } else if (e->kind == AX_EV_TIMED_OUT) {
        snprintf(timed_out_ref, sizeof timed_out_ref, "%s", e->ref);
        atomic_fetch_add(&timed_out_events, 1);
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
    c.grace_ms = 200;
    ax_sched *s = test_sched_cfg(&c);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);
    FILE *json = tmpfile();
    CHECK(json != NULL);
    CHECK_EQ(ax_events_json(s, json), 0);

    ax_spec sp = {.fn = spin, .arg = (void *)(uintptr_t)800, .timeout_ms = 100, .ref = "hog-ref"};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&lingering_events) == 1, 10000));
    CHECK(WAIT_UNTIL(atomic_load(&timed_out_events) == 1, 10000));
    CHECK(WAIT_UNTIL(test_stats(s).orphans == 0, 10000));
    CHECK_EQ(ax_events_flush(s), 0);
    CHECK_STR(timed_out_ref, "hog-ref"); /* the task's other events have it */
    CHECK_STR(lingering_ref, "hog-ref"); /* fails: "" */

    rewind(json);
    char line[8192];
    int lines = 0;
    while (fgets(line, sizeof line, json)) {
        if (!strstr(line, "\"event\":\"lingering\""))
            continue;
        lines++;
        CHECK(strstr(line, "\"ref\":\"hog-ref\"") != NULL);
    }
    CHECK_EQ(lines, 1);
    ax_free(s);
    fclose(json);
    return 0;
}
