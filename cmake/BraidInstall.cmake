# Install rules, the CMake package (find_package(Braid) -> Braid::braid) and
# the pkg-config file.
include(CMakePackageConfigHelpers)

install(TARGETS braid braid_nccl EXPORT BraidTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/nccl.h ${PROJECT_SOURCE_DIR}/include/nccl_device.h
              ${PROJECT_SOURCE_DIR}/include/braid.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(BRAID_BUILD_TOOLS)
  install(TARGETS braid-info RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(_cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/Braid)
install(EXPORT BraidTargets NAMESPACE Braid:: DESTINATION ${_cmakedir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/BraidConfig.cmake.in
  ${PROJECT_BINARY_DIR}/BraidConfig.cmake INSTALL_DESTINATION ${_cmakedir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/BraidConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/BraidConfig.cmake ${PROJECT_BINARY_DIR}/BraidConfigVersion.cmake
        DESTINATION ${_cmakedir})

configure_file(${PROJECT_SOURCE_DIR}/cmake/braid.pc.in ${PROJECT_BINARY_DIR}/braid.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/braid.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
