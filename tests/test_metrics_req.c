/* test_metrics_req.c - the /metrics request reader (src/obs/metrics_req.c).
 *
 * Each request of the table is decided with the expected status, HEAD flag
 * and decision length; every proper prefix of it is MORE or the same
 * decision (prefix stability: the endpoint parses again as bytes arrive);
 * junk is decided at its first bad byte; 431 exactly at METRICS_REQ_MAX.
 */
#include "check.h"
#include "obs/metrics_req.h"

#include <stdbool.h>

struct want {
    const char *req;
    int status;
    bool head;
    size_t len; /* bytes used; 0 = all of req */
};

static const struct want table[] = {
    {"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 200, false, 0},
    {"GET /metrics HTTP/1.0\r\n\r\n", 200, false, 0},
    {"HEAD /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 200, true, 0},
    {"GET /metrics?x=1&y=%20 HTTP/1.1\r\nHost: a\r\n\r\n", 200, false, 0},
    {"GET /metrics HTTP/1.1\nHost: a\n\n", 200, false, 0},
    {"\r\n\nGET /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 200, false, 0},
    {"GET /metrics HTTP/1.1\r\nA:\r\nB: \t x \x80\xff\r\nHost: a\r\n\r\n", 200, false, 0},
    {"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\nGET /nope", 200, false, 34}, /* the rest is not read */
    /* absolute-form (RFC 9112 §3.2.2: a server MUST accept it): the path
     * after the authority decides; the scheme is http or https, any case;
     * the authority is checked, not compared (one endpoint, no virtual
     * hosts), and ends at the byte that ends it. */
    {"GET http://127.0.0.1:9464/metrics HTTP/1.1\r\nHost: a\r\n\r\n", 200, false, 0},
    {"HEAD HTTPS://a.example/metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n", 200, true, 0},
    {"GET http://[::1]:9/metrics HTTP/1.0\r\n\r\n", 200, false, 0},
    {"POST http://h/metrics HTTP/1.1\r\nHost: a\r\n\r\n", 405, false, 0},
    {"GET http://h HTTP/1.1\r\nHost: a\r\n\r\n", 404, false, 0},  /* empty path: "/" */
    {"GET http://h?metrics HTTP/1.1\r\nHost: a\r\n\r\n", 404, false, 0},
    {"GET http://h/nope HTTP/1.1\r\nHost: a\r\n\r\n", 404, false, 0},
    {"GET http://h/metrics/ HTTP/1.1\r\nHost: a\r\n\r\n", 404, false, 0},
    {"GET ftp://h/metrics HTTP/1.1\r\n\r\n", 400, false, 8},   /* at the ':' */
    {"GET http:/h/metrics HTTP/1.1\r\n\r\n", 400, false, 11},  /* "//" wanted */
    {"GET http:///metrics HTTP/1.1\r\n\r\n", 400, false, 12},  /* no host */
    {"GET http:// HTTP/1.1\r\n\r\n", 400, false, 12},
    {"GET http://h/metrics\r\n\r\n", 400, false, 21},
    {"GET * HTTP/1.1\r\n\r\n", 400, false, 5},               /* asterisk-form: not served */
    {"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 404, false, 0},
    {"HEAD /nope HTTP/1.1\r\nHost: a\r\n\r\n", 404, true, 0},
    {"GET /metrics/ HTTP/1.1\r\nHost: a\r\n\r\n", 404, false, 0},
    {"GET /metric HTTP/1.1\r\nHost: a\r\n\r\n", 404, false, 0},
    {"GET /METRICS HTTP/1.1\r\nHost: a\r\n\r\n", 404, false, 0},
    {"get /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 405, false, 0}, /* methods are case-sensitive */
    {"POST /metrics HTTP/1.1\r\nHost: a\r\n\r\n", 405, false, 0},
    {"GET /metrics HTTP/2.0\r\n\r\n", 505, false, 0},
    {"GET /metrics HTTP/0.9\r\n\r\n", 505, false, 0},
    {"GET /metrics HTTP/1.10\r\n\r\n", 400, false, 22},
    {"GET /metrics HTTX/1.1\r\n\r\n", 400, false, 17},
    {"GET /metrics\r\n\r\n", 400, false, 13},
    {"GET metrics HTTP/1.1\r\n\r\n", 400, false, 12}, /* a scheme until the space */
    {"GET 1metrics HTTP/1.1\r\n\r\n", 400, false, 5},
    {"GET  /metrics HTTP/1.1\r\n\r\n", 400, false, 5},
    {" GET /metrics HTTP/1.1\r\n\r\n", 400, false, 1},
    {"\x16\x03\x01\x02\x00", 400, false, 1},
    {"G\x00T /metrics HTTP/1.1\r\n\r\n", 400, false, 2},
    {"GET /met\x7frics HTTP/1.1\r\n\r\n", 400, false, 9},
    {"GET /metrics HTTP/1.1\r\r\n\r\n", 400, false, 23},
    {"GET /metrics HTTP/1.1\r\nNo colon\r\n\r\n", 400, false, 26},
    {"GET /metrics HTTP/1.1\r\nName : v\r\n\r\n", 400, false, 28},
    {"GET /metrics HTTP/1.1\r\n folded\r\n\r\n", 400, false, 24},
    {"GET /metrics HTTP/1.1\r\nA: \x01\r\n\r\n", 400, false, 27},
    {"GET /metrics HTTP/1.1\r\nA: b\rc\r\n\r\n", 400, false, 29},
    {"GET /metrics HTTP/1.1\r\n\rx", 400, false, 25},
    {"\rx", 400, false, 2},
    /* Host (RFC 9112 §3.2): HTTP/1.1 needs one, two are 400 at the second
     * colon, an invalid value is 400 at the end of its line; HTTP/1.0 may
     * go without. The value is OWS, host [":" port], OWS. */
    {"GET /metrics HTTP/1.1\r\n\r\n", 400, false, 0},
    {"HEAD /metrics HTTP/1.1\r\nA: b\r\n\r\n", 400, false, 0},
    {"GET /nope HTTP/1.1\r\n\r\n", 400, false, 0},
    {"GET /metrics HTTP/2.0\r\n\r\n", 505, false, 0},
    {"GET /metrics HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", 400, false, 37},
    {"GET /metrics HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400, false, 37},
    {"GET /metrics HTTP/1.1\r\nHost: a b\r\n\r\n", 400, false, 33},
    {"GET /metrics HTTP/1.1\r\nHost: a b\n\n", 400, false, 33},
    {"GET /metrics HTTP/1.1\r\nHost: u@h\r\n\r\n", 400, false, 33},
    {"GET /metrics HTTP/1.1\r\nHost: h:65536\r\n\r\n", 400, false, 37},
    {"GET /metrics HTTP/1.1\r\nHost: h:080x\r\n\r\n", 400, false, 36},
    {"GET /metrics HTTP/1.1\r\nHost: h:123456\r\n\r\n", 400, false, 38},
    {"GET /metrics HTTP/1.1\r\nHost: [::1\r\n\r\n", 400, false, 34},
    {"GET /metrics HTTP/1.1\r\nHost: [::g]\r\n\r\n", 400, false, 35},
    {"GET /metrics HTTP/1.1\r\nHost: [::1]x\r\n\r\n", 400, false, 36},
    {"GET /metrics HTTP/1.1\r\nHost: a%2\r\n\r\n", 400, false, 33},
    {"GET /metrics HTTP/1.1\r\nHost: h\x80\r\n\r\n", 400, false, 32},
    {"GET /metrics HTTP/1.1\r\nHost: [::1]:9464\r\n\r\n", 200, false, 0},
    {"GET /metrics HTTP/1.1\r\nHOST:\t 127.0.0.1:9464 \t\r\n\r\n", 200, false, 0},
    {"GET /metrics HTTP/1.1\r\nHost: a%2Eb.example:\r\n\r\n", 200, false, 0},
    {"GET /metrics HTTP/1.1\r\nHost:\r\n\r\n", 200, false, 0}, /* empty: allowed */
    {"GET /metrics HTTP/1.1\r\nHosts: a\r\nXHost: b\r\nHost: c\r\n\r\n", 200, false, 0},
    {"GET /metrics HTTP/1.0\r\nHost: a b\r\n\r\n", 400, false, 33},
    /* The absolute-form's authority, checked at the byte that ends it. */
    {"GET http://h:99999999999999999999/metrics HTTP/1.1\r\nHost: h\r\n\r\n", 400, false, 34},
    {"GET http://[::1/metrics HTTP/1.1\r\nHost: h\r\n\r\n", 400, false, 16},
    {"GET http://u@h/metrics HTTP/1.1\r\nHost: h\r\n\r\n", 400, false, 15},
    {"GET http://h:/metrics HTTP/1.1\r\nHost: h\r\n\r\n", 200, false, 0},
    {"GET http://[::1]x/metrics HTTP/1.1\r\nHost: h\r\n\r\n", 400, false, 18},
    {"GET http://a%zz HTTP/1.1\r\nHost: h\r\n\r\n", 400, false, 16},
    /* CONNECT's authority-form: no scheme, 400 at the colon. */
    {"CONNECT h:80 HTTP/1.1\r\nHost: h:80\r\n\r\n", 400, false, 10},
};

static void check_one(const struct want *w)
{
    /* len: where the decision falls, when it is not at the end (some
     * entries hold a NUL, which strlen would stop at). */
    size_t n = strlen(w->req), full = w->len ? w->len : n;
    struct metrics_req r;
    int rc = metrics_req_parse(w->req, full, &r);
    if (rc != METRICS_REQ_DONE || r.status != w->status || r.head != w->head || r.len != full)
        fprintf(stderr, "\"%s\": rc %d status %d head %d len %zu\n", w->req, rc, r.status,
                r.head, r.len);
    CHECK_EQ(rc, METRICS_REQ_DONE);
    CHECK_EQ(r.status, w->status);
    CHECK_EQ(r.head, w->head);
    CHECK_EQ(r.len, full);
    /* The same decision from all of it, when there is more. */
    if (n > full) {
        struct metrics_req all;
        CHECK_EQ(metrics_req_parse(w->req, n, &all), METRICS_REQ_DONE);
        CHECK(all.status == r.status && all.head == r.head && all.len == r.len);
    }
    /* Every proper prefix: not decided yet. */
    for (size_t k = 0; k < full; k++) {
        struct metrics_req p;
        CHECK_EQ(metrics_req_parse(w->req, k, &p), METRICS_REQ_MORE);
    }
}

int main(void)
{
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        check_one(&table[i]);

    /* Nothing decided, nothing read. */
    struct metrics_req r;
    CHECK_EQ(metrics_req_parse(NULL, 0, &r), METRICS_REQ_MORE);

    /* A head with no end: MORE below METRICS_REQ_MAX, 431 at it. */
    static char big[METRICS_REQ_MAX + 100];
    memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
    memset(big + 26, 'a', sizeof big - 26);
    CHECK_EQ(metrics_req_parse(big, METRICS_REQ_MAX - 1, &r), METRICS_REQ_MORE);
    CHECK_EQ(metrics_req_parse(big, METRICS_REQ_MAX, &r), METRICS_REQ_DONE);
    CHECK_EQ(r.status, 431);
    CHECK_EQ(r.len, METRICS_REQ_MAX);
    CHECK_EQ(metrics_req_parse(big, sizeof big, &r), METRICS_REQ_DONE);
    CHECK_EQ(r.status, 431);
    /* Empty lines alone are no request either. */
    memset(big, '\n', sizeof big);
    CHECK_EQ(metrics_req_parse(big, sizeof big, &r), METRICS_REQ_DONE);
    CHECK_EQ(r.status, 431);
    /* A head that ends exactly at the bound is read. */
    memcpy(big, "GET /metrics HTTP/1.1\r\nHost: a\r\nX: ", 35);
    memset(big + 35, 'a', METRICS_REQ_MAX - 35 - 4);
    memcpy(big + METRICS_REQ_MAX - 4, "\r\n\r\n", 4);
    CHECK_EQ(metrics_req_parse(big, sizeof big, &r), METRICS_REQ_DONE);
    CHECK_EQ(r.status, 200);
    CHECK_EQ(r.len, METRICS_REQ_MAX);

    printf("test_metrics_req: ok (%zu requests and all their prefixes)\n",
           sizeof table / sizeof *table);
    return 0;
}
