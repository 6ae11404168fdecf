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

# STRATA_SANITIZE as a list whether given with ';' or ','.
string(REPLACE "," ";" STRATA_SANITIZE_LIST "${STRATA_SANITIZE}")
