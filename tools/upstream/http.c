/* http.c - a small, strict HTTP/1.1 request-head parser (RFC 9112).
 *
 * http_parse() is pure: it looks at the bytes received so far and says
 * "need more", "this head is N bytes long", or "refuse with STATUS". The
 * connection re-runs it from the start after every read, which costs nothing
 * for the few hundred bytes a head has and keeps no parser state between
 * reads. Each complete line is checked as soon as it is in, so garbage is
 * refused at once instead of after the idle timeout.
 *
 * What it takes: request line METHOD SP TARGET SP HTTP/1.x (origin-form, or
 * absolute-form whose authority is dropped, or "*"), header fields
 * name ":" OWS value OWS, lines ending in CRLF or a bare LF (RFC 9112 §2.2),
 * and up to a few empty lines before the request line (§2.2 again).
 * What it refuses: malformed lines, whitespace before a colon, obs-fold (400);
 * a missing or repeated Host in HTTP/1.1 (400, §3.2); Content-Length that is
 * not digits, or two that differ (400); Transfer-Encoding together with
 * Content-Length (400, the request-smuggling case); a chunked body (411 --
 * this server only reads Content-Length bodies) or another coding (501);
 * HTTP/2+ (505); a head above UP_MAX_HEAD bytes or UP_MAX_HEADERS fields
 * (431); a body above max_body (413); Expect other than 100-continue (417).
 */
#include "upstream.h"

#include <string.h>
#include <strings.h>

/* RFC 9110 §5.6.2 tchar */
static bool is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Field values: VCHAR, obs-text, SP, HTAB. */
static bool is_field_char(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static bool token_eq(const char *p, size_t n, const char *lit)
{
    return strlen(lit) == n && strncasecmp(p, lit, n) == 0;
}

/* Does the comma-separated list p[0, n) contain token lit (any case)? */
static bool list_has(const char *p, size_t n, const char *lit)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (is_ows(p[i]) || p[i] == ','))
            i++;
        size_t s = i;
        while (i < n && p[i] != ',')
            i++;
        size_t e = i;
        while (e > s && is_ows(p[e - 1]))
            e--;
        if (e > s && token_eq(p + s, e - s, lit)) return true;
    }
    return false;
}

/* The last coding of a Transfer-Encoding list. */
static bool last_is_chunked(const char *p, size_t n)
{
    size_t e = n;
    while (e > 0 && is_ows(p[e - 1]))
        e--;
    size_t s = e;
    while (s > 0 && p[s - 1] != ',')
        s--;
    while (s < e && is_ows(p[s]))
        s++;
    return token_eq(p + s, e - s, "chunked");
}

#define REFUSE(status, msg)                                                                        \
    do {                                                                                           \
        *why = (msg);                                                                              \
        return -(status);                                                                          \
    } while (0)

/* Request line "METHOD SP TARGET SP HTTP/d.d" in l[0, n). */
static int parse_request_line(const char *l, size_t n, struct http_req *rq, const char **why)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)l[i]))
        i++;
    if (i == 0 || i == n || l[i] != ' ') REFUSE(400, "malformed request line (method)");
    rq->method = l;
    rq->method_len = i;
    size_t ts = ++i;
    while (i < n && l[i] != ' ') {
        unsigned char c = (unsigned char)l[i];
        if (c <= 0x20 || c == 0x7f) REFUSE(400, "malformed request line (target)");
        i++;
    }
    if (i == ts || i == n) REFUSE(400, "malformed request line (target)");
    const char *t = l + ts;
    size_t tn = i - ts;
    i++;
    const char *v = l + i;
    if (n - i != 8 || strncmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' ||
        v[7] < '0' || v[7] > '9')
        REFUSE(400, "malformed request line (version)");
    if (v[5] != '1') REFUSE(505, "only HTTP/1.x is served");
    rq->minor = v[7] == '0' ? 0 : 1; /* 1.2+ is answered as 1.1 (RFC 9110 §6.2) */

    /* absolute-form: drop scheme and authority */
    if (tn > 7 && strncasecmp(t, "http://", 7) == 0) {
        t += 7, tn -= 7;
    } else if (tn > 8 && strncasecmp(t, "https://", 8) == 0) {
        t += 8, tn -= 8;
    } else if (t[0] == '/' || (tn == 1 && t[0] == '*')) {
        goto origin;
    } else {
        REFUSE(400, "request target must be a path");
    }
    {
        size_t k = 0;
        while (k < tn && t[k] != '/' && t[k] != '?')
            k++;
        if (k == tn || t[k] == '?') { /* no path: "/" */
            rq->path = "/";
            rq->path_len = 1;
            return 0;
        }
        t += k, tn -= k;
    }
origin:
    rq->path = t;
    rq->path_len = 0;
    while (rq->path_len < tn && t[rq->path_len] != '?' && t[rq->path_len] != '#')
        rq->path_len++;
    return 0;
}

int http_parse(const char *buf, size_t len, uint64_t max_body, struct http_req *rq,
               const char **why)
{
    memset(rq, 0, sizeof *rq);
    *why = "";
    size_t pos = 0;
    int empty_lines = 0, nfields = 0, hosts = 0;
    bool have_line = false, have_cl = false, have_te = false, te_chunked = false;
    bool conn_close = false, conn_keep = false;
    for (;;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        if (!nl) {
            if (len >= UP_MAX_HEAD) REFUSE(431, "request head too large");
            return 0;
        }
        size_t end = (size_t)(nl - buf) + 1; /* past the LF */
        if (end > UP_MAX_HEAD) REFUSE(431, "request head too large");
        const char *l = buf + pos;
        size_t n = (size_t)(nl - l);
        if (n > 0 && l[n - 1] == '\r') n--;
        pos = end;
        if (memchr(l, '\r', n) || memchr(l, '\0', n))
            REFUSE(400, "stray CR or NUL in the request head");

        if (!have_line) {
            if (n == 0) { /* empty lines before the request line */
                if (++empty_lines > 4) REFUSE(400, "empty lines instead of a request");
                continue;
            }
            int rc = parse_request_line(l, n, rq, why);
            if (rc) return rc;
            have_line = true;
            continue;
        }
        if (n == 0) break; /* end of the head */
        if (is_ows(l[0])) REFUSE(400, "obsolete line folding");
        if (++nfields > UP_MAX_HEADERS) REFUSE(431, "too many header fields");
        size_t c = 0;
        while (c < n && is_tchar((unsigned char)l[c]))
            c++;
        if (c == 0 || c == n || l[c] != ':') REFUSE(400, "malformed header field");
        const char *name = l;
        size_t name_len = c;
        size_t vs = c + 1, ve = n;
        while (vs < ve && is_ows(l[vs]))
            vs++;
        while (ve > vs && is_ows(l[ve - 1]))
            ve--;
        for (size_t k = vs; k < ve; k++)
            if (!is_field_char((unsigned char)l[k]))
                REFUSE(400, "control character in a header value");
        const char *v = l + vs;
        size_t vn = ve - vs;

        if (token_eq(name, name_len, "content-length")) {
            if (vn == 0) REFUSE(400, "empty Content-Length");
            uint64_t cl = 0;
            for (size_t k = 0; k < vn; k++) {
                if (v[k] < '0' || v[k] > '9') REFUSE(400, "Content-Length is not a number");
                if (cl > (UINT64_MAX - 9) / 10) REFUSE(413, "Content-Length too large");
                cl = cl * 10 + (uint64_t)(v[k] - '0');
            }
            if (have_cl && cl != rq->content_length)
                REFUSE(400, "conflicting Content-Length fields");
            have_cl = true;
            rq->content_length = cl;
        } else if (token_eq(name, name_len, "transfer-encoding")) {
            have_te = true;
            te_chunked = last_is_chunked(v, vn);
        } else if (token_eq(name, name_len, "connection")) {
            conn_close |= list_has(v, vn, "close");
            conn_keep |= list_has(v, vn, "keep-alive");
        } else if (token_eq(name, name_len, "host")) {
            hosts++;
        } else if (token_eq(name, name_len, "expect")) {
            if (!token_eq(v, vn, "100-continue"))
                REFUSE(417, "only Expect: 100-continue is understood");
            rq->expect_continue = true;
        }
    }
    if (rq->minor == 1 && hosts != 1)
        REFUSE(400, hosts ? "more than one Host field" : "HTTP/1.1 request without Host");
    if (have_te && have_cl) REFUSE(400, "both Transfer-Encoding and Content-Length");
    if (have_te)
        REFUSE(te_chunked ? 411 : 501,
               te_chunked ? "chunked request bodies are not read; send Content-Length"
                          : "unknown Transfer-Encoding");
    if (rq->content_length > max_body) REFUSE(413, "request body too large");
    rq->keep_alive = rq->minor == 1 ? !conn_close : (conn_keep && !conn_close);
    rq->head =
        rq->method_len == 4 && memcmp(rq->method, "HEAD", 4) == 0; /* methods are case-sensitive */
    if (rq->minor == 0)
        rq->expect_continue = false; /* RFC 9110 §10.1.1: ignore it from 1.0 clients */
    return (int)pos;
}

const char *http_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 408:
        return "Request Timeout";
    case 411:
        return "Length Required";
    case 413:
        return "Content Too Large";
    case 417:
        return "Expectation Failed";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Unknown";
    }
}
