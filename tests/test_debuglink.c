/* A hog's report names frames of a library whose debug information was
 * split off with objcopy into a file its .gnu_debuglink names (beside it):
 * static functions and lines come from that file. ax looks for debug
 * files on the machine only (no debuginfod: obs/symbols.c), by build id
 * and by debuglink; with the build-id search alone this library's frames
 * were "libaxdl_spin.so+0x1109" (review of a2e21f0). Skips (77) without
 * libdw, where no frame has a line. */
#define _GNU_SOURCE
#include "util.h"

#include "internal.h" /* bt_symbolised */

#include <dlfcn.h>

atomic_int dl_hog_stop;
static atomic_int got;
static char msg[AX_EVENT_MESSAGE_MAX];
static int (*entry)(void);

static void on_event(const ax_event *e, void *arg)
{
    (void)arg;
    if (e->kind == AX_EV_LINGERING && !atomic_load(&got)) {
        snprintf(msg, sizeof msg, "%s", e->message);
        atomic_store(&got, 1);
        atomic_store(&dl_hog_stop, 1);
    }
}

static int hog(ax_task *t, void *arg)
{
    (void)t, (void)arg;
    return entry();
}

int main(void)
{
    if (!bt_symbolised()) {
        fprintf(stderr, "ax built without libdw: skipped\n");
        return 77;
    }
    void *h = dlopen(AX_DEBUGLINK_LIB, RTLD_NOW | RTLD_GLOBAL);
    if (!h)
        fprintf(stderr, "dlopen: %s\n", dlerror());
    CHECK(h != NULL);
    entry = (int (*)(void))dlsym(h, "dl_hog_entry");
    CHECK(entry != NULL);
    ax_config c;
    ax_config_default(&c);
    c.workers = 1;
    c.grace_ms = 20;
    ax_sched *s = test_sched_cfg(&c);
    CHECK_EQ(ax_events_callback(s, on_event, NULL), 0);
    ax_spec sp = {.fn = hog, .timeout_ms = 20};
    CHECK_EQ(ax_submit(s, &sp, NULL), 0);
    CHECK(WAIT_UNTIL(atomic_load(&got), 30000));
    fprintf(stderr, "%s\n", msg);
    CHECK(strstr(msg, "spin_in_library+0x") != NULL);
    CHECK(strstr(msg, "(spin_lib.c:") != NULL);
    ax_free(s);
    return 0;
}
