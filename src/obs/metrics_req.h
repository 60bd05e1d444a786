/* metrics_req.h - the request reader of the /metrics endpoint (internal; see
 * metrics_req.c for the grammar it accepts).
 *
 * A pure function of the bytes received so far: no allocation, no I/O, no
 * global state, so the endpoint calls it again each time more bytes arrive
 * and a fuzzer (tests/fuzz/fuzz_metrics_request.c) can call it on anything.
 */
#ifndef AX_OBS_METRICS_REQ_H
#define AX_OBS_METRICS_REQ_H

#include <stdbool.h>
#include <stddef.h>

/* The request head (request line and headers) is at most this long; a
 * longer one is answered 431. */
#define METRICS_REQ_MAX 8192

enum {
    METRICS_REQ_MORE = 0, /* a prefix of a request that may still be valid: read on */
    METRICS_REQ_DONE = 1, /* decided: answer out->status */
};

struct metrics_req {
    int status; /* 200 (GET or HEAD /metrics), 400, 404, 405, 431, 505 */
    bool head;  /* HEAD: the answer has headers only */
    size_t len; /* bytes of buf the decision used (the whole head when 200/404/405) */
};

/* Read the first len bytes of buf (need not be NUL-terminated; may be NULL
 * when len is 0). Returns METRICS_REQ_MORE, or METRICS_REQ_DONE with *out
 * filled. Prefix-stable: once a prefix of some input is DONE, every longer
 * input that starts with it is DONE with the same result, so feeding bytes
 * as they arrive decides exactly what reading them all at once would. A
 * malformed request is decided at its first bad byte, without waiting for
 * the rest (a TLS hello or a port scanner's junk gets 400 at once). */
int metrics_req_parse(const char *buf, size_t len, struct metrics_req *out);

#endif /* AX_OBS_METRICS_REQ_H */
