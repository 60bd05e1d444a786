/* Metrics (DESIGN.md §9): histograms count every attempt, quantiles match
 * the known run times, the Prometheus text agrees with ax_stats, and the
 * /metrics endpoint answers a real HTTP client (curl). */
#include "util.h"

#include <stdlib.h>
#include <string.h>

static int sleeper(ax_task *t, void *arg)
{
    return ax_sleep(t, (uint64_t)(uintptr_t)arg);
}

/* The value of the sample line that starts with `prefix` followed by ' '. */
static double sample(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, prefix, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    fprintf(stderr, "no sample %s\n", prefix);
    abort();
}

int main(void)
{
    ax_sched *s = test_sched(2, 100);
    /* 40 HIGH tasks of 20 ms, 40 LOW tasks of 60 ms. */
    for (int i = 0; i < 40; i++) {
        ax_spec a = {.fn = sleeper, .arg = (void *)20, .priority = AX_PRIO_HIGH, .timeout_ms = 5000};
        ax_spec b = {.fn = sleeper, .arg = (void *)60, .priority = AX_PRIO_LOW, .timeout_ms = 5000};
        CHECK_EQ(ax_submit(s, &a, NULL), 0);
        CHECK_EQ(ax_submit(s, &b, NULL), 0);
    }
    CHECK(WAIT_UNTIL(test_stats(s).succeeded == 80, 5000));
    CHECK(WAIT_UNTIL(test_stats(s).running == 0, 1000));
    ax_metrics m;
    CHECK_EQ(ax_metrics_get(s, &m), 0);
    CHECK_EQ(m.stats.succeeded, 80);
    CHECK_EQ(m.wait[AX_PRIO_HIGH].count, 40);
    CHECK_EQ(m.wait[AX_PRIO_LOW].count, 40);
    CHECK_EQ(m.run[AX_PRIO_HIGH].count, 40);
    CHECK_EQ(m.run[AX_PRIO_LOW].count, 40);
    CHECK_EQ(m.run[AX_PRIO_NORMAL].count, 0);
    /* Sleeps end on a 1 ms wheel: 20 ms runs take 20..~25 ms here (more
     * under sanitizers, hence the loose upper bounds). */
    CHECK(m.run[AX_PRIO_HIGH].p50_ns >= 19000000 && m.run[AX_PRIO_HIGH].p50_ns <= 100000000);
    CHECK(m.run[AX_PRIO_LOW].p50_ns >= 57000000 && m.run[AX_PRIO_LOW].p50_ns <= 250000000);
    CHECK(m.run[AX_PRIO_LOW].p50_ns > m.run[AX_PRIO_HIGH].p50_ns);
    CHECK(m.run[AX_PRIO_LOW].max_ns >= m.run[AX_PRIO_LOW].p99_ns);
    CHECK(m.run[AX_PRIO_LOW].p99_ns >= m.run[AX_PRIO_LOW].p50_ns);
    CHECK(m.run[AX_PRIO_HIGH].sum_ns >= 40ull * 20000000);

    /* Prometheus text: sized first, then rendered; values agree. */
    long need = ax_metrics_prometheus(s, NULL, 0);
    CHECK(need > 1000);
    char *text = malloc((size_t)need + 1);
    CHECK_EQ(ax_metrics_prometheus(s, text, (size_t)need + 1), need);
    CHECK_EQ(strlen(text), (size_t)need);
    CHECK(strstr(text, "# TYPE ax_wait_seconds histogram") != NULL);
    CHECK_EQ(sample(text, "ax_tasks_succeeded_total"), 80);
    CHECK_EQ(sample(text, "ax_tasks_submitted_total"), 80);
    CHECK_EQ(sample(text, "ax_run_seconds_count{priority=\"low\"}"), 40);
    CHECK_EQ(sample(text, "ax_run_seconds_bucket{priority=\"low\",le=\"+Inf\"}"), 40);
    CHECK_EQ(sample(text, "ax_run_seconds_bucket{priority=\"low\",le=\"0.01\"}"), 0);
    /* 20 ms runs: all under 0.25 s even under sanitizers (0.05 s is too tight there) */
    CHECK_EQ(sample(text, "ax_run_seconds_bucket{priority=\"high\",le=\"0.25\"}"), 40);
    CHECK_EQ(ax_metrics_prometheus(NULL, text, 10), AX_EINVAL);
    free(text);

    /* The endpoint: bad addresses, then a real client. */
    CHECK_EQ(ax_metrics_serve(s, "nonsense", NULL), AX_EINVAL);
    CHECK_EQ(ax_metrics_serve(s, "127.0.0.1:99999", NULL), AX_EINVAL);
    CHECK_EQ(ax_metrics_serve(s, "example.com:80", NULL), AX_EINVAL);
    uint16_t port = 0;
    CHECK_EQ(ax_metrics_serve(s, "127.0.0.1:0", &port), 0);
    CHECK(port != 0);
    CHECK_EQ(ax_metrics_serve(s, "127.0.0.1:0", NULL), AX_EBUSY);
    char cmd[256], out[65536];
    snprintf(cmd, sizeof cmd, "curl -sS --max-time 5 -w '\\n%%{http_code}' http://127.0.0.1:%u/metrics",
             port);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    CHECK_EQ(pclose(p), 0);
    CHECK(strstr(out, "ax_tasks_succeeded_total 80") != NULL);
    CHECK(strstr(out, "\n200") != NULL);
    /* the endpoint runs on its own thread: no slot, and the scrape is not
     * counted as a task (tests/test_metrics_serve.c has the rest) */
    CHECK_EQ(sample(out, "ax_tasks_running"), 0);
    CHECK_EQ(sample(out, "ax_tasks_submitted_total"), 80);
    CHECK_EQ(sample(out, "ax_events_dropped_total"), 0);
    snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%u/nope",
             port);
    p = popen(cmd, "r");
    n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    pclose(p);
    CHECK_STR(out, "404");
    CHECK_EQ(ax_shutdown(s, 1000), 0); /* the endpoint ends with the scheduler */
    ax_free(s);
    return 0;
}
