# Sanitizer and fuzzing builds (tools/run_tests.sh runs both; both off by default).
#   -DSTRATA_SANITIZE=address,undefined   compile and link every target with these
#                                          sanitizers (a CPU-only build: -DSTRATA_CUDA=OFF)
#   -DSTRATA_FUZZ=ON                       the libFuzzer targets in tests/fuzz (clang only;
#                                          implies address,undefined when STRATA_SANITIZE is empty)
# A report stops the program (-fno-sanitize-recover), so a test run fails on
# the first one instead of printing it and passing. Included from the root
# CMakeLists.txt after the CUDA block and before the first target.
set(STRATA_SANITIZE "" CACHE STRING "Sanitizers for every target, e.g. address,undefined (empty: none)")
option(STRATA_FUZZ "Build the libFuzzer targets in tests/fuzz (needs clang)" OFF)

if(STRATA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "STRATA_FUZZ needs clang's libFuzzer, and the C++ compiler is "
                        "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER}: configure a fresh build folder with "
                        "-DCMAKE_CXX_COMPILER=clang++ (apt-get install clang)")
  endif()
  if(STRATA_SANITIZE STREQUAL "")
    set(STRATA_SANITIZE "address,undefined")
  endif()
  # Coverage instrumentation for every object; only the fuzz executables link
  # libFuzzer's main (tests/fuzz/CMakeLists.txt).
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
endif()

if(NOT STRATA_SANITIZE STREQUAL "")
  if(STRATA_CUDA_ENABLED)
    message(FATAL_ERROR "STRATA_SANITIZE=${STRATA_SANITIZE} is for CPU-only builds: "
                        "configure with -DSTRATA_CUDA=OFF as well")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${STRATA_SANITIZE}>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-sanitize-recover=all>
                      $<$<COMPILE_LANGUAGE:CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=${STRATA_SANITIZE})
  message(STATUS "sanitizers: ${STRATA_SANITIZE}")
endif()
