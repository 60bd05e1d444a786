/* metrics_req.c - read the head of an HTTP/1.x request for the /metrics
 * endpoint and decide the answer (RFC 9112 §2-§5, the strict subset a
 * scraper needs).
 *
 * What it owns: the grammar below and the choice of status. Nothing else:
 * the endpoint (metrics_serve.c) owns sockets, buffers and deadlines.
 *
 *   head         = *( [CR] LF ) request-line *( header-line ) [CR] LF
 *   request-line = method SP target SP "HTTP/" DIGIT "." DIGIT [CR] LF
 *   method       = 1*tchar
 *   target       = origin-form / absolute-form
 *   origin-form  = "/" *( %x21-7E )
 *   absolute-form = scheme "://" authority [ ( "/" / "?" ) *( %x21-7E ) ]
 *   scheme       = "http" / "https"        (any case)
 *   authority    = host [ ":" port ]       (RFC 3986 §3.2, no userinfo)
 *   host         = "[" IPv6address "]" / 1*( unreserved / pct-encoded / sub-delims )
 *   port         = 0*5DIGIT, at most 65535
 *   header-line  = 1*tchar ":" *( %x09 / %x20-7E / %x80-FF ) [CR] LF
 *   Host value   = OWS [ authority ] OWS   (its host may be empty)
 *
 * Bare LF ends a line as CRLF does (§2.2 allows it); a CR not followed by LF,
 * a control byte, white space before a colon or at the start of a header
 * line (obsolete folding) are 400 at that byte, without reading the rest.
 * Empty lines before the request line are skipped (§2.2). Header values
 * other than Host's are not interpreted: the endpoint answers one request
 * and closes, so neither Connection nor a body's length changes what it
 * does (an unread body is drained and discarded before close, see
 * metrics_serve.c).
 *
 * Host (RFC 9112 §3.2: a server MUST answer 400 to an HTTP/1.1 request
 * without it, and to any request with two Host lines or an invalid Host
 * value): a second Host line is 400 at its colon, an invalid value at the
 * end of its line, a missing one in HTTP/1.1 at the end of the head. Its
 * value is checked, not compared: one endpoint, no virtual hosts.
 *
 * The absolute-form is what a client sends through a proxy, and a server
 * MUST accept it (RFC 9112 §3.2.2): its path decides as the origin-form's
 * does (no path reads "/"). A scheme other than http(s), a missing "//" or
 * an empty host is 400 at that byte, an authority that is not one (junk,
 * a userinfo "@", a port past 65535, an unclosed "[") at the byte that
 * ends it. The asterisk-form ("*", OPTIONS only) and the authority-form
 * (CONNECT's "host:port") are 400.
 *
 * Status: a well-formed head with major version other than 1 is 505;
 * a path "/metrics" or "/metrics?..." with GET or HEAD is 200 and with any
 * other method 405; any other target is 404; no end of head within
 * METRICS_REQ_MAX bytes is 431.
 *
 * Each decision depends only on the bytes up to the one that forced it, so
 * the result is prefix-stable (metrics_req.h). O(len), one pass, no
 * allocation; the caller's re-parse on each read makes it O(len^2 / read
 * size) at worst, bounded by METRICS_REQ_MAX.
 */
#include "obs/metrics_req.h"

#include <arpa/inet.h>
#include <string.h>

enum st {
    S_LEAD,    /* empty lines before the request line */
    S_LEAD_CR, /* CR of such a line */
    S_METHOD,
    S_TARGET,  /* origin-form, or the path of an absolute-form */
    S_SCHEME,  /* absolute-form: the scheme */
    S_SLASHES, /* "//" after it */
    S_HOST,    /* the authority, up to "/", "?" or the end of the target */
    S_VERSION, /* "HTTP/d.d" */
    S_RL_CR,   /* CR ending the request line */
    S_LINE,    /* start of a header line, or of the empty line */
    S_NAME,
    S_VALUE,
    S_VALUE_CR,
    S_END_CR,  /* CR of the empty line */
};

#define ALPHA(c) (((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z'))

/* Do the n bytes at p spell the first n of lower-case `word`, in any case? */
static int lower_is(const char *p, const char *word, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != word[i])
            return 0;
    }
    return 1;
}

/* RFC 9110 §5.6.2 tchar */
static int tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return 1;
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int decide(struct metrics_req *out, int status, size_t len, int head)
{
    out->status = status;
    out->head = head;
    out->len = len;
    return METRICS_REQ_DONE;
}

/* RFC 3986 §2.3 unreserved and §2.2 sub-delims: what a reg-name holds
 * besides pct-encoded octets. */
static int host_char(unsigned char c)
{
    if ((c >= '0' && c <= '9') || ALPHA(c))
        return 1;
    return c != 0 && strchr("-._~!$&'()*+,;=", c) != NULL;
}

static int hexdig(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Is p[0..n) an authority, host [":" port] (RFC 3986 §3.2.2-3, without
 * userinfo, which an http URI must not carry: RFC 9110 §4.2.4)? An empty
 * host is allowed only when `empty_host` (a Host value may have one). */
static int authority_ok(const char *p, size_t n, int empty_host)
{
    size_t i = 0;
    if (n > 0 && p[0] == '[') {
        const char *close = memchr(p, ']', n);
        char a[INET6_ADDRSTRLEN];
        struct in6_addr addr;
        size_t al = close ? (size_t)(close - p) - 1 : 0;
        if (!close || al == 0 || al >= sizeof a)
            return 0;
        memcpy(a, p + 1, al);
        a[al] = 0;
        if (inet_pton(AF_INET6, a, &addr) != 1)
            return 0;
        i = al + 2;
    } else {
        for (; i < n && p[i] != ':'; i++) {
            unsigned char c = (unsigned char)p[i];
            if (c == '%') {
                if (i + 2 >= n || !hexdig((unsigned char)p[i + 1]) ||
                    !hexdig((unsigned char)p[i + 2]))
                    return 0;
                i += 2;
            } else if (!host_char(c)) {
                return 0;
            }
        }
        if (i == 0 && !empty_host)
            return 0;
    }
    if (i == n)
        return 1;
    if (p[i] != ':' || n - i - 1 > 5)
        return 0;
    unsigned port = 0;
    for (size_t k = i + 1; k < n; k++) {
        if (p[k] < '0' || p[k] > '9')
            return 0;
        port = port * 10 + (unsigned)(p[k] - '0');
    }
    return port <= 65535;
}

/* What the request line said, as offsets into the buffer, and whether a
 * Host line came. */
struct rline {
    const char *buf;
    size_t mstart, mlen, tstart, tlen; /* tstart, tlen: the path */
    int major, minor;
    int hosts;
};

/* The head ended well at byte len: choose the status. */
static int answer(const struct rline *rl, size_t len, struct metrics_req *out)
{
    const char *m = rl->buf + rl->mstart, *t = rl->buf + rl->tstart;
    int head = rl->mlen == 4 && memcmp(m, "HEAD", 4) == 0;
    int get = rl->mlen == 3 && memcmp(m, "GET", 3) == 0;
    if (rl->major != 1)
        return decide(out, 505, len, head);
    if (rl->minor >= 1 && !rl->hosts)
        return decide(out, 400, len, 0); /* RFC 9112 §3.2: HTTP/1.1 needs Host */
    if (!(rl->tlen >= 8 && memcmp(t, "/metrics", 8) == 0 && (rl->tlen == 8 || t[8] == '?')))
        return decide(out, 404, len, head);
    return decide(out, get || head ? 200 : 405, len, head);
}

int metrics_req_parse(const char *buf, size_t len, struct metrics_req *out)
{
    const unsigned char *b = (const unsigned char *)buf;
    size_t n = len < METRICS_REQ_MAX ? len : METRICS_REQ_MAX;
    enum st st = S_LEAD;
    struct rline rl = {.buf = buf};
    size_t vpos = 0;
    size_t afrm = 0, hostlen = 0; /* absolute-form: where its scheme began (0: none) */
    size_t nstart = 0;            /* the header name being read */
    int in_host = 0;              /* the value being read is Host's */
    size_t hv = 0, hvend = 0;     /* Host value without its OWS: [hv, hvend) */

    for (size_t i = 0; i < n; i++) {
        unsigned char c = b[i];
        switch (st) {
        case S_LEAD:
            if (c == '\r') {
                st = S_LEAD_CR;
            } else if (c == '\n') {
                /* skip */
            } else if (tchar(c)) {
                st = S_METHOD;
                rl.mstart = i;
                rl.mlen = 1;
            } else {
                return decide(out, 400, i + 1, 0);
            }
            break;
        case S_LEAD_CR:
            if (c != '\n')
                return decide(out, 400, i + 1, 0);
            st = S_LEAD;
            break;
        case S_METHOD:
            if (c == ' ') {
                st = S_TARGET;
                rl.tstart = i + 1;
            } else if (tchar(c)) {
                rl.mlen++;
            } else {
                return decide(out, 400, i + 1, 0);
            }
            break;
        case S_TARGET:
            if (i == rl.tstart && rl.tlen == 0 && !afrm && c != '/') {
                if (!ALPHA(c))
                    return decide(out, 400, i + 1, 0);
                st = S_SCHEME; /* absolute-form */
                afrm = i;
                break;
            }
            if (c == ' ') {
                st = S_VERSION;
                vpos = 0;
            } else if (c > 0x20 && c < 0x7f) {
                rl.tlen++;
            } else {
                return decide(out, 400, i + 1, 0);
            }
            break;
        case S_SCHEME:
            if (c == ':') {
                size_t sl = i - afrm;
                if (!((sl == 4 || sl == 5) && lower_is(buf + afrm, "https", sl)))
                    return decide(out, 400, i + 1, 0); /* not http(s) */
                st = S_SLASHES;
                vpos = 0;
            } else if (!(ALPHA(c) || (c >= '0' && c <= '9') || c == '+' || c == '-' ||
                         c == '.')) {
                return decide(out, 400, i + 1, 0);
            }
            break;
        case S_SLASHES:
            if (c != '/')
                return decide(out, 400, i + 1, 0);
            if (++vpos == 2) {
                st = S_HOST;
                hostlen = 0;
            }
            break;
        case S_HOST:
            if (c == '/' || c == '?' || c == ' ') {
                if (hostlen == 0)
                    return decide(out, 400, i + 1, 0); /* http URIs have a host */
                if (!authority_ok(buf + i - hostlen, hostlen, 0))
                    return decide(out, 400, i + 1, 0);
                st = S_TARGET;
                rl.tstart = i; /* the path, possibly empty */
                if (c == ' ') {
                    st = S_VERSION;
                    vpos = 0;
                } else {
                    rl.tlen = 1;
                }
            } else if (c > 0x20 && c < 0x7f) {
                hostlen++;
            } else {
                return decide(out, 400, i + 1, 0);
            }
            break;
        case S_VERSION:
            /* "HTTP/" DIGIT "." DIGIT, then [CR] LF */
            if (vpos < 5) {
                if (c != (unsigned char)"HTTP/"[vpos])
                    return decide(out, 400, i + 1, 0);
            } else if (vpos == 5 || vpos == 7) {
                if (c < '0' || c > '9')
                    return decide(out, 400, i + 1, 0);
                if (vpos == 5)
                    rl.major = c - '0';
                else
                    rl.minor = c - '0';
            } else if (vpos == 6) {
                if (c != '.')
                    return decide(out, 400, i + 1, 0);
            } else if (c == '\r') {
                st = S_RL_CR;
            } else if (c == '\n') {
                st = S_LINE;
            } else {
                return decide(out, 400, i + 1, 0);
            }
            vpos++;
            break;
        case S_RL_CR:
        case S_VALUE_CR:
            if (c != '\n')
                return decide(out, 400, i + 1, 0);
            st = S_LINE;
            break;
        case S_LINE:
            if (c == '\r') {
                st = S_END_CR;
            } else if (c == '\n') {
                return answer(&rl, i + 1, out);
            } else if (tchar(c)) {
                st = S_NAME;
                nstart = i;
            } else {
                return decide(out, 400, i + 1, 0); /* folding, or junk */
            }
            break;
        case S_NAME:
            if (c == ':') {
                st = S_VALUE;
                in_host = i - nstart == 4 && lower_is(buf + nstart, "host", 4);
                if (in_host && rl.hosts++)
                    return decide(out, 400, i + 1, 0); /* a second Host line */
                hv = hvend = i + 1;
            } else if (!tchar(c)) {
                return decide(out, 400, i + 1, 0);
            }
            break;
        case S_VALUE:
            if (c == '\r' || c == '\n') {
                if (in_host && !authority_ok(buf + hv, hvend - hv, 1))
                    return decide(out, 400, i + 1, 0);
                in_host = 0;
                st = c == '\r' ? S_VALUE_CR : S_LINE;
            } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
                return decide(out, 400, i + 1, 0);
            } else if (c != ' ' && c != '\t') {
                if (hvend == hv) /* the first byte past the leading OWS */
                    hv = i;
                hvend = i + 1;
            }
            break;
        case S_END_CR:
            if (c != '\n')
                return decide(out, 400, i + 1, 0);
            return answer(&rl, i + 1, out);
        }
    }
    if (n == METRICS_REQ_MAX)
        return decide(out, 431, n, 0);
    return METRICS_REQ_MORE;
}
