/* test_trace_format.c - a generated trace id is "ax-" and the task id in 16
 * lowercase hex digits, most significant first (trace.c formats it from
 * a table of digit pairs, not snprintf): checked against snprintf for every
 * nibble value in every position, the ends of the range, and 200 000
 * pseudo-random ids; then a task's own, through ax_task_trace_id and its
 * ax_result. */
#include "util.h" /* first: _GNU_SOURCE */

#include "internal.h"

#include <string.h>

static void check_id(uint64_t id)
{
    char want[32], got[AX_TRACE_ID_MAX];
    memset(got, 'x', sizeof got);
    snprintf(want, sizeof want, "ax-%016llx", (unsigned long long)id);
    trace_format_id(id, got);
    if (strcmp(want, got) != 0) {
        fprintf(stderr, "id %#llx: want %s, got %.*s\n", (unsigned long long)id, want,
                AX_TRACE_ID_MAX, got);
        CHECK(0);
    }
}

static char seen[AX_TRACE_ID_MAX];
static char in_task[AX_TRACE_ID_MAX];
static atomic_ullong done_id;
static atomic_int done_n;

static int task(ax_task *t, void *arg)
{
    (void)arg;
    snprintf(in_task, sizeof in_task, "%s", ax_task_trace_id(t));
    return 0;
}

static void on_done(const ax_result *r, void *arg)
{
    (void)arg;
    memcpy(seen, r->trace_id, sizeof seen);
    atomic_store(&done_id, r->id);
    atomic_store(&done_n, 1);
}

int main(void)
{
    check_id(0);
    check_id(UINT64_MAX);
    for (unsigned pos = 0; pos < 16; pos++)
        for (uint64_t nib = 0; nib < 16; nib++) {
            check_id(nib << (4 * pos));
            check_id(~(nib << (4 * pos)));
        }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        check_id(x);
    }

    ax_sched *s = test_sched(1, 1);
    ax_spec sp = {.fn = task, .timeout_ms = 10000, .on_done = on_done};
    uint64_t id = 0;
    CHECK_EQ(ax_submit(s, &sp, &id), AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&done_n) == 1, 30000 * TEST_SLOW));
    CHECK_EQ(atomic_load(&done_id), id);
    char want[32];
    snprintf(want, sizeof want, "ax-%016llx", (unsigned long long)id);
    CHECK(strcmp(seen, want) == 0);
    CHECK(strcmp(in_task, want) == 0);
    CHECK_EQ(ax_shutdown(s, 5000), AX_OK);
    ax_free(s);
    return 0;
}
