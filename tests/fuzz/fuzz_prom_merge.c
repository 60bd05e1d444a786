/* fuzz_prom_merge.c - libFuzzer entry for ax_prom_merge (src/obs/prom.c),
 * which rewrites the text appenders add to a /metrics scrape.
 *
 * Beyond memory safety it checks what metrics_render relies on: the result
 * is never longer than the input; every line it keeps is a line of the
 * input; and merging is idempotent (merging the result again changes
 * nothing), so a second appender pass could not move anything either.
 */
#include "obs/prom.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check(int ok)
{
    if (!ok)
        abort();
}

/* Is line [p, p+n) a whole line of text[0..len)? */
static int is_line_of(const char *p, size_t n, const char *text, size_t len)
{
    for (size_t at = 0; at < len;) {
        const char *e = memchr(text + at, '\n', len - at);
        size_t k = e ? (size_t)(e - (text + at)) : len - at;
        if (k == n && memcmp(text + at, p, n) == 0)
            return 1;
        at += k + 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *in = malloc(size + 1), *buf = malloc(size + 1);
    check(in && buf);
    memcpy(in, data, size);
    memcpy(buf, data, size);
    size_t n = ax_prom_merge(buf, size);
    check(n <= size);
    for (size_t at = 0; at < n;) {
        const char *e = memchr(buf + at, '\n', n - at);
        size_t k = e ? (size_t)(e - (buf + at)) : n - at;
        check(k > 0); /* blank lines go */
        check(is_line_of(buf + at, k, in, size));
        at += k + 1;
    }
    char *again = malloc(n + 1);
    check(again != NULL);
    memcpy(again, buf, n);
    size_t m = ax_prom_merge(again, n);
    check(m == n && memcmp(again, buf, n) == 0);
    free(again);
    free(in);
    free(buf);
    return 0;
}
