# Cross-build for 64-bit Arm Linux with Debian's cross toolchain
# (gcc-aarch64-linux-gnu), running the tests under qemu-user:
#   cmake -S . -B build/aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake
# .ci/aarch64.sh installs what this needs and runs ctest.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(TDL_CROSS_TRIPLET aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${TDL_CROSS_TRIPLET}-gcc)
set(CMAKE_ASM_COMPILER ${TDL_CROSS_TRIPLET}-gcc)

# Target libraries come from two places on Debian: the cross toolchain's own
# sysroot (libc6-dev-arm64-cross) and multiarch packages such as
# libcmocka-dev:arm64 under /usr/lib/aarch64-linux-gnu.
set(CMAKE_FIND_ROOT_PATH /usr/${TDL_CROSS_TRIPLET} /usr/lib/${TDL_CROSS_TRIPLET})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config must describe arm64 packages, not the build machine's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${TDL_CROSS_TRIPLET}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# Multiarch libraries (and what they depend on) live outside the cross
# sysroot: let the linker and the emulated loader find them there.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,/usr/lib/${TDL_CROSS_TRIPLET} -Wl,-rpath-link,/lib/${TDL_CROSS_TRIPLET}")
# -L: the emulated loader and libc come from the cross sysroot, the ones the
# tests were linked against.  The sysroot's library directory must also come
# first at run time: libcmocka-dev:arm64 pulls in multiarch libc6:arm64, a
# different Debian revision whose libc.so.6 the loader would otherwise pick
# from /lib/aarch64-linux-gnu; mixing the two made every fork()ed child spin
# forever inside libc under qemu 7.2.
# TDL_QEMU_USER=1 lets a test skip what qemu-user does not emulate (it keeps
# RLIMIT_AS to itself; exec of /proc/self/exe runs qemu, not the test).
set(CMAKE_CROSSCOMPILING_EMULATOR
  qemu-aarch64;-L;/usr/${TDL_CROSS_TRIPLET};-E;LD_LIBRARY_PATH=/usr/${TDL_CROSS_TRIPLET}/lib;-E;TDL_QEMU_USER=1)
