# Warning and sanitizer flags shared by every Strata target (through strata_options).
add_library(strata_options INTERFACE)
target_compile_options(strata_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-missing-field-initializers>)
if(STRATA_WERROR)
  target_compile_options(strata_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
target_include_directories(strata_options INTERFACE
  ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/generated)

if(STRATA_SANITIZE)
  string(REPLACE ";" "," _san "${STRATA_SANITIZE}")
  message(STATUS "Strata: sanitizers ${_san}")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${_san}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>)
  add_link_options(-fsanitize=${_san})
endif()

# Under TSan, code that runs oneTBB can only be race-checked when oneTBB itself is instrumented
# (Debian's is not: every task hand-off looks like a race). STRATA_TBB_TSAN says it is; then the
# host kernels use oneTBB under TSan too and the oneTBB test suites join the `threaded` label.
set(STRATA_TSAN_COVERS_TBB OFF)
if("thread" IN_LIST STRATA_SANITIZE)
  if(STRATA_TBB_TSAN)
    set(STRATA_TSAN_COVERS_TBB ON)
    target_compile_definitions(strata_options INTERFACE STRATA_TBB_TSAN=1)
    message(STATUS "Strata: oneTBB is TSan-instrumented (${TBB_DIR}); its users are race-checked")
  else()
    message(STATUS "Strata: TSan without an instrumented oneTBB: cpu_adam and optimizer-swap "
                   "tests stay out of the threaded label (scripts/build_tsan_tbb.sh builds one)")
  endif()
endif()
