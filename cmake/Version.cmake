# Versions of kvevict's shared libraries. The file is libkvevict.so.MAJOR.MINOR.PATCH; its SONAME
# (what a program that links it asks the loader for) names the ABI it promises:
#   0.x  libkvevict.so.0.MINOR: while the version is 0.x a minor release may change the C++ ABI
#        (docs/PUBLIC_API.md "Stability"), so 0.1 and 0.2 are different SONAMEs
#   >= 1 libkvevict.so.MAJOR
# The C API keeps its own number (KVEVICT_C_API_VERSION, kvevict_c_api_version()).
# Static libraries (KVEVICT_SHARED=OFF: the Python module) carry no version.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(KVEVICT_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
else()
  set(KVEVICT_SOVERSION ${PROJECT_VERSION_MAJOR})
endif()
# The file the loader of libkvevict_cuda opens (src/core/cuda_library.cpp).
if(KVEVICT_SHARED)
  set(KVEVICT_CUDA_SONAME libkvevict_cuda.so.${KVEVICT_SOVERSION})
else()
  set(KVEVICT_CUDA_SONAME libkvevict_cuda.so)
endif()

function(kvevict_library_version target)
  if(KVEVICT_SHARED)
    set_target_properties(${target} PROPERTIES VERSION ${PROJECT_VERSION}
                          SOVERSION ${KVEVICT_SOVERSION})
  endif()
endfunction()

# include/kvevict/version.h: the version as macros (KVEVICT_VERSION_MAJOR/MINOR/PATCH,
# KVEVICT_VERSION_STRING, KVEVICT_VERSION), written into the build tree at configure time from
# include/kvevict/version.h.in and installed with the public headers (cmake/Install.cmake). The
# kvevict target puts the directory on its users' include path (src/CMakeLists.txt).
set(KVEVICT_GENERATED_INCLUDE_DIR ${PROJECT_BINARY_DIR}/include)
configure_file(${PROJECT_SOURCE_DIR}/include/kvevict/version.h.in
               ${KVEVICT_GENERATED_INCLUDE_DIR}/kvevict/version.h @ONLY)
