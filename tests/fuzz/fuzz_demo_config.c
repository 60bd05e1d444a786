/* fuzz_demo_config.c - ax-demo's --config file syntax (tools/demo/scenario.c)
 * on arbitrary bytes.
 *
 * The file replaces parts of the built-in scenario (first byte: the short or
 * the full one). A refused file must leave the scenario as it was and say
 * why; an accepted one must be one ax-demo can run and print: at least one
 * class, phase and configuration, shares adding up to more than 0, a finite
 * length, phase lookups inside the table, and --print-config's output
 * accepted again as a --config file.
 */
#include "demo.h"
#include "fuzz_memfile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    bool short_mode = data[0] & 1;
    const char *base = data[0] & 2 ? "retry-storm" : "overload"; /* the file edits either */
    data++, size--;
    struct dm_scenario *sc = malloc(sizeof *sc), *before = malloc(sizeof *sc);
    if (!sc || !before) abort();
    memset(sc, 0, sizeof *sc);
    if (dm_scenario_builtin(sc, base, short_mode) != 0) abort();
    memcpy(before, sc, sizeof *sc);
    char err[512] = "";
    int rc = dm_scenario_file(sc, fuzz_memfile(data, size), err, sizeof err);
    if (rc != 0) {
        if (rc != -1 || !err[0] || !memchr(err, '\0', sizeof err)) abort();
        if (memcmp(sc, before, sizeof *sc) != 0) abort(); /* untouched */
    } else {
        if (!sc->ncls || !sc->nph || !sc->nprof) abort();
        if (sc->ncls > DM_MAX_CLASSES || sc->nph > DM_MAX_PHASES || sc->nprof > DM_MAX_PROFILES)
            abort();
        double share = 0, len = dm_scenario_length_ms(sc);
        for (unsigned i = 0; i < sc->ncls; i++)
            share += sc->cls[i].share;
        if (!(share > 0) || !isfinite(len) || !(len >= 0)) abort();
        static const double at[] = {-1, 0, 1, 1e3, 1e6, 1e9, INFINITY};
        for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
            if (dm_phase_at(sc, at[i]) >= sc->nph) abort();
        for (unsigned i = 0; i < sc->nprof; i++)
            if (dm_profile_find(sc, sc->prof[i].name) == NULL) abort();

        /* --print-config, then that text as a --config file */
        char *text = NULL;
        size_t tlen = 0;
        FILE *f = open_memstream(&text, &tlen);
        if (!f) abort();
        dm_scenario_print(sc, f);
        if (fclose(f) != 0) abort();
        struct dm_scenario *again = malloc(sizeof *again);
        if (!again) abort();
        memcpy(again, before, sizeof *again);
        if (dm_scenario_file(again, fuzz_memfile((const uint8_t *)text, tlen), err, sizeof err) !=
            0) {
            fprintf(stderr, "--print-config output refused: %s\n%s", err, text);
            abort();
        }
        free(text);
        free(again);
    }
    free(sc);
    free(before);
    return 0;
}
