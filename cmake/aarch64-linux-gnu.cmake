# Cross-compile for 64-bit ARM Linux with Debian's gcc-aarch64-linux-gnu, and
# run the tests under qemu-aarch64 (Debian: qemu-user), which CTest prefixes
# to each test command. scripts/test uses it:
#   cmake -S . -B build/aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_ASM_COMPILER aarch64-linux-gnu-gcc)
set(AX_AARCH64_SYSROOT /usr/aarch64-linux-gnu) # libc6-dev-arm64-cross
set(CMAKE_FIND_ROOT_PATH ${AX_AARCH64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# -L: where qemu finds the ARM dynamic loader and libc.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L ${AX_AARCH64_SYSROOT})
# pkg-config looks only at ARM packages (so the host's libcurl is not taken
# for the target's: without an arm64 libcurl, libax_http is not built).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:${AX_AARCH64_SYSROOT}/lib/pkgconfig")
