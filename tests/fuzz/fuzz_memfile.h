/* fuzz_memfile.h - the fuzz input as a file, for parsers that take a path
 * (ax-upstream --scenario, ax-demo --config): one memfd, rewritten for each
 * input and opened again through /proc/self/fd, so nothing touches the disk
 * and the parser runs unchanged. */
#ifndef AX_FUZZ_MEMFILE_H
#define AX_FUZZ_MEMFILE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* The path of a file holding exactly data[0, size); aborts if it cannot. */
static const char *fuzz_memfile(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("ax-fuzz-input", 0);
        if (fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size)) {
        perror("fuzz input file");
        abort();
    }
    return path;
}

#endif
