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
