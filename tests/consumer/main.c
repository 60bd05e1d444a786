#define _DEFAULT_SOURCE /* usleep */
/* Built against an installed ax by scripts/test: the header, the library
 * and its dependencies must all be found through the package files. */
#include <ax.h>
#include <stdio.h>
#include <unistd.h>

static int hello(ax_task *t, void *arg)
{
    (void)arg;
    return ax_sleep(t, 1);
}

int main(void)
{
    ax_config c;
    ax_config_default(&c);
    ax_sched *s;
    if (ax_new(&c, &s) != AX_OK)
        return 1;
    ax_spec sp = {.fn = hello, .timeout_ms = 1000};
    if (ax_submit(s, &sp, NULL) != AX_OK)
        return 1;
    ax_stats st;
    for (int i = 0; i < 2000; i++) {
        ax_stats_get(s, &st);
        if (st.succeeded == 1)
            break;
        usleep(1000);
    }
    ax_free(s);
    printf("consumer: %s\n", st.succeeded == 1 ? "ok" : "FAILED");
    return st.succeeded == 1 ? 0 : 1;
}
