# `cmake --install`: the program, the libraries and their public headers, the
# shipped rules (share/fusec/rules, found by the installed libraries relative
# to themselves), the Python module, a CMake package (find_package(fusec):
# fusec::engine, fusec::grammar, fusec::codegen, fusec::driver) and a
# pkg-config file. `cpack -G DEB` packages the same.
include(CMakePackageConfigHelpers)

if(FUSEC_WHEEL)
  # A wheel: the package folder holds the module, the libraries and the
  # rules (share/fusec/rules beside the libraries, where they look first).
  install(TARGETS _fusec fusec_engine fusec_grammar fusec_codegen fusec_driver
          LIBRARY DESTINATION fusec COMPONENT python)
  install(DIRECTORY python/fusec/ DESTINATION fusec COMPONENT python
          FILES_MATCHING PATTERN "*.py" PATTERN "*.pyi" PATTERN "py.typed")
  install(DIRECTORY rules/ DESTINATION fusec/share/fusec/rules COMPONENT python
          FILES_MATCHING PATTERN "*.fuse" PATTERN "*.toml" PATTERN "*.md")
  return()
endif()

set(FUSEC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/fusec)
install(TARGETS fusec fusec_engine fusec_grammar fusec_codegen fusec_driver
        EXPORT fusecTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/fusec DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY rules/ DESTINATION ${CMAKE_INSTALL_DATADIR}/fusec/rules
        FILES_MATCHING PATTERN "*.fuse" PATTERN "*.toml" PATTERN "*.md")
install(EXPORT fusecTargets NAMESPACE fusec:: DESTINATION ${FUSEC_CMAKE_DIR})
configure_package_config_file(cmake/fusecConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/fusecConfig.cmake
                              INSTALL_DESTINATION ${FUSEC_CMAKE_DIR} PATH_VARS CMAKE_INSTALL_DATADIR)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/fusecConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/fusecConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/fusecConfigVersion.cmake
        DESTINATION ${FUSEC_CMAKE_DIR})
# The .pc file names the prefix relative to itself: right under any --prefix.
file(RELATIVE_PATH FUSEC_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(cmake/fusec.pc.in ${CMAKE_CURRENT_BINARY_DIR}/fusec.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/fusec.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

if(FUSEC_PYTHON)
  # Debian's layout: /usr/lib/python3/dist-packages for /usr/bin/python3.
  set(FUSEC_PYTHON_INSTALL_DIR lib/python3/dist-packages CACHE STRING
      "where the Python package goes, relative to the prefix")
  file(RELATIVE_PATH FUSEC_PY_TO_LIB /p/${FUSEC_PYTHON_INSTALL_DIR}/fusec /p/${CMAKE_INSTALL_LIBDIR})
  set_target_properties(_fusec PROPERTIES INSTALL_RPATH "$ORIGIN/${FUSEC_PY_TO_LIB}")
  install(TARGETS _fusec LIBRARY DESTINATION ${FUSEC_PYTHON_INSTALL_DIR}/fusec)
  install(DIRECTORY python/fusec/ DESTINATION ${FUSEC_PYTHON_INSTALL_DIR}/fusec
          FILES_MATCHING PATTERN "*.py" PATTERN "*.pyi" PATTERN "py.typed")
endif()

set(CPACK_PACKAGE_NAME fusec)
set(CPACK_PACKAGE_VENDOR "fusec")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Declarative operator-fusion compiler: ONNX to fused OpenCL C kernels")
set(CPACK_PACKAGE_CONTACT "fusec maintainers <fusec@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "pocl-opencl-icd | opencl-icd, python3, python3-numpy, python3-onnx")
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB)
include(CPack)
