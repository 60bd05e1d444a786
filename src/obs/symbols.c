/* symbols.c - backtraces as text: function, offset, and file:line where the
 * program has debug information (panic and lingering reports).
 *
 * Capturing and naming are apart. A backtrace is captured as raw return
 * addresses with backtrace() -- in ax_panic, in a parked task resumed for
 * the purpose, or in the SIGURG handler of a worker running a hog -- and is
 * named here, later, on an ordinary thread (the worker that reports a panic
 * or a parked task, the watchdog for a hog). Nothing here is called from a
 * signal handler: libdw allocates and takes locks.
 *
 * With libdw (elfutils; Debian libdw-dev) a frame reads
 *     #0 stubborn_spin_loop+0x1c (test_lingering.c:27)
 * from the ELF symbol table (static functions too, no -rdynamic needed) and
 * the DWARF line table. One Dwfl describes the process; it is built on first
 * use from /proc/self/maps and built again once when an address falls in a
 * module loaded since (dlopen). It is not thread-safe: one mutex guards it.
 * Cost: the first report reads the modules' tables (milliseconds); later
 * frames cost microseconds. Reports are rare (a panic, a lingering task).
 *
 * Without libdw, dladdr() names exported functions; any other frame is
 * written "module+0xoffset", which `addr2line -f -e module 0xoffset` turns
 * into a name and a line.
 *
 * A report shows the task's frames only: the frames below the task's own
 * function (ax's coroutine entry) say nothing about the task and are cut.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#ifdef AX_HAVE_LIBDW
#include <elfutils/libdwfl.h>
#include <sys/stat.h>
#endif

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* One frame's text (no newline). *fn_start gets the address of the function
 * the frame is in, 0 when unknown. pc is a return address, so the call
 * instruction (whose line we want) is at pc - 1 -- unless `exact`: the
 * frame a signal interrupted, where pc is the instruction itself. Named by
 * pc - 1, a thread stopped at a function's first byte (a spin loop that
 * starts its function, a stack overflow faulting on its first push) was
 * put in the function before it (test_bt_exact_pc). Which frame that is,
 * is known by its value (the handler's ucontext), not its place: under
 * TSan the handler runs later, from a return address of TSan's, and a
 * sanitizer's backtrace may add a frame of its own (review of eae0da7). */
#ifdef AX_HAVE_LIBDW
static pthread_mutex_t dw_lock = PTHREAD_MUTEX_INITIALIZER;
static Dwfl *dw;
static char *debuginfo_path;
/* The files libdw opens for the modules' tables stay open with the Dwfl,
 * for the process's life: closed on exec, or a program the host runs would
 * inherit them (trial: `system()` after a report, the child had the host's
 * own executable open).
 *
 * Debug information is looked for on this machine only: by build id
 * (/usr/lib/debug/.build-id: Debian's -dbgsym packages), then by the
 * module's .gnu_debuglink name beside it, in its .debug/ and under
 * /usr/lib/debug, its CRC checked -- the standard search's places. The
 * standard search itself ends by asking debuginfod, which would fetch
 * files over the network from a crash report's naming wherever
 * DEBUGINFOD_URLS is set, and even unset starts a libcurl client that
 * keeps two sockets open without close-on-exec for the process's life
 * (trial). A module without such a file is named from its symbol table,
 * without lines. */
static int cloexec(int fd)
{
    if (fd >= 0)
        fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
    return fd;
}

static int find_elf(Dwfl_Module *m, void **user, const char *name, Dwarf_Addr base, char **file,
                    Elf **elf)
{
    return cloexec(dwfl_linux_proc_find_elf(m, user, name, base, file, elf));
}

/* The CRC-32 of a .gnu_debuglink (the IEEE polynomial, reflected, as
 * zlib's) over a whole file; false if it cannot be read. dw_lock held. */
static uint32_t crc_table[256];

static bool file_crc32(int fd, uint32_t *out)
{
    if (!crc_table[1]) {
        for (uint32_t n = 0; n < 256; n++) {
            uint32_t c = n;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            crc_table[n] = c;
        }
    }
    uint32_t c = 0xffffffffu;
    unsigned char buf[16384];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return false;
        if (n == 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            c = crc_table[(c ^ buf[i]) & 0xff] ^ (c >> 8);
    }
    *out = c ^ 0xffffffffu;
    return true;
}

/* Past this, a file named by a debuglink is not read for its CRC: naming
 * holds the symbol tables' lock, which every other report waits for up to
 * 2 s (review: an 8 GB file at the link's place took 68 s). A larger debug
 * file is found by its build id only (Debian's -dbgsym packages). 64 MiB
 * read and summed: ~0.1 s here. */
#define DEBUGLINK_CRC_MAX ((off_t)64 << 20)

/* Whether fd, a candidate for the debug file, is it: a regular file (a
 * FIFO planted at one of the places would block its reader for good: it
 * is opened O_NONBLOCK and refused here) small enough to sum, with the
 * link's CRC. */
static bool debug_file_matches(int fd, GElf_Word crc)
{
    struct stat st;
    uint32_t sum;
    return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= DEBUGLINK_CRC_MAX &&
           file_crc32(fd, &sum) && sum == crc;
}

/* The debuglink search without debuginfod: `link` beside `file`, in its
 * .debug/, and under /usr/lib/debug with file's directory; the first that
 * matches (debug_file_matches). */
static int find_by_debuglink(const char *file, const char *link, GElf_Word crc,
                             char **debug_file)
{
    if (!file || !link || !*link || strchr(link, '/'))
        return -1;
    const char *slash = strrchr(file, '/');
    if (!slash)
        return -1;
    int dirlen = (int)(slash - file);
    static const char *const places[] = {"%.*s/%s", "%.*s/.debug/%s", "/usr/lib/debug%.*s/%s"};
    for (unsigned i = 0; i < sizeof places / sizeof places[0]; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, places[i], dirlen, file, link) >= (int)sizeof path ||
            strcmp(path, file) == 0) /* the module itself: its own debuglink */
            continue;
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
            continue;
        if (debug_file_matches(fd, crc) && lseek(fd, 0, SEEK_SET) == 0 &&
            (*debug_file = strdup(path))) {
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
            return fd;
        }
        close(fd);
    }
    return -1;
}

static int find_debuginfo(Dwfl_Module *m, void **user, const char *name, Dwarf_Addr base,
                          const char *file, const char *link, GElf_Word crc, char **debug_file)
{
    int fd = dwfl_build_id_find_debuginfo(m, user, name, base, file, link, crc, debug_file);
    if (fd < 0)
        fd = find_by_debuglink(file, link, crc, debug_file);
    return cloexec(fd);
}

static const Dwfl_Callbacks dw_callbacks = {
    .find_elf = find_elf,
    .find_debuginfo = find_debuginfo,
    .debuginfo_path = &debuginfo_path,
};

/* In a child of fork(): a naming the parent had in progress left dw_lock
 * held by a thread that is not here, and its Dwfl perhaps half made: the
 * child starts a fresh one (the old one leaked), or every later naming
 * waited for ever (review). */
static void dw_atfork_child(void)
{
    if (pthread_mutex_trylock(&dw_lock) == 0) {
        pthread_mutex_unlock(&dw_lock);
        return;
    }
    pthread_mutex_init(&dw_lock, NULL);
    dw = NULL;
}

/* dw_lock held. */
static bool dw_open(void)
{
    if (dw)
        dwfl_end(dw);
    dw = dwfl_begin(&dw_callbacks);
    if (!dw)
        return false;
    dwfl_report_begin(dw);
    if (dwfl_linux_proc_report(dw, getpid()) != 0 || dwfl_report_end(dw, NULL, NULL) != 0) {
        dwfl_end(dw);
        dw = NULL;
    }
    return dw != NULL;
}

/* The line of `at` found by walking the module's compile units. libdw 0.188
 * finds a unit through .debug_aranges, which clang does not emit unless
 * asked (-gdwarf-aranges): without this, clang-built code has no lines. */
static const char *cu_line(Dwfl_Module *m, Dwarf_Addr at, int *line)
{
    Dwarf_Die *cu = NULL;
    Dwarf_Addr bias;
    while ((cu = dwfl_module_nextcu(m, cu, &bias))) {
        if (dwarf_haspc(cu, at - bias) <= 0)
            continue;
        Dwarf_Line *l = dwarf_getsrc_die(cu, at - bias);
        if (!l || dwarf_lineno(l, line) != 0)
            return NULL;
        return dwarf_linesrc(l, NULL, NULL);
    }
    return NULL;
}

static int frame_text(char *out, size_t cap, uintptr_t pc, bool exact, uintptr_t *fn_start,
                      bool *reopened)
{
    Dwarf_Addr at = exact ? pc : pc - 1;
    Dwfl_Module *m = dw || dw_open() ? dwfl_addrmodule(dw, at) : NULL;
    if (!m && dw && !*reopened) {
        *reopened = true; /* a module loaded since the Dwfl was built? */
        m = dw_open() ? dwfl_addrmodule(dw, at) : NULL;
    }
    *fn_start = 0;
    if (!m)
        return snprintf(out, cap, "%#lx", (unsigned long)pc);
    GElf_Off off = 0;
    GElf_Sym sym;
    const char *name = dwfl_module_addrinfo(m, at, &off, &sym, NULL, NULL, NULL);
    Dwarf_Addr base = 0;
    const char *mod = dwfl_module_info(m, NULL, &base, NULL, NULL, NULL, NULL, NULL);
    int line = 0;
    const char *file = NULL;
    Dwfl_Line *l = dwfl_module_getsrc(m, at);
    if (l)
        file = dwfl_lineinfo(l, NULL, &line, NULL, NULL, NULL);
    else
        file = cu_line(m, at, &line);
    int n;
    if (name) {
        *fn_start = (uintptr_t)(at - off);
        n = snprintf(out, cap, "%s+0x%lx", name, (unsigned long)(pc - (at - off)));
    } else {
        n = snprintf(out, cap, "%s+0x%lx", mod && *mod ? base_name(mod) : "?",
                     (unsigned long)(pc - base));
    }
    if (n >= 0 && (size_t)n < cap && file && line > 0)
        n += snprintf(out + n, cap - (size_t)n, " (%s:%d)", base_name(file), line);
    return n;
}
#else
static int frame_text(char *out, size_t cap, uintptr_t pc, bool exact, uintptr_t *fn_start,
                      bool *reopened)
{
    (void)reopened;
    Dl_info info;
    *fn_start = 0;
    if (!dladdr((void *)(exact ? pc : pc - 1), &info) || !info.dli_fname)
        return snprintf(out, cap, "%#lx", (unsigned long)pc);
    if (info.dli_sname) {
        *fn_start = (uintptr_t)info.dli_saddr;
        return snprintf(out, cap, "%s+0x%lx", info.dli_sname,
                        (unsigned long)(pc - (uintptr_t)info.dli_saddr));
    }
    return snprintf(out, cap, "%s+0x%lx", base_name(info.dli_fname),
                    (unsigned long)(pc - (uintptr_t)info.dli_fbase));
}
#endif

/* Where the frames of interest begin: after the capture point's own frame
 * (found by name, so an extra frame -- a sanitizer's interceptor of
 * backtrace, an uninlined helper -- does not shift it), or after
 * cut->fallback frames when names are unknown. dw_lock held. */
static int first_frame(void *const *bt, int n, const struct bt_cut *cut, bool *reopened)
{
    char scratch[256];
    for (int i = 0; cut->through && i < n && i < 6; i++) {
        uintptr_t fn_start;
        frame_text(scratch, sizeof scratch, (uintptr_t)bt[i], false, &fn_start, reopened);
        if (fn_start && fn_start == (uintptr_t)cut->through)
            return i + 1 + cut->then;
    }
    return cut->fallback;
}

static void format_locked(char *out, size_t cap, void *const *bt, int n, const struct bt_cut *cut)
{
    size_t len = strlen(out);
    bool reopened = false;
    int first = first_frame(bt, n, cut, &reopened);
    bool seen_exact = false;
    for (int i = first, k = 0; i < n && len + 1 < cap; i++, k++) {
        int w = snprintf(out + len, cap - len, "\n#%d ", k);
        if (w < 0 || (size_t)w >= cap - len)
            break;
        len += (size_t)w;
        uintptr_t fn_start;
        bool exact = cut->signal_pc && (uintptr_t)bt[i] == cut->signal_pc && !seen_exact;
        seen_exact |= exact; /* a return address further down may equal it */
        w = frame_text(out + len, cap - len, (uintptr_t)bt[i], exact, &fn_start, &reopened);
        if (w < 0)
            break;
        len += (size_t)w < cap - len ? (size_t)w : cap - len - 1;
        if (cut->task_fn && fn_start == (uintptr_t)cut->task_fn)
            break; /* the task's own function: below it is ax's coroutine entry */
    }
}

uintptr_t bt_signal_pc(const void *uctx)
{
    const ucontext_t *uc = uctx;
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__i386__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_EIP];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.pc;
#else
    (void)uc;
    return 0; /* every frame named as a return address */
#endif
}

uintptr_t bt_signal_sp(const void *uctx)
{
    const ucontext_t *uc = uctx;
    /* Every architecture here must set AX_SIGNAL_SP_KNOWN (internal.h). */
#if defined(__x86_64__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__i386__)
    return (uintptr_t)uc->uc_mcontext.gregs[REG_ESP];
#elif defined(__aarch64__)
    return (uintptr_t)uc->uc_mcontext.sp;
#else
    (void)uc;
    return 0;
#endif
}

void bt_format(char *out, size_t cap, void *const *bt, int n, const struct bt_cut *cut)
{
#ifdef AX_HAVE_LIBDW
    pthread_mutex_lock(&dw_lock);
#endif
    format_locked(out, cap, bt, n, cut);
#ifdef AX_HAVE_LIBDW
    pthread_mutex_unlock(&dw_lock);
#endif
}

void bt_format_raw(char *out, size_t cap, void *const *bt, int n, const struct bt_cut *cut,
                   const char *why)
{
    /* Without names the capture point's frames are dropped by count (as
     * first_frame does when names are unknown): the report starts with the
     * task's frames, not ax's (trial). ax's coroutine entry stays at the
     * end: without names its frames cannot be told apart. */
    int skip = cut && cut->fallback < n ? cut->fallback : 0;
    bt += skip;
    n -= skip;
    size_t len = strlen(out);
    if (len + 1 >= cap)
        return;
    int w = snprintf(out + len, cap - len, " (frames not named: %s)", why);
    for (int k = 0; w >= 0 && k <= n; k++) {
        if ((size_t)w >= cap - len) { /* cut: no part of an address */
            out[len] = 0;
            return;
        }
        len += (size_t)w;
        if (k == n)
            return;
        /* module+offset, as `addr2line -f -e module offset` reads it (an
         * absolute address means nothing to it in a PIE): dladdr takes no
         * lock of ours. */
        Dl_info info;
        uintptr_t pc = (uintptr_t)bt[k];
        if (dladdr((void *)(pc - 1), &info) && info.dli_fname)
            w = snprintf(out + len, cap - len, "\n#%d %s+0x%lx", k, base_name(info.dli_fname),
                         (unsigned long)(pc - (uintptr_t)info.dli_fbase));
        else
            w = snprintf(out + len, cap - len, "\n#%d %p", k, bt[k]);
    }
}

void bt_warm(const void *a, const void *b)
{
#ifdef AX_HAVE_LIBDW
    char scratch[256];
    uintptr_t fn_start;
    bool reopened = false;
    pthread_mutex_lock(&dw_lock);
    /* As a return address one past each: its module's symbol table, and
     * its compile unit's lines, are read as a frame in it would read them. */
    frame_text(scratch, sizeof scratch, (uintptr_t)a + 1, false, &fn_start, &reopened);
    frame_text(scratch, sizeof scratch, (uintptr_t)b + 1, false, &fn_start, &reopened);
    pthread_mutex_unlock(&dw_lock);
#else
    (void)a;
    (void)b;
#endif
}

bool bt_format_within(char *out, size_t cap, void *const *bt, int n, const struct bt_cut *cut,
                      unsigned max_ms)
{
#ifdef AX_HAVE_LIBDW
    /* Tried, not timed-locked: TSan's runtime does not see a timed lock. */
    for (unsigned k = 0; pthread_mutex_trylock(&dw_lock) != 0; k++) {
        if (k >= max_ms)
            return false;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
#else
    (void)max_ms;
#endif
    format_locked(out, cap, bt, n, cut);
#ifdef AX_HAVE_LIBDW
    pthread_mutex_unlock(&dw_lock);
#endif
    return true;
}

void symbols_init(void)
{
#ifdef AX_HAVE_LIBDW
    (void)pthread_atfork(NULL, NULL, dw_atfork_child);
#endif
}

bool bt_symbolised(void)
{
#ifdef AX_HAVE_LIBDW
    return true;
#else
    return false;
#endif
}
