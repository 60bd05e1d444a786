/* test_class_stress.c - classes under churn: 3 classes (fixed
 * limit 2, adaptive, breaker + budget) plus classless tasks, random
 * run times, failures, timeouts, retries and cancels from another thread.
 * Checks exactly-once (one on_done per admitted task), liveness (all end
 * within a generous bound), and that each class's in_flight and queued go
 * back to 0 and its terminal counts add up to its submissions.
 */
#include "class_common.h"

#define N 3000

static atomic_int done_by_id[N];
static uint64_t ids[N];
static atomic_int ended;

static void on_done(const ax_result *r, void *arg)
{
    (void)r;
    int i = (int)(intptr_t)arg;
    atomic_fetch_add(&done_by_id[i], 1);
    atomic_fetch_add(&ended, 1);
}

static int work(ax_task *t, void *arg)
{
    uintptr_t k = (uintptr_t)arg;
    unsigned kind = (unsigned)(k % 7);
    switch (kind) {
    case 0: return 0;
    case 1: return 3; /* fails */
    case 2: return ax_sleep(t, 1 + (unsigned)(k % 5));
    case 3: return ax_sleep(t, 200); /* times out (timeout 20 ms) */
    case 4: ax_yield(t); return 0;
    default: return ax_sleep(t, 2);
    }
}

int main(void)
{
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = 2;
    cfg.max_concurrency = 16;
    ax_sched *s = test_sched_cfg(&cfg);
    unsigned cls[3];
    ax_class_config c = rc_plain("fixed");
    c.limit_max = 2;
    c.timeout_ms = 20;
    c.max_retry = 2;
    c.retry = (ax_retry_policy){AX_BACKOFF_EXPONENTIAL, 1, 4, 1};
    CHECK_EQ(ax_class_register(s, &c, &cls[0]), AX_OK);
    c = rc_adaptive("adapt", 8);
    c.timeout_ms = 20;
    c.max_retry = 1;
    c.retry = (ax_retry_policy){AX_BACKOFF_EXPONENTIAL, 1, 4, 1};
    c.queue_budget = true;
    c.queue_budget_ms = 50;
    CHECK_EQ(ax_class_register(s, &c, &cls[1]), AX_OK);
    ax_class_config_default(&c);
    c.name = "guard";
    c.timeout_ms = 20;
    c.max_retry = 2;
    c.retry = (ax_retry_policy){AX_BACKOFF_EXPONENTIAL, 1, 4, 1};
    c.breaker_min_calls = 5;
    c.breaker_window_ms = 200;
    c.breaker_open_ms = 20;
    c.breaker_half_open_calls = 2;
    c.retry_budget_ratio = 0.2;
    c.retry_budget_min_per_s = 5;
    c.retry_budget_window_ms = 1000;
    CHECK_EQ(ax_class_register(s, &c, &cls[2]), AX_OK);

    uint64_t rng = 88172645463325252ull;
    int admitted = 0;
    unsigned long long class_admitted[4] = {0};
    for (int i = 0; i < N; i++) {
        unsigned which = (unsigned)(xorshift(&rng) % 4); /* 3 = no class */
        ax_spec sp = {.fn = work, .arg = (void *)(uintptr_t)xorshift(&rng),
                      .on_done = on_done, .cb_arg = (void *)(intptr_t)i,
                      .class_id = which < 3 ? cls[which] : 0,
                      .timeout_ms = which < 3 ? 0 : 20,
                      .priority = (ax_priority)(xorshift(&rng) % 3),
                      .overrides = AX_SPEC_PRIORITY};
        int rc = ax_submit(s, &sp, &ids[i]);
        if (rc == AX_OK) {
            admitted++;
            class_admitted[which]++;
        } else {
            CHECK(rc == AX_EOPEN || rc == AX_ESHED || rc == AX_EFULL);
            atomic_store(&done_by_id[i], 1); /* never admitted: nothing to wait for */
            ids[i] = 0;
        }
        if (i > 10 && xorshift(&rng) % 5 == 0) {
            uint64_t v = ids[xorshift(&rng) % (unsigned)i];
            if (v)
                (void)ax_cancel(s, v);
        }
        if (i % 200 == 0)
            usleep(2000);
    }
    bool all = WAIT_UNTIL(atomic_load(&ended) == admitted, 20000);
    fprintf(stderr, "admitted %d, ended %d\n", admitted, atomic_load(&ended));
    for (unsigned k = 0; k < 3; k++) {
        ax_class_stats st = rc_cstats(s, cls[k]);
        fprintf(stderr,
                "%s: submitted=%llu succ=%llu fail=%llu to=%llu canc=%llu in_flight=%u queued=%llu "
                "breaker=%s started=%llu allowed=%llu denied=%llu\n",
                st.name, (unsigned long long)st.submitted, (unsigned long long)st.succeeded,
                (unsigned long long)st.failed, (unsigned long long)st.timed_out,
                (unsigned long long)st.cancelled, st.in_flight, (unsigned long long)st.queued,
                ax_breaker_state_name(st.breaker), (unsigned long long)st.started,
                (unsigned long long)st.retries_allowed, (unsigned long long)st.retries_denied);
    }
    CHECK(all);
    for (int i = 0; i < N; i++)
        CHECK_EQ(atomic_load(&done_by_id[i]), 1);
    for (unsigned k = 0; k < 3; k++) {
        ax_class_stats st = rc_cstats(s, cls[k]);
        CHECK_EQ(st.in_flight, 0u);
        CHECK_EQ(st.queued, 0u);
        CHECK_EQ(st.submitted, class_admitted[k]);
        CHECK_EQ(st.succeeded + st.failed + st.timed_out + st.cancelled, st.submitted);
    }
    ax_stats st = test_stats(s);
    CHECK_EQ(st.running, 0u);
    CHECK_EQ(st.succeeded + st.failed + st.timed_out + st.cancelled, st.submitted);
    CHECK_EQ(ax_shutdown(s, 5000), 0);
    ax_free(s);
    return 0;
}
