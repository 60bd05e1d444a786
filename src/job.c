/* job.c - the job table: slots, ids, reference counts.
 *
 * Jobs are allocated in chunks of AX_JOB_CHUNK and never returned to the
 * system before ax_free, so a job pointer read racily (the monitor's hog
 * watch, ax_cancel) always points at a job-shaped object; callers validate it
 * by id or by a CAS on the state word. The free list and the chunk array are
 * guarded by s->lock, which the submit path holds anyway.
 *
 * An id is (process-wide sequence << AX_SLOT_BITS) | slot, so ax_cancel finds
 * a job in O(1) without a hash map, and ids never repeat within a process.
 */
#include "internal.h"

#include <stdlib.h>

/* What a queued task costs (DESIGN.md: <= 256 bytes per queued task). */
_Static_assert(sizeof(struct job) <= 256, "struct job grew past 256 bytes");

static _Atomic uint64_t id_seq = 1;

static int grow_locked(struct ax_sched *s)
{
    if ((uint64_t)(s->nchunks + 1) * AX_JOB_CHUNK > AX_MAX_JOBS)
        return ax_fail_static(AX_ENOMEM, "job table full (4 194 304 live tasks)");
    struct job *c = calloc(AX_JOB_CHUNK, sizeof *c);
    if (!c)
        return ax_fail_static(AX_ENOMEM, "out of memory growing the job table");
    /* s->chunks is sized for the maximum at ax_new: no realloc under readers. */
    unsigned base = s->nchunks * AX_JOB_CHUNK;
    for (unsigned i = AX_JOB_CHUNK; i-- > 0;) {
        c[i].id = base + i; /* slot index until first use */
        c[i].next = s->job_free;
        s->job_free = &c[i];
    }
    atomic_store_explicit((_Atomic(struct job *) *)&s->chunks[s->nchunks], c,
                          memory_order_release);
    s->nchunks++;
    return AX_OK;
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
    uint64_t slot = j->id & (AX_MAX_JOBS - 1);
    uint64_t seq = atomic_fetch_add_explicit(&id_seq, 1, memory_order_relaxed);
    j->id = (seq << AX_SLOT_BITS) | slot;
    j->next = j->prev = NULL;
    *out = j;
    return AX_OK;
}

void job_free_locked(struct ax_sched *s, struct job *j)
{
    uint64_t slot = j->id & (AX_MAX_JOBS - 1);
    /* Keep only the slot: a stale id no longer matches, and the state word is
     * cleared so no CAS taken from an old reading can succeed. */
    atomic_store_explicit(&j->sw, 0, memory_order_release);
    j->id = slot;
    j->next = s->job_free;
    s->job_free = j;
}

struct job *job_lookup(struct ax_sched *s, uint64_t id)
{
    uint64_t slot = id & (AX_MAX_JOBS - 1);
    unsigned ci = (unsigned)(slot / AX_JOB_CHUNK);
    if (ci >= AX_MAX_JOBS / AX_JOB_CHUNK)
        return NULL;
    struct job *c = atomic_load_explicit((_Atomic(struct job *) *)&s->chunks[ci],
                                         memory_order_acquire);
    if (!c)
        return NULL;
    return &c[slot % AX_JOB_CHUNK];
}

void job_unref(struct ax_sched *s, struct job *j)
{
    if (atomic_fetch_sub_explicit(&j->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_mutex_lock(&s->lock);
    job_free_locked(s, j);
    pthread_mutex_unlock(&s->lock);
}

void job_table_destroy(struct ax_sched *s)
{
    for (unsigned i = 0; i < s->nchunks; i++)
        free(s->chunks[i]);
    free(s->chunks);
    s->chunks = NULL;
    s->nchunks = 0;
}
