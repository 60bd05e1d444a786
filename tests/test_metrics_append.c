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
 *    AX_EBUSY, a 17th AX_ENOMEM, an unknown one AX_ENOTFOUND.
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

int main(void)
{
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

    CHECK_EQ(ax_metrics_unappend(s, fixed, a_text), AX_OK);
    CHECK_EQ(ax_metrics_unappend(s, fixed, a_text), AX_ENOTFOUND);
    CHECK_EQ(ax_metrics_unappend(s, NULL, NULL), AX_EINVAL);
    t = scrape(s);
    CHECK(strstr(t, "my_up{x=\"a\"}") == NULL);
    CHECK(strstr(t, "my_up{x=\"b\"} 2\n") != NULL);
    free(t);
    free(base);
    ax_free(s);
    return 0;
}
