/* Lingering (seed §3.4): a task still running grace_ms after its timeout is
 * reported once, with its id and a backtrace that names where it is, and
 * counted; a task that returns in time is not. */
#include "util.h"

#include <string.h>

static atomic_int lingering_events;
static char message[AX_EVENT_MESSAGE_MAX];
static uint64_t event_id;

static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind != AX_EV_LINGERING)
        return;
    snprintf(message, sizeof message, "%s", e->message);
    event_id = e->id;
    atomic_fetch_add(&lingering_events, 1);
}

/* Ignores its deadline: spins on the CPU, never yields. The name must show
 * up in the report's backtrace (tests link with -rdynamic). */
__attribute__((noinline)) void stubborn_spin_loop(uint64_t until_ns)
{
    while (ax_now_ns() < until_ns)
        __asm__ __volatile__("" ::: "memory");
}

static int stubborn(ax_task *t, void *arg)
{
    (void)t;
    stubborn_spin_loop(ax_now_ns() + (uint64_t)(uintptr_t)arg * 1000000u);
    return 0;
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.grace_ms = 200;
    ax_sched *s;
    CHECK_EQ(ax_new(&c, &s), 0);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);
    FILE *json = tmpfile(); /* the JSON sink gets the same report */
    CHECK(json != NULL);
    CHECK_EQ(ax_events_json(s, json), 0);

    /* Overruns its 100 ms timeout by 700 ms: reported once, after ~300 ms. */
    uint64_t id;
    ax_spec sp = {.fn = stubborn, .arg = (void *)(uintptr_t)800, .timeout_ms = 100};
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&lingering_events) == 1, 3000));
    CHECK_EQ(event_id, id);
    CHECK(strstr(message, "without yielding") != NULL);
    CHECK(strstr(message, "stubborn_spin_loop") != NULL);
    CHECK(WAIT_UNTIL(test_stats(s).orphans == 0, 3000)); /* it returned at last */
    usleep(300000);
    CHECK_EQ(atomic_load(&lingering_events), 1); /* once */
    CHECK_EQ(test_stats(s).lingering, 1);
    CHECK_EQ(test_stats(s).timed_out, 1);
    CHECK_EQ(ax_events_flush(s), 0);
    rewind(json);
    char line[4096];
    int lingering_lines = 0;
    while (fgets(line, sizeof line, json)) {
        CHECK(line[0] == '{' && strstr(line, "}\n") != NULL);
        if (strstr(line, "\"event\":\"lingering\"")) {
            lingering_lines++;
            char want[64];
            snprintf(want, sizeof want, "\"id\":%llu,", (unsigned long long)id);
            CHECK(strstr(line, want) != NULL);
            CHECK(strstr(line, "stubborn_spin_loop") != NULL);
            CHECK(strstr(line, "without yielding:\\n#0 ") != NULL); /* escaped newlines */
        }
    }
    CHECK_EQ(lingering_lines, 1);

    /* Overruns by less than grace_ms: not lingering. */
    sp.arg = (void *)(uintptr_t)200;
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(test_stats(s).timed_out == 2, 3000));
    CHECK(WAIT_UNTIL(test_stats(s).orphans == 0, 3000));
    usleep(300000);
    CHECK_EQ(atomic_load(&lingering_events), 1);
    CHECK_EQ(test_stats(s).lingering, 1);
    ax_free(s);
    fclose(json);
    return 0;
}
