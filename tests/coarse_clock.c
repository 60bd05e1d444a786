/* coarse_clock.c - LD_PRELOAD: CLOCK_MONOTONIC at 4 ms resolution, as a VM
 * without a stable TSC gives it (the jiffies clocksource). For tests whose
 * figures must not depend on distinct clock readings (CMakeLists.txt:
 * test_events_sample_threads_coarse). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>

int clock_gettime(clockid_t c, struct timespec *ts)
{
    static int (*real)(clockid_t, struct timespec *);
    if (!real)
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int r = real(c, ts);
    if (r == 0 && c == CLOCK_MONOTONIC)
        ts->tv_nsec -= ts->tv_nsec % 4000000;
    return r;
}
