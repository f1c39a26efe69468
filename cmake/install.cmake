# `cmake --install BUILD --prefix DIR` puts strata where a researcher's own
# layer library finds it:
#   DIR/bin/strata
#   DIR/include/strata/{framework,layers}/...    the headers, as the tree has them
#   DIR/lib/cmake/strata/strataConfig.cmake      find_package(strata)
# A layer library links no strata library: it is loaded into `strata` (which
# exports the engine's symbols) with --plugin, so find_package(strata) gives
# an interface target, strata::layer_library (headers, definitions, C++17),
# and strata_add_layer_library(NAME SOURCES...) builds one
# (examples/swish_layer is such a project).
include(CMakePackageConfigHelpers)

install(TARGETS strata RUNTIME DESTINATION bin)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/framework ${PROJECT_SOURCE_DIR}/layers
        DESTINATION include/strata
        FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")

set(STRATA_INSTALL_CUDA ${STRATA_CUDA_ENABLED})
set(STRATA_INSTALL_CUDNN_INCLUDE_DIR "${CUDNN_INCLUDE_DIR}")
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/strataConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/strataConfig.cmake
                              INSTALL_DESTINATION lib/cmake/strata)
# A library built against one version is refused by another (framework/
# plugin_api.h), so only the same version matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY ExactVersion)
install(FILES ${PROJECT_BINARY_DIR}/strataConfig.cmake ${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
        DESTINATION lib/cmake/strata)
