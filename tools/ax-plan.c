/* ax-plan.c - capacity planning for an ax scheduler (seed §2.3, §4.3;
 * DESIGN.md §5).
 *
 * From the load a service expects -- peak QPS, mean and p99 task time, how
 * many seconds of backlog it tolerates, how much memory a running task holds
 * -- ax-plan prints the numbers the seed derives by hand, and the ax_config
 * that carries them:
 *
 *   queue capacity   = qps x mean x backlog           2000/s x 0.5 s x 10 s = 10000
 *   max_concurrency  = throughput x mean, + 20 %      500/s x 0.5 s = 250 -> 300
 *                                                     3000/s x 0.8 s = 2400 -> 2880
 *   timeout_ms       = p99 x 1.5                      800 ms -> 1200 ms
 *   rate_limit       = 1.5 x qps                      seed §4.3: "traffic above 1.5 x
 *                                                     peak is refused outright"
 *   memory bound     = queued x 256 B + running x (task bytes + stack)
 *
 * Rounding. Every count is rounded up, as the seed does ("250 -> 300" is
 * 250 x 1.2 exactly; a fractional task or slot would be one more). Inputs are
 * decimals, most of which have no exact binary form: 175/s x 1.1 s x 1.2
 * computed as written is 231.00000000000003, whose ceiling is 232, and
 * 1.1/s x 0.1 s x 100 s is 11.000000000000002. So the formulas keep the
 * inputs as given (milliseconds, a margin of 12/10) to stay exact where they
 * can, and ceil_exact() snaps a result within one part in 1e9 of an integer
 * to that integer before rounding up.
 *
 * The memory bound is what admission guarantees, not a forecast: every
 * bucket full (each holds at most its capacity) and every concurrency slot
 * taken, each running task touching its whole coroutine stack. Its blind
 * spots are printed with it (see assumptions()).
 *
 * No run-time dependency on libax: the static library supplies only
 * ax_config_default(), so the defaults printed are the library's own.
 */
#include "ax.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ax's design bound for a queued task (struct job, src/internal.h). */
#define QUEUED_TASK_BYTES 256.0
/* ax_new refuses capacity total + max_concurrency above this
 * (AX_MAX_JOBS / 2, src/internal.h and src/config.c). */
#define AX_TASK_LIMIT 2097152.0
/* ax refuses spec.timeout_ms above one year (src/submit.c). */
#define AX_MAX_TIMEOUT_MS (365.0 * 24 * 3600 * 1000)
/* With mprotect guards (Linux < 6.13) a stack costs two mappings, so the
 * default vm.max_map_count of 65530 caps live stacks near this (DESIGN §7). */
#define MPROTECT_STACK_LIMIT 32640.0
/* Released stacks a worker keeps resident for reuse (src/worker.c warm_keep). */
#define WARM_STACKS_PER_WORKER 64
/* As the worker (src/worker.c): 64, fewer of stacks past 64 KiB (4 MiB in all). */
static double warm_stacks(double stack_bytes)
{
    double n = floor((4u << 20) / stack_bytes);
    return n > WARM_STACKS_PER_WORKER ? WARM_STACKS_PER_WORKER : n < 1 ? 1 : n;
}
/* Larger inputs are typing mistakes, and would leave double's exact range. */
#define INPUT_MAX 1e12

#define MAX_WARNINGS 8

struct inputs {
    double qps, mean_ms, p99_ms, backlog_s, task_bytes, throughput;
    unsigned mix[AX_PRIO_COUNT]; /* percent, indexed by ax_priority */
    double stack_bytes;
    int json;
};

struct plan {
    double capacity;           /* qps x mean x backlog */
    double cap[AX_PRIO_COUNT]; /* split by mix, indexed by ax_priority */
    double cap_total;          /* sum of cap[]: what the config admits */
    double conc_base;          /* throughput x mean */
    double max_concurrency;    /* conc_base + 20 % */
    double timeout_ms;         /* p99 x 1.5 */
    double rate_limit;         /* 1.5 x qps */
    double shed_ratio;         /* ax's default */
    double shed_at;            /* load at which NORMAL/LOW are shed, as ax computes it */
    double drain_s;            /* a full queue empties in this long at max_concurrency */
    double mem_queued, mem_running, mem_total;
    const char *warnings[MAX_WARNINGS];
    int nwarnings;
};

static const char *const usage_text =
    "usage: ax-plan --qps N --mean-ms MS --p99-ms MS --backlog-s S --task-bytes B\n"
    "               [--throughput N] [--mix H/N/L] [--stack-kib K] [--json]\n"
    "       ax-plan --help\n"
    "\n"
    "Sizes an ax scheduler from its load (seed 2.3 and 4.3, DESIGN.md 5):\n"
    "  queue capacity   = qps x mean x backlog, split HIGH/NORMAL/LOW by --mix\n"
    "  max_concurrency  = throughput x mean, plus a 20% margin\n"
    "  timeout_ms       = p99 x 1.5\n"
    "  rate_limit       = 1.5 x qps (refuse traffic above 1.5 x peak)\n"
    "  memory bound     = queued x 256 B + running x (task bytes + stack)\n"
    "Counts are rounded up.\n"
    "\n"
    "  --qps N         peak submissions per second (> 0)\n"
    "  --mean-ms MS    mean task run time in milliseconds (> 0)\n"
    "  --p99-ms MS     p99 task run time in milliseconds (> 0)\n"
    "  --backlog-s S   seconds of peak traffic the queues may hold (> 0)\n"
    "  --task-bytes B  memory a running task holds, in bytes (integer >= 0)\n"
    "  --throughput N  completions per second max_concurrency must sustain\n"
    "                  (> 0; default: --qps)\n"
    "  --mix H/N/L     percent of the capacity for HIGH/NORMAL/LOW, integers >= 1\n"
    "                  summing to 100 (default 20/60/20)\n"
    "  --stack-kib K   coroutine stack in KiB, integer in [16, 262144]\n"
    "                  (default: ax_config_default, 64)\n"
    "  --json          print one JSON object instead of text\n"
    "  --help          print this text and exit\n"
    "\n"
    "Values may be written --flag V or --flag=V. Exit status: 0 ok, 2 bad arguments.\n";

/* A bad command line. parse_args() and make_plan() never exit: they say what
 * is wrong here and return -1, so tests/fuzz/fuzz_plan_args.c can call them;
 * main() prints it and the usage on stderr and exits 2. */
static char bad_args[512];

static int refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int refuse(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bad_args, sizeof bad_args, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- argument parsing ------------------------------------------------------ */

/* A plain decimal: digits, at most one '.', at least one digit, optional
 * exponent. strtod alone would also take " 1", "0x10", "inf" and "nan". */
static int is_decimal(const char *s)
{
    int digits = 0, dot = 0;
    for (; *s && *s != 'e' && *s != 'E'; s++) {
        if (isdigit((unsigned char)*s))
            digits++;
        else if (*s == '.' && !dot)
            dot = 1;
        else
            return 0;
    }
    if (!digits) return 0;
    if (*s) { /* exponent */
        s++;
        if (*s == '+' || *s == '-') s++;
        if (!isdigit((unsigned char)*s)) return 0;
        while (isdigit((unsigned char)*s))
            s++;
    }
    return *s == '\0';
}

enum { NONNEG = 0, POSITIVE = 1, INTEGER = 2 };

static int parse_number(const char *flag, const char *v, int rules, double *out)
{
    if (*v == '-' && is_decimal(v + 1)) return refuse("%s: '%s' is negative", flag, v);
    if (!is_decimal(v)) return refuse("%s: '%s' is not a number", flag, v);
    errno = 0;
    double d = strtod(v, NULL);
    if (errno == ERANGE && d < 1) /* underflow: '1e-400' */
        return refuse("%s: '%s' is too small to be told from 0", flag, v);
    if (errno == ERANGE || !(d <= INPUT_MAX))
        return refuse("%s: '%s' is out of range (at most 1e12)", flag, v);
    if ((rules & POSITIVE) && !(d > 0))
        return refuse("%s: '%s' must be greater than zero", flag, v);
    if ((rules & INTEGER) && d != floor(d))
        return refuse("%s: '%s' must be a whole number", flag, v);
    *out = d;
    return 0;
}

/* "H/N/L": three integers >= 1 that sum to 100. */
static int parse_mix(const char *v, unsigned mix[AX_PRIO_COUNT])
{
    static const ax_priority order[AX_PRIO_COUNT] = {AX_PRIO_HIGH, AX_PRIO_NORMAL, AX_PRIO_LOW};
    const char *p = v;
    unsigned sum = 0;
    for (int i = 0; i < AX_PRIO_COUNT; i++) {
        unsigned n = 0;
        int digits = 0;
        while (isdigit((unsigned char)*p) && digits < 4) {
            n = n * 10 + (unsigned)(*p++ - '0');
            digits++;
        }
        if (!digits || isdigit((unsigned char)*p))
            return refuse("--mix: '%s' is not three whole percentages H/N/L", v);
        if (n == 0)
            return refuse("--mix: '%s': every priority needs at least 1%% (a bucket of "
                        "capacity 0 is refused by ax_new)",
                        v);
        mix[order[i]] = n;
        sum += n;
        if (i < AX_PRIO_COUNT - 1 && *p++ != '/')
            return refuse("--mix: '%s' is not three whole percentages H/N/L", v);
    }
    if (*p) return refuse("--mix: '%s' is not three whole percentages H/N/L", v);
    if (sum != 100) return refuse("--mix: '%s' does not sum to 100", v);
    return 0;
}

/* 0: *in is filled; 1: --help was asked for; -1: refused (bad_args says why). */
static int parse_args(int argc, char **argv, struct inputs *in)
{
    enum { QPS, MEAN, P99, BACKLOG, TASK, THROUGHPUT, MIX, STACK, NFLAGS };
    static const char *const names[NFLAGS] = {"--qps",       "--mean-ms",    "--p99-ms",
                                              "--backlog-s", "--task-bytes", "--throughput",
                                              "--mix",       "--stack-kib"};
    const char *val[NFLAGS] = {0};

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            in->json = 1;
            continue;
        }
        if (strncmp(a, "--json=", 7) == 0) return refuse("--json takes no value");
        if (a[0] != '-') return refuse("unexpected argument '%s'", a);
        if (a[1] != '-') return refuse("unknown option '%s'", a);
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        int f = 0;
        while (f < NFLAGS && !(strlen(names[f]) == len && strncmp(a, names[f], len) == 0))
            f++;
        if (f == NFLAGS) return refuse("unknown option '%.*s'", (int)len, a);
        if (val[f]) return refuse("%s is given twice", names[f]);
        if (eq) {
            val[f] = eq + 1;
        } else {
            if (i + 1 >= argc) return refuse("%s needs a value", names[f]);
            val[f] = argv[++i];
        }
        if (*val[f] == '\0') return refuse("%s: the value is empty", names[f]);
    }
    for (int f = QPS; f <= TASK; f++)
        if (!val[f]) return refuse("%s is required", names[f]);

    if (parse_number(names[QPS], val[QPS], POSITIVE, &in->qps) ||
        parse_number(names[MEAN], val[MEAN], POSITIVE, &in->mean_ms) ||
        parse_number(names[P99], val[P99], POSITIVE, &in->p99_ms) ||
        parse_number(names[BACKLOG], val[BACKLOG], POSITIVE, &in->backlog_s) ||
        parse_number(names[TASK], val[TASK], NONNEG | INTEGER, &in->task_bytes))
        return -1;
    in->throughput = in->qps;
    if (val[THROUGHPUT] &&
        parse_number(names[THROUGHPUT], val[THROUGHPUT], POSITIVE, &in->throughput))
        return -1;
    in->mix[AX_PRIO_HIGH] = 20;
    in->mix[AX_PRIO_NORMAL] = 60;
    in->mix[AX_PRIO_LOW] = 20;
    if (val[MIX] && parse_mix(val[MIX], in->mix)) return -1;
    if (val[STACK]) {
        double k;
        if (parse_number(names[STACK], val[STACK], POSITIVE | INTEGER, &k)) return -1;
        if (k < 16 || k > 262144)
            return refuse("%s: '%s' is outside [16, 262144] KiB (ax_config.stack_size limits)",
                        names[STACK], val[STACK]);
        in->stack_bytes = k * 1024;
    }
    return 0;
}

/* ---- the plan -------------------------------------------------------------- */

/* ceil(x), except that x within one part in 1e9 of an integer is that
 * integer: decimal inputs carry binary noise (see the header comment). */
static double ceil_exact(double x)
{
    double r = nearbyint(x);
    if (fabs(x - r) <= 1e-9 * fmax(1.0, fabs(x))) return r;
    return ceil(x);
}

static void warn(struct plan *p, const char *msg)
{
    if (p->nwarnings < MAX_WARNINGS) p->warnings[p->nwarnings++] = msg;
}

/* Past this many tasks the inputs are wrong (units mixed up), not a plan;
 * it also keeps every count an exact integer in a double. */
#define PLAN_MAX 1e15

static int make_plan(const struct inputs *in, const ax_config *def, struct plan *p)
{
    memset(p, 0, sizeof *p);
    /* qps x (mean_ms / 1000) x backlog, kept in ms until the one division. */
    p->capacity = fmax(1.0, ceil_exact(in->qps * in->mean_ms * in->backlog_s / 1000.0));
    p->cap_total = 0;
    for (int i = 0; i < AX_PRIO_COUNT; i++) {
        p->cap[i] = fmax(1.0, ceil_exact(p->capacity * in->mix[i] / 100.0));
        p->cap_total += p->cap[i];
    }
    p->conc_base = fmax(1.0, ceil_exact(in->throughput * in->mean_ms / 1000.0));
    /* x 1.2 as x 12 / 10000 (ms -> s and the margin in one exact step). */
    p->max_concurrency = fmax(1.0, ceil_exact(in->throughput * in->mean_ms * 12.0 / 10000.0));
    if (p->capacity > PLAN_MAX)
        return refuse("--qps x --mean-ms x --backlog-s gives %.3g tasks (more than 1e15): "
                    "check the units",
                    p->capacity);
    if (p->max_concurrency > PLAN_MAX)
        return refuse("--throughput x --mean-ms gives %.3g running tasks (more than 1e15): "
                    "check the units",
                    p->max_concurrency);
    /* At least 1: ax_submit refuses 0, which a p99 under ~7e-10 ms snapped
     * to (a trial). */
    p->timeout_ms = fmax(1.0, ceil_exact(in->p99_ms * 3.0 / 2.0));
    p->rate_limit = in->qps * 3.0 / 2.0;
    p->shed_ratio = def->shed_ratio;
    /* As sched.c computes it: rounded up, at least 1 (a trial: the plan
     * said 186 where ax sheds from 187). */
    double shed_x = def->shed_ratio * p->cap_total;
    p->shed_at = fmax(1.0, ceil(shed_x - 1e-9 - shed_x * 1e-12));
    p->drain_s = p->cap_total * (in->mean_ms / 1000.0) / p->max_concurrency;
    p->mem_queued = p->cap_total * QUEUED_TASK_BYTES;
    p->mem_running = p->max_concurrency * (in->task_bytes + in->stack_bytes);
    p->mem_total = p->mem_queued + p->mem_running;

    if (p->rate_limit > 1e12)
        warn(p, "rate_limit above 1e12 per second: ax_new refuses this config (it is 1.5 x "
                "--qps; leave it 0, off, or spread the load over processes)");
    if (p->cap_total + p->max_concurrency > AX_TASK_LIMIT)
        warn(p, "capacity plus max_concurrency exceeds 2097152 tasks: ax_new refuses this "
                "config (lower --backlog-s, or spread the load over processes)");
    if (p->max_concurrency > MPROTECT_STACK_LIMIT)
        warn(p, "more than 32640 running tasks: needs Linux >= 6.13 (MADV_GUARD_INSTALL) or a "
                "higher vm.max_map_count, else stacks run out of mappings");
    if (p->timeout_ms > AX_MAX_TIMEOUT_MS)
        warn(p, "timeout_ms exceeds one year: ax_submit refuses it");
    if (in->p99_ms < in->mean_ms) warn(p, "p99 is below the mean: check --p99-ms and --mean-ms");
    if (p->cap_total > p->capacity)
        warn(p, "rounding the --mix split up gives the buckets a few more slots than the "
                "computed capacity");
    return 0;
}

/* ---- output ---------------------------------------------------------------- */

/* v as an integer when it is one, else with up to 4 decimals and no trailing
 * zeros; valid as a JSON number. Returns one of a ring of buffers so that a
 * printf may format several numbers (not thread-safe: this is a CLI). */
static const char *num(double v)
{
    static char ring[16][48];
    static unsigned next;
    char *buf = ring[next++ % 16];
    if (v == floor(v) && fabs(v) < 1e18) {
        snprintf(buf, sizeof ring[0], "%.0f", v);
        return buf;
    }
    snprintf(buf, sizeof ring[0], "%.4f", v);
    char *e = buf + strlen(buf) - 1;
    while (*e == '0')
        *e-- = '\0';
    if (*e == '.') *e = '\0';
    if (v != 0 && (strcmp(buf, "0") == 0 || strcmp(buf, "-0") == 0))
        snprintf(buf, sizeof ring[0], "%.6g", v); /* 1.5e-05, not 0 ("off": trial) */
    else if (!strchr(buf, '.'))
        snprintf(buf, sizeof ring[0], "%.12g", v); /* 10.000008, not "10" beside "-> 11" (review) */
    return buf;
}

/* 83660800 -> "79.8 MiB"; a ring of buffers, as num(). */
static const char *human_bytes(double v)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    static char ring[8][48];
    static unsigned next;
    char *buf = ring[next++ % 8];
    int u = 0;
    while (v >= 1024.0 && u < 6) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, sizeof ring[0], "%.0f B", v);
    else if (v == floor(v))
        snprintf(buf, sizeof ring[0], "%.0f %s", v, units[u]);
    else
        snprintf(buf, sizeof ring[0], "%.1f %s", v, units[u]);
    return buf;
}

/* "1200" " ms" -> "1200 ms"; a ring of buffers, as num(). */
static const char *unit(const char *n, const char *u)
{
    static char ring[8][64];
    static unsigned next;
    char *buf = ring[next++ % 8];
    snprintf(buf, sizeof ring[0], "%s%s", n, u);
    return buf;
}

#define NASSUME 5

/* What the memory bound leaves out, in both output modes. */
static void assumptions(const struct inputs *in, char out[NASSUME][200])
{
    snprintf(out[0], 200,
             "a queued task costs 256 B (ax's struct job bound); its arg is the caller's "
             "memory, not counted");
    snprintf(out[1], 200, "--task-bytes is memory a task holds while it runs");
    snprintf(out[2], 200,
             "a running task has its whole %s stack resident (the worst case; one that "
             "touched a single page costs ~4 KiB)",
             human_bytes(in->stack_bytes));
    snprintf(out[3], 200,
             "not counted: up to %g released stacks kept warm per worker (%s a worker), "
             "retries re-entering a full bucket, timed-out tasks that ignore their deadline",
             warm_stacks(in->stack_bytes),
             human_bytes(warm_stacks(in->stack_bytes) * in->stack_bytes));
    snprintf(out[4], 200,
             "max_concurrency uses the mean time; the seed's 4.3 used the p99 (pass it as "
             "--mean-ms to plan as conservatively)");
}

/* The ax_config (and per-submission timeout) that carries the plan. */
static void snippet(const struct inputs *in, const struct plan *p, char *buf, size_t n)
{
    size_t k = 0;
#define ADD(...) (k += (size_t)snprintf(buf + k, k < n ? n - k : 0, __VA_ARGS__))
    ADD("ax_config cfg;\n");
    ADD("ax_config_default(&cfg);\n");
    ADD("cfg.max_concurrency = %s; /* %s/s x %s s, + 20%% */\n", num(p->max_concurrency),
        num(in->throughput), num(in->mean_ms / 1000.0));
    ADD("cfg.capacity[AX_PRIO_HIGH] = %s; /* %u%% of %s */\n", num(p->cap[AX_PRIO_HIGH]),
        in->mix[AX_PRIO_HIGH], num(p->capacity));
    ADD("cfg.capacity[AX_PRIO_NORMAL] = %s; /* %u%% */\n", num(p->cap[AX_PRIO_NORMAL]),
        in->mix[AX_PRIO_NORMAL]);
    ADD("cfg.capacity[AX_PRIO_LOW] = %s; /* %u%% */\n", num(p->cap[AX_PRIO_LOW]),
        in->mix[AX_PRIO_LOW]);
    ADD("cfg.shed_ratio = %s; /* NORMAL/LOW get AX_ESHED from %s tasks */\n", num(p->shed_ratio),
        num(p->shed_at));
    ADD("cfg.rate_limit = %s; /* 1.5 x peak, then AX_ERATE; burst: 1 s worth */\n",
        num(p->rate_limit));
    ADD("cfg.stack_size = %s; /* %s */\n", num(in->stack_bytes), human_bytes(in->stack_bytes));
    ADD("/* per submission: */\n");
    ADD("spec.timeout_ms = %s; /* p99 %s ms x 1.5 */\n", num(p->timeout_ms), num(in->p99_ms));
#undef ADD
}

static void print_text(const struct inputs *in, const struct plan *p)
{
    const double mean_s = in->mean_ms / 1000.0;
    static const char *const label[AX_PRIO_COUNT] = {"NORMAL", "HIGH", "LOW"};
    static const ax_priority order[AX_PRIO_COUNT] = {AX_PRIO_HIGH, AX_PRIO_NORMAL, AX_PRIO_LOW};

    printf("ax-plan: peak %s/s, mean %s ms, p99 %s ms, backlog %s s, %s B per running task\n\n",
           num(in->qps), num(in->mean_ms), num(in->p99_ms), num(in->backlog_s),
           num(in->task_bytes));
    /* The products as computed, then what the plan rounds them to, when it
     * does (trial: "0.1/s x 0.1 s = 1", and a capacity of 1 beside three
     * buckets of 1 and "shed at 0.8 x 3"). */
    double cap_raw = in->qps * in->mean_ms * in->backlog_s / 1000.0;
    printf("%-18s %-14s %s/s x %s s x %s s", "queue capacity", unit(num(p->cap_total), " tasks"),
           num(in->qps), num(mean_s), num(in->backlog_s));
    if (cap_raw != p->capacity)
        printf(" = %s -> %s", num(cap_raw), num(p->capacity));
    if (p->cap_total != p->capacity)
        printf(", %s with the --mix split rounded up per bucket", num(p->cap_total));
    printf("\n");
    for (int i = 0; i < AX_PRIO_COUNT; i++)
        printf("  %-16s %-14s %u%%\n", label[order[i]], num(p->cap[order[i]]), in->mix[order[i]]);
    /* The margin on the product, then the rounding, as make_plan does (a
     * trial read "= 192.5 -> 193, + 20% margin" and 231, not 232). */
    double conc_raw = in->throughput * in->mean_ms / 1000.0;
    double conc_margin = in->throughput * in->mean_ms * 12.0 / 10000.0;
    printf("%-18s %-14s %s/s x %s s = %s, + 20%% margin = %s%s%s\n", "max_concurrency",
           unit(num(p->max_concurrency), " tasks"), num(in->throughput), num(mean_s),
           num(conc_raw), num(conc_margin), conc_margin != p->max_concurrency ? " -> " : "",
           conc_margin != p->max_concurrency ? num(p->max_concurrency) : "");
    printf("%-18s %-14s p99 %s ms x 1.5\n", "timeout_ms", unit(num(p->timeout_ms), " ms"),
           num(in->p99_ms));
    printf("%-18s %-14s 1.5 x peak %s/s; traffic above it gets AX_ERATE\n", "rate_limit",
           unit(num(p->rate_limit), "/s"), num(in->qps));
    printf("%-18s %-14s shed_ratio %s x %s; from there NORMAL/LOW get AX_ESHED\n", "shed at",
           unit(num(p->shed_at), " tasks"), num(p->shed_ratio), num(p->cap_total));
    printf("%-18s (queued + running + delayed; HIGH is admitted up to its bound)\n", "");
    char drain[32];
    snprintf(drain, sizeof drain, "%.1f s", p->drain_s);
    printf("%-18s %-14s %s tasks / (%s running / %s s)\n", "full queue drains", drain,
           num(p->cap_total), num(p->max_concurrency), num(mean_s));
    printf("\n%-18s %-14s %s B\n", "memory bound", human_bytes(p->mem_total), num(p->mem_total));
    printf("  %-16s %-14s %s x 256 B\n", "queued", human_bytes(p->mem_queued), num(p->cap_total));
    printf("  %-16s %-14s %s x (%s B + %s stack)\n", "running", human_bytes(p->mem_running),
           num(p->max_concurrency), num(in->task_bytes), human_bytes(in->stack_bytes));

    char as[NASSUME][200];
    assumptions(in, as);
    printf("\nassumptions:\n");
    for (int i = 0; i < NASSUME; i++)
        printf("  - %s\n", as[i]);
    if (p->nwarnings) {
        printf("\nwarnings:\n");
        for (int i = 0; i < p->nwarnings; i++)
            printf("  - %s\n", p->warnings[i]);
    }
    char sn[2048];
    snippet(in, p, sn, sizeof sn);
    printf("\nax_config:\n\n%s", sn);
}

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c == '\n')
            fputs("\\n", stdout);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void print_json(const struct inputs *in, const struct plan *p)
{
    struct {
        const char *key;
        double v;
    } f[] = {
        {"qps", in->qps},
        {"mean_ms", in->mean_ms},
        {"p99_ms", in->p99_ms},
        {"backlog_s", in->backlog_s},
        {"task_bytes", in->task_bytes},
        {"throughput", in->throughput},
        {"mix_high", in->mix[AX_PRIO_HIGH]},
        {"mix_normal", in->mix[AX_PRIO_NORMAL]},
        {"mix_low", in->mix[AX_PRIO_LOW]},
        {"stack_bytes", in->stack_bytes},
        {"queued_task_bytes", QUEUED_TASK_BYTES},
        {"capacity", p->capacity},
        {"capacity_high", p->cap[AX_PRIO_HIGH]},
        {"capacity_normal", p->cap[AX_PRIO_NORMAL]},
        {"capacity_low", p->cap[AX_PRIO_LOW]},
        {"capacity_total", p->cap_total},
        {"concurrency_base", p->conc_base},
        {"max_concurrency", p->max_concurrency},
        {"timeout_ms", p->timeout_ms},
        {"rate_limit", p->rate_limit},
        {"shed_ratio", p->shed_ratio},
        {"shed_at", p->shed_at},
        {"drain_s", p->drain_s},
        {"memory_queued_bytes", p->mem_queued},
        {"memory_running_bytes", p->mem_running},
        {"memory_bytes", p->mem_total},
    };
    putchar('{');
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        printf("%s\"%s\": %s", i ? ", " : "", f[i].key, num(f[i].v));

    char as[NASSUME][200];
    assumptions(in, as);
    fputs(", \"assumptions\": [", stdout);
    for (int i = 0; i < NASSUME; i++) {
        if (i) fputs(", ", stdout);
        json_string(as[i]);
    }
    fputs("], \"warnings\": [", stdout);
    for (int i = 0; i < p->nwarnings; i++) {
        if (i) fputs(", ", stdout);
        json_string(p->warnings[i]);
    }
    char sn[2048];
    snippet(in, p, sn, sizeof sn);
    fputs("], \"ax_config\": ", stdout);
    json_string(sn);
    fputs("}\n", stdout);
}

#ifndef AX_PLAN_NO_MAIN /* tests/fuzz/fuzz_plan_args.c includes this file */
int main(int argc, char **argv)
{
    ax_config def;
    ax_config_default(&def);
    struct inputs in;
    memset(&in, 0, sizeof in);
    in.stack_bytes = (double)def.stack_size;
    int rc = parse_args(argc, argv, &in);
    if (rc == 1) {
        fputs(usage_text, stdout);
        return 0;
    }
    struct plan p;
    if (rc == 0) rc = make_plan(&in, &def, &p);
    if (rc) {
        fprintf(stderr, "ax-plan: %s\n\n%s", bad_args, usage_text);
        return 2;
    }
    if (in.json)
        print_json(&in, &p);
    else
        print_text(&in, &p);
    return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}
#endif
