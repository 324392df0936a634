# SPDX-License-Identifier: MIT
# Man pages, generated from the public headers' comments (the one source) by
# scripts/gen-man.py into the build tree: a page per function or family in
# man3 (with a .so page for each other function it covers, so that `man
# tdl_write` works), a page per header in man7, the cookbook's page, and
# treadle-migrate(7) from CHANGELOG.md's table "Migrating from the API before
# 1.0" (scripts/gen-migrate.py).  Installed under share/man.  The check_man
# test fails when a public function has no page or a page names a function
# that no longer exists.
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_FOUND)
  message(STATUS "treadle: no python3, so no man pages")
  return()
endif()
file(GLOB TDL_PUBLIC_HEADERS CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/include/treadle.h ${PROJECT_SOURCE_DIR}/include/treadle/*.h)
# The cookbook's page, treadle-cookbook(7), from its recipes (the same source
# as docs/COOKBOOK.md).
file(GLOB TDL_COOKBOOK_SOURCES CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/examples/cookbook/intro.txt ${PROJECT_SOURCE_DIR}/examples/cookbook/[0-9][0-9]-*.c)
set(TDL_MAN_DIR ${PROJECT_BINARY_DIR}/man)
# A library left out of the build (libtreadle-tls without OpenSSL) has no pages.
set(TDL_MAN_LIBS --lib $<TARGET_FILE:treadle_shared> --lib $<TARGET_FILE:treadle_hook>)
if(TDL_TLS_BUILT)
  set(TDL_MAN_WITHOUT "")
  list(APPEND TDL_MAN_LIBS --lib $<TARGET_FILE:treadle_tls>)
else()
  set(TDL_MAN_WITHOUT --without treadle/tls.h)
endif()
add_custom_command(OUTPUT ${TDL_MAN_DIR}/pages.stamp
  COMMAND ${CMAKE_COMMAND} -E remove_directory ${TDL_MAN_DIR}/man3
  COMMAND ${CMAKE_COMMAND} -E remove_directory ${TDL_MAN_DIR}/man7
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/gen-man.py --out ${TDL_MAN_DIR}
          --version ${PROJECT_VERSION} ${TDL_MAN_WITHOUT}
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/gen-cookbook.py --man ${TDL_MAN_DIR}
          --version ${PROJECT_VERSION}
  COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/gen-migrate.py --man ${TDL_MAN_DIR}
          --version ${PROJECT_VERSION}
  COMMAND ${CMAKE_COMMAND} -E touch ${TDL_MAN_DIR}/pages.stamp
  DEPENDS ${PROJECT_SOURCE_DIR}/scripts/gen-man.py ${TDL_PUBLIC_HEADERS}
          ${PROJECT_SOURCE_DIR}/scripts/gen-cookbook.py ${TDL_COOKBOOK_SOURCES}
          ${PROJECT_SOURCE_DIR}/scripts/gen-migrate.py ${PROJECT_SOURCE_DIR}/CHANGELOG.md
  COMMENT "Man pages from the public headers" VERBATIM)
add_custom_target(treadle_man ALL DEPENDS ${TDL_MAN_DIR}/pages.stamp)
install(DIRECTORY ${TDL_MAN_DIR}/man3 ${TDL_MAN_DIR}/man7 DESTINATION ${CMAKE_INSTALL_MANDIR})
if(TDL_TESTS AND NOT CMAKE_CROSSCOMPILING)
  add_test(NAME check_man
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/gen-man.py --check ${TDL_MAN_DIR}
            --nm ${CMAKE_NM} ${TDL_MAN_LIBS})
endif()
if(TDL_TESTS AND NOT CMAKE_CROSSCOMPILING)
  add_test(NAME test_gen_man
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/man/test_gen_man.py ${CMAKE_NM}
            $<TARGET_FILE:treadle_shared> $<TARGET_FILE:treadle_hook> $<$<BOOL:${TDL_TLS_BUILT}>:$<TARGET_FILE:treadle_tls>>)
endif()
