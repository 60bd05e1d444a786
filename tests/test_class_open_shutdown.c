/* test_class_open_shutdown.c - after ax_shutdown, a submission to a class
 * whose breaker is open is AX_ESHUTDOWN, as ax_shutdown documents, and
 * does not count as a breaker refusal (user trial, D3: it was AX_EOPEN, and
 * breaker_rejected kept rising after shutdown). Before shutdown the same
 * submission is AX_EOPEN. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <ax.h>
#include <time.h>

static int failer(ax_task *t, void *a)
{
    (void)t;
    (void)a;
    return 5;
}

static void msleep(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(void)
{
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = 1;
    ax_sched *s;
    CHECK_EQ(ax_new(&cfg, &s), AX_OK);
    ax_class_config cc;
    ax_class_config_default(&cc);
    cc.name = "up";
    cc.breaker_min_calls = 5;
    cc.retry_budget = false;
    unsigned k;
    CHECK_EQ(ax_class_register(s, &cc, &k), AX_OK);
    ax_spec sp = {.fn = failer, .class_id = k};
    ax_class_stats cs;
    /* Failures until the breaker opens (liveness bound only: 20 s). */
    for (int i = 0; i < 2000; i++) {
        CHECK_EQ(ax_class_stats_get(s, k, &cs), AX_OK);
        if (cs.breaker == AX_BREAKER_OPEN)
            break;
        int rc = ax_submit(s, &sp, NULL);
        CHECK(rc == AX_OK || rc == AX_EOPEN);
        msleep(10);
    }
    CHECK_EQ(cs.breaker, AX_BREAKER_OPEN);
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_EOPEN);

    CHECK_EQ(ax_shutdown(s, 5000), AX_OK);
    CHECK_EQ(ax_class_stats_get(s, k, &cs), AX_OK);
    uint64_t refused = cs.breaker_rejected;
    int rc = ax_submit(s, &sp, NULL);
    fprintf(stderr, "after shutdown: %s (%s)\n", ax_strerror(rc), ax_error_detail());
    CHECK_EQ(rc, AX_ESHUTDOWN);
    CHECK_EQ(ax_class_stats_get(s, k, &cs), AX_OK);
    CHECK_EQ(cs.breaker_rejected, refused);
    ax_free(s);
    return 0;
}
