/* run.c - one configuration, start to finish, in its own process (a child
 * that ax-demo forks, so that peak RSS and peak threads are this
 * configuration's alone).
 *
 * The main thread is both the traffic source and the sampler:
 *   - it submits each arrival of the schedule (traffic.c) when its time
 *     comes, with a fresh task carrying its business context;
 *   - every sample period (100 ms of wall time by default) it records the
 *     engine's gauges (queued per bucket, waiting to retry, running, limit),
 *     this process's RSS and threads, the outcome counters, the p99 wait of
 *     tasks that started in the last half second per priority, the response
 *     times seen, and ax-upstream's own /stats (its service time and the
 *     requests it holds, abandoned ones included);
 *   - it prints progress.
 * After the last phase, no new traffic; the run ends when the engine is
 * idle or the drain time is up, and whatever is still queued, waiting or
 * running is then ended (CANCELLED) so that every task is accounted for.
 *
 * Times measured here are wall time; results are in incident time (x speed).
 */
#include "run.h"

#include <curl/curl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ax.h"

struct dm_run dm_run_g;

#define WAIT_WINDOW 5 /* samples in the wait/latency window */

static uint64_t now_ns(void)
{
    return ax_now_ns();
}

/* ---- bookkeeping called by the engines ----------------------------------------- */

static void atomic_max(_Atomic uint64_t *m, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(m, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak_explicit(m, &cur, v, memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
}

/* A task's wait ends: it starts, or it ends without having started. */
static void wait_ended(struct dm_run *rn, struct dm_task *t, uint64_t now)
{
    uint64_t us = (now - t->submit_ns) / 1000;
    dm_hist_add(&rn->wait[t->prio], us);
    if (t->in_peak && t->prio == DM_HIGH) dm_hist_add(&rn->wait_high_peak, us);
    if (t->in_steady) dm_hist_add(&rn->wait_steady, us);
}

uint64_t dm_attempt_begin(struct dm_task *t)
{
    struct dm_run *rn = &dm_run_g;
    uint64_t now = now_ns();
    atomic_fetch_add_explicit(&t->attempts, 1, memory_order_relaxed);
    if (!atomic_exchange_explicit(&t->started, true, memory_order_relaxed)) {
        atomic_fetch_sub_explicit(&rn->waiting, 1, memory_order_relaxed);
        wait_ended(rn, t, now);
        atomic_fetch_add_explicit(&rn->started[t->prio], 1, memory_order_relaxed);
        if (t->prio == DM_LOW) {
            double inc = (double)(now - rn->o->t0_ns) / 1e6 * rn->speed;
            if (inc >= rn->peak_from_ms && inc < rn->peak_to_ms)
                atomic_fetch_add_explicit(&rn->low_started_in_peak, 1, memory_order_relaxed);
        }
    }
    atomic_fetch_add_explicit(&rn->requests, 1, memory_order_relaxed);
    atomic_max(&rn->max_in_fn, atomic_fetch_add_explicit(&rn->in_fn, 1, memory_order_relaxed) + 1);
    return now;
}

void dm_attempt_end(unsigned cls, uint64_t start_ns, long http_status)
{
    struct dm_run *rn = &dm_run_g;
    uint64_t us = (now_ns() - start_ns) / 1000;
    atomic_fetch_sub_explicit(&rn->in_fn, 1, memory_order_relaxed);
    dm_hist_add(&rn->attempt, us);
    atomic_max(&rn->max_attempt_us, us);
    /* The function's own account of its deadline: how long after it the
     * call came back. Past the slack, the engine had ended the attempt
     * (and, ax, freed its slot) while the function still ran: an orphan. */
    uint64_t limit_us = rn->timeout_wall_ms[cls] * 1000;
    if (us > limit_us) {
        atomic_max(&rn->max_over_us, us - limit_us);
        uint32_t i = atomic_fetch_add_explicit(&rn->npast, 1, memory_order_relaxed);
        if (i < DM_MAX_PAST)
            rn->past_us[i] = (uint32_t)(us - limit_us < UINT32_MAX ? us - limit_us : UINT32_MAX);
    }
    unsigned code = http_status >= 100 && http_status < DM_NSTATUS ? (unsigned)http_status : 0;
    atomic_fetch_add_explicit(&rn->status[cls][code], 1, memory_order_relaxed);
    if (http_status > 0) {
        atomic_fetch_add_explicit(&rn->answered, 1, memory_order_relaxed);
        dm_hist_add(&rn->latency, us);
        dm_hist_add(&rn->latency_all, us);
    } else if (us >= limit_us) {
        /* Timed out: its latency is at least the timeout. Counted there, so
         * an upstream that stalls shows in the percentiles, not only in its
         * mean; the chart says these are censored. */
        dm_hist_add(&rn->latency_all, limit_us);
        atomic_fetch_add_explicit(&rn->censored, 1, memory_order_relaxed);
    }
}

void dm_task_account(struct dm_task *t, enum dm_outcome o)
{
    struct dm_run *rn = &dm_run_g;
    /* A task that never started waited at least until now: count that, or
     * the wait of a backlog that was never served would vanish. An
     * exchange, as dm_attempt_begin's: a cancel that ends an attempt about
     * to begin must not count the wait twice. */
    uint64_t now = now_ns();
    bool started = atomic_exchange_explicit(&t->started, true, memory_order_relaxed);
    if (!started) {
        atomic_fetch_sub_explicit(&rn->waiting, 1, memory_order_relaxed);
        wait_ended(rn, t, now);
    }
    /* Goodput: succeeded within the scenario's deadline of its submission. */
    if (o == OUT_SUCCEEDED &&
        (double)(now - t->submit_ns) / 1e6 * rn->speed <= rn->sc->deadline_ms) {
        atomic_fetch_add_explicit(&rn->good, 1, memory_order_relaxed);
        if (t->in_degraded) atomic_fetch_add_explicit(&rn->good_degraded, 1, memory_order_relaxed);
    }
    /* Requests per task admitted while degraded: every such task but those
     * the end of the run cancelled before they ever started (the demo's cut,
     * not the engine's choice); refused or expired ones count with 0. */
    if (t->in_degraded && (o != OUT_CANCELLED || started)) {
        atomic_fetch_add_explicit(&rn->degraded_tasks, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&rn->degraded_requests,
                                  atomic_load_explicit(&t->attempts, memory_order_relaxed),
                                  memory_order_relaxed);
    }
    atomic_max(&rn->max_task_requests, atomic_load_explicit(&t->attempts, memory_order_relaxed));
    atomic_fetch_add_explicit(&rn->out[t->prio][o], 1, memory_order_relaxed);
}

void dm_task_done(struct dm_task *t, enum dm_outcome o)
{
    dm_task_account(t, o);
    free(t);
}

/* ---- sampling -------------------------------------------------------------------- */

static void proc_status(double *rss_mb, double *hwm_mb, unsigned *threads)
{
    *rss_mb = *hwm_mb = 0;
    *threads = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long v;
        if (sscanf(line, "VmRSS: %lu kB", &v) == 1)
            *rss_mb = v / 1024.0;
        else if (sscanf(line, "VmHWM: %lu kB", &v) == 1)
            *hwm_mb = v / 1024.0;
        else if (sscanf(line, "Threads: %lu", &v) == 1)
            *threads = (unsigned)v;
    }
    fclose(f);
}

struct sampler {
    uint64_t (*wait_snap)[DM_NPRIO][DM_HIST_N]; /* ring of WAIT_WINDOW + 1 */
    uint64_t (*lat_snap)[DM_HIST_N];
    uint64_t (*all_snap)[DM_HIST_N];
    uint64_t censored[WAIT_WINDOW + 1];
    unsigned n;
    CURL *stats_easy;
    struct dm_upstream_stats prev_up;
    double up_mean;
};

static float nan_or(double v)
{
    return v < 0 ? NAN : (float)v;
}

static void sample(struct sampler *sm, const struct dm_engine_ops *eng, struct dm_result *r,
                   uint64_t now)
{
    struct dm_run *rn = &dm_run_g;
    if (r->nsamples >= DM_MAX_SAMPLES) return;
    unsigned i = r->nsamples++;
    float(*S)[DM_MAX_SAMPLES] = r->series;
    S[S_T][i] = (float)((double)(now - rn->o->t0_ns) / 1e6 * rn->speed);

    struct dm_gauges g;
    eng->gauges(&g);
    S[S_Q_HIGH][i] = (float)g.queued[DM_HIGH];
    S[S_Q_NORMAL][i] = (float)g.queued[DM_NORMAL];
    S[S_Q_LOW][i] = (float)g.queued[DM_LOW];
    S[S_DELAYED][i] = (float)g.delayed;
    S[S_RUNNING][i] = (float)g.running;
    S[S_LIMIT][i] = (float)g.limit;
    uint64_t q = g.queued[0] + g.queued[1] + g.queued[2];
    if (q > r->max_queued) r->max_queued = q;
    if (g.running > r->max_in_flight) r->max_in_flight = g.running;
    r->limit = g.limit;

    double rss, hwm;
    unsigned th;
    proc_status(&rss, &hwm, &th);
    S[S_RSS_MB][i] = (float)rss;
    S[S_THREADS][i] = (float)th;
    if (th > r->peak_threads) r->peak_threads = th;

    /* Windowed quantiles: this snapshot minus the one WAIT_WINDOW samples ago. */
    unsigned slot = i % (WAIT_WINDOW + 1), old = (i + 1) % (WAIT_WINDOW + 1);
    uint64_t diff[DM_HIST_N], all[DM_HIST_N] = {0};
    for (unsigned p = 0; p < DM_NPRIO; p++) {
        dm_hist_snapshot(&rn->wait[p], sm->wait_snap[slot][p]);
        for (unsigned k = 0; k < DM_HIST_N; k++) {
            diff[k] = sm->wait_snap[slot][p][k] - (i >= WAIT_WINDOW ? sm->wait_snap[old][p][k] : 0);
            all[k] += diff[k];
        }
        double us = dm_hist_quantile(diff, 0.99);
        S[S_WAIT_HIGH + p][i] = nan_or(us < 0 ? -1 : us / 1000 * rn->speed);
    }
    double all_us = dm_hist_quantile(all, 0.99);
    S[S_WAIT_ALL][i] = nan_or(all_us < 0 ? -1 : all_us / 1000 * rn->speed);
    if (eng->class_sample) eng->class_sample(r, i);
    dm_hist_snapshot(&rn->latency, sm->lat_snap[slot]);
    for (unsigned k = 0; k < DM_HIST_N; k++)
        diff[k] = sm->lat_snap[slot][k] - (i >= WAIT_WINDOW ? sm->lat_snap[old][k] : 0);
    double p50 = dm_hist_quantile(diff, 0.5), p99 = dm_hist_quantile(diff, 0.99);
    S[S_LAT_P50][i] = nan_or(p50 < 0 ? -1 : p50 / 1000 * rn->speed);
    S[S_LAT_P99][i] = nan_or(p99 < 0 ? -1 : p99 / 1000 * rn->speed);
    dm_hist_snapshot(&rn->latency_all, sm->all_snap[slot]);
    for (unsigned k = 0; k < DM_HIST_N; k++)
        diff[k] = sm->all_snap[slot][k] - (i >= WAIT_WINDOW ? sm->all_snap[old][k] : 0);
    p50 = dm_hist_quantile(diff, 0.5);
    p99 = dm_hist_quantile(diff, 0.99);
    S[S_LAT_ALL_P50][i] = nan_or(p50 < 0 ? -1 : p50 / 1000 * rn->speed);
    S[S_LAT_ALL_P99][i] = nan_or(p99 < 0 ? -1 : p99 / 1000 * rn->speed);
    sm->censored[slot] = atomic_load_explicit(&rn->censored, memory_order_relaxed);
    uint64_t calls = dm_hist_total(diff);
    uint64_t cut = sm->censored[slot] - (i >= WAIT_WINDOW ? sm->censored[old] : 0);
    S[S_TIMEOUT_PCT][i] = calls ? (float)(100.0 * (double)cut / (double)calls) : NAN;

    S[S_UP_MEAN][i] = NAN;
    S[S_UP_INFLIGHT][i] = NAN;
    if (sm->stats_easy) {
        struct dm_upstream_stats st;
        dm_upstream_stats(sm->stats_easy, rn->o->base_url, 200, &st);
        if (st.ok) {
            /* Mean service time of the requests it finished since last time. */
            double dn = (double)st.lat_count - (double)sm->prev_up.lat_count;
            if (dn > 0) {
                double sum = st.lat_mean_ms * (double)st.lat_count -
                             sm->prev_up.lat_mean_ms * (double)sm->prev_up.lat_count;
                sm->up_mean = sum / dn * rn->speed;
            }
            if (sm->prev_up.ok || i == 0) S[S_UP_MEAN][i] = dn > 0 ? (float)sm->up_mean : NAN;
            S[S_UP_INFLIGHT][i] = (float)st.in_flight;
            r->upstream_requests = st.requests;
            r->upstream_max_in_flight = st.max_in_flight;
            sm->prev_up = st;
        }
    }

    uint64_t sum_out[DM_NOUT] = {0};
    for (unsigned p = 0; p < DM_NPRIO; p++)
        for (unsigned o = 0; o < DM_NOUT; o++)
            sum_out[o] += atomic_load_explicit(&rn->out[p][o], memory_order_relaxed);
    uint64_t adm = 0;
    for (unsigned p = 0; p < DM_NPRIO; p++)
        adm += atomic_load_explicit(&rn->admitted[p], memory_order_relaxed);
    S[S_GENERATED][i] = (float)atomic_load(&rn->generated);
    S[S_ADMITTED][i] = (float)adm;
    S[S_REFUSED][i] = (float)(sum_out[OUT_SHED] + sum_out[OUT_REJECTED]);
    S[S_SUCCEEDED][i] = (float)sum_out[OUT_SUCCEEDED];
    S[S_FAILED][i] = (float)sum_out[OUT_FAILED];
    S[S_TIMED_OUT][i] = (float)sum_out[OUT_TIMED_OUT];
    S[S_REQUESTS][i] = (float)atomic_load(&rn->requests);
}

static void progress(const struct dm_result *r, bool tty, bool final)
{
    struct dm_run *rn = &dm_run_g;
    unsigned i = r->nsamples ? r->nsamples - 1 : 0;
    const float(*S)[DM_MAX_SAMPLES] = r->series;
    double t = S[S_T][i] / 1000;
    double total = (dm_scenario_length_ms(rn->sc) + rn->sc->drain_ms) / 1000;
    double ph_end = dm_scenario_length_ms(rn->sc) / 1000;
    const char *phase = t < ph_end ? rn->sc->ph[dm_phase_at(rn->sc, t * 1000)].name : "drain";
    char line[320];
    snprintf(line, sizeof line,
             "%-12s %5.1f/%.0fs %-9s in flight %4.0f/%-4.0f queued H %-5.0f N %-6.0f L %-6.0f "
             "retry-wait %-5.0f | ok %.0f fail %.0f t/o %.0f refused %.0f | %.0f MB",
             rn->p->name, t, total, phase, S[S_RUNNING][i], S[S_LIMIT][i], S[S_Q_HIGH][i],
             S[S_Q_NORMAL][i], S[S_Q_LOW][i], S[S_DELAYED][i], S[S_SUCCEEDED][i], S[S_FAILED][i],
             S[S_TIMED_OUT][i], S[S_REFUSED][i], S[S_RSS_MB][i]);
    if (tty) {
        /* One line that rewrites itself: never wider than the terminal. */
        struct winsize ws;
        if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20 && strlen(line) >= ws.ws_col)
            line[ws.ws_col - 1] = 0;
        fprintf(stderr, "\r\033[K%s%s", line, final ? "\n" : "");
    } else if (!final)
        fprintf(stderr, "  %s\n", line);
    fflush(stderr);
}

/* Linux's CPU pressure (PSI): microseconds in which some runnable thread on
 * the machine waited for a CPU; 0 where the kernel does not provide it. */
static uint64_t cpu_pressure_us(void)
{
    FILE *f = fopen("/proc/pressure/cpu", "r");
    if (!f) return 0;
    unsigned long long total = 0;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "some ", 5) == 0) {
            const char *t = strstr(line, "total=");
            if (t) total = strtoull(t + 6, NULL, 10);
        }
    fclose(f);
    return total;
}

/* Sleep until t, and remember how late the wake-up came: the worst of it
 * is how long this machine kept a runnable thread off the CPU, which no
 * engine can be blamed for (goal 3's slack includes it). */
static void sleep_until(uint64_t t)
{
    uint64_t now = now_ns();
    if (t <= now) return;
    uint64_t d = t - now;
    struct timespec ts = {(time_t)(d / 1000000000u), (long)(d % 1000000000u)};
    nanosleep(&ts, NULL);
    uint64_t late = (now_ns() - t) / 1000;
    if (late > dm_run_g.max_stall_us) dm_run_g.max_stall_us = late;
}

static struct dm_dist dist_of(const struct dm_hist *h, double speed)
{
    uint64_t c[DM_HIST_N];
    dm_hist_snapshot(h, c);
    struct dm_dist d = {-1, -1, -1, dm_hist_total(c)};
    if (d.count) {
        /* A quantile is a bucket's midpoint: never report it above the max. */
        d.max = (double)atomic_load(&h->max_us) / 1000 * speed;
        d.p50 = fmin(dm_hist_quantile(c, 0.5) / 1000 * speed, d.max);
        d.p99 = fmin(dm_hist_quantile(c, 0.99) / 1000 * speed, d.max);
    }
    return d;
}

/* Time to recover: from the end of the upstream's degradation to the first
 * sample from which the wait p99 of recently started tasks (every priority)
 * stays at most twice its steady value (the p99 of the tasks submitted in
 * the first phase; at least RECOVERY_FLOOR_MS, the seed's own "starts
 * within 100 ms": below it a p99 of a few milliseconds measures the
 * machine's scheduling hiccups, not a backlog) until the traffic ends. A
 * window in which nothing started counts as recovered only with every
 * bucket empty. -1: never recovered; NAN: no degradation, or no steady
 * value to compare with. A sample's p99 is over the starts of the last
 * WAIT_WINDOW samples (1.75 s of incident time at the defaults), so the
 * late starts it reports ended up to that long before it: recovery_window_ms
 * says how long, for the reader; the measure itself is the sample's time. */
#define RECOVERY_FLOOR_MS 100.0
/* The upstream's own recovery, from the answers' p50 (S_LAT_P50): back
 * within the limiter's tolerance of its steady value. */
#define ANSWERS_BACK 1.5
static void upstream_recovery(const struct dm_run *rn, struct dm_result *r)
{
    r->ans_p50_steady_ms = r->ans_p50_at_recovery_ms = r->ans_back_ms = NAN;
    if (!rn->degraded) return;
    const float(*S)[DM_MAX_SAMPLES] = r->series;
    double sum = 0;
    unsigned n = 0;
    for (unsigned i = 0; i < r->nsamples && S[S_T][i] < rn->degraded_from_ms; i++)
        if (isfinite(S[S_LAT_P50][i])) sum += S[S_LAT_P50][i], n++;
    if (!n) return;
    r->ans_p50_steady_ms = sum / n;
    double end = dm_scenario_length_ms(rn->sc), since = -1;
    for (unsigned i = 0; i < r->nsamples; i++) {
        double t = S[S_T][i], v = S[S_LAT_P50][i];
        if (t < rn->degraded_to_ms || !isfinite(v)) continue;
        if (t > end) break;
        if (!isfinite(r->ans_p50_at_recovery_ms)) r->ans_p50_at_recovery_ms = v;
        if (v > ANSWERS_BACK * r->ans_p50_steady_ms)
            since = -1;
        else if (since < 0)
            since = t; /* and stays there until the traffic ends, as recovery_ms */
    }
    if (since >= 0) r->ans_back_ms = since - rn->degraded_to_ms;
}

static void recovery(const struct dm_run *rn, struct dm_result *r)
{
    r->recovery_ms = NAN;
    r->recovery_limit_ms = NAN;
    r->recovery_window_ms = NAN;
    upstream_recovery(rn, r);
    if (!rn->degraded || r->wait_steady.count == 0) return;
    double limit = fmax(2 * r->wait_steady.p99, RECOVERY_FLOOR_MS);
    r->recovery_limit_ms = limit;
    double end = dm_scenario_length_ms(rn->sc);
    const float(*S)[DM_MAX_SAMPLES] = r->series;
    double since = -1, window = NAN;
    for (unsigned i = 0; i < r->nsamples; i++) {
        double t = S[S_T][i];
        if (t < rn->degraded_to_ms) continue;
        if (t > end) break;
        double w = S[S_WAIT_ALL][i];
        double q = S[S_Q_HIGH][i] + S[S_Q_NORMAL][i] + S[S_Q_LOW][i];
        bool good = isfinite(w) ? w <= limit : q == 0;
        if (!good) {
            since = -1;
        } else if (since < 0) {
            since = t;
            /* Sample i's p99 is over the starts since sample i - WAIT_WINDOW. */
            window = t - S[S_T][i >= WAIT_WINDOW ? i - WAIT_WINDOW : 0];
        }
    }
    r->recovery_ms = since < 0 ? -1 : since - rn->degraded_to_ms;
    r->recovery_window_ms = since < 0 ? NAN : window;
}

void dm_run(const struct dm_run_opts *o, struct dm_result *r)
{
    struct dm_run *rn = &dm_run_g;
    const struct dm_scenario *sc = o->sc;
    const struct dm_profile *p = o->prof;
    memset(rn, 0, sizeof *rn);
    rn->o = o;
    rn->sc = sc;
    rn->p = p;
    rn->speed = sc->speed;
    snprintf(r->name, sizeof r->name, "%s", p->name);
    r->ran = true;

    /* Many connections (a slot each, plus abandoned ones closing). */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);

    double max_timeout = 0;
    for (unsigned c = 0; c < sc->ncls; c++) {
        /* ax-demo.c keeps --url short enough for any class path. */
        if (snprintf(rn->url[c], sizeof rn->url[c], "%s%s", o->base_url, sc->cls[c].path) >=
            (int)sizeof rn->url[c]) {
            snprintf(r->error, sizeof r->error, "the URL of class %s is too long", sc->cls[c].name);
            return;
        }
        double to = p->timeout_ms > 0 ? p->timeout_ms : sc->cls[c].timeout_ms;
        if (to > max_timeout) max_timeout = to;
        double w = to / sc->speed;
        rn->timeout_wall_ms[c] = w < 1 ? 1 : (uint64_t)llround(w);
    }
    r->max_timeout_ms = max_timeout;
    /* "The peak": the phase with the highest arrival rate. */
    double start = 0, best = -1;
    for (unsigned i = 0; i < sc->nph; i++) {
        if (sc->ph[i].rate > best) {
            best = sc->ph[i].rate;
            rn->peak_from_ms = start;
            rn->peak_to_ms = start + sc->ph[i].duration_ms;
        }
        start += sc->ph[i].duration_ms;
    }
    rn->steady_to_ms = sc->nph ? sc->ph[0].duration_ms : 0;
    rn->degraded = dm_degraded_window(sc, &rn->degraded_from_ms, &rn->degraded_to_ms);
    bool bounded = p->queue[0] || p->queue[1] || p->queue[2];
    r->queue_bound =
        p->engine == ENG_AX && bounded ? (uint64_t)p->queue[0] + p->queue[1] + p->queue[2] : 0;
    if (p->engine == ENG_AX_AUTO) {
        ax_config dc;
        ax_config_default(&dc);
        r->queue_bound = dc.capacity[0] + dc.capacity[1] + dc.capacity[2];
    }

    const struct dm_engine_ops *eng = p->engine == ENG_THREADS ? &dm_engine_threads : &dm_engine_ax;
    if (eng->start(r->error, sizeof r->error) != 0) return;
    uint64_t psi0 = cpu_pressure_us(), psi_t0 = now_ns();

    double length_ms = dm_scenario_length_ms(sc);
    double wall_total_ms = (length_ms + sc->drain_ms) / sc->speed;
    r->sample_ms = 100;
    if (wall_total_ms / r->sample_ms > DM_MAX_SAMPLES - 10)
        r->sample_ms = ceil(wall_total_ms / (DM_MAX_SAMPLES - 10));

    struct sampler sm = {0};
    sm.wait_snap = calloc(WAIT_WINDOW + 1, sizeof *sm.wait_snap);
    sm.lat_snap = calloc(WAIT_WINDOW + 1, sizeof *sm.lat_snap);
    sm.all_snap = calloc(WAIT_WINDOW + 1, sizeof *sm.all_snap);
    if (o->own_upstream) sm.stats_easy = curl_easy_init();

    struct dm_traffic tr;
    dm_traffic_init(&tr, sc);
    struct dm_arrival a;
    bool more = dm_traffic_next(&tr, &a);
    const uint64_t t0 = o->t0_ns;
    const uint64_t sample_ns = (uint64_t)(r->sample_ms * 1e6);
    const uint64_t progress_ns = o->tty ? 250000000u : 2000000000u;
    uint64_t next_sample = t0, next_progress = t0 + progress_ns;
    const uint64_t end_traffic = t0 + (uint64_t)(length_ms / sc->speed * 1e6);
    const uint64_t end_all = t0 + (uint64_t)(wall_total_ms * 1e6);
    size_t task_size = sizeof(struct dm_task) + (size_t)sc->ctx_bytes;

    for (;;) {
        uint64_t now = now_ns();
        /* Submit everything due (catching up in a burst if we fell behind). */
        for (unsigned burst = 0; more && burst < 20000; burst++) {
            uint64_t due = t0 + (uint64_t)(a.t_ms / sc->speed * 1e6);
            if (due > now) break;
            struct dm_task *t = malloc(task_size);
            if (!t) {
                snprintf(r->error, sizeof r->error, "out of memory at task %llu",
                         (unsigned long long)atomic_load(&rn->generated));
                more = false;
                break;
            }
            memset(t, 0, task_size); /* the context is real memory, as the caller's */
            t->prio = a.prio;
            t->cls = a.cls;
            t->in_peak = a.t_ms >= rn->peak_from_ms && a.t_ms < rn->peak_to_ms;
            t->in_steady = a.t_ms < rn->steady_to_ms;
            t->in_degraded =
                rn->degraded && a.t_ms >= rn->degraded_from_ms && a.t_ms < rn->degraded_to_ms;
            t->submit_ns = now_ns();
            atomic_fetch_add_explicit(&rn->generated, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&rn->generated_by[a.prio], 1, memory_order_relaxed);
            /* Counted waiting before the engine can start it (its start
             * takes it off again); a refusal takes it off at once. */
            /* Counted once admitted: the verdicts divide by admitted tasks
             * (a trial saw 106 % when refused arrivals counted too). */
            bool met_full =
                atomic_load_explicit(&rn->in_fn, memory_order_relaxed) >= r->limit && r->limit;
            atomic_max(&rn->max_waiting,
                       atomic_fetch_add_explicit(&rn->waiting, 1, memory_order_relaxed) + 1);
            uint64_t s0 = now_ns();
            int rc = eng->submit(t);
            uint64_t took = (now_ns() - s0) / 1000;
            if (took > rn->max_submit_us) rn->max_submit_us = took;
            if (rc == 0) {
                atomic_fetch_add_explicit(&rn->admitted[a.prio], 1, memory_order_relaxed);
                if (met_full) {
                    atomic_fetch_add_explicit(&rn->met_full, 1, memory_order_relaxed);
                    atomic_fetch_add_explicit(&rn->met_full_by[a.prio], 1, memory_order_relaxed);
                }
            } else {
                atomic_fetch_sub_explicit(&rn->waiting, 1, memory_order_relaxed);
                atomic_fetch_add_explicit(&rn->out[a.prio][rc], 1, memory_order_relaxed);
                free(t);
            }
            more = dm_traffic_next(&tr, &a);
        }
        now = now_ns();
        if (now >= next_sample) {
            uint64_t s0 = now_ns();
            sample(&sm, eng, r, now);
            uint64_t took = (now_ns() - s0) / 1000;
            if (took > rn->max_sample_us) rn->max_sample_us = took;
            next_sample += sample_ns;
            if (next_sample < now) next_sample = now + sample_ns;
        }
        if (now >= next_progress) {
            progress(r, o->tty, false);
            next_progress += progress_ns;
        }
        if (!more && now >= end_traffic && (now >= end_all || eng->idle())) break;
        uint64_t wake = next_sample < next_progress ? next_sample : next_progress;
        if (more) {
            uint64_t due = t0 + (uint64_t)(a.t_ms / sc->speed * 1e6);
            if (due < wake) wake = due;
        }
        /* Batch submissions: at most one wake-up per half millisecond. */
        if (wake < now + 500000) wake = now + 500000;
        sleep_until(wake);
    }
    sample(&sm, eng, r, now_ns());
    progress(r, o->tty, true);
    uint64_t t_end = now_ns();
    uint64_t psi1 = cpu_pressure_us();
    r->cpu_pressure_pct = psi0 && psi1 > psi0 && t_end > psi_t0
                              ? 100.0 * (double)(psi1 - psi0) / ((double)(t_end - psi_t0) / 1000)
                              : -1;
    eng->stop();

    /* Figures. */
    double rss, hwm;
    unsigned th;
    proc_status(&rss, &hwm, &th);
    r->peak_rss_mb = hwm;
    r->wall_s = (double)(t_end - t0) / 1e9;
    r->incident_s = r->wall_s * sc->speed;
    r->generated = atomic_load(&rn->generated);
    for (unsigned pr = 0; pr < DM_NPRIO; pr++) {
        r->generated_by[pr] = atomic_load(&rn->generated_by[pr]);
        r->admitted[pr] = atomic_load(&rn->admitted[pr]);
        r->started[pr] = atomic_load(&rn->started[pr]);
        for (unsigned oc = 0; oc < DM_NOUT; oc++)
            r->out[pr][oc] = atomic_load(&rn->out[pr][oc]);
    }
    eng->finish(r);
    r->on_done_calls = atomic_load(&rn->on_done_calls);
    r->low_started_in_peak = atomic_load(&rn->low_started_in_peak);
    r->requests = atomic_load(&rn->requests);
    r->answered = atomic_load(&rn->answered);
    for (unsigned pr = 0; pr < DM_NPRIO; pr++)
        r->wait[pr] = dist_of(&rn->wait[pr], sc->speed);
    r->run = dist_of(&rn->attempt, sc->speed);
    r->wait_high_peak = dist_of(&rn->wait_high_peak, sc->speed);
    r->wait_steady = dist_of(&rn->wait_steady, sc->speed);
    r->degraded_tasks = atomic_load(&rn->degraded_tasks);
    r->degraded_requests = atomic_load(&rn->degraded_requests);
    r->max_task_requests = atomic_load(&rn->max_task_requests);
    r->good = atomic_load(&rn->good);
    r->good_degraded = atomic_load(&rn->good_degraded);
    r->open_refused = atomic_load(&rn->open_refused);
    r->open_failed = atomic_load(&rn->open_failed);
    r->expired = atomic_load(&rn->expired);
    r->budget_denied = atomic_load(&rn->budget_denied);
    recovery(rn, r);
    r->max_attempt_ms = (double)atomic_load(&rn->max_attempt_us) / 1000 * sc->speed;
    if (p->engine == ENG_THREADS) r->max_slot_ms = r->max_attempt_ms; /* a thread is the slot */
    r->max_in_task = atomic_load(&rn->max_in_fn);
    r->max_waiting = atomic_load(&rn->max_waiting);
    r->met_full = atomic_load(&rn->met_full);
    for (unsigned pr = 0; pr < DM_NPRIO; pr++)
        r->met_full_by[pr] = atomic_load(&rn->met_full_by[pr]);
    r->max_over_ms = (double)atomic_load(&rn->max_over_us) / 1000 * sc->speed;
    /* Orphans, as the functions saw them: back later than the slack. */
    r->stall_ms = (double)rn->max_stall_us / 1000 * sc->speed;
    r->max_submit_ms = (double)rn->max_submit_us / 1000 * sc->speed;
    r->max_sample_ms = (double)rn->max_sample_us / 1000 * sc->speed;
    r->slack_ms = dm_slack_ms(sc) + r->stall_ms;
    uint32_t npast = atomic_load(&rn->npast);
    r->late = npast;
    for (uint32_t i = 0; i < npast && i < DM_MAX_PAST; i++)
        if ((double)rn->past_us[i] / 1000 * sc->speed > r->slack_ms) r->overdue++;
    for (unsigned c = 0; c < DM_MAX_CLASSES; c++)
        for (unsigned k = 0; k < DM_NSTATUS; k++)
            r->status[c][k] = atomic_load(&rn->status[c][k]);
    if (sm.stats_easy) {
        /* The upstream's count once it has settled: the engine has stopped,
         * but on a busy machine ax-upstream may still hold requests the
         * engine abandoned at their deadlines, unread in its sockets or its
         * accept queue; read now, they would be missing from its count. So
         * wait (3 s at most) until nothing is in flight there and two reads
         * 100 ms apart agree. */
        struct dm_upstream_stats st, prev = {0};
        uint64_t give_up = now_ns() + 3000000000ull;
        for (;;) {
            dm_upstream_stats(sm.stats_easy, o->base_url, 1000, &st);
            bool settled = st.ok && prev.ok && st.in_flight == 0 && st.requests == prev.requests;
            if (settled || now_ns() >= give_up) break;
            prev = st;
            sleep_until(now_ns() + 100000000ull);
        }
        if (st.ok) {
            r->upstream_requests = st.requests;
            r->upstream_max_in_flight = st.max_in_flight;
        }
        curl_easy_cleanup(sm.stats_easy);
    }
    free(sm.wait_snap);
    free(sm.lat_snap);
    free(sm.all_snap);
    r->ok = r->error[0] == 0;
}
