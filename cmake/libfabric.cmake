# The fabric (RDMA) transport (parallel/transport/fabric_*.cpp): on when
# libfabric is found through pkg-config (Debian/Ubuntu: libfabric-dev; CI
# installs it from tools/install_deps.sh). Then STRATA_HAVE_LIBFABRIC is
# defined for everything that links strata_parallel; without it the build is
# as before and asking for the rdma transport is a ConfigError that says how
# to get it. Included from the root CMakeLists.txt after the strata_parallel
# target exists. This is the only place libfabric is searched for.
#
# libfabric, not libibverbs directly: its verbs provider drives InfiniBand
# and RoCE through libibverbs, and its tcp/sockets providers run the same
# code on machines without an RDMA device (parallel/README.md says more).
option(STRATA_LIBFABRIC "Build the fabric (RDMA) transport when libfabric is found" ON)
set(STRATA_LIBFABRIC_ENABLED OFF)
if(STRATA_LIBFABRIC)
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(LIBFABRIC QUIET libfabric>=1.9)
  endif()
  if(LIBFABRIC_FOUND)
    set(STRATA_LIBFABRIC_ENABLED ON)
    target_compile_definitions(strata_parallel PUBLIC STRATA_HAVE_LIBFABRIC)
    # Headers only: the library is loaded with dlopen when a run asks for the
    # transport (parallel/transport/fabric_library.h says why).
    target_include_directories(strata_parallel PUBLIC ${LIBFABRIC_INCLUDE_DIRS})
    target_link_libraries(strata_parallel PUBLIC ${CMAKE_DL_LIBS})
    message(STATUS "libfabric ${LIBFABRIC_VERSION}: fabric (rdma) transport on")
  else()
    message(STATUS "libfabric not found (apt-get install libfabric-dev, or tools/install_deps.sh): "
                   "no rdma transport")
  endif()
else()
  message(STATUS "STRATA_LIBFABRIC=OFF: no rdma transport")
endif()
