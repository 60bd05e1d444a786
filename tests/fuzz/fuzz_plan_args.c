/* fuzz_plan_args.c - ax-plan's command line (tools/ax-plan.c) from arbitrary
 * bytes: the input split at newlines into argv[1..], at most 32.
 *
 * ax-plan.c is included whole (its parser is static) without its main(). A
 * command line is either --help, refused with a message (main prints it and
 * exits 2), or a plan that prints as text and as JSON without fault.
 */
#define AX_PLAN_NO_MAIN
#include "../../tools/ax-plan.c"

#include <stdint.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (!freopen("/dev/null", "w", stdout)) abort(); /* the plans printed */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { MAXARGS = 32 };
    char *text = malloc(size + 1);
    if (!text) abort();
    memcpy(text, data, size);
    text[size] = '\0';
    char *argv[MAXARGS + 2];
    int argc = 0;
    argv[argc++] = "ax-plan";
    for (char *p = text; argc <= MAXARGS;) {
        argv[argc++] = p;
        p += strcspn(p, "\n");
        if (p >= text + size) break;
        *p++ = '\0';
    }
    /* NULs inside the input end an argument early, as execve would */
    argv[argc] = NULL;

    ax_config def;
    ax_config_default(&def);
    struct inputs in;
    memset(&in, 0, sizeof in);
    in.stack_bytes = (double)def.stack_size;
    bad_args[0] = '\0';
    int rc = parse_args(argc, argv, &in);
    struct plan p;
    if (rc == 0) rc = make_plan(&in, &def, &p);
    if (rc == -1) {
        if (!bad_args[0]) abort(); /* a refusal says why */
    } else if (rc == 0) {
        if (!(in.qps > 0) || !(in.mean_ms > 0) || !(p.max_concurrency >= 1) ||
            !(p.cap_total >= 3) || !(p.mem_total >= 0))
            abort();
        print_text(&in, &p);
        print_json(&in, &p);
    } else if (rc != 1) {
        abort();
    }
    free(text);
    return 0;
}
