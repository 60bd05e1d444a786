/* Lifecycle events (DESIGN.md §9): every kind is produced, the JSON lines
 * sink writes valid JSON that parses back to the same fields, counts match
 * the stats counters, the filter and sampling work at run time. */
#include "util.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- a strict parser for one flat JSON object a line ------------------- */

struct kv {
    char key[32];
    char str[600];
    double num;
    int is_str;
};

static const char *ws(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

static const char *parse_string(const char *p, char *out, size_t cap)
{
    CHECK(*p == '"');
    p++;
    size_t n = 0;
    while (*p != '"') {
        CHECK(*p != 0 && (unsigned char)*p >= 0x20); /* control chars must be escaped */
        char c = *p++;
        if (c == '\\') {
            c = *p++;
            switch (c) {
            case '"': case '\\': case '/': break;
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': {
                unsigned v;
                CHECK(sscanf(p, "%4x", &v) == 1);
                p += 4;
                c = (char)v;
                break;
            }
            default: CHECK(!"bad escape");
            }
        }
        CHECK(n + 1 < cap);
        out[n++] = c;
    }
    out[n] = 0;
    return p + 1;
}

/* Parses {"k":"v"|number,...}; returns the number of pairs. */
static int parse_object(const char *line, struct kv *kv, int max)
{
    const char *p = ws(line);
    CHECK(*p == '{');
    p = ws(p + 1);
    int n = 0;
    while (*p != '}') {
        CHECK(n < max);
        p = ws(parse_string(p, kv[n].key, sizeof kv[n].key));
        CHECK(*p == ':');
        p = ws(p + 1);
        if (*p == '"') {
            p = parse_string(p, kv[n].str, sizeof kv[n].str);
            kv[n].is_str = 1;
        } else {
            char *end;
            kv[n].num = strtod(p, &end);
            CHECK(end != p);
            p = end;
            kv[n].is_str = 0;
        }
        n++;
        p = ws(p);
        if (*p == ',')
            p = ws(p + 1);
        else
            CHECK(*p == '}');
    }
    p = ws(p + 1);
    CHECK(*p == '\n' || *p == 0);
    return n;
}

static const struct kv *get(const struct kv *kv, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (strcmp(kv[i].key, key) == 0)
            return &kv[i];
    return NULL;
}

/* ---- tasks producing every kind ---------------------------------------- */

static int ok(ax_task *t, void *a)
{
    (void)t, (void)a;
    return 0;
}
static int fails(ax_task *t, void *a)
{
    (void)a;
    ax_task_set_error(t, "bad \"quote\"\n and newline");
    return 3;
}
static int sleeps(ax_task *t, void *a)
{
    (void)a;
    return ax_sleep(t, 5000);
}
static int panics(ax_task *t, void *a)
{
    (void)a;
    ax_panic(t, "boom %d", 42);
    return 0;
}

static atomic_int cb_count[AX_EV_COUNT];
static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    CHECK((unsigned)e->kind < AX_EV_COUNT);
    atomic_fetch_add(&cb_count[e->kind], 1);
    /* The callback runs on ax's events thread, named as the README says. */
    char name[16];
    CHECK_EQ(pthread_getname_np(pthread_self(), name, sizeof name), 0);
    CHECK(strcmp(name, "ax-events") == 0);
}

int main(void)
{
    char path[] = "/tmp/ax_events_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w+");
    ax_config c;
    ax_config_default(&c);
    c.workers = 2;
    c.capacity[AX_PRIO_LOW] = 1;
    c.shed_ratio = 1.0;
    c.grace_ms = 100;
    ax_sched *s;
    CHECK_EQ(ax_new(&c, &s), 0);
    CHECK_EQ(ax_events_json(s, f), 0);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);
    CHECK_EQ(ax_events_filter(s, 1u << 20, 1), AX_EINVAL);
    CHECK_EQ(ax_events_filter(s, AX_EVMASK_ALL, 0), AX_EINVAL);

    static const ax_retry_policy fast = {AX_BACKOFF_EXPONENTIAL, 10, 10, 0};
    ax_spec sp;
    sp = (ax_spec){.fn = ok, .timeout_ms = 1000, .trace_id = "trace-ok"};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    sp = (ax_spec){.fn = fails, .timeout_ms = 1000, .max_retry = 1, .retry = &fast};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    sp = (ax_spec){.fn = sleeps, .timeout_ms = 50, .priority = AX_PRIO_HIGH};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    sp = (ax_spec){.fn = panics, .timeout_ms = 1000};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    sp = (ax_spec){.fn = ok, .timeout_ms = 0}; /* invalid: REJECTED */
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_EINVAL);
    /* SHED: capacity LOW 1 with shed_ratio 1.0 cannot shed LOW before full,
     * so use a delayed LOW to fill LOW, then a rate of 0 load...: simpler,
     * cancel and shed via a second scheduler below. */
    uint64_t cid;
    sp = (ax_spec){.fn = sleeps, .timeout_ms = 10000};
    CHECK_EQ(ax_submit(s, &sp, &cid), 0);
    CHECK(WAIT_UNTIL(test_stats(s).running >= 1, 2000));
    usleep(20000);
    CHECK_EQ(ax_cancel(s, cid), 0);
    CHECK(WAIT_UNTIL(test_stats(s).running == 0 && test_stats(s).delayed == 0, 5000));
    CHECK_EQ(ax_events_flush(s), 0);

    /* A second scheduler sheds: total capacity 3, shed_ratio 0.33: the line
     * is 0.99 tasks, reached at a load of 1. */
    ax_config c2 = c;
    c2.capacity[AX_PRIO_HIGH] = c2.capacity[AX_PRIO_NORMAL] = c2.capacity[AX_PRIO_LOW] = 1;
    c2.shed_ratio = 0.33;
    ax_sched *s2;
    CHECK_EQ(ax_new(&c2, &s2), 0);
    CHECK_EQ(ax_events_json(s2, f), 0);
    CHECK_EQ(ax_pause(s2), 0);
    sp = (ax_spec){.fn = ok, .timeout_ms = 1000};
    CHECK_EQ(ax_submit(s2, &sp, NULL), 0);
    CHECK_EQ(ax_submit(s2, &sp, NULL), AX_ESHED);
    CHECK_EQ(ax_resume(s2), 0);
    CHECK(WAIT_UNTIL(test_stats(s2).succeeded == 1, 2000));
    ax_free(s2); /* writes its remaining events */

    ax_stats st = test_stats(s);
    CHECK_EQ(ax_events_flush(s), 0);
    fflush(f);

    /* Parse every line back. */
    rewind(f);
    char line[4096];
    int kinds[AX_EV_COUNT] = {0};
    int lines = 0;
    bool saw_escape = false, saw_trace = false;
    while (fgets(line, sizeof line, f)) {
        struct kv kv[16];
        int n = parse_object(line, kv, 16);
        const struct kv *ev = get(kv, n, "event"), *ts = get(kv, n, "ts");
        CHECK(ev && ev->is_str && ts && ts->is_str);
        /* RFC 3339 UTC with microseconds: 2026-11-29T23:30:01.123456Z */
        CHECK_EQ(strlen(ts->str), 27);
        CHECK(ts->str[4] == '-' && ts->str[10] == 'T' && ts->str[19] == '.' && ts->str[26] == 'Z');
        int k;
        for (k = 0; k < AX_EV_COUNT; k++)
            if (strcmp(ev->str, ax_event_name((ax_event_kind)k)) == 0)
                break;
        CHECK(k < AX_EV_COUNT);
        kinds[k]++;
        CHECK(get(kv, n, "id") && get(kv, n, "trace_id") && get(kv, n, "priority") &&
              get(kv, n, "attempt") && get(kv, n, "wait_us") && get(kv, n, "run_us") &&
              get(kv, n, "code") && get(kv, n, "message"));
        const struct kv *m = get(kv, n, "message");
        if (strstr(m->str, "bad \"quote\"\n and newline"))
            saw_escape = true;
        if (strcmp(get(kv, n, "trace_id")->str, "trace-ok") == 0)
            saw_trace = true;
        if (k == AX_EV_PANIC)
            CHECK(strstr(m->str, "boom 42") != NULL);
        lines++;
    }
    CHECK(saw_escape && saw_trace);
    for (int k = 0; k < AX_EV_COUNT; k++) {
        if (k == AX_EV_LINGERING)
            continue; /* test_lingering covers it */
        if (kinds[k] == 0)
            fprintf(stderr, "no %s event\n", ax_event_name((ax_event_kind)k));
        CHECK(kinds[k] > 0);
    }
    /* Counts equal the stats (first scheduler; s2 added 2 submitted, 1
     * started/succeeded, 1 shed). */
    CHECK_EQ(kinds[AX_EV_SUBMITTED], st.submitted + 1);
    CHECK_EQ(kinds[AX_EV_STARTED], st.started + 1);
    CHECK_EQ(kinds[AX_EV_SUCCEEDED], st.succeeded + 1);
    CHECK_EQ(kinds[AX_EV_FAILED], st.failed);
    CHECK_EQ(kinds[AX_EV_TIMED_OUT], st.timed_out);
    CHECK_EQ(kinds[AX_EV_CANCELLED], st.cancelled);
    CHECK_EQ(kinds[AX_EV_RETRY_SCHEDULED], st.retried);
    CHECK_EQ(kinds[AX_EV_PANIC], st.panicked);
    CHECK_EQ(kinds[AX_EV_REJECTED], st.rejected);
    CHECK_EQ(kinds[AX_EV_SHED], st.shed + 1);
    /* The callback sink saw the first scheduler's events too. */
    CHECK_EQ(atomic_load(&cb_count[AX_EV_SUBMITTED]), st.submitted);
    CHECK_EQ(atomic_load(&cb_count[AX_EV_FAILED]), st.failed);
    CHECK_EQ(ax_events_dropped(s), 0);

    /* Filter at run time: failures only; then sampling 1 in 4. */
    CHECK_EQ(ax_events_callback(s, NULL, NULL), 0);
    CHECK_EQ(ax_events_json(s, NULL), 0);
    for (int k = 0; k < AX_EV_COUNT; k++)
        atomic_store(&cb_count[k], 0);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);
    CHECK_EQ(ax_events_filter(s, AX_EVMASK_FAILURES, 1), 0);
    for (int i = 0; i < 40; i++) {
        sp = (ax_spec){.fn = i % 2 ? ok : fails, .timeout_ms = 1000};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK(WAIT_UNTIL(test_stats(s).succeeded + test_stats(s).failed >= st.succeeded + st.failed + 40, 5000));
    /* The terminal event comes after the outcome's count (finish.c): wait
     * for the events, then check that no more came. */
    CHECK(WAIT_UNTIL((ax_events_flush(s), atomic_load(&cb_count[AX_EV_FAILED]) >= 20), 10000));
    CHECK_EQ(ax_events_flush(s), 0);
    CHECK_EQ(atomic_load(&cb_count[AX_EV_SUBMITTED]), 0);
    CHECK_EQ(atomic_load(&cb_count[AX_EV_SUCCEEDED]), 0);
    CHECK_EQ(atomic_load(&cb_count[AX_EV_FAILED]), 20);
    CHECK_EQ(ax_events_filter(s, AX_EVMASK_ALL, 4), 0);
    for (int k = 0; k < AX_EV_COUNT; k++)
        atomic_store(&cb_count[k], 0);
    for (int i = 0; i < 400; i++) {
        sp = (ax_spec){.fn = ok, .timeout_ms = 1000};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    CHECK(WAIT_UNTIL(test_stats(s).running == 0 && test_stats(s).queued[AX_PRIO_NORMAL] == 0, 5000));
    /* A slot is freed before the SUCCEEDED event is emitted (finish.c):
     * wait for the sampled events themselves (1 in 4 of 400). */
    CHECK(WAIT_UNTIL((ax_events_flush(s), atomic_load(&cb_count[AX_EV_SUCCEEDED]) >= 100), 10000));
    CHECK_EQ(ax_events_flush(s), 0);
    int sub = atomic_load(&cb_count[AX_EV_SUBMITTED]);
    CHECK_EQ(sub, 100); /* one thread's consecutive submissions: exactly 1 in 4 */
    CHECK_EQ(atomic_load(&cb_count[AX_EV_STARTED]), sub);
    CHECK_EQ(atomic_load(&cb_count[AX_EV_SUCCEEDED]), sub);

    /* Lossless mode: a burst far larger than the buffers loses nothing. */
    CHECK_EQ(ax_events_filter(s, AX_EVMASK_ALL, 1), 0);
    CHECK_EQ(ax_events_lossless(s, true), 0);
    for (int k = 0; k < AX_EV_COUNT; k++)
        atomic_store(&cb_count[k], 0);
    uint64_t dropped0 = ax_events_dropped(s);
#if defined(__SANITIZE_THREAD__)
    const int burst = 3000; /* TSan: each coroutine is a fiber, ~1 ms to create */
#else
    const int burst = 30000;
#endif
    for (int i = 0; i < burst; i++) {
        sp = (ax_spec){.fn = ok, .timeout_ms = 5000};
        int rc;
        while ((rc = ax_submit(s, &sp, NULL)) == AX_EFULL || rc == AX_ESHED)
            usleep(100);
        CHECK_EQ(rc, 0);
    }
    CHECK(WAIT_UNTIL(atomic_load(&cb_count[AX_EV_SUCCEEDED]) == burst ||
                         (ax_events_flush(s), false),
                     20000));
    CHECK_EQ(ax_events_flush(s), 0);
    CHECK_EQ(atomic_load(&cb_count[AX_EV_SUBMITTED]), burst);
    CHECK_EQ(atomic_load(&cb_count[AX_EV_STARTED]), burst);
    CHECK_EQ(atomic_load(&cb_count[AX_EV_SUCCEEDED]), burst);
    CHECK_EQ(ax_events_dropped(s), dropped0);

    /* The filter may change while workers emit (TSan checked this racing
     * with the sampling read; CI caught it once at the end of the 1-in-4
     * case above): every task still ends, and nothing is dropped. */
    CHECK_EQ(ax_events_lossless(s, false), 0);
    uint64_t succ0 = test_stats(s).succeeded;
    for (int i = 0; i < 400; i++) {
        sp = (ax_spec){.fn = ok, .timeout_ms = 5000};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
        CHECK_EQ(ax_events_filter(s, AX_EVMASK_ALL, 1u + (unsigned)(i % 3)), 0);
    }
    /* Counted after the slot is freed (finish.c): wait for the count. */
    CHECK(WAIT_UNTIL(test_stats(s).succeeded - succ0 >= 400, 20000));
    CHECK(WAIT_UNTIL(test_stats(s).running == 0 && test_stats(s).queued[AX_PRIO_NORMAL] == 0, 20000));
    CHECK_EQ(test_stats(s).succeeded - succ0, 400);
    ax_free(s);
    fclose(f);
    unlink(path);
    return 0;
}
