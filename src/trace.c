/* trace.c - trace ids: the caller's, or one generated from the task id.
 *
 * A generated trace id is "ax-" and the id in 16 hex digits. It is formatted
 * only when somebody reads it (a result, an event, ax_task_trace_id), never
 * on the submit path.
 */
#include "internal.h"

#include <string.h>

/* Hot (every result with a generated trace id): one table lookup per byte;
 * snprintf cost ~100 ns here. Eight digits at a time in a register (each
 * nibble spread to a byte, then '0' and the a-f offset added) was tried:
 * 61 instructions against these 44 (callgrind, bench ax_fullpath). */
static const char hex_pairs[256][2] = {
#define X2(n) {"0123456789abcdef"[(n) >> 4], "0123456789abcdef"[(n)&15]}
#define X16(h)                                                                                 \
    X2(h + 0), X2(h + 1), X2(h + 2), X2(h + 3), X2(h + 4), X2(h + 5), X2(h + 6), X2(h + 7),   \
        X2(h + 8), X2(h + 9), X2(h + 10), X2(h + 11), X2(h + 12), X2(h + 13), X2(h + 14),      \
        X2(h + 15)
    X16(0),   X16(16),  X16(32),  X16(48),  X16(64),  X16(80),  X16(96),  X16(112),
    X16(128), X16(144), X16(160), X16(176), X16(192), X16(208), X16(224), X16(240),
#undef X16
#undef X2
};

void trace_format(const struct job *j, char out[AX_TRACE_ID_MAX])
{
    if (j->has_trace) {
        memcpy(out, j->trace_id, AX_TRACE_ID_MAX);
        return;
    }
    trace_format_id(j->id, out);
}

void trace_format_id(uint64_t id, char out[AX_TRACE_ID_MAX])
{
    memcpy(out, "ax-", 3);
    for (int i = 7; i >= 0; i--, id >>= 8)
        memcpy(out + 3 + 2 * i, hex_pairs[id & 0xff], 2);
    out[19] = 0;
}

