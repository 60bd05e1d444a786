/* test_class_adaptive_register.c - with config.adaptive_limit on, a class
 * registered with limit_max 0 is bounded by max_concurrency (ax.h: "0 =
 * max_concurrency"), not by wherever the scheduler's adaptive cap happens
 * to be at that moment (review of a3a7dd5).
 *
 * Old code read the cap in force: registered while a timeout storm held
 * the adaptive cap at 31 of 64, the class kept 31 as its bound for good
 * (its limiter can never rise above it), and a limit_initial of 40 was
 * refused with AX_EINVAL. Here: tasks that always time out pull the
 * adaptive cap below half of max_concurrency (64); then a class with
 * limit_max 0 must report limit 64, and one with limit_initial 40 must be
 * accepted with limit 40.
 */
#include "util.h"

#define CAP 64

static atomic_long submitted, done;

static int stall(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 200); /* past its 20 ms timeout: a dropped sample */
}

static void on_done(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    atomic_fetch_add(&done, 1);
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.max_concurrency = CAP;
    c.adaptive_limit = true;
    c.adaptive_min = 2;
    ax_sched *s = test_sched_cfg(&c);

    /* Keep 150 outstanding until the cap is below half (liveness: 30 s). */
    uint64_t t0 = test_now_ms();
    unsigned lim = CAP;
    while (lim >= CAP / 2 && test_now_ms() - t0 < 30000) {
        while (atomic_load(&submitted) - atomic_load(&done) < 150) {
            atomic_fetch_add(&submitted, 1);
            ax_spec sp = {.fn = stall, .timeout_ms = 20, .on_done = on_done};
            CHECK_EQ(ax_submit(s, &sp, NULL), AX_OK);
        }
        usleep(2000);
        lim = (unsigned)test_stats(s).limit;
    }
    fprintf(stderr, "adaptive cap %u of %u after the storm\n", lim, CAP);
    CHECK(lim < CAP / 2);

    ax_class_config cc;
    ax_class_config_default(&cc); /* adaptive, limit_max 0 */
    cc.name = "late";
    unsigned late;
    CHECK_EQ(ax_class_register(s, &cc, &late), AX_OK);
    ax_class_stats cs;
    CHECK_EQ(ax_class_stats_get(s, late, &cs), AX_OK);
    fprintf(stderr, "class registered now: limit %u (want %u)\n", cs.limit, CAP);
    CHECK_EQ(cs.limit, (unsigned)CAP);

    cc.name = "late40";
    cc.limit_initial = 40; /* within [limit_min, max_concurrency] */
    unsigned late40;
    int rc = ax_class_register(s, &cc, &late40);
    if (rc)
        fprintf(stderr, "limit_initial 40: %s\n", ax_error_detail());
    CHECK_EQ(rc, AX_OK);
    CHECK_EQ(ax_class_stats_get(s, late40, &cs), AX_OK);
    CHECK_EQ(cs.limit, 40u);

    CHECK(WAIT_UNTIL(atomic_load(&done) == atomic_load(&submitted), 30000));
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
