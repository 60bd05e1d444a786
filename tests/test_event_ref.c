/* ax_spec.ref: an external reference carried by every lifecycle event of
 * its task, in the callback's ax_event.ref and as "ref" in the JSON lines.
 *  - each task's events carry exactly its own ref; a task without one has
 *    "" and no "ref" key in its lines;
 *  - a ref survives a retry, a long failure message (the event goes by the
 *    long ring) and a refusal (SHED / REJECTED events of a refused submit);
 *  - a child with a ref that fails keeps its error text for ax_join (both
 *    live in the job's one side allocation);
 *  - bad input: too long, not UTF-8, a control character -> AX_EINVAL with
 *    a detail naming spec.ref; nothing admitted. */
#include "util.h"

#include <pthread.h>
#include <string.h>

enum { N = 200 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct seen {
    uint64_t id;
    char ref[AX_REF_MAX];
    unsigned events;
    bool mismatch;
} seen[N + 16];
static unsigned nseen;
static unsigned refused_with_ref;
static unsigned nterminal; /* SUCCEEDED and FAILED events seen */
static unsigned nterminal_seen;

static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    if (e->id == 0) { /* a refusal: no task */
        if (strcmp(e->ref, "paused-ref") == 0) refused_with_ref++;
        pthread_mutex_unlock(&mu);
        return;
    }
    struct seen *x = NULL;
    for (unsigned i = 0; i < nseen && !x; i++)
        if (seen[i].id == e->id) x = &seen[i];
    if (!x && nseen < sizeof seen / sizeof *seen) {
        x = &seen[nseen++];
        x->id = e->id;
        memcpy(x->ref, e->ref, sizeof x->ref);
    }
    if (e->kind == AX_EV_SUCCEEDED || e->kind == AX_EV_FAILED)
        nterminal++;
    if (x) {
        x->events++;
        if (strcmp(x->ref, e->ref) != 0) x->mismatch = true;
    }
    pthread_mutex_unlock(&mu);
}

static int quick(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    return 0;
}

/* Fails its first attempt with a message longer than a ring record holds. */
static int fail_long_once(ax_task *t, void *arg)
{
    (void)arg;
    if (ax_task_attempt(t) > 0) return 0;
    char msg[300];
    memset(msg, 'x', sizeof msg - 1);
    msg[sizeof msg - 1] = 0;
    ax_task_set_error(t, "%s", msg);
    return 7;
}

static int child_fails(ax_task *t, void *arg)
{
    (void)arg;
    ax_task_set_error(t, "child error text");
    return 3;
}

static int parent_joins(ax_task *t, void *arg)
{
    ax_result *res = arg;
    ax_spec c = {.fn = child_fails, .timeout_ms = 5000, .ref = "child-ref"};
    uint64_t id;
    int rc = ax_spawn(t, &c, &id);
    if (rc) return rc;
    return ax_join(t, id, 5000, res);
}

static struct seen *find_ref(const char *ref)
{
    for (unsigned i = 0; i < nseen; i++)
        if (strcmp(seen[i].ref, ref) == 0) return &seen[i];
    return NULL;
}

int main(void)
{
    ax_config cfg;
    ax_config_default(&cfg);
    cfg.workers = 2;
    cfg.max_concurrency = 64;
    cfg.capacity[AX_PRIO_HIGH] = 4; /* the refusal below */
    ax_sched *s = test_sched_cfg(&cfg);
    FILE *json = tmpfile();
    CHECK(json != NULL);
    CHECK_EQ(ax_events_json(s, json), 0);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);
    CHECK_EQ(ax_events_lossless(s, true), 0);

    /* Bad input first: refused, with a detail naming the field. */
    char too_long[AX_REF_MAX + 1];
    memset(too_long, 'r', AX_REF_MAX);
    too_long[AX_REF_MAX] = 0;
    ax_spec bad = {.fn = quick, .timeout_ms = 1000, .ref = too_long};
    CHECK_EQ(ax_submit(s, &bad, NULL), AX_EINVAL);
    CHECK_STR(ax_error_detail(), "spec.ref is longer than 63 bytes");
    too_long[AX_REF_MAX - 1] = 0; /* 63 bytes: the longest taken */
    uint64_t longest_id;
    CHECK_EQ(ax_submit(s, &bad, &longest_id), 0);
    bad.ref = "ok\xff";
    CHECK_EQ(ax_submit(s, &bad, NULL), AX_EINVAL);
    CHECK_STR(ax_error_detail(), "spec.ref is not valid UTF-8 (byte 2: 0xff)");
    bad.ref = "line\nbreak";
    CHECK_EQ(ax_submit(s, &bad, NULL), AX_EINVAL);
    CHECK_STR(ax_error_detail(), "spec.ref has a control character (byte 4: 0x0a)");

    /* N tasks, every other one with a ref; one that retries with a long
     * error; a child that fails with a ref. */
    char refs[N][32];
    for (int i = 0; i < N; i++) {
        snprintf(refs[i], sizeof refs[i], "n:1700000000000-%d", i);
        ax_spec sp = {.fn = quick, .timeout_ms = 5000, .ref = i % 2 ? refs[i] : NULL};
        CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    }
    ax_retry_policy fast = {.mode = AX_BACKOFF_EXPONENTIAL, .base_ms = 1, .max_ms = 1};
    ax_spec lf = {.fn = fail_long_once,
                  .timeout_ms = 5000,
                  .max_retry = 1,
                  .retry = &fast,
                  .ref = "long-failure"};
    CHECK_EQ(ax_submit(s, &lf, NULL), 0);
    ax_result child_res;
    memset(&child_res, 0, sizeof child_res);
    ax_spec par = {.fn = parent_joins, .arg = &child_res, .timeout_ms = 10000, .ref = "parent"};
    CHECK_EQ(ax_submit(s, &par, NULL), 0);
    CHECK(WAIT_UNTIL(test_stats(s).succeeded + test_stats(s).failed == N + 3 + 1, 30000));
    /* A terminal event is emitted after its outcome is counted (finish.c). */
    CHECK(WAIT_UNTIL((ax_events_flush(s), pthread_mutex_lock(&mu), nterminal_seen = nterminal,
                      pthread_mutex_unlock(&mu), nterminal_seen >= N + 3 + 1),
                     30000));

    /* A refusal carries the ref too: the HIGH bucket (4) full while paused. */
    CHECK_EQ(ax_pause(s), 0);
    ax_spec hi = {.fn = quick, .timeout_ms = 1000, .priority = AX_PRIO_HIGH, .ref = "paused-ref"};
    for (int i = 0; i < 4; i++)
        CHECK_EQ(ax_submit(s, &hi, NULL), 0);
    CHECK_EQ(ax_submit(s, &hi, NULL), AX_EFULL);
    CHECK_EQ(ax_events_flush(s), 0);

    pthread_mutex_lock(&mu);
    unsigned with = 0, without = 0;
    unsigned paused = 0;
    for (unsigned i = 0; i < nseen; i++) {
        CHECK(!seen[i].mismatch); /* every event of a task: the same ref */
        if (strcmp(seen[i].ref, "paused-ref") == 0) {
            CHECK_EQ(seen[i].events, 1); /* submitted, never started */
            paused++;
            continue;
        }
        CHECK(seen[i].events >= 3); /* submitted, started, a terminal one */
        if (seen[i].ref[0])
            with++;
        else
            without++;
    }
    for (int i = 1; i < N; i += 2) {
        struct seen *x = find_ref(refs[i]);
        CHECK(x != NULL);
        CHECK_EQ(x->events, 3);
    }
    struct seen *x = find_ref("long-failure");
    CHECK(x != NULL);
    CHECK_EQ(x->events, 5); /* submitted, started, retry_scheduled, started, succeeded */
    CHECK(find_ref("child-ref") != NULL);
    CHECK(find_ref("parent") != NULL);
    CHECK(find_ref(too_long) != NULL);
    CHECK_EQ(refused_with_ref, 1);
    CHECK_EQ(paused, 4);
    pthread_mutex_unlock(&mu);
    CHECK_EQ(with, N / 2 + 4); /* the paused ones apart */
    CHECK_EQ(without, N / 2);
    CHECK_EQ(child_res.state, AX_STATE_FAILED);
    CHECK_STR(child_res.error, "child error text");

    /* The JSON lines: "ref" exactly where the task has one. */
    CHECK_EQ(ax_events_flush(s), 0);
    rewind(json);
    char line[4096];
    unsigned lines_with = 0, lines_total = 0;
    while (fgets(line, sizeof line, json)) {
        lines_total++;
        const char *r = strstr(line, ",\"ref\":\"");
        if (!r) continue;
        lines_with++;
        const char *v = r + 8;
        CHECK(strncmp(v, "n:1700000000000-", 16) == 0 || strncmp(v, "long-failure\"", 13) == 0 ||
              strncmp(v, "child-ref\"", 10) == 0 || strncmp(v, "parent\"", 7) == 0 ||
              strncmp(v, "paused-ref\"", 11) == 0 || strncmp(v, too_long, 63) == 0 ||
              strncmp(v, "line\\nbreak\"", 12) == 0); /* a refusal's, escaped */
    }
    printf("%u of %u lines with a ref\n", lines_with, lines_total);
    /* N/2 tasks x 3; the long failure 5; child, parent, the 63-byte ref 3
     * each; 4 paused submits; the EFULL refusal; the refusal of the ref
     * with a newline (valid UTF-8: shown, escaped) */
    CHECK_EQ(lines_with, (N / 2) * 3 + 5 + 3 + 3 + 3 + 4 + 1 + 1);
    ax_free(s);
    fclose(json);
    return 0;
}
