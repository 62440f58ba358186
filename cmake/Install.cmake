# Install and export rules: kvevict as a package other projects build on (README "Use kvevict
# from your project"). `cmake --install build/<preset> --prefix P` lays out
#   P/include/kvevict/...        the public headers of docs/PUBLIC_API.md, nothing else
#   P/lib/libkvevict*.so.0.1     core (+ C API), model, cuda (when built), eval (for the tool);
#                                versioned (cmake/Version.cmake), the .so links in the development
#                                component: `--component kvevict_runtime` installs what runs only
#   P/bin/kvevict                the command-line tool (KVEVICT_BUILD_CLI)
#   P/lib/cmake/kvevict/         kvevictConfig.cmake + version file + one targets file a component
#   P/lib/pkgconfig/             kvevict.pc, kvevict-model.pc (+ kvevict-cuda.pc)
# The same targets are exported from the build tree (build/<preset>/kvevictConfig.cmake), so
# kvevict_DIR=build/<preset> works without installing. The Python wheel installs only its own
# component (pyproject.toml: install.components = ["python"]), none of this.
include(CMakePackageConfigHelpers)

set(KVEVICT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvevict)
set(KVEVICT_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# Public headers (docs/PUBLIC_API.md says why each is public): a new header is internal until it
# is listed here.
set(KVEVICT_PUBLIC_HEADERS_CORE
  kvevict.h error.h dtype.h tensor.h workspace.h method.h score.h select.h cache.h attention.h
  backend.h threads.h evict.h decode_evict.h decode_score.h diagnostics.h io/atomic_file.h io/npy.h
  io/safetensors.h)
set(KVEVICT_PUBLIC_HEADERS_MODEL
  tokenizer.h io/gguf.h model/config.h model/weights.h model/model.h model/sampler.h
  model/evict_config.h model/runtime.h)
set(KVEVICT_PUBLIC_HEADERS_CUDA
  cuda/backend.h cuda/score.h cuda/select.h cuda/compact.h cuda/attention.h)

function(kvevict_install_headers)
  foreach(h ${ARGN})
    get_filename_component(dir ${h} DIRECTORY)
    install(FILES ${PROJECT_SOURCE_DIR}/include/kvevict/${h}
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvevict/${dir}
            COMPONENT kvevict_development)
  endforeach()
endfunction()

# Run paths of the installed binaries: the tool finds its libraries in ../lib, and every library
# finds its siblings in its own directory ($ORIGIN), so libkvevict_cuda, loaded by path, finds
# libkvevict_model and libkvevict; libkvevict_cuda also keeps the CUDA toolkit's library
# directory it was linked against (libcudart, libcublas).
file(RELATIVE_PATH KVEVICT_BIN_TO_LIB
     ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})

# One export set a component, so `find_package(kvevict COMPONENTS core)` loads the core alone.
set(KVEVICT_COMPONENTS core model)
set(KVEVICT_TARGETS_core kvevict)
set(KVEVICT_TARGETS_model kvevict_model)
if(TARGET kvevict_cuda)
  list(APPEND KVEVICT_COMPONENTS cuda)
  set(KVEVICT_TARGETS_cuda kvevict_cuda)
  set_target_properties(kvevict_cuda PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
endif()
foreach(component ${KVEVICT_COMPONENTS})
  set(target ${KVEVICT_TARGETS_${component}})
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN")
  install(TARGETS ${target} EXPORT kvevict-${component}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT kvevict_runtime
                  NAMELINK_COMPONENT kvevict_development
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT kvevict_development
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT kvevict_runtime)
  install(EXPORT kvevict-${component} NAMESPACE kvevict:: FILE kvevict-${component}-targets.cmake
          DESTINATION ${KVEVICT_CMAKE_DIR} COMPONENT kvevict_development)
  export(EXPORT kvevict-${component} NAMESPACE kvevict::
         FILE ${PROJECT_BINARY_DIR}/kvevict-${component}-targets.cmake)
endforeach()
kvevict_install_headers(${KVEVICT_PUBLIC_HEADERS_CORE} ${KVEVICT_PUBLIC_HEADERS_MODEL})
# The generated one (cmake/Version.cmake), with the core's.
install(FILES ${KVEVICT_GENERATED_INCLUDE_DIR}/kvevict/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvevict COMPONENT kvevict_development)
if(TARGET kvevict_cuda)
  kvevict_install_headers(${KVEVICT_PUBLIC_HEADERS_CUDA})
endif()

# The tool and the one library only it uses (no headers, not exported).
if(TARGET kvevict_cli)
  set_target_properties(kvevict_cli PROPERTIES INSTALL_RPATH "$ORIGIN/${KVEVICT_BIN_TO_LIB}")
  install(TARGETS kvevict_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
          COMPONENT kvevict_runtime)
  if(TARGET kvevict_eval AND KVEVICT_SHARED)
    set_target_properties(kvevict_eval PROPERTIES INSTALL_RPATH "$ORIGIN")
    install(TARGETS kvevict_eval LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
            COMPONENT kvevict_runtime NAMELINK_SKIP)
  endif()
endif()

# kvevictConfig.cmake (cmake/kvevictConfig.cmake.in) and its version file. 0.x: a minor version
# may break the API, so only the same MAJOR.MINOR is compatible.
set(KVEVICT_CONFIG_OPENMP OFF)
if(OpenMP_CXX_FOUND AND NOT KVEVICT_SHARED)
  set(KVEVICT_CONFIG_OPENMP ON)  # a static libkvevict exports libgomp link-only
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvevictConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kvevictConfig.cmake INSTALL_DESTINATION ${KVEVICT_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvevictConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvevictConfig.cmake
              ${PROJECT_BINARY_DIR}/kvevictConfigVersion.cmake
        DESTINATION ${KVEVICT_CMAKE_DIR} COMPONENT kvevict_development)

# pkg-config files, relocatable (prefix from ${pcfiledir}), one a library. A static build lists
# what its archives need in Libs.private (`pkg-config --static`).
file(RELATIVE_PATH KVEVICT_PC_TO_PREFIX
     ${CMAKE_INSTALL_PREFIX}/${KVEVICT_PKGCONFIG_DIR} ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" KVEVICT_PC_TO_PREFIX "${KVEVICT_PC_TO_PREFIX}")
set(KVEVICT_PC_LIBS_PRIVATE_core "")
set(KVEVICT_PC_LIBS_PRIVATE_model "")
set(KVEVICT_PC_LIBS_PRIVATE_cuda "")
if(NOT KVEVICT_SHARED)
  set(KVEVICT_PC_LIBS_PRIVATE_core "-lstdc++ -lm -ldl -pthread")
  if(OpenMP_CXX_FOUND)
    string(APPEND KVEVICT_PC_LIBS_PRIVATE_core " ${OpenMP_CXX_FLAGS}")
  endif()
  foreach(lib ${BLAS_LIBRARIES})
    string(APPEND KVEVICT_PC_LIBS_PRIVATE_model " ${lib}")
  endforeach()
  if(TARGET kvevict_cuda)
    set(KVEVICT_PC_LIBS_PRIVATE_cuda "-L${CUDAToolkit_LIBRARY_DIR} -lcublas -lcudart")
  endif()
endif()
set(KVEVICT_PC_core_NAME kvevict)
set(KVEVICT_PC_core_LIB kvevict)
set(KVEVICT_PC_core_REQUIRES "")
set(KVEVICT_PC_core_DESCRIPTION
    "KV-cache eviction for LLM inference: scores, selection, compaction, evictors, C API")
set(KVEVICT_PC_model_NAME kvevict-model)
set(KVEVICT_PC_model_LIB kvevict_model)
set(KVEVICT_PC_model_REQUIRES "kvevict = ${PROJECT_VERSION}")
set(KVEVICT_PC_model_DESCRIPTION "kvevict's model runtime: GGUF models, tokenizers, sessions")
set(KVEVICT_PC_cuda_NAME kvevict-cuda)
set(KVEVICT_PC_cuda_LIB kvevict_cuda)
set(KVEVICT_PC_cuda_REQUIRES "kvevict-model = ${PROJECT_VERSION}")
set(KVEVICT_PC_cuda_DESCRIPTION "kvevict's cuda backend and GPU model runtime (sm_90a)")
foreach(component ${KVEVICT_COMPONENTS})
  set(KVEVICT_PC_NAME ${KVEVICT_PC_${component}_NAME})
  set(KVEVICT_PC_LIB ${KVEVICT_PC_${component}_LIB})
  set(KVEVICT_PC_REQUIRES ${KVEVICT_PC_${component}_REQUIRES})
  set(KVEVICT_PC_DESCRIPTION ${KVEVICT_PC_${component}_DESCRIPTION})
  set(KVEVICT_PC_LIBS_PRIVATE ${KVEVICT_PC_LIBS_PRIVATE_${component}})
  configure_file(${PROJECT_SOURCE_DIR}/cmake/kvevict.pc.in
                 ${PROJECT_BINARY_DIR}/pkgconfig/${KVEVICT_PC_NAME}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/${KVEVICT_PC_NAME}.pc
          DESTINATION ${KVEVICT_PKGCONFIG_DIR} COMPONENT kvevict_development)
endforeach()
