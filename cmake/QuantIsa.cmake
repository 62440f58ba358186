# Instruction-set flags for the run-time dispatched kernels of src/quant, one translation unit at
# a time: <name>_avx2.cpp is compiled for AVX2 + FMA + F16C and called only on CPUs that report
# them (src/quant/dispatch.cpp), so the rest of the library stays baseline x86-64.
function(kvevict_isa_sources)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag("-mavx2 -mfma -mf16c" KVEVICT_HAS_AVX2_FLAGS)
  foreach(src ${ARGN})
    if(src MATCHES "_avx2\\.cpp$" AND KVEVICT_HAS_AVX2_FLAGS)
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
    endif()
  endforeach()
endfunction()
