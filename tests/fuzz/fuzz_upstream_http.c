/* fuzz_upstream_http.c - ax-upstream's HTTP/1.1 request-head parser
 * (tools/upstream/http.c) on arbitrary bytes.
 *
 * The connection re-runs http_parse() over the bytes received so far after
 * every read, so the target does the same: every prefix a 1..64-byte read
 * pattern produces, then the whole input. Beyond "no crash", it checks what
 * the server relies on: a head length never past the bytes given, a method
 * and path inside the buffer, only the statuses the header comment lists, a
 * reason for every refusal, and a decision that more bytes do not change
 * (a prefix that is a whole head, or is refused, gets the same answer as the
 * whole input: the parser decides on complete lines only).
 */
#include "upstream.h"

#include <stdlib.h>
#include <string.h>

static void check(const char *buf, size_t len, uint64_t max_body, int rc, const struct http_req *rq,
                  const char *why)
{
    if (rc > 0) {
        if ((size_t)rc > len) abort();
        if (!rq->method || rq->method < buf || rq->method + rq->method_len > buf + rc) abort();
        /* the path is in the buffer, or the literal "/" of an absolute-form without one */
        if (!rq->path || rq->path_len == 0) abort();
        if (!(rq->path >= buf && rq->path + rq->path_len <= buf + rc) &&
            !(rq->path_len == 1 && rq->path[0] == '/'))
            abort();
        if (rq->minor != 0 && rq->minor != 1) abort();
        if (rq->content_length > max_body) abort();
        return;
    }
    if (rc == 0) {
        if (len >= UP_MAX_HEAD) abort(); /* a full buffer must be decided */
        return;
    }
    switch (-rc) {
    case 400: case 411: case 413: case 417: case 431: case 501: case 505:
        break;
    default:
        abort();
    }
    if (!why || !*why) abort();
    if (strcmp(http_reason(-rc), "Unknown") == 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    /* first byte: the read size and the body bound */
    size_t step = (data[0] & 63) + 1;
    uint64_t max_body = (data[0] & 64) ? UP_MAX_REQ_BODY : 0;
    data++, size--;
    /* an exact-size copy, so any read past the end is caught by ASan */
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);

    struct http_req rq;
    const char *why;
    for (size_t got = step < size ? step : size;; got = got + step < size ? got + step : size) {
        int rc = http_parse(buf, got, max_body, &rq, &why);
        check(buf, got, max_body, rc, &rq, why);
        if (rc != 0 || got == size) {
            /* once decided, more bytes must not change the decision */
            if (got < size) {
                int all = http_parse(buf, size, max_body, &rq, &why);
                check(buf, size, max_body, all, &rq, why);
                if (all != rc) abort();
            }
            break;
        }
    }
    free(buf);
    return 0;
}
