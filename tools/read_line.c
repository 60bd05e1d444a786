/* read_line.c - one bounded line of a tool's config file (read_line.h). */
#include "read_line.h"

int tool_read_line(FILE *f, char *buf, size_t *len)
{
    size_t n = 0;
    int c = 0;
    /* Up to the line and a "\r\n": with no '\n' among TOOL_MAX_LINE + 2
     * bytes, the line is longer than TOOL_MAX_LINE whatever they are. */
    while ((c = getc(f)) != EOF) {
        if (n == TOOL_MAX_LINE + 2) return -1;
        buf[n++] = (char)c;
        if (c == '\n') break;
    }
    if (c == EOF && ferror(f)) return -2;
    if (c == EOF && n == 0) return 0;
    size_t body = n;
    if (body && buf[body - 1] == '\n') {
        body--;
        if (body && buf[body - 1] == '\r') body--;
    }
    if (body > TOOL_MAX_LINE) return -1;
    buf[n] = 0;
    *len = n;
    return 1;
}
