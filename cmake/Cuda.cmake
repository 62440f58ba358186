# CUDA is optional: AUTO builds the backend when a toolkit is found (it compiles without a GPU).
# The kernels target the H200: sm_90a (wgmma; README "GPU"). CMAKE_CUDA_ARCHITECTURES belongs to
# whoever drives the build: on its own kvevict defaults it to 90a (a cache entry the user or a
# preset may set); under a parent project it stays the parent's, and KVEVICT_CUDA_ARCHITECTURES
# (default 90a) applies to kvevict's own CUDA target only (src/CMakeLists.txt).
set(KVEVICT_WITH_CUDA OFF)
if(NOT KVEVICT_CUDA STREQUAL "OFF")
  if(KVEVICT_TOP_LEVEL AND NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(KVEVICT_TOP_LEVEL)
      if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
        set(CMAKE_CUDA_ARCHITECTURES 90a CACHE STRING
            "CUDA architectures (kvevict's kernels target sm_90a)")
      endif()
    else()
      set(KVEVICT_CUDA_ARCHITECTURES 90a CACHE STRING
          "CUDA architectures of kvevict's kernels when built under another project")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(KVEVICT_WITH_CUDA ON)
  elseif(KVEVICT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KVEVICT_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "kvevict: CUDA backend ${KVEVICT_WITH_CUDA}")
