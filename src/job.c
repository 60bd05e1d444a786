/* job.c - the job table: slots, ids, holds (DESIGN.md §3a).
 *
 * Jobs are allocated in chunks of AX_JOB_CHUNK and never returned to the
 * system before ax_free, so a job pointer read racily (the watchdog, a stale
 * run, a late timer) always points at a job-shaped object; such a reader
 * validates it by a CAS on the state word, whose generation a reused slot
 * no longer matches. The free list and the chunk array are guarded by
 * s->lock, which the submit path holds anyway.
 *
 * An id is (process-wide sequence << AX_SLOT_BITS) | slot, so ax_cancel finds
 * a job in O(1) without a hash map, and ids never repeat within a process
 * (each thread takes the sequence's numbers in blocks: id_seq_next).
 * The sequence starts at 1: no id below 2^AX_SLOT_BITS is ever issued, and a
 * free slot's word is 0 (JS_FREE, generation 0), which matches no id.
 *
 * A job is freed when it is terminal and nobody holds it (state.h): the
 * terminal path (JH_END), the coroutine of its last attempt (JH_RUN) and a
 * parent that may still join it (JH_PARENT) each drop their own hold, and
 * whoever drops the last one frees the slot.
 */
#include "internal.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* What a queued task costs (DESIGN.md: <= 256 bytes per queued task). */
_Static_assert(sizeof(struct job) <= 256, "struct job grew past 256 bytes");

/* The ids' sequence. A thread takes its numbers ID_BLOCK at a time, one
 * shared add per ID_BLOCK tasks instead of one per task (issue 10's
 * hot-path budget: a task's submit moves no line other submitters write):
 * so the ids one thread gets grow, and those of different threads
 * interleave in no set order. A thread that ends leaves the rest of its
 * block unused, which the 2^42 numbers of the generation can afford. */
#define ID_BLOCK 256
static _Atomic uint64_t id_seq = 1;
static _Thread_local uint64_t id_next AX_TLS_HOT, id_end AX_TLS_HOT;

static inline uint64_t id_seq_next(void)
{
    if (AX_UNLIKELY(id_next == id_end)) {
        id_next = atomic_fetch_add_explicit(&id_seq, ID_BLOCK, memory_order_relaxed);
        id_end = id_next + ID_BLOCK;
    }
    return id_next++;
}

/* Number a zeroed chunk's jobs from `base` and chain them in order, before
 * it is linked: a prefill does it outside the lock. Under the lock this
 * loop over the chunk's 1 024 jobs (~250 KiB, its stores missing on every
 * line) took 20 % of bench ax_fullpath's samples with four submitting
 * threads and one worker (perf, 2026-12-04): five threads on two CPUs, and
 * a holder taken off its CPU mid-loop held every submitter and the worker.
 * (Not numbering them at all, taking never-used slots from the table's end
 * instead, was slower still: the first touch of each job then fell in the
 * submit under the lock, 1.15x on that bench.) */
static void chunk_chain(struct job *c, unsigned base)
{
    for (unsigned i = 0; i < AX_JOB_CHUNK; i++) {
        c[i].id = base + i; /* slot index until first use: sequence 0, never issued */
        c[i].next = i + 1 < AX_JOB_CHUNK ? &c[i + 1] : NULL;
    }
}

/* Link a zeroed chunk into the table (s->lock held), its jobs first on the
 * free list. `chained` is the base chunk_chain numbered it from outside
 * the lock (a prefill's guess of the table's size), or UINT_MAX for a
 * chunk not numbered yet (a cold growth's): it is numbered here when the
 * guess went stale (another chunk was linked in between: a cold growth,
 * or the spare by grow_locked) or was not made. */
static int link_chunk_locked(struct ax_sched *s, struct job *c, unsigned chained)
{
    if ((uint64_t)(s->nchunks + 1) * AX_JOB_CHUNK > AX_MAX_JOBS) {
        free(c);
        return ax_fail_static(AX_ENOMEM, "job table full (4 194 304 live tasks)");
    }
    /* s->chunks is sized for the maximum at ax_new: no realloc under readers. */
    unsigned base = s->nchunks * AX_JOB_CHUNK;
    if (chained != base)
        chunk_chain(c, base);
    struct job *last = &c[AX_JOB_CHUNK - 1];
    last->next = s->job_free;
    if (!s->job_free)
        s->job_free_tail = last;
    s->job_free = c;
    atomic_store_explicit((_Atomic(struct job *) *)&s->chunks[s->nchunks], c,
                          memory_order_release);
    s->nchunks++;
    atomic_store_explicit(&s->nchunks_hint, s->nchunks, memory_order_relaxed);
    s->nfree += AX_JOB_CHUNK;
    atomic_store_explicit(&s->nfree_hint, s->nfree, memory_order_relaxed);
    return AX_OK;
}

/* A zeroed chunk with its pages faulted in. calloc alone leaves them
 * unfaulted: a chunk of 1 024 jobs (~250 KiB) is a fresh mapping whose
 * pages fault in on first touch, and gcc turns malloc + memset into that
 * same calloc, so the first touches fell in link_chunk_locked, under
 * s->lock (perf: 10% of the full path in job_alloc_locked; measured
 * 2026-12-04, a page fault costs ~11 us on this project's VM, 63 of them
 * stalled every submitter and worker ~0.7 ms). MADV_POPULATE_WRITE
 * (Linux 5.14) faults the whole range in one call, ~0.8 us a page; it
 * writes nothing, so the zeroes stay. Where it is refused, one write per
 * page does the same at the per-fault price. The range is rounded out to
 * whole pages: every page holding a byte of the chunk is mapped, and the
 * call only populates, so the bytes outside it are untouched. The chunk
 * stays an ordinary heap block: LeakSanitizer scans it (a mapping of our
 * own was not, and read the queued tasks' arguments as leaks: review of
 * fe04240). */
struct job *job_chunk_new(size_t n)
{
    struct job *c = calloc(n, sizeof *c);
    if (!c || n == 0)
        return c;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)c & ~(pg - 1);
    uintptr_t e = ((uintptr_t)(c + n) + pg - 1) & ~(pg - 1);
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older headers lack it, older kernels refuse it */
#endif
    /* Whether the advice does what it says, checked once with mincore:
     * an emulator (qemu-user: the CI's aarch64 run) accepts it and does
     * nothing. -1 unknown, 0 no, 1 yes. */
    static _Atomic int populate_works = -1;
    int works = atomic_load_explicit(&populate_works, memory_order_relaxed);
    bool done = works != 0 && madvise((void *)a, e - a, MADV_POPULATE_WRITE) == 0;
    if (done && works < 0) {
        size_t np = (e - a) / pg, resident = 0;
        unsigned char vec[256];
        if (np <= sizeof vec && mincore((void *)a, e - a, vec) == 0) {
            for (size_t i = 0; i < np; i++)
                resident += vec[i] & 1;
            done = resident == np;
            atomic_store_explicit(&populate_works, done ? 1 : 0, memory_order_relaxed);
        }
    }
    if (!done) {
        volatile char *p = (volatile char *)c, *end = (volatile char *)(c + n);
        for (; p < end; p += pg)
            *p = 0;
        end[-1] = 0;
    }
    return c;
}

/* The table ran dry before a prefill was linked (the first chunk;
 * populating ran out of memory; a prefiller held up past
 * JOB_PREFILL_WAIT_NS; more than 16 threads submitting at once): the
 * spare a prefill left (populated, counted with the prefills), else a
 * calloc'd chunk whose pages then fault in under the lock (counted in
 * s->job_grow_cold). */
static int grow_locked(struct ax_sched *s)
{
    struct job *c = s->job_spare;
    unsigned chained = s->job_spare_base; /* its prefill numbered it, maybe right */
    s->job_spare = NULL;
    if (c) {
        s->job_prefilled++;
    } else {
        c = calloc(AX_JOB_CHUNK, sizeof *c);
        if (!c)
            return ax_fail_static(AX_ENOMEM, "out of memory growing the job table");
        s->job_grow_cold++;
        chained = UINT_MAX;
    }
    return link_chunk_locked(s, c, chained);
}

/* Grow the table before it runs dry, outside the lock (job_chunk_new).
 * Called by a submitter after each admission (so a rejection still
 * allocates nothing) while fewer than JOB_PREFILL_LOW jobs are free.
 *
 * One submitter at a time populates and links, chunk by chunk until the
 * count is back (review of fe04240: competing submitters each populated a
 * chunk and all but one threw theirs away). The others go on while a
 * prefill is under way, but below JOB_PREFILL_FLOOR free jobs they wait
 * for it instead of taking more: without that, a second submitter used the
 * headroom up during the populate and grew the table under the lock
 * itself (review of 6c48ff7: 309-334 of 391 chunks with 256 jobs of
 * headroom and two submitters; 71 of 212 in a CI run of four with more
 * headroom). A submitter takes at most one job (a batch's run: 8) between
 * two looks, so while at most FLOOR / 8 = 16 threads submit at once
 * (workers running tasks that submit, callbacks that do, included) the
 * table runs dry only if the prefill fails or is held up past
 * JOB_PREFILL_WAIT_NS, after which waiters go on.
 *
 * A chunk not needed by the time it is ready (the workers freed enough
 * meanwhile) is kept as the one spare grow_locked takes, or freed. It is
 * not linked at the next dip: with the free list FIFO the whole table is
 * the jobs' working set, and a table grown at every passing dip grew to
 * 200-450 chunks in bench ax_spawn (16-48 otherwise) and ran it 1.6x
 * slower. None is made once the table holds its last chunk (else every
 * submit near the maximum paid one). A scheduler that has run anything
 * holds two chunks (~500 KiB) or more. */
void job_table_prefill(struct ax_sched *s)
{
    uint64_t t0 = 0;
    for (unsigned round = 0;; round++) {
        if (!job_table_low(s) ||
            atomic_load_explicit(
                (_Atomic(struct job *) *)&s->chunks[AX_MAX_JOBS / AX_JOB_CHUNK - 1],
                memory_order_relaxed))
            return;
        if (!atomic_load_explicit(&s->prefilling, memory_order_relaxed) &&
            !atomic_exchange_explicit(&s->prefilling, true, memory_order_acquire))
            break;
        /* Another thread is on it: go on while there is room enough. */
        if (atomic_load_explicit(&s->nfree_hint, memory_order_relaxed) >= JOB_PREFILL_FLOOR)
            return;
        /* Or until JOB_PREFILL_WAIT_NS have passed: a prefiller held up
         * (memory pressure, off its CPU, a real-time waiter on its CPU)
         * must not hold every submitter; past it this one takes its jobs
         * and the table may grow cold, counted. */
        uint64_t now = now_ns();
        if (!t0)
            t0 = now;
        else if (now - t0 > JOB_PREFILL_WAIT_NS)
            return;
        /* Poll the flag alone, not the count on the lock's busy line. */
        for (unsigned i = 0; i < 64 && atomic_load_explicit(&s->prefilling, memory_order_relaxed);
             i++)
            ax_cpu_relax();
        if (round >= 8)
            sched_yield(); /* the prefiller may want this CPU */
    }
    while (job_table_low(s) &&
           !atomic_load_explicit(
               (_Atomic(struct job *) *)&s->chunks[AX_MAX_JOBS / AX_JOB_CHUNK - 1],
               memory_order_relaxed)) {
        struct job *c = job_chunk_new(AX_JOB_CHUNK);
        if (!c)
            break; /* job_alloc_locked grows it, or fails, itself */
        unsigned base = atomic_load_explicit(&s->nchunks_hint, memory_order_relaxed) * AX_JOB_CHUNK;
        chunk_chain(c, base);
        bool linked = false;
        pthread_mutex_lock(&s->lock);
        if ((uint64_t)(s->nchunks + 1) * AX_JOB_CHUNK > AX_MAX_JOBS) {
            free(c); /* grow_locked took the last place meanwhile */
        } else if (s->nfree < JOB_PREFILL_LOW) {
            link_chunk_locked(s, c, base);
            s->job_prefilled++;
            linked = true;
        } else if (!s->job_spare) {
            s->job_spare = c;
            s->job_spare_base = base;
        } else {
            free(c);
        }
        pthread_mutex_unlock(&s->lock);
        if (!linked)
            break;
    }
    atomic_store_explicit(&s->prefilling, false, memory_order_release);
}

int job_alloc_locked(struct ax_sched *s, struct job **out)
{
    if (AX_UNLIKELY(!s->job_free)) {
        int rc = grow_locked(s);
        if (rc)
            return rc;
    }
    struct job *j = s->job_free;
    s->job_free = j->next;
    if (!s->job_free)
        s->job_free_tail = NULL;
    /* The next submit's job, most likely freed by a worker on another core
     * (its lines were last written there): fetch all of it now, for
     * writing, so the next submit neither waits for j->next (a dependent
     * miss under s->lock) nor drains its stores to it before its unlock.
     * On a VM whose two vCPUs pass a cache line to and fro in 410-430 ns
     * (bench ax_fullpath, medians of 5 in one run): 1 worker 701 -> 585 ns
     * a task with read prefetches, 2 workers 841 -> 692, ax_spawn
     * 914 -> 782; then with PREFETCHW here and sched_pick_locked's
     * prefetch of the next pick, 1 worker 491 -> 424, 2 workers
     * 542 -> 444, ax_spawn 374 -> 336 (the FIFO free list in between). */
    if (j->next)
        job_prefetch_hot(j->next); /* the lines a submit writes (struct job) */
    s->nfree--;
    atomic_store_explicit(&s->nfree_hint, s->nfree, memory_order_relaxed);
    uint64_t slot = j->id & (AX_MAX_JOBS - 1);
    uint64_t seq = id_seq_next();
    j->id = (seq << AX_SLOT_BITS) | slot;
    j->next = j->prev = NULL;
    *out = j;
    return AX_OK;
}

void job_free_locked(struct ax_sched *s, struct job *j)
{
    uint64_t slot = j->id & (AX_MAX_JOBS - 1);
    /* Word 0 and the bare slot as id: no id and no CAS taken from an old
     * reading matches this slot again until it is reissued. */
    atomic_store_explicit(&j->sw, 0, memory_order_release);
    if (AX_UNLIKELY(j->ext)) {
        free(j->ext->err);
        free(j->ext);
        j->ext = NULL;
        j->has_ref = 0;
        j->has_release = 0;
    }
    j->id = slot;
    s->live_prio[j->prio]--;
    j->next = NULL;
    if (s->job_free_tail)
        s->job_free_tail->next = j;
    else
        s->job_free = j;
    s->job_free_tail = j;
    s->nfree++;
    atomic_store_explicit(&s->nfree_hint, s->nfree, memory_order_relaxed);
}

struct job *job_find_locked(struct ax_sched *s, uint64_t id)
{
    uint64_t slot = id & (AX_MAX_JOBS - 1);
    unsigned ci = (unsigned)(slot / AX_JOB_CHUNK);
    if (id >> AX_SLOT_BITS == 0 || ci >= s->nchunks)
        return NULL;
    struct job *j = &s->chunks[ci][slot % AX_JOB_CHUNK];
    uint64_t w = atomic_load_explicit(&j->sw, memory_order_acquire);
    if (j->id != id || js_state(w) == JS_FREE || js_gen(w) != job_gen(j))
        return NULL;
    return j;
}

void job_run_release(struct ax_sched *s, struct worker *w, struct job *j)
{
    void (*fn)(void *) = j->ext->release;
    j->ext->release = NULL;
    /* User code, as on_done: ax_free and ax_shutdown refuse to run in it. */
    struct on_done_frame frame = {s, ax_on_done_frames};
    ax_on_done_frames = &frame;
    fn(j->arg);
    ax_on_done_frames = frame.up;
    if (w && w == ax_current_worker)
        w->clock_stale = true; /* the next dispatch reads the clock again */
}

void job_released(struct ax_sched *s, struct worker *w, struct job *j, uint64_t word)
{
    if (js_freeable(word)) {
        /* Terminal, on_done returned, no coroutine of it left: its arg is
         * the user's again (ax_spec.on_release). Such a job has counted with
         * the on_done calls in progress since its terminal path (finish.c),
         * so that ax_shutdown sees no idle moment before its on_release
         * (review: an orphan returning, a job left on a to-start list, the
         * watchdog's hand-over all had one), and it counts until the job is
         * freed: ax_free waits for them before it frees the table (new-user
         * trial: a slow on_release in ax_cancel's thread freed the job into
         * a table ax_free had freed). */
        bool rel = AX_UNLIKELY(j->has_release);
        if (rel)
            job_run_release(s, w, j);
        if (w) { /* freed in the worker's next lock section: nobody holds it */
            j->next = w->pend.free_list;
            w->pend.free_list = j;
        } else {
            pthread_mutex_lock(&s->lock);
            job_free_locked(s, j);
            pthread_mutex_unlock(&s->lock);
        }
        if (rel)
            cb_return(s, own_worker(s));
        return;
    }
    /* A retry waited for the coroutine that just returned: queue it now.
     * Never deferred to a list: nothing would hold the job there, and a
     * cancel could end and free it meanwhile. The generation is the one
     * this release saw: a reused slot is not touched. */
    pthread_mutex_lock(&s->lock);
    sched_orphan_returned_locked(s, j, js_gen(word), now_ns());
    pthread_mutex_unlock(&s->lock);
    sched_wake_workers(s, 1);
}

void job_release_nouser(struct ax_sched *s, struct job *j, uint64_t hold)
{
    uint64_t n = js_release(&j->sw, hold);
    if (js_freeable(n) && AX_UNLIKELY(j->has_release)) {
        cb_pool_release(s, j); /* the finisher runs it and frees the job */
        return;
    }
    bool requeue = (hold & JH_RUN) && js_state(n) == JS_RETRYING && (n & JF_WAIT);
    if (requeue || js_freeable(n))
        job_released(s, NULL, j, n);
    else if (job_let_go(hold, n))
        join_let_go(s, j, n);
}

void job_table_destroy(struct ax_sched *s)
{
    buckets_destroy(s); /* their rings name slots of this table */
    for (unsigned i = 0; i < s->nchunks; i++) {
        for (unsigned k = 0; k < AX_JOB_CHUNK; k++)
            if (s->chunks[i][k].ext) {
                free(s->chunks[i][k].ext->err);
                free(s->chunks[i][k].ext);
            }
        free(s->chunks[i]);
    }
    free(s->chunks);
    s->chunks = NULL;
    s->nchunks = 0;
    free(s->job_spare);
    s->job_spare = NULL;
}
