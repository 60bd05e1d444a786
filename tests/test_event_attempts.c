/* The numbers of an event belong to one attempt, and its texts say what
 * happened:
 *  - retry_scheduled carries the attempt that ended (its number, its wait,
 *    its run), not the number of the attempt it schedules;
 *  - a panic event has the run time of its attempt, the same as the FAILED
 *    event that follows it;
 *  - a task's own return code is "task returned 7" in the JSON "error"
 *    field, not "unknown error code". */
#include "util.h"

#include <string.h>

#define MAXEV 64
static ax_event evs[MAXEV];
static atomic_int nev;

static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    int i = atomic_load(&nev);
    if (i < MAXEV) {
        evs[i] = *e;
        atomic_store(&nev, i + 1);
    }
}

/* Runs at least 1 ms, then returns 7 (attempt 0) or 9 (attempt 1). */
static int seven_then_nine(ax_task *t, void *arg)
{
    (void)arg;
    uint64_t until = ax_now_ns() + 1000000u;
    while (ax_now_ns() < until)
        ;
    return ax_task_attempt(t) == 0 ? 7 : 9;
}

static int spin_then_panic(ax_task *t, void *arg)
{
    (void)arg;
    uint64_t until = ax_now_ns() + 2000000u;
    while (ax_now_ns() < until)
        ;
    ax_panic(t, "gave up");
    return 0;
}

static const ax_event *find(uint64_t id, ax_event_kind kind, unsigned attempt)
{
    const ax_event *found = NULL;
    for (int i = 0; i < atomic_load(&nev); i++)
        if (evs[i].id == id && evs[i].kind == kind && evs[i].attempt == attempt) {
            CHECK(found == NULL); /* exactly one */
            found = &evs[i];
        }
    CHECK(found != NULL);
    return found;
}

int main(void)
{
    ax_sched *s = test_sched(1, 4);
    FILE *json = tmpfile();
    CHECK(json != NULL);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);
    CHECK_EQ(ax_events_json(s, json), 0);

    ax_retry_policy quick = {
        .mode = AX_BACKOFF_EXPONENTIAL, .base_ms = 50, .max_ms = 50, .jitter_ms = 0};
    ax_spec sp = {.fn = seven_then_nine, .timeout_ms = 5000, .max_retry = 1, .retry = &quick};
    uint64_t id;
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    ax_spec pp = {.fn = spin_then_panic, .timeout_ms = 5000};
    uint64_t pid;
    CHECK_EQ(ax_submit(s, &pp, &pid), 0);
    CHECK(WAIT_UNTIL(test_stats(s).failed == 2, 5000));
    /* A terminal event is emitted after the outcome is counted (finish.c):
     * wait for the events themselves, then check their exact number. */
    CHECK(WAIT_UNTIL((ax_events_flush(s), atomic_load(&nev) >= 5 + 4), 10000));
    CHECK_EQ(ax_events_flush(s), 0);

    /* submitted, started 0, retry_scheduled, started 1, failed 1; and
     * submitted, started, panic, failed. */
    CHECK_EQ(atomic_load(&nev), 5 + 4);
    const ax_event *s0 = find(id, AX_EV_STARTED, 0);
    const ax_event *r0 = find(id, AX_EV_RETRY_SCHEDULED, 0);
    const ax_event *s1 = find(id, AX_EV_STARTED, 1);
    const ax_event *f1 = find(id, AX_EV_FAILED, 1);
    CHECK_EQ(r0->wait_ns, s0->wait_ns); /* attempt 0's wait, with attempt 0's number */
    CHECK(r0->run_ns >= 1000000u);      /* and attempt 0's run */
    CHECK_EQ(r0->code, 7);
    CHECK_STR(r0->message, "task returned 7; retry 1 of 1 (attempt 1) in 50 ms");
    CHECK(r0->time_ns <= s1->time_ns);
    CHECK_EQ(f1->code, 9);
    CHECK(f1->run_ns >= 1000000u);

    const ax_event *pe = find(pid, AX_EV_PANIC, 0);
    const ax_event *pf = find(pid, AX_EV_FAILED, 0);
    CHECK(pe->run_ns >= 2000000u);
    CHECK_EQ(pe->run_ns, pf->run_ns);
    CHECK_EQ(pe->wait_ns, pf->wait_ns);
    CHECK(strncmp(pe->message, "gave up\n#0 ", 11) == 0);

    /* The JSON sink names the task's own codes. */
    rewind(json);
    char line[4096];
    int own = 0;
    while (fgets(line, sizeof line, json)) {
        CHECK(strstr(line, "unknown error code") == NULL);
        own += strstr(line, "\"code\":7,\"error\":\"task returned 7\"") != NULL;
        own += strstr(line, "\"code\":9,\"error\":\"task returned 9\"") != NULL;
    }
    CHECK_EQ(own, 2); /* retry_scheduled of attempt 0, failed of attempt 1 */
    ax_free(s);
    fclose(json);
    return 0;
}
