# SPDX-License-Identifier: MIT
# Build against musl libc instead of glibc, natively, with the musl-gcc
# wrapper from Debian's musl-tools (the system gcc with musl's headers, start
# files and libc; no kernel headers, which treadle does not include):
#   cmake -S . -B build/musl -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-musl.cmake \
#         -DTDL_MUSL_PREFIX=<prefix holding a musl-built cmocka>
# scripts/test-musl.sh (make test-musl) builds that cmocka and runs ctest.
set(CMAKE_C_COMPILER musl-gcc)
set(CMAKE_ASM_COMPILER musl-gcc)

# Libraries and headers must come from the musl prefix alone: the system's
# are built against glibc, and one found there (liburing, cmocka, libcurl...)
# fails to compile, to link, or at run time.  pkg-config reads the prefix's
# .pc files only, and find_library, find_path and find_package look under the
# prefix only (programs are found anywhere).  Without a prefix they are given
# a directory that does not exist, so that they find nothing: the io_uring
# back end is left out (no liburing), and so are the tests (no cmocka), which
# configure says.  (An empty PKG_CONFIG_LIBDIR would not do: CMake unsets a
# variable set to "", and pkg-config then reads the system's directories.)
set(TDL_MUSL_PREFIX "" CACHE PATH "Prefix of the libraries built against musl (tests: cmocka)")
# try_compile reads this file again, in the same process: pass it the prefix
# so that it does not reset the environment.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES TDL_MUSL_PREFIX)
if(TDL_MUSL_PREFIX)
  set(TDL_MUSL_ROOT "${TDL_MUSL_PREFIX}")
else()
  set(TDL_MUSL_ROOT /nonexistent/treadle-musl-prefix-not-set)
endif()
set(ENV{PKG_CONFIG_LIBDIR} "${TDL_MUSL_ROOT}/lib/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
set(CMAKE_FIND_ROOT_PATH "${TDL_MUSL_ROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
