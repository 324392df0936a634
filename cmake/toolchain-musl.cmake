# Build against musl libc instead of glibc, natively, with the musl-gcc
# wrapper from Debian's musl-tools (the system gcc with musl's headers, start
# files and libc; no kernel headers, which treadle does not include):
#   cmake -S . -B build/musl -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-musl.cmake \
#         -DTDL_MUSL_PREFIX=<prefix holding a musl-built cmocka>
# scripts/test-musl.sh (make test-musl) builds that cmocka and runs ctest.
set(CMAKE_C_COMPILER musl-gcc)
set(CMAKE_ASM_COMPILER musl-gcc)

# pkg-config must find only libraries built against musl: a glibc one (the
# system's libcmocka) would link, then fail at run time.  Without a prefix it
# finds nothing, so a missing cmocka is reported at configure time.
set(TDL_MUSL_PREFIX "" CACHE PATH "Prefix of the libraries built against musl (tests: cmocka)")
# try_compile reads this file again, in the same process: pass it the prefix
# so that it does not reset the environment.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES TDL_MUSL_PREFIX)
if(TDL_MUSL_PREFIX)
  set(ENV{PKG_CONFIG_LIBDIR} "${TDL_MUSL_PREFIX}/lib/pkgconfig")
else()
  set(ENV{PKG_CONFIG_LIBDIR} "")
endif()
set(ENV{PKG_CONFIG_PATH} "")
