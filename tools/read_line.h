/* read_line.h - one bounded line of a tool's config file (ax-demo --config,
 * ax-worker --config, ax-upstream --scenario). */
#ifndef AX_TOOLS_READ_LINE_H
#define AX_TOOLS_READ_LINE_H

#include <stddef.h>
#include <stdio.h>

/* The longest line the tools read, in bytes, its line ending ("\n" or
 * "\r\n") not counted: the same for the last line of a file, which may
 * have none. */
#define TOOL_MAX_LINE 2047
/* The buffer tool_read_line fills: the line, its ending, a NUL. */
#define TOOL_LINE_BUF (TOOL_MAX_LINE + 3)

/* One line of f into buf (TOOL_LINE_BUF bytes), NUL-terminated, its length
 * (its ending and any NUL bytes in it included, so a caller can refuse
 * them) in *len. 1: a line; 0: the end of the file; -1: longer than
 * TOOL_MAX_LINE, of which no more is read; -2: a read error (errno says
 * which). Bounded, unlike getline: a 300 MB line made a tool take 300 MB
 * to say "line too long", and a getline that ran out of memory ended the
 * file there without a word. */
int tool_read_line(FILE *f, char *buf, size_t *len);

#endif
