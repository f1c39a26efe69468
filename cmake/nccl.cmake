# The nccl communication backend (parallel/backends/nccl_communicator.cpp): on when the
# CUDA backend is on and NCCL is found. Then STRATA_HAVE_NCCL is defined for
# everything that links strata_parallel; without it, asking for the nccl
# backend is a ConfigError that says so. Included from the root CMakeLists.txt
# after the strata_parallel target exists. This is the only place NCCL is
# searched for.
#
# Where: under NCCL_ROOT when it is given (-DNCCL_ROOT=... or the NCCL_ROOT
# environment variable; the cmake variable wins), and then only there, so a
# root without nccl.h and libnccl.so is an error rather than a silent fallback
# to another NCCL. Otherwise the CUDA toolkit folders, then the system folders.
option(STRATA_NCCL "Build the nccl communication backend when CUDA and NCCL are found" ON)
set(STRATA_NCCL_ENABLED OFF)
if(STRATA_NCCL AND STRATA_CUDA_ENABLED)
  set(STRATA_NCCL_ROOT "")
  if(NCCL_ROOT)
    set(STRATA_NCCL_ROOT "${NCCL_ROOT}")
  elseif(DEFINED ENV{NCCL_ROOT} AND NOT "$ENV{NCCL_ROOT}" STREQUAL "")
    set(STRATA_NCCL_ROOT "$ENV{NCCL_ROOT}")
  endif()
  # find_path/find_library keep their first answer in the cache; forget it
  # when the root changes, so reconfiguring with another NCCL_ROOT takes effect.
  if(NOT "${STRATA_NCCL_ROOT}" STREQUAL "${STRATA_NCCL_ROOT_SEARCHED}")
    unset(NCCL_INCLUDE_DIR CACHE)
    unset(NCCL_LIBRARY CACHE)
    set(STRATA_NCCL_ROOT_SEARCHED "${STRATA_NCCL_ROOT}" CACHE INTERNAL "NCCL_ROOT of the last NCCL search")
  endif()
  if(STRATA_NCCL_ROOT)
    find_path(NCCL_INCLUDE_DIR nccl.h PATHS ${STRATA_NCCL_ROOT} PATH_SUFFIXES include NO_DEFAULT_PATH)
    find_library(NCCL_LIBRARY NAMES nccl PATHS ${STRATA_NCCL_ROOT} PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
    if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
      message(FATAL_ERROR "NCCL_ROOT is '${STRATA_NCCL_ROOT}' but it lacks include/nccl.h or "
                          "lib/libnccl.so (or lib64/): point NCCL_ROOT at an NCCL install, unset it to "
                          "use the NCCL of the CUDA toolkit or the system, or configure with -DSTRATA_NCCL=OFF")
    endif()
  else()
    set(STRATA_NCCL_TOOLKIT_ROOTS ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
    find_path(NCCL_INCLUDE_DIR nccl.h
      HINTS ${CUDAToolkit_INCLUDE_DIRS} ${STRATA_NCCL_TOOLKIT_ROOTS}
      PATH_SUFFIXES include
      PATHS /usr/include /usr/local/cuda/include)
    find_library(NCCL_LIBRARY NAMES nccl
      HINTS ${CUDAToolkit_LIBRARY_DIR} ${STRATA_NCCL_TOOLKIT_ROOTS}
      PATH_SUFFIXES lib lib64
      PATHS /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/local/cuda/lib64)
  endif()
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h STRATA_NCCL_VERSION_LINES REGEX "define NCCL_(MAJOR|MINOR|PATCH) ")
    string(REGEX REPLACE "[^0-9;]" "" STRATA_NCCL_VERSION "${STRATA_NCCL_VERSION_LINES}")
    string(REPLACE ";" "." STRATA_NCCL_VERSION "${STRATA_NCCL_VERSION}")
    # ncclCommInitRankConfig (nonblocking communicators, for timeouts) and ncclAvg need NCCL >= 2.14.
    if(STRATA_NCCL_VERSION VERSION_LESS 2.14)
      message(STATUS "NCCL ${STRATA_NCCL_VERSION} at ${NCCL_LIBRARY} is older than 2.14: no nccl backend")
    else()
      set(STRATA_NCCL_ENABLED ON)
      target_compile_definitions(strata_parallel PUBLIC STRATA_HAVE_NCCL)
      target_include_directories(strata_parallel PUBLIC ${NCCL_INCLUDE_DIR})
      target_link_libraries(strata_parallel PUBLIC ${NCCL_LIBRARY} CUDA::cudart)
      message(STATUS "NCCL ${STRATA_NCCL_VERSION}: nccl backend on (${NCCL_LIBRARY}, headers ${NCCL_INCLUDE_DIR})")
    endif()
  else()
    message(STATUS "NCCL not found (nccl.h / libnccl.so; set NCCL_ROOT): no nccl backend")
  endif()
elseif(STRATA_NCCL)
  message(STATUS "no CUDA backend: no nccl backend")
else()
  message(STATUS "STRATA_NCCL=OFF: no nccl backend")
endif()
