/* machine_line.c - what one cache line costs to move between two cores.
 *
 * Not a benchmark of ax: a reading of the machine, printed beside the rows.
 * Two threads, pinned to two different CPUs when the affinity call is
 * allowed, hand one cache line back and forth `rounds` times: each spins
 * until the line holds its turn, then writes the other's. Prints
 *   machine_line_rtt_<at>_ns   ns per round trip (two moves of the line)
 * with <at> from the argument at=NAME (default "start"), so bench/run can
 * read the machine at the start and at the end of a run. No reading (exit
 * 0, the reason on stderr) with fewer than two CPUs to run on or when a
 * thread may not be pinned.
 *
 * A busy machine raises the figure too (one busy loop beside it took it
 * from ~440 to ~800 ns in a trial): bench/run notes the load average when
 * it starts.
 *
 * Why: the full path hands each task's lines from the submitting core to a
 * worker's, so it tracks this figure. On the VM this project is built on it
 * is ~110-140 ns at some hours and ~400-470 ns at others (the host moves
 * the VM's two vCPUs between placements), and ax's full path takes ~1.9x
 * as long in the slow one, while a thread pool, which sleeps and wakes per
 * task, hardly moves (src/SCALING.md, "Two placements of one VM"). A row is
 * comparable with another only when this reading is alike.
 */
#include "bench_util.h"

#include <sched.h>

static _Alignas(64) _Atomic int turn; /* 1: the partner's move, 0: main's */
static long rounds;

/* Pin the calling thread to `cpu`; false when not allowed or not there. */
static bool pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

static void *partner(void *arg)
{
    int cpu = *(const int *)arg;
    if (!pin(cpu))
        fprintf(stderr, "machine_line: pinning the partner to CPU %d was refused\n", cpu);
    for (long i = 0; i < rounds; i++) {
        while (atomic_load_explicit(&turn, memory_order_acquire) != 1)
            ;
        atomic_store_explicit(&turn, 0, memory_order_release);
    }
    return NULL;
}

/* The first two CPUs this process may run on, or -1s. */
static void two_cpus(int *a, int *b)
{
    cpu_set_t set;
    *a = *b = -1;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return;
    for (int c = 0; c < CPU_SETSIZE && *b < 0; c++) {
        if (!CPU_ISSET(c, &set))
            continue;
        if (*a < 0)
            *a = c;
        else
            *b = c;
    }
}

static int usage(const char *why)
{
    fprintf(stderr,
            "machine_line: %s\nusage: machine_line [at=NAME] [rounds=N]  (NAME: a-z, 0-9, _; "
            "default start. N: 10000 to 100000000, default 1000000)\n",
            why);
    return 2;
}

int main(int argc, char **argv)
{
    rounds = 1000000;
    const char *at = "start";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "at=", 3) == 0) {
            at = a + 3;
            if (!*at)
                return usage("at= needs a name");
        } else if (strncmp(a, "rounds=", 7) == 0) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(a + 7, &end, 10);
            /* Fewer rounds than this and the figure is mostly thread start. */
            if (a[7] < '0' || a[7] > '9' || *end || errno || v < 10000 || v > 100000000)
                return usage("rounds= takes a whole number from 10000 to 100000000");
            rounds = (long)v;
        } else {
            char why[160];
            snprintf(why, sizeof why, "unknown argument '%.100s'", a);
            return usage(why);
        }
    }
    for (const char *c = at; *c; c++) {
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_')) {
            fprintf(stderr, "machine_line: at=%s: use a-z, 0-9 and _ only (it names a key)\n", at);
            return 2;
        }
    }
    int mine, theirs;
    two_cpus(&mine, &theirs);
    if (theirs < 0) {
        fprintf(stderr, "machine_line: fewer than two CPUs to run on: no reading\n");
        return 0; /* nothing to print; not a failure of the bench */
    }
    if (!pin(mine)) {
        /* Unpinned, the two threads may share a CPU: a figure of the OS's
         * scheduler, not of the line. */
        fprintf(stderr, "machine_line: pinning a thread to CPU %d was refused: no reading\n", mine);
        return 0;
    }
    int partner_cpu = theirs;
    pthread_t t;
    if (pthread_create(&t, NULL, partner, &partner_cpu) != 0) {
        fprintf(stderr, "machine_line: pthread_create failed\n");
        return 1;
    }
    uint64_t t0 = bu_now_ns();
    for (long i = 0; i < rounds; i++) {
        atomic_store_explicit(&turn, 1, memory_order_release);
        while (atomic_load_explicit(&turn, memory_order_acquire) != 0)
            ;
    }
    uint64_t t1 = bu_now_ns();
    pthread_join(t, NULL);
    printf("machine_line_rtt_%s_ns %.1f\n", at, (double)(t1 - t0) / (double)rounds);
    return 0;
}
