/* test_bt_exact_pc.c - the frame a signal interrupted is named by its own
 * address, every other frame by the call before its return address
 * (obs/symbols.c frame_text).
 *
 * A backtrace taken in a signal handler (a lingering hog's, a stack
 * overflow's) holds, after the handler's frames and the signal's return
 * trampoline, the exact address the thread was stopped at; the frames
 * below it are return addresses, named by the call just before them
 * (pc - 1). Naming the exact one by pc - 1 too named the function before
 * it whenever the thread stopped at a function's first byte: a spin loop
 * that starts its function (clang's code for test_linger_report_async's
 * hog, where CI's report named the wrong function), a stack overflow that
 * faults on a function's first push. Checked on made-up backtraces through
 * bt_format: in a signal's (bt_cut.signal_pc, from the handler's ucontext)
 * the frame that holds that pc shows +0x0 of the function, wherever it is
 * among the frames, and only that one; a parked task's (no signal_pc)
 * shows a return address one past a function's first byte at +0x1 of it.
 * Skipped (77) without libdw, where a static function has no name. */
#include "util.h" /* first: _GNU_SOURCE */

#include "internal.h"

#include <string.h>

__attribute__((noinline)) int exact_target(int x);
__attribute__((noinline)) int exact_target(int x)
{
    return x * 3 + 1;
}

static void check_has(const char *out, const char *want)
{
    if (!strstr(out, want)) {
        fprintf(stderr, "want \"%s\" in:%s\n", want, out);
        CHECK(0);
    }
}

int main(void)
{
    if (!bt_symbolised()) {
        fprintf(stderr, "skipped: ax built without libdw\n");
        return 77;
    }
    char *fn = (char *)(uintptr_t)exact_target;
    char out[1024];

    /* A signal's capture whose handler cannot be named (fallback frames
     * dropped: here none), the interrupted pc first. */
    void *sig[2] = {fn, fn + 2};
    struct bt_cut at_signal = {NULL, 1, 0, NULL, (uintptr_t)fn};
    out[0] = '\0';
    bt_format(out, sizeof out, sig, 2, &at_signal);
    check_has(out, "\n#0 exact_target+0x0");
    check_has(out, "\n#1 exact_target+0x2"); /* a return address */

    /* The interrupted pc below a frame of the handler's caller (TSan runs
     * the handler later, from a return address of its own): only the
     * frame that holds it is exact; a return address equal to it further
     * down is not. */
    void *late[3] = {fn + 1, fn, fn};
    out[0] = '\0';
    bt_format(out, sizeof out, late, 3, &at_signal);
    check_has(out, "\n#0 exact_target+0x1");
    check_has(out, "\n#1 exact_target+0x0");
    CHECK(strstr(out, "\n#2 exact_target+0x0") == NULL);

    /* The same frames in a parked task's capture: all return addresses. */
    void *parked[1] = {fn + 1};
    struct bt_cut at_park = {NULL, 0, 0, NULL, 0};
    out[0] = '\0';
    bt_format(out, sizeof out, parked, 1, &at_park);
    check_has(out, "\n#0 exact_target+0x1");
    CHECK(!strstr(out, "exact_target+0x0"));
    return exact_target(0) == 1 ? 0 : 1;
}
