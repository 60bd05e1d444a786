/* check.h - the assertions every ax test uses.
 *
 * A failed check prints file:line, the expression and both values, then
 * aborts, so CTest reports the test as failed and a core/ASan trace points
 * at the exact line. No framework: each test is a plain main() that returns
 * 0 when every check passed. */
#ifndef AX_TEST_CHECK_H
#define AX_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* TEST_TSAN: built with -fsanitize=thread (gcc or clang), where tests that
 * hold thousands of fibers scale down. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define TEST_TSAN 1
#endif

/* TEST_SLOW: the factor on liveness bounds that wait for thousands of
 * coroutines to start. Under TSan every coroutine past a worker's warm ones
 * is a new TSan fiber, and creating one costs ~3 ms on a 2-core VM whose
 * page faults are dear (perf: __tsan::CreateThreadContext and the memset of
 * its fresh pages, 40 % of test_idle's time): 3 000 parked tasks take 10 s
 * alone, 30 s beside the rest of the suite. Only bounds a test waits out
 * for something that must happen are scaled, never a window in which
 * something must not. */
#if defined(TEST_TSAN)
#define TEST_SLOW 4
#else
#define TEST_SLOW 1
#endif

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                    \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define CHECK_EQ(a, b)                                                         \
    do {                                                                       \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);        \
        if (check_a_ != check_b_) {                                            \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%lld vs %lld)\n", \
                    __FILE__, __LINE__, #a, #b, check_a_, check_b_);           \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define CHECK_LE(a, b)                                                         \
    do {                                                                       \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);        \
        if (!(check_a_ <= check_b_)) {                                         \
            fprintf(stderr, "%s:%d: CHECK_LE failed: %s <= %s (%lld vs %lld)\n", \
                    __FILE__, __LINE__, #a, #b, check_a_, check_b_);           \
            abort();                                                           \
        }                                                                      \
    } while (0)

#define CHECK_STR(a, b)                                                        \
    do {                                                                       \
        const char *check_a_ = (a), *check_b_ = (b);                           \
        if (strcmp(check_a_, check_b_) != 0) {                                 \
            fprintf(stderr, "%s:%d: CHECK_STR failed: \"%s\" vs \"%s\"\n",     \
                    __FILE__, __LINE__, check_a_, check_b_);                   \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* CHECK_SOFT: report a failed check, with a printf-style note, and count
 * it instead of aborting, so that one run shows every case that fails; the
 * test then returns check_soft_result(name). */
static int check_soft_failed __attribute__((unused));
#define CHECK_SOFT(cond, ...)                                                  \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s -- ", __FILE__, __LINE__, \
                    #cond);                                                    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            check_soft_failed++;                                               \
        }                                                                      \
    } while (0)

static inline int check_soft_result(const char *name)
{
    if (check_soft_failed) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, check_soft_failed);
        return 1;
    }
    printf("%s: ok\n", name);
    return 0;
}

#endif
