/* test_prom.c - Prometheus text exposition (src/obs/prom.c).
 *
 * Renders a synthetic snapshot and parses it back with a strict parser of
 * the text format 0.0.4: every line is "# HELP name text", "# TYPE name
 * type" or "name{labels} value"; names and label names are well formed; one
 * HELP and one TYPE per family, before its samples, whose samples are
 * contiguous; histogram buckets are cumulative, end with le="+Inf" equal to
 * _count. Then the values: counters and gauges equal the snapshot, bucket
 * counts equal the raw values counted by hand. Number formatting is checked
 * against strings produced by Go's strconv.FormatFloat. A too-small buffer
 * returns the needed length and truncates safely.
 *
 * `test_prom --dump` prints the exposition (for promtool check metrics).
 */
#include "check.h"
#include "obs/prom.h"

#include <math.h>
#include <stdbool.h>

/* ---- a strict parser ---------------------------------------------------------- */

#define MAXFAM 64
#define MAXSAMPLE 512

struct family {
    char name[64];
    char type[16];
    bool help, typed, has_samples, closed;
};

struct sample {
    char name[64];
    char prio[64]; /* the priority label, "" if none */
    char le[64];   /* the le label, "" if none */
    char cls[64];  /* the class label, "" if none */
    double value;
    int fam;
};

static struct family fams[MAXFAM];
static int nfam;
static struct sample samples[MAXSAMPLE];
static int nsample;

static bool name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static bool name_char(char c)
{
    return name_start(c) || (c >= '0' && c <= '9');
}

/* Metric name [a-zA-Z_:][a-zA-Z0-9_:]* (label names: the same without ':'). */
static const char *parse_name(const char *p, char *out, size_t cap, bool label)
{
    size_t n = 0;
    CHECK(name_start(*p) && !(label && *p == ':'));
    while (name_char(*p)) {
        CHECK(!(label && *p == ':'));
        CHECK(n + 1 < cap);
        out[n++] = *p++;
    }
    out[n] = '\0';
    return p;
}

static int find_family(const char *name)
{
    for (int i = 0; i < nfam; i++)
        if (strcmp(fams[i].name, name) == 0) return i;
    return -1;
}

static int get_family(const char *name)
{
    int f = find_family(name);
    if (f >= 0) return f;
    CHECK(nfam < MAXFAM);
    snprintf(fams[nfam].name, sizeof fams[nfam].name, "%s", name);
    return nfam++;
}

/* A sample value: a Go float ("+Inf", "-Inf", "NaN" or a decimal). */
static double parse_value(const char *s, const char *end)
{
    size_t n = (size_t)(end - s);
    CHECK(n > 0 && n < 40);
    char tmp[40];
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    if (strcmp(tmp, "+Inf") == 0) return INFINITY;
    if (strcmp(tmp, "-Inf") == 0) return -INFINITY;
    if (strcmp(tmp, "NaN") == 0) return NAN;
    for (size_t i = 0; i < n; i++) /* no hex floats, no "inf", no spaces */
        CHECK(strchr("0123456789.eE+-", tmp[i]) != NULL);
    char *e;
    double v = strtod(tmp, &e);
    CHECK(*e == '\0');
    return v;
}

static int current_family = -1;

static void parse_comment(const char *line)
{
    char name[64];
    if (strncmp(line, "# HELP ", 7) == 0) {
        const char *p = parse_name(line + 7, name, sizeof name, false);
        CHECK(*p == ' ');
        for (p++; *p; p++) { /* escapes: only \\ and \n */
            if (*p != '\\') continue;
            p++;
            CHECK(*p == '\\' || *p == 'n');
        }
        int f = get_family(name);
        CHECK(!fams[f].help && !fams[f].has_samples);
        fams[f].help = true;
    } else if (strncmp(line, "# TYPE ", 7) == 0) {
        const char *p = parse_name(line + 7, name, sizeof name, false);
        CHECK(*p == ' ');
        p++;
        CHECK(strcmp(p, "counter") == 0 || strcmp(p, "gauge") == 0 || strcmp(p, "histogram") == 0 ||
              strcmp(p, "summary") == 0 || strcmp(p, "untyped") == 0);
        int f = get_family(name);
        CHECK(!fams[f].typed && !fams[f].has_samples);
        fams[f].typed = true;
        snprintf(fams[f].type, sizeof fams[f].type, "%s", p);
        if (strcmp(p, "counter") == 0) /* conventions promtool lints */
            CHECK(strlen(name) > 6 && strcmp(name + strlen(name) - 6, "_total") == 0);
    } else {
        CHECK(!"a comment that is neither HELP nor TYPE");
    }
}

/* The family a sample name belongs to: itself, or a histogram's
 * _bucket/_sum/_count. */
static int sample_family(const char *name, const char **suffix)
{
    static const char *sfx[] = {"_bucket", "_sum", "_count"};
    int f = find_family(name);
    *suffix = "";
    if (f >= 0 && strcmp(fams[f].type, "histogram") != 0) return f;
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(name), k = strlen(sfx[i]);
        if (n > k && strcmp(name + n - k, sfx[i]) == 0) {
            char base[64];
            memcpy(base, name, n - k);
            base[n - k] = '\0';
            f = find_family(base);
            if (f >= 0 && strcmp(fams[f].type, "histogram") == 0) {
                *suffix = sfx[i];
                return f;
            }
        }
    }
    return -1;
}

static void parse_sample(const char *line)
{
    CHECK(nsample < MAXSAMPLE);
    struct sample *s = &samples[nsample++];
    memset(s, 0, sizeof *s);
    const char *p = parse_name(line, s->name, sizeof s->name, false);
    if (*p == '{') {
        p++;
        while (*p != '}') {
            char lname[64], lval[64];
            size_t n = 0;
            p = parse_name(p, lname, sizeof lname, true);
            CHECK(p[0] == '=' && p[1] == '"');
            for (p += 2; *p != '"'; p++) {
                CHECK(*p != '\0' && *p != '\n');
                char c = *p;
                if (c == '\\') { /* escapes: \\ \" \n only */
                    p++;
                    CHECK(*p == '\\' || *p == '"' || *p == 'n');
                    c = *p == 'n' ? '\n' : *p;
                }
                CHECK(n + 1 < sizeof lval);
                lval[n++] = c;
            }
            lval[n] = '\0';
            p++;
            if (strcmp(lname, "priority") == 0) {
                CHECK(s->prio[0] == '\0');
                snprintf(s->prio, sizeof s->prio, "%s", lval);
            } else if (strcmp(lname, "class") == 0) {
                CHECK(s->cls[0] == '\0');
                snprintf(s->cls, sizeof s->cls, "%s", lval);
            } else if (strcmp(lname, "le") == 0) {
                CHECK(s->le[0] == '\0');
                snprintf(s->le, sizeof s->le, "%s", lval);
            } else {
                CHECK(!"unexpected label");
            }
            if (*p == ',')
                p++;
            else
                CHECK(*p == '}');
        }
        p++;
    }
    CHECK(*p == ' ');
    p++;
    const char *end = strchr(p, ' '); /* no timestamps are emitted */
    CHECK(end == NULL);
    s->value = parse_value(p, p + strlen(p));

    const char *suffix;
    int f = sample_family(s->name, &suffix);
    CHECK(f >= 0); /* every sample belongs to a declared family */
    CHECK(fams[f].help && fams[f].typed);
    CHECK(!fams[f].closed); /* a family's samples are contiguous */
    if (current_family >= 0 && current_family != f) fams[current_family].closed = true;
    current_family = f;
    fams[f].has_samples = true;
    s->fam = f;
    CHECK((strcmp(suffix, "_bucket") == 0) == (s->le[0] != '\0')); /* le only on buckets */
}

/* Parse the whole text; fills fams[] and samples[]. */
static void parse(const char *text)
{
    nfam = nsample = 0;
    current_family = -1;
    memset(fams, 0, sizeof fams);
    size_t n = strlen(text);
    CHECK(n > 0 && text[n - 1] == '\n'); /* ends with a newline */
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t k = (size_t)(nl - p);
        char line[256];
        CHECK(k > 0 && k < sizeof line); /* no empty lines */
        memcpy(line, p, k);
        line[k] = '\0';
        CHECK(strchr(line, '\r') == NULL && strchr(line, '\t') == NULL);
        if (line[0] == '#')
            parse_comment(line);
        else
            parse_sample(line);
        p = nl + 1;
    }
    for (int f = 0; f < nfam; f++) /* no family without a TYPE or samples */
        CHECK(fams[f].typed && fams[f].help && fams[f].has_samples);
}

static const struct sample *find(const char *name, const char *prio, const char *le)
{
    const struct sample *hit = NULL;
    for (int i = 0; i < nsample; i++)
        if (strcmp(samples[i].name, name) == 0 && strcmp(samples[i].prio, prio) == 0 &&
            strcmp(samples[i].le, le) == 0) {
            CHECK(hit == NULL); /* no duplicate series */
            hit = &samples[i];
        }
    if (!hit) fprintf(stderr, "missing sample %s{priority=\"%s\",le=\"%s\"}\n", name, prio, le);
    CHECK(hit != NULL);
    return hit;
}

static double value(const char *name, const char *prio, const char *le)
{
    return find(name, prio, le)->value;
}

/* ---- the synthetic snapshot ----------------------------------------------------- */

static struct ax_metrics_snapshot snap;
static const char *prio_names[] = {"high", "normal", "low"};
static const ax_priority prio_ids[] = {AX_PRIO_HIGH, AX_PRIO_NORMAL, AX_PRIO_LOW};

/* Raw values recorded into each histogram, for counting by hand. None lies
 * within 2 % of an le bound, where the exposition is only approximate. */
static uint64_t raw[2][AX_PRIO_COUNT][64];
static size_t nraw[2][AX_PRIO_COUNT];

static void add(int kind, ax_priority p, uint64_t ns, int times)
{
    for (int i = 0; i < times; i++) {
        ax_hist_record(kind ? &snap.run[p] : &snap.wait[p], ns);
        if (nraw[kind][p] < 64) raw[kind][p][nraw[kind][p]++] = ns;
    }
}

static void build_snapshot(void)
{
    memset(&snap, 0, sizeof snap);
    ax_stats *st = &snap.st;
    st->queued[AX_PRIO_HIGH] = 3;
    st->queued[AX_PRIO_NORMAL] = 1234567; /* prints as 1.234567e+06 */
    st->queued[AX_PRIO_LOW] = 0;
    st->delayed = 17;
    st->running = 8;
    st->limit = 64;
    st->submitted = 9876543210ull;
    st->rejected = 11;
    st->shed = 12;
    st->started = 1000001;
    st->succeeded = 999000;
    st->failed = 13;
    st->timed_out = 14;
    st->cancelled = 15;
    st->retried = 16;
    st->panicked = 1;
    st->orphans = 2;
    st->lingering = 4;
    st->stacks_in_use = 9;
    st->callback_overruns = 0;
    st->callback_dropped = 5;
    /* Every per-priority field distinct, so a swapped field or priority shows. */
    for (int p = 0; p < AX_PRIO_COUNT; p++) {
        ax_prio_stats *ps = &st->prio[p];
        uint64_t b = 100u * (uint64_t)(p + 1);
        ps->submitted = b + 1;
        ps->rejected = b + 2;
        ps->shed = b + 3;
        ps->succeeded = b + 4;
        ps->failed = b + 5;
        ps->timed_out = b + 6;
        ps->cancelled = b + 7;
    }
    snap.events_dropped = 123456789; /* prints as 1.23456789e+08 */
    snap.nclasses = 2;
    snprintf(snap.cls[0].name, sizeof snap.cls[0].name, "quote");
    snap.cls[0].limit = 37;
    snap.cls[0].in_flight = 12;
    snap.cls[0].breaker = AX_BREAKER_HALF_OPEN;
    snap.cls[0].retry_budget_left = 7;
    snap.cls[0].retry_tokens = 6.5;
    snap.cls[0].rtt_short_ns = 250000000; /* 0.25 s */
    snap.cls[0].retries_denied = 3;
    snap.cls[0].limit_mark = 250;
    snap.cls[0].limit_doublings = 4;
    snprintf(snap.cls[1].name, sizeof snap.cls[1].name, "search.v2");
    snap.cls[1].limit = 500;
    snap.cls[1].expired = 41;
    snap.cls[1].retry_budget_left = INFINITY; /* no budget */

    add(0, AX_PRIO_HIGH, 3000, 5);              /* 3 us */
    add(0, AX_PRIO_HIGH, 70000, 7);             /* 70 us */
    add(0, AX_PRIO_HIGH, 2000000, 11);          /* 2 ms */
    add(0, AX_PRIO_HIGH, 40000000, 13);         /* 40 ms */
    add(0, AX_PRIO_HIGH, 3000000000ull, 3);     /* 3 s */
    add(0, AX_PRIO_HIGH, 100000000000ull, 2);   /* 100 s: +Inf only */
    add(0, AX_PRIO_HIGH, AX_HIST_LIMIT * 2, 1); /* overflow bucket */
    add(0, AX_PRIO_NORMAL, 0, 2);
    add(0, AX_PRIO_NORMAL, 7000, 9);   /* 7 us */
    add(0, AX_PRIO_NORMAL, 333000, 4); /* 333 us */
    /* wait[LOW] stays empty */
    add(1, AX_PRIO_HIGH, 150000, 6); /* 150 us */
    add(1, AX_PRIO_NORMAL, 1, 1);
    add(1, AX_PRIO_NORMAL, 770000000, 5);   /* 770 ms */
    add(1, AX_PRIO_LOW, 45000000000ull, 3); /* 45 s */
}

static void check_counters(void)
{
    const ax_stats *st = &snap.st;
    struct {
        const char *name;
        uint64_t v;
    } c[] = {
        {"ax_tasks_submitted_total", st->submitted},
        {"ax_tasks_started_total", st->started},
        {"ax_tasks_succeeded_total", st->succeeded},
        {"ax_tasks_failed_total", st->failed},
        {"ax_tasks_timed_out_total", st->timed_out},
        {"ax_tasks_cancelled_total", st->cancelled},
        {"ax_tasks_retried_total", st->retried},
        {"ax_tasks_rejected_total", st->rejected},
        {"ax_tasks_shed_total", st->shed},
        {"ax_tasks_panicked_total", st->panicked},
        {"ax_tasks_lingering_total", st->lingering},
        {"ax_callback_overruns_total", st->callback_overruns},
        {"ax_callback_dropped_total", st->callback_dropped},
        {"ax_events_dropped_total", snap.events_dropped},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        const struct sample *s = find(c[i].name, "", "");
        CHECK_STR(fams[s->fam].type, "counter");
        CHECK(s->value == (double)c[i].v);
    }
    struct {
        const char *name;
        uint64_t v;
    } g[] = {
        {"ax_tasks_delayed", st->delayed},       {"ax_tasks_running", st->running},
        {"ax_concurrency_limit", st->limit},     {"ax_tasks_orphaned", st->orphans},
        {"ax_stacks_in_use", st->stacks_in_use},
    };
    for (size_t i = 0; i < sizeof g / sizeof *g; i++) {
        const struct sample *s = find(g[i].name, "", "");
        CHECK_STR(fams[s->fam].type, "gauge");
        CHECK(s->value == (double)g[i].v);
    }
    for (int i = 0; i < AX_PRIO_COUNT; i++) {
        const struct sample *s = find("ax_queue_length", prio_names[i], "");
        CHECK_STR(fams[s->fam].type, "gauge");
        CHECK(s->value == (double)st->queued[prio_ids[i]]);
    }
    /* Per priority: 7 counter families, one sample per priority each. */
    static const char *pnames[7] = {
        "ax_priority_submitted_total", "ax_priority_rejected_total",
        "ax_priority_shed_total",      "ax_priority_succeeded_total",
        "ax_priority_failed_total",    "ax_priority_timed_out_total",
        "ax_priority_cancelled_total",
    };
    for (int k = 0; k < 7; k++)
        for (int i = 0; i < AX_PRIO_COUNT; i++) {
            const ax_prio_stats *ps = &st->prio[prio_ids[i]];
            const uint64_t want[7] = {ps->submitted, ps->rejected,  ps->shed,     ps->succeeded,
                                      ps->failed,    ps->timed_out, ps->cancelled};
            const struct sample *s = find(pnames[k], prio_names[i], "");
            CHECK_STR(fams[s->fam].type, "counter");
            CHECK(s->value == (double)want[k]);
        }
    /* 14 + 7 counters, 6 gauges, 2 histograms; with classes 9 gauges and 12
     * counters more, one sample per class each. */
    CHECK_EQ(nfam, 14 + 7 + 6 + 2 + (snap.nclasses ? 9 + 12 : 0));
}

/* Every histogram series: buckets in ascending le, cumulative, ending at
 * +Inf == _count; each bucket equals the raw values <= le; _sum in seconds. */
static void check_histograms(void)
{
    static const char *names[2] = {"ax_wait_seconds", "ax_run_seconds"};
    int nseries = 0;
    for (int kind = 0; kind < 2; kind++) {
        int f = find_family(names[kind]);
        CHECK(f >= 0);
        CHECK_STR(fams[f].type, "histogram");
        char bucket[64], sum[64], count[64];
        snprintf(bucket, sizeof bucket, "%s_bucket", names[kind]);
        snprintf(sum, sizeof sum, "%s_sum", names[kind]);
        snprintf(count, sizeof count, "%s_count", names[kind]);
        for (int pi = 0; pi < AX_PRIO_COUNT; pi++) {
            ax_priority p = prio_ids[pi];
            const struct ax_hist *h = kind ? &snap.run[p] : &snap.wait[p];
            double prev_le = -INFINITY, prev = 0;
            int nb = 0;
            for (int i = 0; i < nsample; i++) {
                const struct sample *s = &samples[i];
                if (strcmp(s->name, bucket) != 0 || strcmp(s->prio, prio_names[pi]) != 0) continue;
                double le = parse_value(s->le, s->le + strlen(s->le));
                CHECK(le > prev_le);     /* ascending bounds */
                CHECK(s->value >= prev); /* cumulative */
                size_t want = 0;
                for (size_t k = 0; k < nraw[kind][p]; k++)
                    want += (double)raw[kind][p][k] / 1e9 <= le;
                if (s->value != (double)want)
                    fprintf(stderr, "%s{priority=\"%s\",le=\"%s\"} %g, want %zu\n", bucket,
                            prio_names[pi], s->le, s->value, want);
                CHECK(s->value == (double)want);
                prev_le = le;
                prev = s->value;
                nb++;
            }
            CHECK_EQ(nb, AX_PROM_NBOUNDS + 1);
            CHECK(isinf(prev_le) && prev_le > 0);            /* the last bucket is +Inf ... */
            CHECK(value(count, prio_names[pi], "") == prev); /* ... and equals _count */
            CHECK(prev == (double)ax_hist_count(h));
            CHECK(prev == (double)nraw[kind][p]);
            CHECK(value(sum, prio_names[pi], "") == (double)ax_hist_sum(h) / 1e9);
            nseries++;
        }
    }
    CHECK_EQ(nseries, 6);
    /* The layout is as documented: each series is buckets, _sum, _count. */
    for (int i = 0; i + 1 < nsample; i++)
        if (strstr(samples[i].name, "_sum") && samples[i].fam == samples[i + 1].fam)
            CHECK(strstr(samples[i + 1].name, "_count") != NULL);
}

/* Go's strconv.FormatFloat(v, 'g', -1, 64) plus the client's special cases;
 * the expected strings were produced by Go 1.19. */
static void test_format(void)
{
    struct {
        double v;
        const char *go;
    } t[] = {
        {1234567, "1.234567e+06"},
        {123456, "123456"},
        {1e-05, "1e-05"},
        {0.0001, "0.0001"},
        {2.5e-05, "2.5e-05"},
        {0.1, "0.1"},
        {1e21, "1e+21"},
        {-0.5, "-0.5"},
        {0x1p-1022, "2.2250738585072014e-308"},
        {5e-324, "5e-324"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {18446744073709551615.0, "1.8446744073709552e+19"},
        {0x1p-1014, "5.696189077778436e-306"}, /* a power of two: asymmetric interval */
        {100, "100"},
        {1e6, "1e+06"},
        {999999, "999999"},
        {0.123456789, "0.123456789"},
        {1e-4 * 3, "0.00030000000000000003"},
        {12345.678, "12345.678"},
        {0.000123, "0.000123"},
        {9007199254740994.0, "9.007199254740994e+15"},
        {1.5e-7, "1.5e-07"},
        {0, "0"},
        {-0.0, "0"},
        {1, "1"},
        {-1, "-1"},
        {INFINITY, "+Inf"},
        {-INFINITY, "-Inf"},
        {NAN, "NaN"},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        char out[32];
        size_t n = ax_prom_format_double(t[i].v, out);
        CHECK_STR(out, t[i].go);
        CHECK_EQ(n, strlen(t[i].go));
    }
}

/* snprintf semantics: the return value is always the full length; at most
 * len bytes are written, the last of them a NUL; the text is a prefix of
 * the full one. */
static void test_truncation(const char *full, size_t needed)
{
    CHECK_EQ(ax_prom_render(&snap, NULL, 0), needed);
    size_t cap = needed + 64;
    char *buf = malloc(cap);
    CHECK(buf != NULL);
    for (size_t len = 0; len <= needed + 2; len += len < 300 ? 1 : 97) {
        for (size_t tries = 0; tries < 2; tries++) { /* also len = needed, needed + 1 */
            size_t l = tries ? (len % 2 ? needed : needed + 1) : len;
            memset(buf, 0x5a, cap);
            CHECK_EQ(ax_prom_render(&snap, buf, l), needed);
            for (size_t i = l; i < cap; i++)
                CHECK(buf[i] == 0x5a); /* nothing written past len */
            if (l == 0) continue;
            size_t kept = needed < l ? needed : l - 1;
            CHECK_EQ(strlen(buf), kept);
            CHECK(memcmp(buf, full, kept) == 0);
        }
    }
    free(buf);
}

/* ax_prom_merge: appended texts that repeat families become one group per
 * family, first HELP/TYPE kept, repeated samples (name + labels) dropped. */
static void test_merge(void)
{
    static const char in[] =
        "# HELP q_len Entries.\n# TYPE q_len gauge\nq_len{queue=\"a\"} 1\n\n"
        "# HELP c_total Pulled.\n# TYPE c_total counter\nc_total{c=\"x\"} 5\n"
        "# HELP h Hist.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
        "h_sum 3\nh_count 2\n"
        "# HELP q_len Entries again.\n# TYPE q_len gauge\nq_len{queue=\"b\"} 2\n"
        "q_len{queue=\"a\"} 9\n"
        "# HELP c_total Pulled.\n# TYPE c_total counter\nc_total{c=\"y\"} 7\n"
        "c_total{c=\"x\\\"} 1\"} 8\n"
        "bare_gauge 4\n";
    static const char want[] =
        "# HELP q_len Entries.\n# TYPE q_len gauge\nq_len{queue=\"a\"} 1\nq_len{queue=\"b\"} 2\n"
        "# HELP c_total Pulled.\n# TYPE c_total counter\nc_total{c=\"x\"} 5\nc_total{c=\"y\"} 7\n"
        "c_total{c=\"x\\\"} 1\"} 8\n"
        "# HELP h Hist.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
        "h_sum 3\nh_count 2\n"
        "bare_gauge 4\n";
    char buf[sizeof in];
    memcpy(buf, in, sizeof in);
    size_t n = ax_prom_merge(buf, sizeof in - 1);
    buf[n] = 0;
    if (strcmp(buf, want) != 0)
        fprintf(stderr, "merged:\n%s\nwanted:\n%s\n", buf, want);
    CHECK(strcmp(buf, want) == 0);
    /* Already valid text comes back unchanged; nothing stays nothing. */
    memcpy(buf, want, sizeof want);
    CHECK_EQ(ax_prom_merge(buf, sizeof want - 1), sizeof want - 1);
    CHECK(memcmp(buf, want, sizeof want - 1) == 0);
    CHECK_EQ(ax_prom_merge(buf, 0), 0u);
    /* A last line without its newline gets one only if there is room: the
     * length never grows. */
    char t[] = "a 1\na 2";
    size_t m = ax_prom_merge(t, strlen(t));
    CHECK_EQ(m, 4u);
    CHECK(memcmp(t, "a 1\n", 4) == 0);
    char u[] = "a 1\nb 2";
    CHECK_EQ(ax_prom_merge(u, strlen(u)), strlen("a 1\nb 2"));
    CHECK(memcmp(u, "a 1\nb 2", 7) == 0);
}

int main(int argc, char **argv)
{
    test_merge();
    build_snapshot();
    size_t needed = ax_prom_render(&snap, NULL, 0);
    char *text = malloc(needed + 1);
    CHECK(text != NULL);
    CHECK_EQ(ax_prom_render(&snap, text, needed + 1), needed);
    CHECK_EQ(strlen(text), needed);
    if (argc > 1 && strcmp(argv[1], "--dump") == 0) {
        fputs(text, stdout);
        free(text);
        return 0;
    }

    test_format();
    parse(text);
    check_counters();
    check_histograms();
    CHECK(strstr(text, "ax_queue_length{priority=\"normal\"} 1.234567e+06\n") != NULL);
    CHECK(strstr(text, "ax_tasks_submitted_total 9.87654321e+09\n") != NULL);
    CHECK(strstr(text, "# TYPE ax_events_dropped_total counter\n"
                       "ax_events_dropped_total 1.23456789e+08\n") != NULL);
    CHECK(strstr(text, "# TYPE ax_tasks_orphaned gauge\nax_tasks_orphaned 2\n") != NULL);
    CHECK(strstr(text, "ax_wait_seconds_bucket{priority=\"high\",le=\"0.0001\"} 12\n") != NULL);
    /* Per-class families: one sample per class, in registration order. */
    CHECK(strstr(text, "# TYPE ax_class_limit gauge\nax_class_limit{class=\"quote\"} 37\n"
                       "ax_class_limit{class=\"search.v2\"} 500\n") != NULL);
    CHECK(strstr(text, "ax_class_breaker_state{class=\"quote\"} 2\n") != NULL);
    CHECK(strstr(text, "ax_class_retry_budget_left{class=\"search.v2\"} +Inf\n") != NULL);
    CHECK(strstr(text, "ax_class_retry_tokens{class=\"quote\"} 6.5\n") != NULL);
    CHECK(strstr(text, "ax_class_latency_seconds{class=\"quote\"} 0.25\n") != NULL);
    CHECK(strstr(text, "# TYPE ax_class_expired_total counter\n") != NULL);
    CHECK(strstr(text, "ax_class_expired_total{class=\"search.v2\"} 41\n") != NULL);
    CHECK(strstr(text, "ax_class_retries_denied_total{class=\"quote\"} 3\n") != NULL);
    CHECK(strstr(text, "# TYPE ax_class_limit_mark gauge\nax_class_limit_mark{class=\"quote\"} 250\n"
                       "ax_class_limit_mark{class=\"search.v2\"} 0\n") != NULL);
    CHECK(strstr(text, "# TYPE ax_class_limit_doublings_total counter\n"
                       "ax_class_limit_doublings_total{class=\"quote\"} 4\n") != NULL);
    test_truncation(text, needed);

    /* An empty snapshot renders too: zeros everywhere, same shape. */
    memset(&snap, 0, sizeof snap);
    memset(nraw, 0, sizeof nraw);
    size_t n0 = ax_prom_render(&snap, NULL, 0);
    char *empty = malloc(n0 + 1);
    CHECK(empty != NULL);
    CHECK_EQ(ax_prom_render(&snap, empty, n0 + 1), n0);
    parse(empty);
    check_counters();
    check_histograms();

    free(empty);
    free(text);
    printf("test_prom: ok (%zu bytes, %d samples)\n", needed, nsample);
    return 0;
}
