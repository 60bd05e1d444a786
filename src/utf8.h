/* utf8.h - strict UTF-8 (RFC 3629): what a trace id must be, and what the
 * JSON events writer lets through unescaped.
 *
 * Strict means what Python's and Go's decoders accept: no overlong forms, no
 * surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no truncated
 * sequence. O(1) per character, no tables.
 */
#ifndef AX_UTF8_H
#define AX_UTF8_H

#include <stddef.h>

/* Length (1..4) of the valid character at p, of at most n bytes; 0 when
 * the bytes there are not one. */
static inline size_t utf8_char_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* overlong */
        else if (c == 0xed)
            hi = 0x9f; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90; /* overlong */
        else if (c == 0xf4)
            hi = 0x8f; /* above U+10FFFF */
    } else {
        return 0; /* a continuation byte, 0xc0/0xc1 (overlong) or 0xf5.. */
    }
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    return len;
}

/* The length, at most n, that s[0..n) keeps when a cut at n would split
 * the character before it: that character's bytes go, not half of them
 * (a text cut to a buffer's size stays valid UTF-8 if it was). Bytes that
 * are not UTF-8 anyway are left as they are. */
static inline size_t utf8_cut(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = n; /* back over the continuation bytes at the end, 3 at most */
    while (i > 0 && n - i < 3 && (p[i - 1] & 0xc0) == 0x80)
        i--;
    if (i == 0)
        return n;
    unsigned char c = p[i - 1];
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    return len > n - (i - 1) ? i - 1 : n;
}

/* Offset of the first byte of s[0..n) that does not begin a valid
 * character, or n when all of it is valid UTF-8. */
static inline size_t utf8_invalid_at(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_char_len(p + i, n - i);
        if (!k)
            return i;
        i += k;
    }
    return n;
}

#endif
