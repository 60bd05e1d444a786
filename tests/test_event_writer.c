/* test_event_writer.c - the JSON events writer's own parts, exactly: the
 * line it makes of an event, its string escaping, and the merge that puts
 * a batch (one time-ordered run per ring) into time order.
 *
 * The writer's functions are static in src/obs/events.c, so this file
 * includes it: the library's copy of events.c is then not linked in (every
 * symbol it defines is defined here first). Nothing here starts a
 * scheduler; time and records are made up. */
#define _GNU_SOURCE
#include "check.h"

#include "../src/obs/events.c"

/* ---- lines ----------------------------------------------------------------- */

static struct ev_state *writer(void)
{
    struct ev_state *st = ev_zalloc(sizeof *st); /* cache-line aligned */
    CHECK(st != NULL);
    st->ts_sec = (time_t)-1;
    pieces_init(st);
    return st;
}

static void expect_line(struct ev_state *st, const struct ev_line *l, const char *want)
{
    struct out o = {st->out, 0, st->out_cap};
    put_event(st, &o, l);
    if (o.len != strlen(want) || memcmp(o.p, want, o.len) != 0) {
        fprintf(stderr, "got:  %.*s\nwant: %s\n", (int)o.len, o.p, want);
        CHECK(0);
    }
}

static void test_lines(void)
{
    struct ev_state *st = writer();
    /* 2026-11-30T10:38:24.608706Z, as ns since the epoch */
    uint64_t t = 1796035104608706123ull;
    struct ev_line l = {.time_ns = t,
                        .id = 16777216,
                        .kind = AX_EV_SUBMITTED,
                        .prio = AX_PRIO_NORMAL,
                        .trace = "with \"quote\" and \\ back",
                        .msg = ""};
    l.tlen = strlen(l.trace);
    expect_line(st, &l,
                "{\"ts\":\"2026-11-30T10:38:24.608706Z\",\"event\":\"submitted\",\"id\":16777216,"
                "\"trace_id\":\"with \\\"quote\\\" and \\\\ back\",\"priority\":\"normal\","
                "\"attempt\":0,\"wait_us\":0.000,\"run_us\":0.000,\"code\":0,\"message\":\"\"}\n");

    /* A generated trace id (trace NULL), an ax code with its text, a
     * message with every kind of escape and a byte that is not UTF-8. */
    static const char msg[] = "a\"b\\c\nd\re\tf\x01g\x7f\xc3\xa9\xff!";
    l = (struct ev_line){.time_ns = t + 1000,
                         .id = 0x12345678abcull,
                         .wait_ns = 731762,
                         .run_ns = 922,
                         .code = AX_ETIMEDOUT,
                         .attempt = 3,
                         .kind = AX_EV_FAILED,
                         .prio = AX_PRIO_HIGH,
                         .trace = NULL,
                         .msg = msg,
                         .msglen = sizeof msg - 1};
    expect_line(st, &l,
                "{\"ts\":\"2026-11-30T10:38:24.608707Z\",\"event\":\"failed\",\"id\":1250999896764,"
                "\"trace_id\":\"ax-0000012345678abc\",\"priority\":\"high\",\"attempt\":3,"
                "\"wait_us\":731.762,\"run_us\":0.922,\"code\":-7,\"error\":\"timed out\","
                "\"message\":\"a\\\"b\\\\c\\nd\\re\\tf\\u0001g\x7f\xc3\xa9\\ufffd!\"}\n");

    /* A task's own code (not an AX_E*): "task returned N"; the extremes of
     * every number; a kind and a priority out of range. */
    l = (struct ev_line){.time_ns = t,
                         .id = UINT64_MAX,
                         .wait_ns = UINT64_MAX,
                         .run_ns = 999,
                         .code = INT32_MIN,
                         .attempt = UINT32_MAX,
                         .kind = AX_EV_COUNT + 5,
                         .prio = AX_PRIO_COUNT + 1,
                         .trace = "-",
                         .msg = "",
                         .tlen = 1};
    expect_line(st, &l,
                "{\"ts\":\"2026-11-30T10:38:24.608706Z\",\"event\":\"invalid\","
                "\"id\":18446744073709551615,\"trace_id\":\"-\",\"priority\":\"invalid\","
                "\"attempt\":4294967295,\"wait_us\":18446744073709551.615,\"run_us\":0.999,"
                "\"code\":-2147483648,\"error\":\"task returned -2147483648\",\"message\":\"\"}\n");

    /* The cached date prefix follows the second; a task's class comes
     * after its trace id. */
    l = (struct ev_line){.time_ns = t + 2000000000ull,
                         .id = 9,
                         .wait_ns = 1000,
                         .run_ns = 10,
                         .code = 42,
                         .attempt = 1,
                         .kind = AX_EV_RETRY_SCHEDULED,
                         .prio = AX_PRIO_LOW,
                         .trace = "t",
                         .msg = "m",
                         .tlen = 1,
                         .msglen = 1,
                         .cls = "pay\"ments",
                         .clen = 9};
    expect_line(st, &l,
                "{\"ts\":\"2026-11-30T10:38:26.608706Z\",\"event\":\"retry_scheduled\",\"id\":9,"
                "\"trace_id\":\"t\",\"class\":\"pay\\\"ments\",\"priority\":\"low\",\"attempt\":1,"
                "\"wait_us\":1.000,\"run_us\":0.010,\"code\":42,\"error\":\"task returned 42\","
                "\"message\":\"m\"}\n");
    free(st->out);
    ev_zfree(st, sizeof *st);
}

/* ---- string escaping ------------------------------------------------------ */

/* The rules, byte by byte: '"' and '\' escaped, \n \r \t by name, other
 * bytes below 0x20 as \u00xx, a valid UTF-8 character as it is, any other
 * byte from 0x80 as \ufffd. */
static size_t ref_str(const char *s, size_t n, char *out)
{
    size_t k = 0;
    out[k++] = '"';
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            size_t len = utf8_char_len((const unsigned char *)s + i, n - i);
            if (len) {
                memcpy(out + k, s + i, len);
                k += len;
                i += len;
            } else {
                memcpy(out + k, "\\ufffd", 6);
                k += 6;
                i++;
            }
            continue;
        }
        if (c == '"' || c == '\\') {
            out[k++] = '\\';
            out[k++] = (char)c;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            out[k++] = '\\';
            out[k++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        } else if (c < 0x20) {
            k += (size_t)sprintf(out + k, "\\u%04x", c);
        } else {
            out[k++] = (char)c;
        }
        i++;
    }
    out[k++] = '"';
    return k;
}

static void test_strings(void)
{
    static const unsigned char pool[] = {'a',  '"',  '\\', '\n', '\t', '\r', 0x01, 0x1f, 0x7f,
                                         0x80, 0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x9a,
                                         0x80, 0xff, 0xed, 0xa0, ' ',  '/',  'z'};
    static char in[600], got[4000], want[4000];
    uint64_t r = 88172645463325252ull;
    for (int it = 0; it < 300000; it++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        size_t n = it % 100 == 0 ? r % 520 : r % 40;
        for (size_t i = 0; i < n; i++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            /* mostly printable ASCII, the runs the fast path takes */
            in[i] = r % 3 == 0 ? (char)pool[(r >> 8) % sizeof pool] : (char)(' ' + (r >> 16) % 95);
        }
        size_t k = ref_str(in, n, want);
        size_t g = (size_t)(w_str(got, in, n) - got);
        if (g != k || memcmp(got, want, k) != 0) {
            fprintf(stderr, "input of %zu bytes: got %.*s\nwant %.*s\n", n, (int)g, got, (int)k,
                    want);
            CHECK(0);
        }
    }
}

/* ---- merging a batch ------------------------------------------------------ */

static void test_merge(void)
{
    struct ev_state *st = ev_zalloc(sizeof *st); /* cache-line aligned, zeroed */
    CHECK(st != NULL);
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int it = 0; it < 3000; it++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        unsigned nruns = 1 + (unsigned)(r % 9), n = 0, bound[12];
        unsigned len[10];
        for (unsigned k = 0; k < nruns; k++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            len[k] = (unsigned)(r % 4 == 0 ? 0 : r % 300);
        }
        for (unsigned k = 0; k < nruns; k++) {
            bound[k] = n;
            CHECK(batch_room(st, n + len[k] + 1));
            uint64_t t = r % 50;
            for (unsigned i = 0; i < len[k]; i++, n++) {
                r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                t += r % 4; /* sorted within the run, with ties */
                /* rec doubles as a tag: run k, position i */
                st->batch[n] =
                    (struct ev_item){t, (const struct ev_rec *)(uintptr_t)(k << 16 | i), NULL, k};
            }
        }
        bound[nruns] = n;
        struct ev_item *out = order_batch(st, n, bound, nruns);
        for (unsigned i = 1; i < n; i++) {
            CHECK(out[i - 1].time_ns <= out[i].time_ns);
            if (out[i - 1].time_ns == out[i].time_ns) /* stable: ring, then position */
                CHECK((uintptr_t)out[i - 1].rec < (uintptr_t)out[i].rec);
        }
        /* a permutation: every tag once */
        unsigned seen[10] = {0};
        for (unsigned i = 0; i < n; i++) {
            uintptr_t tag = (uintptr_t)out[i].rec;
            unsigned k = (unsigned)(tag >> 16), pos = (unsigned)(tag & 0xffff);
            CHECK(k < nruns);
            CHECK_EQ(pos, seen[k]); /* each run's own order kept */
            seen[k]++;
        }
        for (unsigned k = 0; k < nruns; k++)
            CHECK_EQ(seen[k], len[k]);
    }
    free(st->batch);
    free(st->scratch);
    ev_zfree(st, sizeof *st);
}

int main(void)
{
    test_lines();
    test_strings();
    test_merge();
    return 0;
}
