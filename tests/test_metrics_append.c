/* test_metrics_append.c - ax_metrics_append / ax_metrics_unappend: what a
 * /metrics scrape (metrics_render, the body ax_metrics_serve sends) gets
 * from appenders, and bad input.
 *
 *  - an appender's text follows ax's own, whole lines (a missing final
 *    newline is added);
 *  - one that needs more room than it was given is called again with it;
 *  - one that returns an error, claims more than it wrote (a NUL inside
 *    the length: the buffer's old bytes would be served), or more than
 *    16 MiB is left out, and the rest of the scrape is intact;
 *  - two appenders writing the same family are merged: one HELP, one TYPE;
 *  - after unappend it is gone; NULLs are AX_EINVAL, the same pair twice
 *    AX_EBUSY, a 17th AX_ENOMEM, an unknown one AX_ENOTFOUND;
 *  - an unappend that succeeds leaves the thread's ax_error_detail alone
 *    (before, it set "not registered" first: the Redis consumer's clean-up
 *    after a refused start replaced the refusal's own text with it);
 *  - after ax_shutdown an append is AX_ESHUTDOWN (before, AX_OK, and the
 *    appender was never called: its endpoint had stopped); unappend works.
 *  - many series (test_many): 20 000 label sets in one family and 20 000
 *    single-sample families, repeated in part by a second appender, merge
 *    to exactly the text expected (one group per family in first-seen
 *    order, the first of each name and labels kept).
 */
#include "util.h"

#include "internal.h" /* metrics_render */

#include <stdlib.h>
#include <string.h>

static long fixed(char *buf, size_t len, void *arg)
{
    const char *t = arg;
    size_t n = strlen(t);
    if (n <= len)
        memcpy(buf, t, n < len ? n + 1 : n);
    return (long)n;
}

static long failing(char *buf, size_t len, void *arg)
{
    (void)buf, (void)len, (void)arg;
    return AX_EINVAL;
}

static long liar(char *buf, size_t len, void *arg)
{
    (void)arg;
    if (len > 0)
        buf[0] = 0; /* wrote nothing, claims 100 bytes */
    return 100;
}

static long huge(char *buf, size_t len, void *arg)
{
    (void)buf, (void)len, (void)arg;
    return 64l << 20;
}

static int calls_big;
static long big(char *buf, size_t len, void *arg)
{
    (void)arg;
    calls_big++;
    size_t n = 10000;
    if (len <= n)
        return (long)n; /* more room, please */
    memset(buf, 'x', n);
    memcpy(buf, "big_gauge ", 10);
    buf[n - 2] = '1';
    buf[n - 1] = '\n';
    return (long)n;
}

static char *scrape(ax_sched *s)
{
    size_t len;
    char *t = metrics_render(s, &len);
    CHECK(t != NULL);
    CHECK_EQ(strlen(t), len);
    return t;
}

static unsigned count(const char *t, const char *needle)
{
    unsigned n = 0;
    for (const char *p = t; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* ---- many series ------------------------------------------------------------ */

#define MANY 20000

struct text {
    char *p;
    size_t n, cap;
};

static void add(struct text *t, const char *fmt, unsigned i, unsigned v)
{
    if (t->cap - t->n < 128) {
        t->cap = t->cap ? 2 * t->cap : 1 << 16;
        t->p = realloc(t->p, t->cap);
        CHECK(t->p != NULL);
    }
    t->n += (size_t)snprintf(t->p + t->n, t->cap - t->n, fmt, i, v);
}

/* Lines of t starting with prefix, in one pass (count's strstr per match
 * is quadratic under ASan and TSan, whose strstr measures the rest of the
 * text each call: half a minute on this text). */
static unsigned count_lines(const char *t, const char *prefix)
{
    unsigned n = 0;
    size_t k = strlen(prefix);
    for (const char *p = t; *p;) {
        if (strncmp(p, prefix, k) == 0)
            n++;
        while (*p && *p++ != '\n')
            ;
    }
    return n;
}

static long text_of(char *buf, size_t len, void *arg)
{
    const struct text *t = arg;
    if (t->n < len)
        memcpy(buf, t->p, t->n + 1);
    return (long)t->n;
}

/* The merge found families and repeated samples by scanning all that came
 * before: quadratic. On the machine it was fixed on (2 shared cores,
 * RelWithDebInfo) this test took 26.3 s with the scans, 0.16 s with the
 * hash tables, nearly all of it this scrape. Only the result is checked. */
static void test_many(void)
{
    /* first: one family of MANY label sets, then MANY bare families */
    struct text first = {0}, second = {0}, want = {0};
    add(&first, "# HELP big_q Entries.\n# TYPE big_q gauge\n", 0, 0);
    for (unsigned i = 0; i < MANY; i++)
        add(&first, "big_q{queue=\"q%05u\"} %u\n", i, i);
    for (unsigned i = 0; i < MANY; i++)
        add(&first, "fam%05u_total %u\n", i, i);
    /* second: the family again with other HELP/TYPE, half of its label
     * sets repeated (dropped) and as many new; every even bare family
     * repeated (dropped), and MANY/2 of them as a histogram's _sum series
     * under a HELP/TYPE of their own (kept, each in its own family). */
    add(&second, "# HELP big_q Other.\n# TYPE big_q counter\n", 0, 0);
    for (unsigned i = MANY / 2; i < MANY + MANY / 2; i++)
        add(&second, "big_q{queue=\"q%05u\"} %u\n", i, 7);
    for (unsigned i = 0; i < MANY; i += 2)
        add(&second, "fam%05u_total %u\n", i, 9);
    for (unsigned i = 0; i < MANY / 2; i++)
        add(&second, "# TYPE h%05u histogram\nh%05u_sum 1\n", i, i);

    add(&want, "# HELP big_q Entries.\n# TYPE big_q gauge\n", 0, 0);
    for (unsigned i = 0; i < MANY; i++)
        add(&want, "big_q{queue=\"q%05u\"} %u\n", i, i);
    for (unsigned i = MANY; i < MANY + MANY / 2; i++)
        add(&want, "big_q{queue=\"q%05u\"} %u\n", i, 7);
    for (unsigned i = 0; i < MANY; i++)
        add(&want, "fam%05u_total %u\n", i, i);
    for (unsigned i = 0; i < MANY / 2; i++)
        add(&want, "# TYPE h%05u histogram\nh%05u_sum 1\n", i, i);

    ax_sched *s = test_sched(1, 4);
    CHECK_EQ(ax_metrics_append(s, text_of, &first), AX_OK);
    CHECK_EQ(ax_metrics_append(s, text_of, &second), AX_OK);
    char *t = scrape(s);
    size_t len = strlen(t);
    /* ax's own series, then exactly the merged text. */
    CHECK(strncmp(t, "# HELP ax_tasks_submitted_total ", 32) == 0);
    CHECK(len > want.n && t[len - want.n - 1] == '\n');
    if (strcmp(t + len - want.n, want.p) != 0)
        fprintf(stderr, "merged text differs from the expected %zu bytes\n", want.n);
    CHECK(strcmp(t + len - want.n, want.p) == 0);
    CHECK_EQ(count_lines(t, "big_q{"), MANY + MANY / 2u);
    CHECK_EQ(count_lines(t, "# HELP big_q "), 1u);
    CHECK_EQ(count_lines(t, "# TYPE big_q "), 1u);
    CHECK_EQ(count_lines(t, "fam"), (unsigned)MANY);
    CHECK_EQ(count_lines(t, "h0"), MANY / 2u);
    CHECK(strstr(t, "\nbig_q{queue=\"q15000\"} 15000\nbig_q{queue=\"q15001\"} 15001\n") != NULL);
    CHECK(strstr(t, "\nbig_q{queue=\"q29999\"} 7\nfam00000_total 0\n") != NULL);
    CHECK(strstr(t, "\nfam19999_total 19999\n# TYPE h00000 histogram\nh00000_sum 1\n") != NULL);
    /* repeats dropped: the first value stays, the second HELP/TYPE go */
    CHECK(strstr(t, "\nbig_q{queue=\"q10000\"} 10000\n") != NULL);
    CHECK(strstr(t, "\"q10000\"} 7") == NULL && strstr(t, "\nfam00002_total 9") == NULL);
    CHECK(strstr(t, "Other.") == NULL && strstr(t, "big_q counter") == NULL);
    free(t);
    ax_free(s);
    free(first.p);
    free(second.p);
    free(want.p);
}

int main(void)
{
    test_many();

    ax_sched *s = test_sched(1, 4);
    char *base = scrape(s);
    size_t base_len = strlen(base);

    static char a_text[] = "# HELP my_up Mine.\n# TYPE my_up gauge\nmy_up{x=\"a\"} 1";
    static char b_text[] = "# HELP my_up Mine.\n# TYPE my_up gauge\nmy_up{x=\"b\"} 2\n";
    CHECK_EQ(ax_metrics_append(s, fixed, a_text), AX_OK);
    char *t = scrape(s);
    CHECK(strncmp(t, base, base_len - 200) == 0); /* ax's own first (gauges move) */
    CHECK(strstr(t, "my_up{x=\"a\"} 1\n") != NULL);
    CHECK_EQ(t[strlen(t) - 1], '\n');
    free(t);

    CHECK_EQ(ax_metrics_append(s, fixed, b_text), AX_OK);
    t = scrape(s);
    CHECK_EQ(count(t, "# TYPE my_up "), 1u);
    CHECK_EQ(count(t, "# HELP my_up "), 1u);
    CHECK(strstr(t, "my_up{x=\"a\"} 1\nmy_up{x=\"b\"} 2\n") != NULL);
    free(t);

    CHECK_EQ(ax_metrics_append(s, failing, NULL), AX_OK);
    CHECK_EQ(ax_metrics_append(s, liar, NULL), AX_OK);
    CHECK_EQ(ax_metrics_append(s, huge, NULL), AX_OK);
    CHECK_EQ(ax_metrics_append(s, big, NULL), AX_OK);
    t = scrape(s);
    CHECK(strstr(t, "my_up{x=\"b\"} 2\n") != NULL);
    CHECK(strstr(t, "big_gauge ") != NULL);
    CHECK(calls_big >= 2);
    CHECK(strlen(t) < base_len + 10000 + 500); /* nothing of liar's or huge's */
    free(t);

    CHECK_EQ(ax_metrics_append(s, fixed, a_text), AX_EBUSY);
    CHECK_EQ(ax_metrics_append(NULL, fixed, a_text), AX_EINVAL);
    CHECK_EQ(ax_metrics_append(s, NULL, a_text), AX_EINVAL);
    static char more[16][8];
    int rc = AX_OK, added = 0;
    for (int i = 0; i < 16 && rc == AX_OK; i++)
        if ((rc = ax_metrics_append(s, fixed, more[i])) == AX_OK)
            added++;
    CHECK_EQ(rc, AX_ENOMEM);
    CHECK_EQ(added, AX_METRICS_APPENDERS - 6);
    for (int i = 0; i < added; i++)
        CHECK_EQ(ax_metrics_unappend(s, fixed, more[i]), AX_OK);

    CHECK_EQ(ax_metrics_append(s, NULL, NULL), AX_EINVAL);
    char before[256];
    snprintf(before, sizeof before, "%s", ax_error_detail());
    CHECK(strstr(before, "scheduler and fn are required") != NULL);
    CHECK_EQ(ax_metrics_unappend(s, fixed, a_text), AX_OK);
    CHECK_EQ(strcmp(ax_error_detail(), before), 0); /* a success leaves it */
    CHECK_EQ(ax_metrics_unappend(s, fixed, a_text), AX_ENOTFOUND);
    CHECK(strstr(ax_error_detail(), "not registered") != NULL);
    CHECK_EQ(ax_metrics_unappend(s, NULL, NULL), AX_EINVAL);
    t = scrape(s);
    CHECK(strstr(t, "my_up{x=\"a\"}") == NULL);
    CHECK(strstr(t, "my_up{x=\"b\"} 2\n") != NULL);
    free(t);
    free(base);

    CHECK_EQ(ax_shutdown(s, 1000), AX_OK);
    CHECK_EQ(ax_metrics_append(s, fixed, a_text), AX_ESHUTDOWN);
    CHECK(strstr(ax_error_detail(), "ax_metrics_append: the scheduler is shutting down") != NULL);
    CHECK_EQ(ax_metrics_unappend(s, fixed, b_text), AX_OK);
    ax_free(s);
    return 0;
}
