/* The job table's chunks come with their pages faulted in (job.c:
 * job_chunk_new), so that linking one under s->lock faults nothing there.
 * calloc alone does not: a chunk is ~250 KiB, a fresh mapping whose pages
 * are not resident until first touched (and gcc turns malloc + memset into
 * that same calloc). Checked with mincore: every page holding a byte of a
 * new chunk is resident before anything writes it; and the chunks are
 * zeroed. Several rounds, freeing in between: after the first free glibc
 * serves such sizes from its heap instead of a mapping of their own, which
 * must hold too. */
#include "util.h"

#include "internal.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static void check_chunk(struct job *c, size_t n)
{
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)c & ~(pg - 1);
    uintptr_t e = ((uintptr_t)(c + n) + pg - 1) & ~(pg - 1);
    size_t np = (e - a) / pg;
    unsigned char *vec = malloc(np);
    CHECK(vec != NULL);
    CHECK_EQ(mincore((void *)a, e - a, vec), 0);
    size_t resident = 0;
    for (size_t i = 0; i < np; i++)
        resident += vec[i] & 1;
    CHECK_EQ(resident, np); /* before any write of ours */
    const unsigned char *b = (const unsigned char *)c;
    for (size_t i = 0; i < n * sizeof *c; i++)
        if (b[i] != 0) {
            fprintf(stderr, "byte %zu of the chunk is %u, not 0\n", i, b[i]);
            CHECK(false);
        }
    free(vec);
}

int main(void)
{
    struct job *keep[4];
    for (int round = 0; round < 4; round++) {
        struct job *c = job_chunk_new(AX_JOB_CHUNK);
        CHECK(c != NULL);
        check_chunk(c, AX_JOB_CHUNK);
        /* dirty it before it goes back, so a reused block must be zeroed */
        memset(c, 0xa5, AX_JOB_CHUNK * sizeof *c);
        free(c);
        keep[round] = job_chunk_new(AX_JOB_CHUNK); /* a second one beside the freed */
        CHECK(keep[round] != NULL);
        check_chunk(keep[round], AX_JOB_CHUNK);
    }
    for (int round = 0; round < 4; round++)
        free(keep[round]);
    /* a small one too: the rounding to whole pages at both ends */
    struct job *small = job_chunk_new(3);
    CHECK(small != NULL);
    check_chunk(small, 3);
    free(small);
    return 0;
}
