/* Every event line is valid JSON in valid UTF-8, whatever bytes reach it
 * (a strict decoder, like Python's json.loads(line.decode("utf-8")),
 * rejects the whole line otherwise):
 *  - a trace id that is not UTF-8 is refused at submit with AX_EINVAL and
 *    the offset of the first bad byte (a trace id is a key: never altered);
 *  - error and panic texts from task code are written with every byte that
 *    does not begin a valid character replaced by \ufffd, short and long
 *    messages alike, and valid UTF-8 passes through unchanged. */
#include "util.h"

#include <string.h>

/* ---- a strict validator: RFC 3629 UTF-8, RFC 8259 JSON ------------------ */

static bool utf8_strict(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = p[i], len, min;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xe0) == 0xc0)
            len = 2, min = 0x80, c &= 0x1f;
        else if ((c & 0xf0) == 0xe0)
            len = 3, min = 0x800, c &= 0x0f;
        else if ((c & 0xf8) == 0xf0)
            len = 4, min = 0x10000, c &= 0x07;
        else
            return false;
        if (i + len > n)
            return false;
        for (unsigned k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                return false;
            c = c << 6 | (p[i + k] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

static const char *json_value(const char *p);

static const char *json_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

static const char *json_string(const char *p)
{
    if (*p++ != '"')
        return NULL;
    for (;;) {
        unsigned char c = (unsigned char)*p++;
        if (c == '"')
            return p;
        if (c < 0x20)
            return NULL; /* raw control characters, and the end of the text */
        if (c != '\\')
            continue;
        c = (unsigned char)*p++;
        if (c == 'u') {
            for (int i = 0; i < 4; i++, p++)
                if (!strchr("0123456789abcdefABCDEF", *p) || !*p)
                    return NULL;
        } else if (!c || !strchr("\"\\/bfnrt", c)) {
            return NULL;
        }
    }
}

static const char *json_number(const char *p)
{
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (*p >= '0' && *p <= '9')
            p++;
    else
        return NULL;
    if (*p == '.') {
        if (!(*++p >= '0' && *p <= '9'))
            return NULL;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return p;
}

static const char *json_value(const char *p)
{
    p = json_ws(p);
    if (*p == '"')
        return json_string(p);
    if (*p == '{') {
        p = json_ws(p + 1);
        if (*p == '}')
            return p + 1;
        for (;;) {
            if (!(p = json_string(json_ws(p))))
                return NULL;
            p = json_ws(p);
            if (*p++ != ':' || !(p = json_value(p)))
                return NULL;
            p = json_ws(p);
            if (*p == '}')
                return p + 1;
            if (*p++ != ',')
                return NULL;
        }
    }
    if (!strncmp(p, "true", 4) || !strncmp(p, "null", 4))
        return p + 4;
    if (!strncmp(p, "false", 5))
        return p + 5;
    return json_number(p);
}

/* One line, with its newline: a whole JSON object and nothing else. */
static bool json_line(const char *line, size_t n)
{
    if (n == 0 || line[n - 1] != '\n' || memchr(line, 0, n) || !utf8_strict((const void *)line, n))
        return false;
    const char *end = json_value(line);
    return end && line[0] == '{' && json_ws(end) == line + n;
}

static bool json_text(const char *line)
{
    return json_line(line, strlen(line));
}

/* ---- the run -------------------------------------------------------------- */

/* Bytes no strict decoder takes: a stray continuation byte, 0xff, an overlong
 * '/', a surrogate half, a sequence cut short; and a quote, a backslash and a
 * control character for the JSON escapes. */
#define ODD "bad:\x80|\xff|\xc0\xaf|\xed\xa0\x80|\xe2\x82|\"\\\x01|ok:\xc3\xa9\xf0\x9f\x9a\x80"

static int fail_odd(ax_task *t, void *arg)
{
    (void)arg;
    ax_task_set_error(t, "%s", ODD);
    return 1;
}

static int panic_odd(ax_task *t, void *arg)
{
    (void)arg;
    ax_panic(t, "%s", ODD); /* with its backtrace: the long-message path */
    return 0;
}

/* Two-byte characters after two ASCII bytes: the 128-byte error buffer
 * keeps 127 bytes, which would cut the last character in half: the cut
 * falls before it instead, so the text stays valid UTF-8 for on_done's
 * ax_result.error as for the event (before, the event showed the half
 * character as \ufffd and r->error ended in a lone lead byte: a new
 * user's trial). */
static int fail_cut(ax_task *t, void *arg)
{
    (void)arg;
    char text[AX_ERROR_MAX + 8] = "xy";
    for (size_t i = 2; i + 2 < sizeof text; i += 2)
        memcpy(text + i, "\xc3\xa9", 3);
    ax_task_set_error(t, "%s", text);
    return 2;
}

/* fail_cut's on_done: its error is the 62 whole characters that fit. */
static atomic_int cut_error_ok;
static void cut_done(const ax_result *r, void *arg)
{
    (void)arg;
    size_t n = strlen(r->error);
    if (utf8_strict((const unsigned char *)r->error, n) && n == 2 + 62 * 2 &&
        strncmp(r->error, "xy\xc3\xa9", 4) == 0)
        atomic_store(&cut_error_ok, 1);
    else
        fprintf(stderr, "fail_cut's error: %zu bytes, last 0x%02x\n", n,
                n ? (unsigned char)r->error[n - 1] : 0);
}

static int count_lines(FILE *f)
{
    fflush(f);
    rewind(f);
    int n = 0, c;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fseek(f, 0, SEEK_END);
    return n;
}

static void refuse(ax_sched *s, const char *trace, const char *detail)
{
    ax_spec sp = {.fn = fail_odd, .timeout_ms = 1000, .trace_id = trace};
    CHECK_EQ(ax_submit(s, &sp, NULL), AX_EINVAL);
    if (!strstr(ax_error_detail(), detail)) {
        fprintf(stderr, "detail: %s (want %s)\n", ax_error_detail(), detail);
        CHECK(0);
    }
}

int main(void)
{
    /* The validator itself: it must refuse what the old writer produced. */
    CHECK(json_text("{\"a\":\"\xc3\xa9\",\"b\":-1.500}\n"));
    CHECK(!json_text("{\"a\":\"\xff\"}\n"));
    CHECK(!json_text("{\"a\":\"\xed\xa0\x80\"}\n"));
    CHECK(!json_text("{\"a\":\"\x01\"}\n"));
    CHECK(!json_text("{\"a\":1}x\n"));

    ax_sched *s = test_sched(2, 8);
    FILE *json = tmpfile();
    CHECK(json != NULL);
    CHECK_EQ(ax_events_json(s, json), 0);

    refuse(s, "ab\xff" "cd", "not valid UTF-8 (byte 2: 0xff)");
    refuse(s, "\xc0\xaf", "(byte 0: 0xc0)");          /* overlong */
    refuse(s, "id-\xed\xa0\x80", "(byte 3: 0xed)");   /* surrogate */
    refuse(s, "cut-\xe2\x82", "(byte 4: 0xe2)");      /* truncated */
    refuse(s, "x\xf4\x90\x80\x80", "(byte 1: 0xf4)"); /* above U+10FFFF */
    /* An out-of-range priority is reported "invalid", not NORMAL (user
     * trial: 77 was written "normal"). */
    ax_spec bad = {.fn = fail_odd, .timeout_ms = 1000, .priority = (ax_priority)77};
    CHECK_EQ(ax_submit(s, &bad, NULL), AX_EINVAL);

    /* Valid UTF-8 is accepted and written as it is. */
    const char *fine = "ordre-\xc3\xa9-\xf0\x9f\x9a\x80";
    ax_spec sp = {.fn = fail_odd, .timeout_ms = 1000, .trace_id = fine};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    sp.fn = panic_odd;
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    sp.fn = fail_cut;
    sp.on_done = cut_done;
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    sp.on_done = NULL;
    CHECK(WAIT_UNTIL(test_stats(s).failed == 3, 5000));
    /* The counters move before the last task's "failed" event is emitted
     * (a busy machine can hold its worker in between): wait for the lines
     * themselves (6 refusals; 3 tasks x (submitted, started, failed); 1
     * panic). */
    CHECK(WAIT_UNTIL(ax_events_flush(s) == 0 && count_lines(json) >= 6 + 3 * 3 + 1, 10000));

    rewind(json);
    char line[8192];
    int lines = 0, rejected = 0, odd = 0, cut = 0, fine_ids = 0, invalid = 0;
    while (fgets(line, sizeof line, json)) {
        size_t n = strlen(line);
        if (!json_line(line, n)) {
            fprintf(stderr, "not strict JSON in UTF-8: %s", line);
            CHECK(0);
        }
        lines++;
        rejected += strstr(line, "\"event\":\"rejected\"") != NULL;
        invalid += strstr(line, "\"priority\":\"invalid\"") != NULL;
        fine_ids += strstr(line, "\"trace_id\":\"ordre-\xc3\xa9-\xf0\x9f\x9a\x80\"") != NULL;
        /* Each bad byte is one U+FFFD; the rest is escaped or passes. */
        if (strstr(line, "bad:\\ufffd|\\ufffd|\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd|\\ufffd\\ufffd|"
                         "\\\"\\\\\\u0001|ok:\xc3\xa9\xf0\x9f\x9a\x80"))
            odd++;
        if (strstr(line, "\"message\":\"xy\xc3\xa9") && strstr(line, "\xc3\xa9\"}"))
            cut++;
        CHECK(!strstr(line, "\xc3\xa9\\ufffd\"")); /* no half character */
    }
    /* 6 refusals; 3 tasks x (submitted, started, failed); 1 panic. */
    CHECK_EQ(rejected, 6);
    CHECK_EQ(invalid, 1);
    CHECK_EQ(lines, 6 + 3 * 3 + 1);
    CHECK_EQ(fine_ids, 3 * 3 + 1);
    CHECK_EQ(odd, 3); /* fail_odd's failed; panic_odd's panic and failed */
    CHECK_EQ(cut, 1);
    CHECK_EQ(atomic_load(&cut_error_ok), 1);
    ax_free(s);
    fclose(json);
    return 0;
}
