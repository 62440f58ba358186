# Warnings are PRIVATE options on our own targets; no global flags.
function(kvevict_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-sign-compare>)
endfunction()

function(kvevict_native target)
  if(KVEVICT_NATIVE)
    include(CheckCXXCompilerFlag)
    check_cxx_compiler_flag(-march=native KVEVICT_HAS_MARCH_NATIVE)
    if(KVEVICT_HAS_MARCH_NATIVE)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
    endif()
  endif()
endfunction()
