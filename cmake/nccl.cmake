# The nccl communication backend (parallel/backends/nccl_communicator.cpp): on when the
# CUDA backend is on and NCCL is found (nccl.h and libnccl.so in the CUDA
# toolkit folders, the system folders, or under NCCL_ROOT given to cmake or
# set in the environment). Then STRATA_HAVE_NCCL is defined for everything
# that links strata_parallel; without it, asking for the nccl backend is a
# ConfigError that says so. Included from the root CMakeLists.txt after the
# strata_parallel target exists.
option(STRATA_NCCL "Build the nccl communication backend when CUDA and NCCL are found" ON)
set(STRATA_NCCL_ENABLED OFF)
if(STRATA_NCCL AND STRATA_CUDA_ENABLED)
  set(STRATA_NCCL_HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
  find_path(NCCL_INCLUDE_DIR nccl.h
    HINTS ${CUDAToolkit_INCLUDE_DIRS} ${STRATA_NCCL_HINTS}
    PATH_SUFFIXES include
    PATHS /usr/include /usr/local/cuda/include)
  find_library(NCCL_LIBRARY NAMES nccl
    HINTS ${CUDAToolkit_LIBRARY_DIR} ${STRATA_NCCL_HINTS}
    PATH_SUFFIXES lib lib64
    PATHS /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/local/cuda/lib64)
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
      message(STATUS "NCCL ${STRATA_NCCL_VERSION}: nccl backend on (${NCCL_LIBRARY})")
    endif()
  else()
    message(STATUS "NCCL not found (nccl.h / libnccl.so; set NCCL_ROOT): no nccl backend")
  endif()
elseif(STRATA_NCCL)
  message(STATUS "no CUDA backend: no nccl backend")
else()
  message(STATUS "STRATA_NCCL=OFF: no nccl backend")
endif()
