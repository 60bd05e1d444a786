/* test_error_utf8_cut.c - an error text longer than ax_result.error's
 * AX_ERROR_MAX bytes reaches on_done cut between two characters, never
 * inside one, whichever path made it:
 *   A. ax_panic's message;
 *   B. a defer's panic added to the first ("; then a defer panicked: ...");
 *   C. a task kept from its retry by its priority's switch: its own text
 *      gives way to "; not retried: ...", cut between characters and marked
 *      "...";
 *   (the same cut for a class's retry budget is the same code, finish.c
 *   not_retried, so C stands for it);
 *   D. and the switch is not blamed for a class task that its queue-time
 *      budget ended in its bucket: such a task is never retried (a review:
 *      its own reason was cut to 49 bytes for "retries ... switched off").
 * Before, each cut fell at a byte count, and on_done got half a character
 * (a new user's trial: "... e2 82"). Each text is made of 3-byte characters
 * after two ASCII bytes, so that the cut at AX_ERROR_MAX - 1 = 127 bytes
 * (2 + 3k + 2) splits one.
 */
#include "util.h"

#include <stdlib.h>

static char euros[AX_ERROR_MAX * 2]; /* "xy€€€...": 2 + 3k bytes are whole */
static ax_result res[4];
static atomic_int done[4];

/* Valid UTF-8 (RFC 3629, strict enough here: lead bytes and their
 * continuation count). */
static bool utf8_whole(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t len = *p < 0x80 ? 1 : *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : *p >= 0xc2 ? 2 : 0;
        if (!len)
            return false;
        for (size_t i = 1; i < len; i++)
            if ((p[i] & 0xc0) != 0x80)
                return false;
        p += len;
    }
    return true;
}

static void on_done(const ax_result *r, void *arg)
{
    int i = (int)(intptr_t)arg;
    res[i] = *r;
    atomic_store(&done[i], 1);
}

static int panics(ax_task *t, void *arg)
{
    (void)arg;
    ax_panic(t, "%s", euros);
    return 0;
}

static void defer_panics(void *arg)
{
    ax_panic((ax_task *)arg, "%s", euros);
}

static int panics_twice(ax_task *t, void *arg)
{
    (void)arg;
    CHECK_EQ(ax_defer(t, defer_panics, t), AX_OK);
    ax_panic(t, "first");
    return 0;
}

static int holds(ax_task *t, void *arg)
{
    (void)arg;
    ax_sleep(t, 300);
    return 0;
}

static int fails(ax_task *t, void *arg)
{
    (void)arg;
    ax_task_set_error(t, "%s", euros);
    return 1;
}

int main(void)
{
    euros[0] = 'x', euros[1] = 'y';
    for (size_t i = 2; i + 3 < sizeof euros; i += 3)
        memcpy(euros + i, "\xe2\x82\xac", 4);

    ax_sched *s = test_sched(1, 4);
    CHECK_EQ(ax_set_retry_enabled(s, AX_PRIO_LOW, false), AX_OK);
    ax_fn fns[3] = {panics, panics_twice, fails};
    for (int i = 0; i < 3; i++) {
        ax_spec sp = {.fn = fns[i], .timeout_ms = 5000, .priority = AX_PRIO_LOW,
                      .max_retry = i == 2 ? 2 : 0, .on_done = on_done,
                      .cb_arg = (void *)(intptr_t)i};
        CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
        CHECK(WAIT_UNTIL(atomic_load(&done[i]), 10000));
    }
    for (int i = 0; i < 3; i++) {
        if (!utf8_whole(res[i].error)) {
            size_t n = strlen(res[i].error);
            fprintf(stderr, "task %c: error of %zu bytes, not whole characters (last 0x%02x)\n",
                    'A' + i, n, n ? (unsigned char)res[i].error[n - 1] : 0);
            CHECK(0);
        }
    }
    CHECK_EQ(res[0].code, AX_EPANIC);
    CHECK(strncmp(res[0].error, "xy\xe2\x82\xac", 5) == 0);
    CHECK(strlen(res[0].error) >= AX_ERROR_MAX - 3); /* the most whole characters that fit */
    CHECK(strncmp(res[1].error, "first; then a defer panicked: xy\xe2\x82\xac", 35) == 0);
    CHECK_EQ(res[2].state, AX_STATE_FAILED);
    CHECK(strstr(res[2].error, "...; not retried: retries of its priority are switched off "
                               "(ax_set_retry_enabled)") != NULL);

    /* D: a class of one slot with a 30 ms queue-time budget; the second
     * task waits behind the first past it. */
    ax_class_config cc;
    ax_class_config_default(&cc);
    cc.name = "db";
    cc.priority = AX_PRIO_LOW;
    cc.timeout_ms = 1000;
    cc.max_retry = 2;
    cc.adaptive = false;
    cc.limit_max = 1;
    cc.queue_budget = true;
    cc.queue_budget_ms = 30;
    cc.breaker = false;
    cc.retry_budget = false;
    unsigned cls;
    CHECK_EQ(ax_class_register(s, &cc, &cls), AX_OK);
    CHECK_EQ(ax_submit(s, &(ax_spec){.fn = holds, .class_id = cls}, NULL), AX_OK);
    CHECK_EQ(ax_submit(s, &(ax_spec){.fn = holds, .class_id = cls, .on_done = on_done,
                                     .cb_arg = (void *)(intptr_t)3},
                       NULL),
             AX_OK);
    CHECK(WAIT_UNTIL(atomic_load(&done[3]), 10000));
    CHECK_EQ(res[3].code, AX_EEXPIRED);
    if (strstr(res[3].error, "switched off")) {
        fprintf(stderr, "task D: \"%s\"\n", res[3].error);
        CHECK(0);
    }
    CHECK_EQ(ax_shutdown(s, 5000), AX_OK);
    ax_free(s);
    return 0;
}
