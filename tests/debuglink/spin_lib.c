/* A shared library whose debug information is split off into a file named
 * by its .gnu_debuglink (test_debuglink): a hog spins in a static function
 * of it, which only that file's DWARF names with a line. */
#include <stdatomic.h>

extern atomic_int dl_hog_stop;

__attribute__((noinline)) static int spin_in_library(volatile int *x)
{
    while (!atomic_load(&dl_hog_stop))
        (*x)++;
    return *x;
}

int dl_hog_entry(void)
{
    volatile int x = 0;
    return spin_in_library(&x) + 1;
}
