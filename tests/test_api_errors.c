/* test_api_errors.c - every public entry point refuses bad input with the
 * documented negative code and a detail naming the culprit (ax.h
 * "Conventions"), never crashes, and a rejected submission creates no task:
 * it is counted in ax_stats.rejected and never produces an on_done.
 *
 * Covered: ax_new (NULL, each invalid config field), ax_submit_batch's own
 * arguments and bad specs inside it, ax_submit (NULL
 * scheduler/spec/fn, priority, timeout, deadline, max_retry, trace_id,
 * spec.retry; ESHUTDOWN after shutdown), ax_cancel, the run-time setters,
 * ax_stats_get, the in-task calls with a NULL task (AX_EINVAL) and with a
 * live task's handle used from outside its coroutine (AX_ESTATE),
 * ax_strerror, ax_error_detail, ax_retry_delay_ms.
 */
#include "util.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>

/* call must return code and leave a detail that contains `names`. */
#define EXPECT_ERR(call, code, names)                                                              \
    do {                                                                                           \
        int ee_rc_ = (call);                                                                       \
        const char *ee_d_ = ax_error_detail();                                                     \
        if (ee_rc_ != (code) || ee_d_ == NULL || ee_d_[0] == 0 || !strstr(ee_d_, (names))) {       \
            fprintf(stderr, "%s:%d: %s returned %d (want %d %s), detail \"%s\" (want \"%s\")\n",   \
                    __FILE__, __LINE__, #call, ee_rc_, (int)(code), #code,                         \
                    ee_d_ ? ee_d_ : "(null)", (names));                                            \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static atomic_int done_calls;

static void count_done(const ax_result *r, void *arg)
{
    (void)r;
    (void)arg;
    atomic_fetch_add(&done_calls, 1);
}

static int noop_fn(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

static void cleanup_noop(void *arg)
{
    (void)arg;
}

/* ---- ax_new -------------------------------------------------------------- */

static int new_with(void (*edit)(ax_config *))
{
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    edit(&c);
    ax_sched *s = NULL;
    int rc = ax_new(&c, &s);
    if (rc == 0) ax_free(s);
    CHECK(rc != 0 || s != NULL);
    return rc;
}

static void e_conc(ax_config *c)
{
    c->max_concurrency = 0;
}
static void e_low(ax_config *c)
{
    c->low_guaranteed = 0;
}
static void e_cap_h(ax_config *c)
{
    c->capacity[AX_PRIO_HIGH] = 0;
}
static void e_cap_n(ax_config *c)
{
    c->capacity[AX_PRIO_NORMAL] = 0;
}
static void e_cap_l(ax_config *c)
{
    c->capacity[AX_PRIO_LOW] = 0;
}
static void e_shed0(ax_config *c)
{
    c->shed_ratio = 0;
}
static void e_shed15(ax_config *c)
{
    c->shed_ratio = 1.5;
}
static void e_shednan(ax_config *c)
{
    c->shed_ratio = NAN;
}
static void e_stack(ax_config *c)
{
    c->stack_size = 1000;
}
static void e_base(ax_config *c)
{
    c->retry.base_ms = 0;
}
static void e_max(ax_config *c)
{
    c->retry.base_ms = 2000, c->retry.max_ms = 1000;
}
static void e_mode(ax_config *c)
{
    c->retry.mode = (ax_backoff)9;
}
static void e_rcap(ax_config *c)
{
    c->max_retry_cap = 5000;
}
static void e_cbt(ax_config *c)
{
    c->callback_threads = 0;
}
static void e_rate(ax_config *c)
{
    c->rate_limit = -1;
}
static void e_ratenan(ax_config *c)
{
    c->rate_limit = NAN;
}
static void e_ratebig(ax_config *c)
{
    c->rate_limit = 1e300; /* ax_set_rate_limit refuses it: so must ax_new */
}
static void e_rateinf(ax_config *c)
{
    c->rate_limit = INFINITY;
}
static void e_ratemax(ax_config *c)
{
    c->rate_limit = 1e12; /* the bound itself is accepted */
}
static void e_none(ax_config *c)
{
    (void)c;
}

static void test_new(void)
{
    ax_config c;
    ax_config_default(&c);
    ax_sched *s = NULL;
    EXPECT_ERR(ax_new(NULL, &s), AX_EINVAL, "config");
    CHECK(s == NULL);
    CHECK_EQ(ax_new(&c, NULL), AX_EINVAL);
    CHECK(ax_error_detail()[0] != 0);

    EXPECT_ERR(new_with(e_conc), AX_EINVAL, "max_concurrency");
    EXPECT_ERR(new_with(e_low), AX_EINVAL, "low_guaranteed");
    EXPECT_ERR(new_with(e_cap_h), AX_EINVAL, "capacity");
    EXPECT_ERR(new_with(e_cap_n), AX_EINVAL, "capacity");
    EXPECT_ERR(new_with(e_cap_l), AX_EINVAL, "capacity");
    EXPECT_ERR(new_with(e_shed0), AX_EINVAL, "shed_ratio");
    EXPECT_ERR(new_with(e_shed15), AX_EINVAL, "shed_ratio");
    EXPECT_ERR(new_with(e_shednan), AX_EINVAL, "shed_ratio");
    EXPECT_ERR(new_with(e_stack), AX_EINVAL, "stack_size");
    EXPECT_ERR(new_with(e_base), AX_EINVAL, "base_ms");
    EXPECT_ERR(new_with(e_max), AX_EINVAL, "max_ms");
    EXPECT_ERR(new_with(e_mode), AX_EINVAL, "mode");
    EXPECT_ERR(new_with(e_rcap), AX_EINVAL, "max_retry_cap");
    EXPECT_ERR(new_with(e_cbt), AX_EINVAL, "callback_threads");
    EXPECT_ERR(new_with(e_rate), AX_EINVAL, "rate_limit");
    EXPECT_ERR(new_with(e_ratenan), AX_EINVAL, "rate_limit");
    EXPECT_ERR(new_with(e_ratebig), AX_EINVAL, "config.rate_limit must be in [0, 1e12]");
    EXPECT_ERR(new_with(e_rateinf), AX_EINVAL, "rate_limit");
    CHECK_EQ(new_with(e_ratemax), 0);
    CHECK_EQ(new_with(e_none), 0); /* the defaults themselves are valid */
}

/* ---- ax_submit ----------------------------------------------------------- */

static ax_spec good_spec(void)
{
    return (ax_spec){.fn = noop_fn, .timeout_ms = 1000, .on_done = count_done};
}

static void test_submit(ax_sched *s)
{
    ax_stats before = test_stats(s);
    unsigned rejected = 0;
    uint64_t id = 777;
    ax_spec sp;

    sp = good_spec();
    EXPECT_ERR(ax_submit(NULL, &sp, &id), AX_EINVAL, "sched");
    EXPECT_ERR(ax_submit(s, NULL, &id), AX_EINVAL, "spec");
    rejected++;
    /* ax_submit_batch: no scheduler, nothing to count in; specs NULL with
     * n 2: one refused call, counted once as ax_submit(s, NULL) is, whatever
     * n; a bad spec inside is refused as ax_submit does it. */
    EXPECT_ERR(ax_submit_batch(NULL, &sp, 1, NULL, NULL), AX_EINVAL, "scheduler");
    EXPECT_ERR(ax_submit_batch(s, NULL, 2, NULL, NULL), AX_EINVAL, "specs");
    rejected += 1;
    {
        ax_spec two[2] = {good_spec(), good_spec()};
        two[0].fn = NULL;
        two[1].fn = NULL;
        int rcs2[2] = {0, 0};
        EXPECT_ERR(ax_submit_batch(s, two, 2, rcs2, NULL), AX_EINVAL, "fn");
        CHECK(rcs2[0] == AX_EINVAL && rcs2[1] == AX_EINVAL);
        rejected += 2;
    }
    sp.fn = NULL;
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_EINVAL, "fn");
    rejected++;
    sp = good_spec();
    sp.priority = (ax_priority)7;
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_EINVAL, "priority");
    rejected++;
    sp = good_spec();
    sp.timeout_ms = 0;
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_EINVAL, "timeout_ms");
    rejected++;
    sp.timeout_ms = 1000000000000000ull; /* 10^15 ms */
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_EINVAL, "timeout_ms");
    rejected++;
    sp = good_spec();
    sp.deadline_ns = ax_now_ns() - 1;
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_EINVAL, "deadline");
    rejected++;
    sp = good_spec();
    sp.max_retry = 17; /* default max_retry_cap is 16 */
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_EINVAL, "max_retry");
    rejected++;
    sp = good_spec();
    sp.trace_id = "0123456789012345678901234567890123456789"; /* 40 chars */
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_EINVAL, "trace_id");
    rejected++;
    sp.trace_id = "01234567890123456789012345678901"; /* 32 chars: no room for the NUL */
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_EINVAL, "trace_id");
    rejected++;
    sp.trace_id = "id\nax: FAKE REPORT"; /* would forge a line of the stderr reports */
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_EINVAL, "control character (byte 2: 0x0a)");
    rejected++;
    sp.trace_id = "id\x1b[2J";
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_EINVAL, "control character (byte 2: 0x1b)");
    rejected++;
    sp.trace_id = "id\xc2\x9b" "2J"; /* U+009B, the C1 CSI */
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_EINVAL, "control character (byte 2: 0xc2)");
    rejected++;
    ax_retry_policy bad = {.mode = AX_BACKOFF_EXPONENTIAL, .base_ms = 0, .max_ms = 100};
    sp = good_spec();
    sp.retry = &bad;
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_EINVAL, "base_ms");
    rejected++;
    bad = (ax_retry_policy){.mode = AX_BACKOFF_EXPONENTIAL, .base_ms = 500, .max_ms = 100};
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_EINVAL, "max_ms");
    rejected++;
    bad = (ax_retry_policy){.mode = (ax_backoff)5, .base_ms = 100, .max_ms = 100};
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_EINVAL, "mode");
    rejected++;
    CHECK_EQ(id, 777); /* no id for a refused submission */

    /* The boundaries just inside are accepted. */
    sp = good_spec();
    sp.trace_id = "0123456789012345678901234567890"; /* 31 chars */
    sp.max_retry = 16;
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    CHECK(id != 777);

    CHECK(WAIT_UNTIL(atomic_load(&done_calls) == 1, 2000));
    usleep(100 * 1000);
    CHECK_EQ(atomic_load(&done_calls), 1); /* only the admitted one */
    ax_stats st = test_stats(s);
    CHECK_EQ(st.rejected - before.rejected, rejected);
    CHECK_EQ(st.submitted - before.submitted, 1);
    CHECK_EQ(st.succeeded - before.succeeded, 1);
}

/* ---- control, stats ------------------------------------------------------ */

static void test_control(ax_sched *s)
{
    ax_stats st;
    EXPECT_ERR(ax_cancel(NULL, 1), AX_EINVAL, "sched");
    /* An id this scheduler never issued may be another's (ids are unique in
     * the process): the detail says both. */
    EXPECT_ERR(ax_cancel(s, UINT64_MAX), AX_ENOTFOUND, "no live task 18446744073709551615 on this");
    EXPECT_ERR(ax_cancel(s, UINT64_MAX), AX_ENOTFOUND, "another scheduler's");
    EXPECT_ERR(ax_set_max_concurrency(s, 0), AX_EINVAL, "max_concurrency");
    CHECK_EQ(test_stats(s).limit, 500); /* unchanged */
    EXPECT_ERR(ax_set_max_concurrency(NULL, 5), AX_EINVAL, "sched");
    EXPECT_ERR(ax_set_quotas(s, 1, 1, 0), AX_EINVAL, "low_guaranteed");
    EXPECT_ERR(ax_set_quotas(NULL, 1, 1, 1), AX_EINVAL, "sched");
    EXPECT_ERR(ax_set_retry_enabled(s, (ax_priority)9, true), AX_EINVAL, "priority");
    EXPECT_ERR(ax_set_retry_enabled(NULL, AX_PRIO_LOW, true), AX_EINVAL, "sched");
    EXPECT_ERR(ax_set_rate_limit(s, -1, 0), AX_EINVAL, "rate");
    EXPECT_ERR(ax_set_rate_limit(s, NAN, 0), AX_EINVAL, "rate");
    EXPECT_ERR(ax_set_rate_limit(s, 1e300, 0), AX_EINVAL, "[0, 1e12]");
    EXPECT_ERR(ax_set_rate_limit(NULL, 10, 0), AX_EINVAL, "sched");
    EXPECT_ERR(ax_pause(NULL), AX_EINVAL, "sched");
    EXPECT_ERR(ax_resume(NULL), AX_EINVAL, "sched");
    EXPECT_ERR(ax_shutdown(NULL, 0), AX_EINVAL, "sched");
    CHECK_EQ(ax_stats_get(NULL, &st), AX_EINVAL);
    CHECK(ax_error_detail()[0] != 0);
    CHECK_EQ(ax_stats_get(s, NULL), AX_EINVAL);
    CHECK(ax_error_detail()[0] != 0);
    ax_free(NULL);

    /* The rate limit was not changed by the refused calls: submissions flow. */
    ax_spec sp = good_spec();
    int before = atomic_load(&done_calls);
    for (int i = 0; i < 50; i++)
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&done_calls) == before + 50, 2000));
}

/* ---- in-task calls ------------------------------------------------------- */

static ax_task *_Atomic parked;
static atomic_int release_parked;

static int parked_fn(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&parked, t);
    while (!atomic_load(&release_parked))
        if (ax_sleep(t, 2) != 0) return 1;
    return 0;
}

/* Another task's handle inside a task. */
static atomic_int foreign_sleep = 1, foreign_cancelled = 1, foreign_spawn = 1, foreign_done;
static atomic_int spawn_bad = 1, spawn_bad_named;
/* ax_spawn checks the spec before the parent's deadline, as ax_submit checks
 * AX_EINVAL first (new user's trial: AX_ETIMEDOUT for a bad spec whose
 * delay_ms passed the parent's deadline; and a delay_ms too large to
 * multiply was measured against the deadline before its bound). */
static atomic_int spawn_bad_late = 1, spawn_bad_late_named, spawn_huge_delay = 1,
                  spawn_huge_delay_named;

static int foreign_fn(ax_task *t, void *arg)
{
    ax_task *other = arg;
    atomic_store(&foreign_sleep, ax_sleep(other, 1));
    atomic_store(&foreign_cancelled, ax_cancelled(other));
    ax_spec sp = good_spec();
    atomic_store(&foreign_spawn, ax_spawn(other, &sp, NULL));
    sp.timeout_ms = 0; /* ax_spawn: the same checks as ax_submit */
    atomic_store(&spawn_bad, ax_spawn(t, &sp, NULL));
    atomic_store(&spawn_bad_named, strstr(ax_error_detail(), "timeout_ms") != NULL);
    sp.delay_ms = 3600 * 1000; /* past the parent's deadline */
    atomic_store(&spawn_bad_late, ax_spawn(t, &sp, NULL));
    atomic_store(&spawn_bad_late_named, strstr(ax_error_detail(), "timeout_ms") != NULL);
    sp.timeout_ms = 100;
    sp.delay_ms = UINT64_MAX / 1000; /* times 10^6 wraps */
    atomic_store(&spawn_huge_delay, ax_spawn(t, &sp, NULL));
    atomic_store(&spawn_huge_delay_named, strstr(ax_error_detail(), "delay_ms") != NULL &&
                                              strstr(ax_error_detail(), "overflows") != NULL);
    atomic_store(&foreign_done, 1);
    return 0;
}

static void test_in_task(ax_sched *s)
{
    ax_spec sp = good_spec();
    ax_result r;

    /* NULL task, from outside any task. */
    static char buf_any[1];
    EXPECT_ERR(ax_sleep(NULL, 1), AX_EINVAL, "task");
    EXPECT_ERR(ax_yield(NULL), AX_EINVAL, "task");
    EXPECT_ERR(ax_wait_fd(NULL, 0, AX_READ, 1), AX_EINVAL, "task");
    EXPECT_ERR(ax_cancelled(NULL), AX_EINVAL, "task");
    EXPECT_ERR(ax_join(NULL, 1, 0, &r), AX_EINVAL, "task");
    EXPECT_ERR(ax_spawn(NULL, &sp, NULL), AX_EINVAL, "task");
    EXPECT_ERR(ax_defer(NULL, cleanup_noop, NULL), AX_EINVAL, "task");
    EXPECT_ERR(ax_panic(NULL, "x %d", 1), AX_EINVAL, "task");
    EXPECT_ERR(ax_task_set_error(NULL, "x %d", 1), AX_EINVAL, "task");
    /* The task first, as every in-task call (it said "addr is NULL"). */
    EXPECT_ERR(ax_connect(NULL, 0, NULL, 0, 1), AX_EINVAL, "ax_connect: task is NULL");
    /* With another argument bad too: the task is still named first. */
    EXPECT_ERR(ax_read(NULL, 0, NULL, 1, 1), AX_EINVAL, "ax_read: task is NULL");
    EXPECT_ERR(ax_write(NULL, 0, NULL, 1, 1), AX_EINVAL, "ax_write: task is NULL");
    EXPECT_ERR(ax_read(NULL, 0, buf_any, (size_t)SSIZE_MAX + 1, 1), AX_EINVAL,
               "ax_read: task is NULL");
    EXPECT_ERR(ax_write(NULL, 0, buf_any, (size_t)SSIZE_MAX + 1, 1), AX_EINVAL,
               "ax_write: task is NULL");
    EXPECT_ERR(ax_wait_fd(NULL, -1, 0, -5), AX_EINVAL, "task is NULL");
    EXPECT_ERR(ax_sleep(NULL, -5), AX_EINVAL, "task is NULL");
    EXPECT_ERR(ax_join(NULL, 0, 0, NULL), AX_EINVAL, "task is NULL");
    EXPECT_ERR(ax_spawn(NULL, NULL, NULL), AX_EINVAL, "task is NULL");
    EXPECT_ERR(ax_defer(NULL, NULL, NULL), AX_EINVAL, "task is NULL");
    EXPECT_ERR(ax_panic(NULL, NULL), AX_EINVAL, "task is NULL");
    EXPECT_ERR(ax_task_set_error(NULL, NULL), AX_EINVAL, "task is NULL");

    /* A live task's handle, from the main thread. */
    sp.fn = parked_fn;
    sp.timeout_ms = 10000;
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&parked) != NULL, 2000));
    ax_task *t = atomic_load(&parked);
    ax_stats before = test_stats(s);
    sp = good_spec();
    CHECK_EQ(ax_sleep(t, 1), AX_ESTATE);
    CHECK(ax_error_detail()[0] != 0);
    CHECK_EQ(ax_yield(t), AX_ESTATE);
    CHECK_EQ(ax_wait_fd(t, 0, AX_READ, 1), AX_ESTATE);
    CHECK_EQ(ax_cancelled(t), AX_ESTATE);
    CHECK_EQ(ax_join(t, 1, 0, &r), AX_ESTATE);
    CHECK_EQ(ax_spawn(t, &sp, NULL), AX_ESTATE);
    CHECK_EQ(ax_defer(t, cleanup_noop, NULL), AX_ESTATE);
    CHECK_EQ(ax_panic(t, "x"), AX_ESTATE);
    CHECK_EQ(ax_task_set_error(t, "x"), AX_ESTATE);
    CHECK(ax_error_detail()[0] != 0);

    /* The same handle inside another task. */
    ax_spec fs = {.fn = foreign_fn, .arg = t, .timeout_ms = 5000};
    CHECK_EQ(ax_submit(s, &fs, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&foreign_done), 2000));
    CHECK_EQ(atomic_load(&foreign_sleep), AX_ESTATE);
    CHECK_EQ(atomic_load(&foreign_cancelled), AX_ESTATE);
    CHECK_EQ(atomic_load(&foreign_spawn), AX_ESTATE);
    CHECK_EQ(atomic_load(&spawn_bad), AX_EINVAL);
    CHECK_EQ(atomic_load(&spawn_bad_named), 1);
    CHECK_EQ(atomic_load(&spawn_bad_late), AX_EINVAL);
    CHECK_EQ(atomic_load(&spawn_bad_late_named), 1);
    CHECK_EQ(atomic_load(&spawn_huge_delay), AX_EINVAL);
    CHECK_EQ(atomic_load(&spawn_huge_delay_named), 1);

    /* None of that created a task, and the parked task is unharmed. */
    ax_stats st = test_stats(s);
    CHECK_EQ(st.submitted - before.submitted, 1); /* foreign_fn itself */
    atomic_store(&release_parked, 1);
    CHECK(WAIT_UNTIL(test_stats(s).succeeded - before.succeeded == 2, 2000));
    CHECK_EQ(test_stats(s).failed, 0);
}

/* ---- names and details --------------------------------------------------- */

static atomic_int fresh_detail_empty;

static void *fresh_thread(void *arg)
{
    (void)arg;
    const char *d = ax_error_detail();
    atomic_store(&fresh_detail_empty, d != NULL && d[0] == 0);
    return NULL;
}

static void test_names(void)
{
    const int codes[] = {AX_OK,     AX_EINVAL,    AX_ENOMEM,    AX_EFULL,     AX_ESHED,
                         AX_ERATE,  AX_ESHUTDOWN, AX_ETIMEDOUT, AX_ECANCELED, AX_ENOTFOUND,
                         AX_ESTATE, AX_ESYS,      AX_EPANIC,    AX_EBUSY,     AX_ENET};
    const int n = (int)(sizeof codes / sizeof codes[0]);
    const int unknown[] = {-99, -15, 1, 42, INT_MIN, INT_MAX};
    const char *unk = ax_strerror(-99);
    CHECK(unk != NULL);
    for (int i = 0; i < n; i++) {
        const char *a = ax_strerror(codes[i]);
        CHECK(a != NULL);
        CHECK(a[0] != 0);
        if (strcmp(a, unk) == 0) {
            fprintf(stderr, "ax_strerror(%d) = \"%s\", the same as an unknown code\n", codes[i], a);
            abort();
        }
        for (int k = 0; k < i; k++)
            CHECK(strcmp(a, ax_strerror(codes[k])) != 0);
    }
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *u = ax_strerror(unknown[i]);
        CHECK(u != NULL);
        CHECK(u[0] != 0);
    }
    /* Every name function says "invalid" for a value outside its enum. */
    CHECK_STR(ax_priority_name((ax_priority)3), "invalid");
    CHECK_STR(ax_priority_name((ax_priority)-1), "invalid");
    CHECK_STR(ax_state_name((ax_state)99), "invalid");
    CHECK_STR(ax_event_name((ax_event_kind)AX_EV_COUNT), "invalid");
    CHECK_STR(ax_breaker_state_name((ax_breaker_state)3), "invalid");
    CHECK_STR(ax_breaker_state_name((ax_breaker_state)-1), "invalid");
    CHECK_STR(ax_breaker_state_name(AX_BREAKER_HALF_OPEN), "half-open");

    /* ax_error_detail is per thread and "" before any failure. */
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, fresh_thread, NULL), 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(atomic_load(&fresh_detail_empty), 1);

    ax_retry_policy p = {.mode = AX_BACKOFF_EXPONENTIAL, .base_ms = 100, .max_ms = 1000};
    uint64_t d = 0;
    EXPECT_ERR(ax_retry_delay_ms(NULL, 0, 0, &d), AX_EINVAL, "policy");
    EXPECT_ERR(ax_retry_delay_ms(&p, 0, 0, NULL), AX_EINVAL, "delay_ms");
    p.base_ms = 0;
    EXPECT_ERR(ax_retry_delay_ms(&p, 0, 0, &d), AX_EINVAL, "base_ms");
    p.base_ms = 100;
    CHECK_EQ(ax_retry_delay_ms(&p, 0, 0, &d), 0);
    CHECK_EQ(d, 100);
}

/* ---- after shutdown ----------------------------------------------------- */

static void test_after_shutdown(ax_sched *s)
{
    CHECK_EQ(ax_shutdown(s, 1000), 0);
    int before_done = atomic_load(&done_calls);
    ax_stats before = test_stats(s);
    ax_spec sp = good_spec();
    uint64_t id = 777;
    EXPECT_ERR(ax_submit(s, &sp, &id), AX_ESHUTDOWN, "shut");
    CHECK_EQ(id, 777);
    ax_stats st = test_stats(s);
    CHECK_EQ(st.rejected - before.rejected, 1);
    CHECK_EQ(st.submitted, before.submitted);
    usleep(50 * 1000);
    CHECK_EQ(atomic_load(&done_calls), before_done);
}

int main(void)
{
    test_new();
    test_names();
    ax_sched *s = test_sched(2, 500);
    test_submit(s);
    test_control(s);
    test_in_task(s);
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 2000));
    test_after_shutdown(s);
    ax_free(s);
    return 0;
}
