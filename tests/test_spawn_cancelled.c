/* ax_spawn from a parent whose attempt was cancelled admits and
 * runs the child. Every other call of a cancelled attempt returns
 * AX_ECANCELED, and a parent past its deadline gets AX_ETIMEDOUT from
 * ax_spawn ("work the parent can no longer use is not started on its
 * behalf", src/submit.c); a cancelled parent should get AX_ECANCELED and
 * start nothing. ax_join of an id that is not its child gets AX_ECANCELED
 * too, not AX_ENOTFOUND. */
#include "util.h"

static atomic_int parked, fin, child_ran;
static atomic_int spawn_rc = 99, join_rc = 99;

static int child(ax_task *t, void *arg)
{
    (void)t;
    (void)arg;
    atomic_store(&child_ran, 1);
    return 0;
}

static int parent(ax_task *t, void *arg)
{
    (void)arg;
    atomic_store(&parked, 1);
    int rc = ax_sleep(t, 100000);
    CHECK_EQ(rc, AX_ECANCELED);
    ax_spec c = {.fn = child, .timeout_ms = 1000};
    uint64_t id;
    atomic_store(&spawn_rc, ax_spawn(t, &c, &id)); /* e.g. a cleanup path that fans out */
    /* ax_join too, for an id that is no child of this task: the cancel's
     * code, as every blocking call of an ended attempt (a review: it was
     * AX_ENOTFOUND, the lookup came before the check). */
    ax_result r;
    atomic_store(&join_rc, ax_join(t, 999999, -1, &r));
    atomic_store(&fin, 1);
    return rc;
}

int main(void)
{
    ax_sched *s = test_sched(1, 16);
    ax_spec sp = {.fn = parent, .timeout_ms = 60000};
    uint64_t id;
    CHECK_EQ(ax_submit(s, &sp, &id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&parked), 60000));
    usleep(20000);
    CHECK_EQ(ax_cancel(s, id), 0);
    CHECK(WAIT_UNTIL(atomic_load(&fin), 60000));
    CHECK(ax_shutdown(s, 2000) == 0);
    fprintf(stderr, "ax_spawn after cancel: %d (%s); child ran: %d\n", atomic_load(&spawn_rc),
            ax_strerror(atomic_load(&spawn_rc)), atomic_load(&child_ran));
    CHECK_EQ(atomic_load(&spawn_rc), AX_ECANCELED);
    CHECK_EQ(atomic_load(&join_rc), AX_ECANCELED);
    CHECK_EQ(atomic_load(&child_ran), 0);
    ax_free(s);
    return 0;
}
