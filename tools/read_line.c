/* read_line.c - one bounded line of a tool's config file (read_line.h). */
#include "read_line.h"

int tool_read_line(FILE *f, char *buf, size_t *len)
{
    size_t n = 0;
    int c = 0;
    while ((c = getc(f)) != EOF) {
        if (n == TOOL_MAX_LINE) return -1;
        buf[n++] = (char)c;
        if (c == '\n') break;
    }
    if (c == EOF && ferror(f)) return -2;
    if (c == EOF && n == 0) return 0;
    buf[n] = 0;
    *len = n;
    return 1;
}
