/* ax-demo.c - the main job: replay the seed's §4 incident against a thread
 * pool and three ax configurations, side by side (issues 5 and 12).
 *
 * With no arguments: for each configuration (threads, seed-before,
 * seed-tuned, ax-auto), start a fresh ax-upstream on a free loopback port, fork a
 * child that runs the configuration against it (run.c), collect the child's
 * figures through shared memory, stop the upstream. Then print the summary
 * and the verdicts on the seed's five goals, and write results.json and
 * report.html. A fork per configuration keeps peak RSS and peak threads
 * per configuration; a fresh upstream per configuration means each meets
 * the same phase schedule from t = 0 and the upstream's counters are its
 * own.
 *
 * The parent stays single-threaded and small: it only forks, waits and
 * writes files. See demo/demo.h for the parts and tools/README.md for the
 * flags, the scenario format and what the numbers mean.
 */
#include "demo/demo.h"
#ifdef AX_DEMO_CLUSTER
#include "demo/cluster.h"
#endif

#include <curl/curl.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ax.h"

static const char *const usage_text =
    "usage: ax-demo [--scenario NAME] [--speed S] [--short] [--out DIR] [--config FILE]\n"
    "               [--url URL] [--only NAME[,NAME...]] [--seed N] [--upstream PATH]\n"
    "       ax-demo --cluster N [--scenario NAME] [--short] [--speed S] [--out DIR] [--seed N]\n"
    "                       [--config FILE] [--upstream PATH]\n"
    "       ax-demo --print-config [--scenario NAME] [--short] [--config FILE]\n"
    "       ax-demo --help\n"
    "\n"
    "Replays the seed's incident (a traffic peak while the upstream degrades from\n"
    "300 ms to 2 s, then recovery) against a thread pool and three ax configurations,\n"
    "one after the other, each in its own process against a fresh ax-upstream.\n"
    "Prints a summary and a verdict per seed goal; writes results.json and\n"
    "report.html (self-contained, inline SVG).\n"
    "\n"
    "  --scenario NAME  the built-in scenario: overload (default: the seed's overload,\n"
    "                   scaled down 10x) or retry-storm (a moderate peak)\n"
    "  --speed S        run S times faster than the incident (default 3.5; every\n"
    "                   duration is divided by S, counts stay at full scale)\n"
    "  --short          the short CI scenario (about 40 s in all)\n"
    "  --out DIR        where results.json and report.html go (default .)\n"
    "  --config FILE    your own scenario (start from ax-demo --print-config)\n"
    "  --url URL        a real upstream instead of ax-upstream: tasks GET URL + the\n"
    "                   class path; its behaviour is its own (phases' upstream= keys\n"
    "                   are ignored)\n"
    "  --only NAMES     run only these configurations (comma-separated)\n"
    "  --seed N         arrival schedule seed (default 42)\n"
    "  --upstream PATH  the ax-upstream binary (default: next to ax-demo, then PATH)\n"
    "  --print-config   print the scenario in --config format and exit\n"
    "  --cluster N      instead of the configurations: a redis-server, N ax-worker\n"
    "                   processes (2 to 16) consuming one queue, the traffic submitted\n"
    "                   to it, one worker killed with SIGKILL in the middle of the peak;\n"
    "                   reports per worker and in total tasks, redeliveries, dead\n"
    "                   letters, duplicates and lost messages (must be 0)\n"
    "\n"
    "Exit status: 0 the runs completed (verdicts may FAIL: that is the demo),\n"
    "1 a run could not be carried out, 2 bad arguments, config file or --url,\n"
    "3 a class path of --url did not answer a GET with a 2xx before the runs (nothing\n"
    "is run), or most upstream answers were not 2xx, or none was (no verdict given),\n"
    "4 --cluster lost an admitted message (no terminal record).\n";

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ax-demo: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n\n", stderr);
    fputs(usage_text, stderr);
    exit(2);
}

static void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ax-demo: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(code);
}

struct options {
    double speed;
    bool short_mode, print_config;
    const char *out, *config, *url, *only, *upstream, *scenario;
    bool seed_given;
    unsigned long long seed;
    unsigned cluster; /* --cluster N; 0 = the configurations */
};

static void parse_args(int argc, char **argv, struct options *o)
{
    static const char *const with_value[] = {"--speed", "--out",  "--config",   "--url",
                                             "--only",  "--seed", "--upstream", "--scenario",
                                             "--cluster"};
    enum { NV = sizeof with_value / sizeof *with_value };
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_text, stdout);
            exit(0);
        }
    bool seen[NV] = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--short") == 0) {
            o->short_mode = true;
            continue;
        }
        if (strcmp(a, "--print-config") == 0) {
            o->print_config = true;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) usage_error("unexpected argument '%s'", a);
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        int f = -1;
        for (int k = 0; k < NV; k++)
            if (strlen(with_value[k]) == len && strncmp(a, with_value[k], len) == 0) f = k;
        if (f < 0) usage_error("unknown option '%.*s'", (int)len, a);
        const char *v;
        if (eq) {
            v = eq + 1;
        } else {
            if (i + 1 >= argc) usage_error("%s needs a value", with_value[f]);
            v = argv[++i];
        }
        if (!*v) usage_error("%s: the value is empty", with_value[f]);
        if (seen[f]) usage_error("%s is given twice", with_value[f]);
        seen[f] = true;
        char *e;
        switch (f) {
        case 0:
            errno = 0;
            o->speed = strtod(v, &e);
            /* A plain decimal: strtod also takes " 3.5" and "0x10" (trial). */
            if (*e || errno || !(o->speed >= 0.01 && o->speed <= 1000) ||
                !(isdigit((unsigned char)v[0]) || v[0] == '.') || strpbrk(v, "xX"))
                usage_error("--speed: '%s' is not a number from 0.01 to 1000", v);
            break;
        case 1:
            o->out = v;
            break;
        case 2:
            o->config = v;
            break;
        case 3:
            o->url = v;
            break;
        case 4:
            o->only = v;
            break;
        case 5:
            errno = 0;
            o->seed = strtoull(v, &e, 10);
            if (*v < '0' || *v > '9' || *e || errno)
                usage_error("--seed: '%s' is not a whole number", v);
            o->seed_given = true;
            break;
        case 6:
            o->upstream = v;
            break;
        case 7:
            o->scenario = v;
            break;
        case 8: {
            errno = 0;
            unsigned long n = strtoul(v, &e, 10);
            if (*v < '0' || *v > '9' || *e || errno || n < 2 || n > 16)
                usage_error("--cluster: '%s' is not a number of workers from 2 to 16", v);
            o->cluster = (unsigned)n;
            break;
        }
        }
    }
}

/* A tool (ax-upstream, ax-worker): given, else next to this executable, else on PATH. */
static bool find_tool(const char *tool, const char *given, char *out, size_t len)
{
    if (given) {
        snprintf(out, len, "%s", given);
        struct stat st; /* a directory passes access(X_OK) (trial) */
        return stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = 0;
            if (snprintf(out, len, "%s/%s", self, tool) < (int)len && access(out, X_OK) == 0)
                return true;
        }
    }
    const char *path = getenv("PATH");
    if (!path) return false;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *d = strtok(buf, ":"); d; d = strtok(NULL, ":")) {
        if (snprintf(out, len, "%s/%s", d, tool) < (int)len && access(out, X_OK) == 0)
            return true;
    }
    return false;
}

static int mkdir_p(const char *dir)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
    struct stat st;
    return stat(buf, &st) == 0 && S_ISDIR(st.st_mode) && access(buf, W_OK) == 0 ? 0 : -1;
}

/* 0 if dir/name can be written by fopen(..., "w") at the end of the runs:
 * absent (dir is writable: mkdir_p checked), or a regular file this process
 * may open for writing -- opened without O_TRUNC and closed, so nothing is
 * created or changed now, and a run refused later leaves no empty file.
 * Else -1 with errno (EISDIR for a directory, EINVAL for anything else not a
 * regular file: a FIFO's open would block). */
static int out_file_ok(const char *dir, const char *name)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    struct stat st;
    if (stat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISREG(st.st_mode)) {
        errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        return -1;
    }
    int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

/* ---- text output ------------------------------------------------------------------ */

static void group(char *b, size_t n, uint64_t v)
{
    char raw[32];
    snprintf(raw, sizeof raw, "%llu", (unsigned long long)v);
    size_t len = strlen(raw), o = 0;
    for (size_t i = 0; i < len && o + 2 < n; i++) {
        if (i && (len - i) % 3 == 0) b[o++] = ' ';
        b[o++] = raw[i];
    }
    b[o] = 0;
}

static void ms_text(char *b, size_t n, double ms)
{
    if (ms < 0)
        snprintf(b, n, "-");
    else if (ms < 10)
        snprintf(b, n, "%.1fms", ms);
    else if (ms < 10000)
        snprintf(b, n, "%.0fms", ms);
    else
        snprintf(b, n, "%.1fs", ms / 1000);
}

#define COLW 22

static void row_start(const char *label)
{
    printf("  %-26s", label);
}

static void cell(const char *s)
{
    printf("%*s", COLW, s);
}

static void row_u64(const char *label, struct dm_result *const *res, unsigned n,
                    uint64_t (*get)(const struct dm_result *, unsigned), unsigned arg)
{
    row_start(label);
    for (unsigned i = 0; i < n; i++) {
        char b[32];
        group(b, sizeof b, get(res[i], arg));
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');
}

static uint64_t g_out(const struct dm_result *r, unsigned o)
{
    return dm_total(r, (enum dm_outcome)o);
}
static uint64_t g_generated(const struct dm_result *r, unsigned a)
{
    (void)a;
    return r->generated;
}
static uint64_t g_admitted(const struct dm_result *r, unsigned a)
{
    (void)a;
    return dm_sum_admitted(r);
}
static uint64_t g_retries(const struct dm_result *r, unsigned a)
{
    (void)a;
    return r->retries;
}
static uint64_t g_requests(const struct dm_result *r, unsigned a)
{
    (void)a;
    return r->requests;
}
static uint64_t g_up_requests(const struct dm_result *r, unsigned a)
{
    (void)a;
    return r->upstream_requests;
}

static void print_summary(const struct dm_scenario *sc, struct dm_result *const *res, unsigned n,
                          bool own_upstream)
{
    printf("\nresults (times in incident time; counts at full scale)\n");
    row_start("");
    for (unsigned i = 0; i < n; i++)
        cell(res[i]->name);
    putchar('\n');
    row_u64("tasks generated", res, n, g_generated, 0);
    row_u64("  admitted", res, n, g_admitted, 0);
    row_u64("  succeeded", res, n, g_out, OUT_SUCCEEDED);
    row_u64("  failed", res, n, g_out, OUT_FAILED);
    row_u64("  timed out", res, n, g_out, OUT_TIMED_OUT);
    row_u64("  cancelled at the end", res, n, g_out, OUT_CANCELLED);
    row_u64("  shed (AX_ESHED)", res, n, g_out, OUT_SHED);
    row_u64("  rejected (full, rate)", res, n, g_out, OUT_REJECTED);
    for (unsigned p = 0; p < DM_NPRIO; p++) {
        char label[64];
        snprintf(label, sizeof label, "wait p50/p99/max %s", dm_prio_name[p]);
        row_start(label);
        for (unsigned i = 0; i < n; i++) {
            char a[16], b[16], c[16], all[56];
            ms_text(a, sizeof a, res[i]->wait[p].p50);
            ms_text(b, sizeof b, res[i]->wait[p].p99);
            ms_text(c, sizeof c, res[i]->wait[p].max);
            snprintf(all, sizeof all, "%s/%s/%s", a, b, c);
            cell(res[i]->ok ? all : "-");
        }
        putchar('\n');
    }
    row_start("run p50/p99 (per attempt)");
    for (unsigned i = 0; i < n; i++) {
        char a[16], b[16], all[40];
        ms_text(a, sizeof a, res[i]->run.p50);
        ms_text(b, sizeof b, res[i]->run.p99);
        snprintf(all, sizeof all, "%s/%s", a, b);
        cell(res[i]->ok ? all : "-");
    }
    putchar('\n');
    row_u64("retries", res, n, g_retries, 0);
    row_u64("upstream requests (sent)", res, n, g_requests, 0);
    if (own_upstream) row_u64("  (ax-upstream counted)", res, n, g_up_requests, 0);
    row_start("  per task sent");
    for (unsigned i = 0; i < n; i++) {
        char b[32];
        snprintf(b, sizeof b, "%.2f", dm_requests_per_task(res[i]));
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');
    row_start("  per task generated");
    for (unsigned i = 0; i < n; i++) {
        char b[32];
        snprintf(b, sizeof b, "%.2f", dm_requests_per_generated(res[i]));
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');
    row_start("functions at once (max)");
    for (unsigned i = 0; i < n; i++) {
        char b[48];
        snprintf(b, sizeof b, "%llu of %llu+%llu", (unsigned long long)res[i]->max_in_task,
                 (unsigned long long)res[i]->limit, (unsigned long long)res[i]->orphan_allowance);
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');
    row_start("  backlog peak (waiting)");
    for (unsigned i = 0; i < n; i++) {
        char b[32];
        group(b, sizeof b, res[i]->max_waiting);
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');
    row_start("  past deadline (latest)");
    for (unsigned i = 0; i < n; i++) {
        char a[16], b[48];
        ms_text(a, sizeof a, res[i]->max_over_ms);
        snprintf(b, sizeof b, "%s, %llu orphans", a, (unsigned long long)res[i]->overdue);
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');
    /* Every status with its code. When one configuration's answers do not
     * fit a column (a 503 beside the 200s and the unanswered), each
     * configuration gets a line of its own rather than a cell that runs into
     * the next. */
    for (unsigned c = 0; c < sc->ncls; c++) {
        char label[64], b[DM_MAX_PROFILES][256];
        snprintf(label, sizeof label, "HTTP %s", sc->cls[c].name);
        bool fits = true;
        for (unsigned i = 0; i < n; i++) {
            if (res[i]->ok)
                dm_status_text(res[i], c, DM_NSTATUS, b[i], sizeof b[i]);
            else
                snprintf(b[i], sizeof b[i], "-");
            if (strlen(b[i]) >= COLW) fits = false;
        }
        if (fits) {
            row_start(label);
            for (unsigned i = 0; i < n; i++)
                cell(b[i]);
            putchar('\n');
        } else {
            printf("  %s\n", label);
            for (unsigned i = 0; i < n; i++)
                printf("    %-24s %s\n", res[i]->name, b[i]);
        }
    }
    row_start("peak RSS");
    for (unsigned i = 0; i < n; i++) {
        char b[32];
        snprintf(b, sizeof b, "%.0f MB", res[i]->peak_rss_mb);
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');
    row_start("peak threads");
    for (unsigned i = 0; i < n; i++) {
        char b[32];
        snprintf(b, sizeof b, "%u", res[i]->peak_threads);
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');

    printf("\noverload (tools/README.md, \"Reading the results\")\n");
    row_start("HIGH wait p99 in the peak");
    for (unsigned i = 0; i < n; i++) {
        char b[32];
        ms_text(b, sizeof b, res[i]->wait_high_peak.count ? res[i]->wait_high_peak.p99 : -1);
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');
    row_start("requests/task, degraded");
    for (unsigned i = 0; i < n; i++) {
        char b[32];
        double q = dm_requests_per_degraded_task(res[i]);
        if (isfinite(q))
            snprintf(b, sizeof b, "%.2f", q);
        else
            snprintf(b, sizeof b, "-");
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');
    row_start("  most by one task");
    for (unsigned i = 0; i < n; i++) {
        char b[32];
        snprintf(b, sizeof b, "%llu", (unsigned long long)res[i]->max_task_requests);
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');
    row_start("peak RSS");
    for (unsigned i = 0; i < n; i++) {
        char b[32];
        snprintf(b, sizeof b, "%.0f MB", res[i]->peak_rss_mb);
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');
    row_start("recovery (wait p99 < 2x)");
    for (unsigned i = 0; i < n; i++) {
        char b[48], a[16];
        if (!isfinite(res[i]->recovery_ms))
            snprintf(b, sizeof b, "n/a");
        else if (res[i]->recovery_ms < 0)
            snprintf(b, sizeof b, "not in the traffic");
        else {
            ms_text(a, sizeof a, res[i]->recovery_ms);
            snprintf(b, sizeof b, "%s", a);
        }
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');
    row_start("goodput (ok within dl)");
    for (unsigned i = 0; i < n; i++) {
        char b[32];
        snprintf(b, sizeof b, "%.1f/s", dm_goodput(sc, res[i]));
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');
    row_start("HIGH success rate");
    for (unsigned i = 0; i < n; i++) {
        char b[32];
        snprintf(b, sizeof b, "%.1f %%", 100 * dm_high_success(res[i]));
        cell(res[i]->ok && isfinite(dm_high_success(res[i])) ? b : "-"); /* no HIGH task */
    }
    putchar('\n');
    row_start("  refused: breaker open");
    for (unsigned i = 0; i < n; i++) {
        char b[32];
        group(b, sizeof b, res[i]->open_refused);
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');
    row_start("  failed: open/expired");
    for (unsigned i = 0; i < n; i++) {
        char b[64], x[24], y[24];
        group(x, sizeof x, res[i]->open_failed);
        group(y, sizeof y, res[i]->expired);
        snprintf(b, sizeof b, "%s / %s", x, y);
        cell(res[i]->ok ? b : "-");
    }
    putchar('\n');

    printf("\nverdicts on the seed's five goals\n");
    for (unsigned i = 0; i < n; i++) {
        if (!res[i]->ok) {
            printf("  %s: did not run: %s\n", res[i]->name, res[i]->error);
            continue;
        }
        struct dm_verdict v[DM_NGOALS];
        dm_verdicts(sc, dm_profile_find(sc, res[i]->name), res[i], v);
        printf("  %s\n", res[i]->name);
        if (dm_machine_stalled(sc, res[i]))
            printf("    (a busy machine: the demo's own thread was kept off the CPU for up to "
                   "%.0f ms of wall time, and some thread waited for a CPU %.0f %% of the run; "
                   "waits and deadlines measured in this run include that, so goals 2-4 say "
                   "more about the machine than the engine)\n",
                   res[i]->stall_ms / sc->speed, res[i]->cpu_pressure_pct);
        for (unsigned k = 0; k < DM_NGOALS; k++)
            printf("    %-26s %-4s  %s\n", v[k].goal, dm_mark_name(v[k].mark), v[k].text);
        const struct dm_profile *p = dm_profile_find(sc, res[i]->name);
        if (p && p->engine == ENG_AX_AUTO) {
            const struct dm_result *tuned = NULL;
            for (unsigned j = 0; j < n; j++)
                if (strcmp(res[j]->name, "seed-tuned") == 0) tuned = res[j];
            struct dm_verdict tv[DM_NTARGETS];
            dm_targets(sc, res[i], tuned, tv);
            printf("    issue 12's targets, against seed-tuned in this run:\n");
            for (unsigned k = 0; k < DM_NTARGETS; k++)
                printf("    %-32s %-4s  %s\n", tv[k].goal, dm_mark_name(tv[k].mark), tv[k].text);
        }
    }
}

/* GET each class path once before anything runs: a path that 404s (or any
 * other non-2xx, or no answer) would only make every run fail, after tens
 * of thousands of requests. Exits 3, naming each path and its answer, in the
 * words of the end-of-run check. */
static void check_class_paths(const struct dm_scenario *sc, const char *url)
{
    char said[DM_MAX_CLASSES][CURL_ERROR_SIZE + 64];
    char full[DM_MAX_CLASSES][DM_URL_MAX + DM_PATH_MAX]; /* never truncated */
    bool bad = false;
    for (unsigned c = 0; c < sc->ncls; c++) {
        snprintf(full[c], sizeof full[c], "%s%s", url, sc->cls[c].path); /* url: no trailing '/' */
        /* The class's own timeout at full scale, at least 3 s. */
        long tmo = sc->cls[c].timeout_ms > 3000 ? (long)sc->cls[c].timeout_ms : 3000;
        long status = 0;
        char err[CURL_ERROR_SIZE + 32];
        if (dm_url_check(full[c], tmo, &status, err, sizeof err) != 0) {
            snprintf(said[c], sizeof said[c], "no answer (%s)", err);
            bad = true;
        } else {
            snprintf(said[c], sizeof said[c], "%ld", status);
            if (status < 200 || status > 299) bad = true;
        }
    }
    if (!bad) return;
    fflush(stdout);
    fprintf(stderr,
            "ax-demo: --url %s: a class path did not answer GET with a 2xx when checked "
            "once before the run;",
            url);
    for (unsigned c = 0; c < sc->ncls; c++)
        fprintf(stderr, "%s GET %s: %s", c ? "," : "", full[c], said[c]);
    fputc('\n', stderr);
    fprintf(stderr, "ax-demo: nothing was run: every class path must answer GET with a 2xx "
                    "(tools/README.md, \"What --url must serve\")\n");
    exit(3);
}

static void print_header(const struct dm_scenario *sc, const char *url, const bool *run)
{
    struct dm_traffic tr;
    dm_traffic_init(&tr, sc);
    struct dm_arrival a;
    uint64_t n = 0;
    while (dm_traffic_next(&tr, &a))
        n++;
    double len = dm_scenario_length_ms(sc);
    printf("ax-demo: a traffic peak while the upstream degrades (the incident ax was written "
           "after), at %gx speed (%s scenario): %.0f s of incident in about %.*f s per "
           "configuration\n",
           sc->speed, sc->origin, (len + sc->drain_ms) / 1000,
           (len + sc->drain_ms) / 1000 / sc->speed < 10 ? 1 : 0, /* not "about 0 s" */
           (len + sc->drain_ms) / 1000 / sc->speed);
    printf("  traffic   ");
    for (unsigned i = 0; i < sc->nph; i++)
        printf("%s%s %gs @%g/s%s%s%s", i ? " -> " : "", sc->ph[i].name,
               sc->ph[i].duration_ms / 1000, sc->ph[i].rate,
               sc->ph[i].upstream[0] && !url ? " (upstream " : "", url ? "" : sc->ph[i].upstream,
               sc->ph[i].upstream[0] && !url ? ")" : "");
    printf(", then drain <= %gs\n", sc->drain_ms / 1000);
    char nb[32];
    group(nb, sizeof nb, n);
    double msum = sc->mix[0] + sc->mix[1] + sc->mix[2];
    printf("            %s tasks, HIGH/NORMAL/LOW %.0f/%.0f/%.0f %%, %g B context each; classes",
           nb, 100 * sc->mix[0] / msum, 100 * sc->mix[1] / msum, 100 * sc->mix[2] / msum,
           sc->ctx_bytes);
    for (unsigned i = 0; i < sc->ncls; i++)
        printf("%s %s (%s, %g s)", i ? "," : "", sc->cls[i].name,
               url ? sc->cls[i].path : sc->cls[i].latency, sc->cls[i].timeout_ms / 1000);
    putchar('\n');
    if (url) {
        printf("  upstream  %s (yours; not restarted between configurations): GET", url);
        for (unsigned i = 0; i < sc->ncls; i++)
            printf("%s %s%s", i ? "," : "", url, sc->cls[i].path);
        putchar('\n');
    } else {
        printf("  upstream  ax-upstream on 127.0.0.1, a fresh process per configuration\n");
    }
    for (unsigned i = 0; i < sc->nprof; i++)
        if (run[i]) printf("  %-12s %s\n", sc->prof[i].name, sc->prof[i].about);
    fflush(stdout);
}

/* --cluster N (demo/cluster.c): the same traffic through a Redis queue and N
 * ax-worker processes, one killed in the peak. */
static int run_cluster(const struct options *o, const struct dm_scenario *sc, const char *up_exe,
                       const char *out)
{
#ifdef AX_DEMO_CLUSTER
    char worker_exe[PATH_MAX];
    if (!find_tool("ax-worker", NULL, worker_exe, sizeof worker_exe))
        die(1, "cannot find ax-worker next to ax-demo or on PATH (it is built with libax_redis)");
    double len = dm_scenario_length_ms(sc);
    printf("ax-demo --cluster %u: the %s scenario at %gx speed (%.0f s of incident in about "
           "%.0f s, then the drain) through one Redis queue and %u ax-worker processes; one "
           "is killed with SIGKILL in the middle of the peak\n",
           o->cluster, sc->origin, sc->speed, len / 1000, len / 1000 / sc->speed, o->cluster);
    fflush(stdout);
    static struct dm_cluster_result r;
    struct dm_cluster_opts co = {.sc = sc, .n = o->cluster, .worker_exe = worker_exe,
                                 .upstream_exe = up_exe, .out = out, .tty = isatty(2)};
    if (dm_cluster_run(&co, &r) != 0) die(1, "--cluster: %s", r.error);
    dm_cluster_print(sc, &r);
    fflush(stdout);
    char path[PATH_MAX], err[600];
    snprintf(path, sizeof path, "%s/results.json", out);
    if (dm_cluster_write_json(path, sc, &r, err, sizeof err) != 0) die(1, "%s", err);
    printf("\nwrote %s", path);
    snprintf(path, sizeof path, "%s/report.html", out);
    if (dm_cluster_write_html(path, sc, &r, err, sizeof err) != 0) die(1, "%s", err);
    printf(" and %s (ledgers and logs in %s/cluster)\n", path, out);
    if (r.lost) {
        fprintf(stderr, "ax-demo: --cluster: %llu admitted messages have no terminal record\n",
                (unsigned long long)r.lost);
        return 4;
    }
    if (!r.drained) {
        fprintf(stderr, "ax-demo: --cluster: the queue did not drain within the bound\n");
        return 1;
    }
    return 0;
#else
    (void)o, (void)sc, (void)up_exe, (void)out;
    die(1, "--cluster: this ax-demo was built without libax_redis (hiredis)");
#endif
}

int main(int argc, char **argv)
{
    struct options o = {0};
    parse_args(argc, argv, &o);

    static struct dm_scenario sc;
    if (dm_scenario_builtin(&sc, o.scenario, o.short_mode) != 0)
        usage_error("--scenario: no built-in scenario '%s' (there are: %s)", o.scenario,
                    dm_scenario_names);
    if (o.config) {
        char err[600];
        if (dm_scenario_file(&sc, o.config, err, sizeof err) != 0) {
            fprintf(stderr, "ax-demo: %s\n(ax-demo --print-config shows the format)\n", err);
            return 2;
        }
    }
    if (o.speed > 0) sc.speed = o.speed;
    if (o.seed_given) sc.seed = o.seed;
    if (o.cluster && (o.url || o.only))
        usage_error("--cluster runs its own ax-upstream and no configuration: no %s",
                    o.url ? "--url" : "--only");
    bool run[DM_MAX_PROFILES];
    unsigned nrun = 0;
    for (unsigned i = 0; i < sc.nprof; i++)
        run[i] = !o.only;
    if (o.only) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", o.only);
        for (char *name = strtok(buf, ","); name; name = strtok(NULL, ",")) {
            const struct dm_profile *p = dm_profile_find(&sc, name);
            if (!p) {
                char names[256] = "";
                for (unsigned i = 0; i < sc.nprof; i++)
                    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                             i ? ", " : "", sc.prof[i].name);
                usage_error("--only: no configuration '%s' (there are: %s)", name, names);
            }
            run[p - sc.prof] = true;
        }
    }
    for (unsigned i = 0; i < sc.nprof; i++)
        nrun += run[i];
    if (nrun == 0) usage_error("no configuration to run");
    /* Timeouts and back-offs must survive the compression (1 ms at least). */
    for (unsigned i = 0; i < sc.ncls; i++)
        if (sc.cls[i].timeout_ms / sc.speed < 1)
            usage_error("--speed %g: class %s's timeout (%g ms) would be under 1 ms", sc.speed,
                        sc.cls[i].name, sc.cls[i].timeout_ms);
    /* Its text; whether it answers is asked below, after --print-config. One
     * trailing '/' is dropped here, once, for the requests and for what is
     * printed ("http://host/" + "/fast" was printed "http://host//fast"). */
    static char url[DM_URL_MAX];
    if (o.url) {
        char why[DM_URL_MAX + 100];
        if (dm_url_base_check(o.url, why, sizeof why) != 0) usage_error("--url: %s", why);
        snprintf(url, sizeof url, "%s", o.url);
        size_t l = strlen(url);
        if (l && url[l - 1] == '/') url[l - 1] = 0;
        o.url = url;
    }
    /* After every flag is checked: --print-config --only bogus exited 0. */
    if (o.print_config) {
        dm_scenario_print(&sc, stdout);
        return 0;
    }

    curl_global_init(CURL_GLOBAL_DEFAULT);
    char up_exe[PATH_MAX] = "";
    if (o.url) {
        char err[CURL_ERROR_SIZE + 64];
        if (dm_url_check(o.url, 3000, NULL, err, sizeof err) != 0)
            die(2, "--url %s: cannot reach it: %s", o.url, err);
        check_class_paths(&sc, o.url);
    } else {
        if (!find_tool("ax-upstream", o.upstream, up_exe, sizeof up_exe))
            die(o.upstream ? 2 : 1,
                "cannot find ax-upstream%s%s (build it, pass --upstream PATH, or use --url)",
                o.upstream ? " at " : "", o.upstream ? o.upstream : "");
        /* Start it once to check the scenario's upstream keys before anything runs. */
        struct dm_upstream u = {.log_fd = -1};
        char err[800];
        int rc = dm_upstream_start(up_exe, &sc, &u, err, sizeof err);
        if (rc != 0) die(rc == -2 ? 2 : 1, "%s", err);
        dm_upstream_stop(&u);
    }

    /* Before the runs, not after them: results.json or report.html that
     * cannot be (over)written failed only once everything had run (trial).
     * After the upstream's checks: a run refused there (exit 2 or 3) left
     * an empty --out directory behind (trial). */
    const char *out = o.out ? o.out : ".";
    if (mkdir_p(out) != 0)
        die(2, "--out %s: cannot create or write to it: %s", out, strerror(errno ? errno : EACCES));
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "report.html" : "results.json";
        if (out_file_ok(out, name) != 0)
            die(2, "--out %s: cannot write %s there: %s", out, name,
                errno == EINVAL ? "not a regular file" : strerror(errno));
    }

    if (o.cluster) return run_cluster(&o, &sc, up_exe, out);
    print_header(&sc, o.url, run);

    size_t bytes = sizeof(struct dm_result) * sc.nprof;
    struct dm_result *shared =
        mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) die(1, "mmap: %s", strerror(errno));
    bool tty = isatty(2);
    struct dm_result *res[DM_MAX_PROFILES];
    unsigned nres = 0;
    int exit_code = 0;
    for (unsigned i = 0; i < sc.nprof; i++) {
        if (!run[i]) continue;
        struct dm_result *r = &shared[i];
        memset(r, 0, sizeof *r);
        snprintf(r->name, sizeof r->name, "%s", sc.prof[i].name);
        res[nres++] = r;
        struct dm_upstream u = {.log_fd = -1};
        struct dm_run_opts ro = {.sc = &sc, .prof = &sc.prof[i], .tty = tty};
        if (o.url) {
            snprintf(ro.base_url, sizeof ro.base_url, "%s", o.url); /* no trailing '/' */
        } else {
            char err[800];
            if (dm_upstream_start(up_exe, &sc, &u, err, sizeof err) != 0) {
                if (snprintf(r->error, sizeof r->error, "%s", err) >= (int)sizeof r->error)
                    r->error[sizeof r->error - 2] = '~';
                exit_code = 1;
                continue;
            }
            snprintf(ro.base_url, sizeof ro.base_url, "%s", u.base_url);
            ro.own_upstream = true;
        }
        /* The upstream's schedule began just before it printed its port. */
        ro.t0_ns = ax_now_ns();
        if (!tty) fprintf(stderr, "%s: running\n", sc.prof[i].name);
        fflush(NULL);
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0) die(1, "fork: %s", strerror(errno));
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives ax-demo (trial) */
            if (getppid() != parent) _exit(1);
            dm_run(&ro, r);
            fflush(NULL);
            _exit(r->ok ? 0 : 1);
        }
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        dm_upstream_stop(&u);
        if (WIFSIGNALED(status)) {
            r->ok = false;
            snprintf(r->error, sizeof r->error, "the run's process was killed by signal %d (%s)",
                     WTERMSIG(status), strsignal(WTERMSIG(status)));
        } else if (!r->ok && !r->error[0]) {
            snprintf(r->error, sizeof r->error, "the run's process exited with status %d",
                     WEXITSTATUS(status));
        }
        if (!r->ok) {
            fprintf(stderr, "ax-demo: %s: %s\n", r->name, r->error);
            exit_code = 1;
        }
    }

    print_summary(&sc, res, nres, !o.url);
    fflush(stdout); /* the table first, so what follows on stderr does not land mid-line */
    /* An upstream that answers most requests with anything but a 2xx (the
     * class paths 404, a proxy error page) makes every figure meaningless:
     * say so and fail, once the files are written. */
    bool failing = false;
    for (unsigned i = 0; i < nres; i++) {
        if (!res[i]->ok || !dm_upstream_failing(res[i])) continue;
        failing = true;
        fprintf(stderr, "ax-demo: %s: only %llu of %llu upstream requests got a 2xx answer;",
                res[i]->name, (unsigned long long)dm_answered_2xx(res[i]),
                (unsigned long long)dm_status_total(res[i]));
        for (unsigned c = 0; c < sc.ncls; c++) {
            char b[256];
            dm_status_text(res[i], c, DM_NSTATUS, b, sizeof b);
            fprintf(stderr, "%s GET %s%s: %s", c ? "," : "", o.url ? o.url : "<ax-upstream>",
                    sc.cls[c].path, b);
        }
        fputc('\n', stderr);
    }
    if (failing) {
        fprintf(stderr, "ax-demo: the upstream failed most requests, so no verdict was given: "
                        "every class path must answer GET with a 2xx (tools/README.md, \"What "
                        "--url must serve\")\n");
        if (exit_code == 0) exit_code = 3;
    }

    char path[PATH_MAX], err[600];
    snprintf(path, sizeof path, "%s/results.json", out);
    if (dm_write_json(path, &sc, o.url, res, nres, err, sizeof err) != 0) die(1, "%s", err);
    printf("\nwrote %s", path);
    snprintf(path, sizeof path, "%s/report.html", out);
    if (dm_write_html(path, &sc, o.url, res, nres, err, sizeof err) != 0) die(1, "%s", err);
    printf(" and %s\n", path);
    munmap(shared, bytes);
    return exit_code;
}
