/* fuzz_metrics_request.c - libFuzzer entry for the /metrics request reader
 * (src/obs/metrics_req.c).
 *
 * Build (clang):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Isrc -Iinclude \
 *     tests/fuzz/fuzz_metrics_request.c src/obs/metrics_req.c -o fuzz_metrics_request
 *   mkdir -p /tmp/corpus   # libFuzzer writes new inputs into the first directory
 *   ./fuzz_metrics_request /tmp/corpus tests/fuzz/corpus/metrics_request
 *
 * Beyond memory safety it checks what the endpoint relies on: a decision
 * has a known status and uses no more bytes than it was given (nor more
 * than METRICS_REQ_MAX); input of METRICS_REQ_MAX bytes or more is always
 * decided; and the result is prefix-stable - feeding the input in pieces
 * (as reads deliver it) decides at the same byte with the same answer as
 * parsing it whole.
 */
#include "obs/metrics_req.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check(int ok)
{
    if (!ok)
        abort();
}

static int known(int status)
{
    return status == 200 || status == 400 || status == 404 || status == 405 || status == 431 ||
           status == 505;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so ASan sees any read past the end. */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);

    struct metrics_req whole;
    int rc = metrics_req_parse(size ? buf : NULL, size, &whole);
    check(rc == METRICS_REQ_MORE || rc == METRICS_REQ_DONE);
    if (rc == METRICS_REQ_DONE) {
        check(known(whole.status));
        check(whole.len >= 1 && whole.len <= size && whole.len <= METRICS_REQ_MAX);
        check(!whole.head || whole.status != 400);
    } else {
        check(size < METRICS_REQ_MAX);
    }

    /* Pieces: the first byte of data chooses a step, as reads of varying
     * size would. The first prefix that decides must decide like the
     * whole, at whole.len. */
    size_t step = size ? (size_t)(data[0] % 61) + 1 : 1;
    for (size_t k = 0; k < size; k += step) {
        struct metrics_req part;
        if (metrics_req_parse(buf, k, &part) == METRICS_REQ_DONE) {
            check(rc == METRICS_REQ_DONE);
            check(part.status == whole.status && part.head == whole.head &&
                  part.len == whole.len);
            check(whole.len <= k);
            break;
        }
        if (rc == METRICS_REQ_DONE)
            check(k < whole.len);
    }
    free(buf);
    return 0;
}
