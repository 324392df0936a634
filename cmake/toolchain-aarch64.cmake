# SPDX-License-Identifier: MIT
# Cross-build for 64-bit Arm Linux with Debian's cross toolchain
# (gcc-aarch64-linux-gnu), running the tests under qemu-user:
#   cmake -S . -B build/aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake
# .ci/aarch64.sh installs what this needs and runs ctest.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(TDL_CROSS_TRIPLET aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${TDL_CROSS_TRIPLET}-gcc)
set(CMAKE_ASM_COMPILER ${TDL_CROSS_TRIPLET}-gcc)

# Target libraries come from two places: the cross toolchain's own sysroot
# (libc6-dev-arm64-cross) and a private one holding cmocka's arm64 packages
# unpacked (.ci/aarch64.sh makes it; TDL_AARCH64_DEPS names another).
if(DEFINED ENV{TDL_AARCH64_DEPS})
  set(TDL_AARCH64_DEPS $ENV{TDL_AARCH64_DEPS})
else()
  get_filename_component(TDL_AARCH64_DEPS ${CMAKE_CURRENT_LIST_DIR}/../build/aarch64-deps ABSOLUTE)
endif()
set(TDL_AARCH64_LIBS ${TDL_AARCH64_DEPS}/usr/lib/${TDL_CROSS_TRIPLET})
set(CMAKE_FIND_ROOT_PATH /usr/${TDL_CROSS_TRIPLET} ${TDL_AARCH64_DEPS})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config must describe arm64 packages, not the build machine's: only the
# private sysroot's, its paths prefixed with where it lies.
set(ENV{PKG_CONFIG_LIBDIR} ${TDL_AARCH64_LIBS}/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
set(ENV{PKG_CONFIG_SYSROOT_DIR} ${TDL_AARCH64_DEPS})

# -L: the emulated loader and libc come from the cross sysroot, the ones the
# tests were linked against; libcmocka.so.0 from the private sysroot.
# TDL_QEMU_USER=1 lets a test skip what qemu-user does not emulate (it keeps
# RLIMIT_AS to itself; exec of /proc/self/exe runs qemu, not the test;
# threads started in the child of a multi-threaded fork trip its asserts).
set(CMAKE_CROSSCOMPILING_EMULATOR
  qemu-aarch64;-L;/usr/${TDL_CROSS_TRIPLET};-E;LD_LIBRARY_PATH=/usr/${TDL_CROSS_TRIPLET}/lib:${TDL_AARCH64_LIBS};-E;TDL_QEMU_USER=1)
