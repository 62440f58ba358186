# Instruction-set flags for the run-time dispatched kernels of src/quant, one translation unit at
# a time: <name>_avx2.cpp is compiled for AVX2 + FMA + F16C, <name>_avx512.cpp for AVX-512
# F/BW/VL/DQ + VNNI (+ FMA, F16C), each called only on CPUs (and OSes) that report them
# (src/quant/dispatch.cpp), so the rest of the library stays baseline x86-64. A compiler without
# the flags compiles the file without them: its #if guard then leaves only a null table.
function(kvevict_isa_sources)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag("-mavx2 -mfma -mf16c" KVEVICT_HAS_AVX2_FLAGS)
  check_cxx_compiler_flag("-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c"
                          KVEVICT_HAS_AVX512_FLAGS)
  foreach(src ${ARGN})
    if(src MATCHES "_avx2\\.cpp$" AND KVEVICT_HAS_AVX2_FLAGS)
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
    elseif(src MATCHES "_avx512\\.cpp$" AND KVEVICT_HAS_AVX512_FLAGS)
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mfma;-mf16c")
    endif()
  endforeach()
endfunction()
