#!/usr/bin/env bash
# kvevict as a package other projects build on (README "Use kvevict from your project"), checked
# from a build that already exists (scripts/test.sh runs it after the release build):
#   1. `cmake --install` into a temporary prefix; the headers there are exactly the public ones
#      of docs/PUBLIC_API.md, each compiles on its own (kvevict.h also as C99), and the installed
#      tool starts with a clean environment, links no CUDA library, and finds libkvevict_cuda
#      next to its libraries when the build has it
#   2. examples/ as a project of its own: find_package(kvevict) against that prefix, built with
#      warnings as errors, and run (C++ library example, model runtime, C example, cuda if built);
#      COMPONENTS core alone, and another MINOR version or an unknown component refused
#   3. the C++ and the C example again with pkg-config and a plain compiler command
#   4. kvevict under a parent project (add_subdirectory and FetchContent), configure only: no
#      CLI11, GoogleTest or Google Benchmark needed, the parent's cache, flags and directory
#      properties left alone (CMAKE_BUILD_TYPE, CMAKE_CUDA_ARCHITECTURES), kvevict:: targets that
#      hand their users no compile options
#   scripts/check_package.sh [build dir]          (default build/release; scripts/test.sh runs it)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
BUILD="${1:-build/release}"
[ -f "$BUILD/CMakeCache.txt" ] || { echo "check_package: $BUILD is not a configured build" >&2; exit 2; }
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kvevict-package.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
PREFIX="$WORK/prefix"
JOBS="$(nproc)"
start=$(date +%s)
step() { echo "check_package: $*"; }
die() { echo "check_package: FAILED: $*" >&2; exit 1; }

# --- 1. install ------------------------------------------------------------------------------
cmake --install "$BUILD" --prefix "$PREFIX" >"$WORK/install.log"
LIBDIR="$(pkg-config --variable=libdir "$PREFIX"/lib*/pkgconfig/kvevict.pc)"
VERSION="$(pkg-config --modversion "$PREFIX"/lib*/pkgconfig/kvevict.pc)"
HAS_CUDA=0
[ -f "$LIBDIR/libkvevict_cuda.so" ] && HAS_CUDA=1

# The installed headers against docs/PUBLIC_API.md's list of public headers (its "Public"
# section; the cuda ones only in a CUDA build).
listed="$(sed -n '/^## Public headers/,/^## /p' docs/PUBLIC_API.md | grep -o '`kvevict/[a-z0-9_/]*\.h`' |
          tr -d '`' | sort -u)"
[ "$HAS_CUDA" = 1 ] || listed="$(grep -v '^kvevict/cuda/' <<<"$listed")"
installed="$(cd "$PREFIX/include" && find kvevict -type f | sort)"
[ "$listed" = "$installed" ] || die "installed headers differ from docs/PUBLIC_API.md:
$(diff <(echo "$listed") <(echo "$installed") || true)"
# Each compiles alone: nothing installed includes a header that is not.
export PREFIX
# shellcheck disable=SC2016
xargs -P "$JOBS" -I{} sh -c 'printf "#include \"%s\"\n" "{}" |
  c++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -I"$PREFIX/include" -x c++ - ||
  { echo "check_package: {} does not compile on its own" >&2; exit 255; }' <<<"$installed"
printf '#include "kvevict/kvevict.h"\n' |
  cc -std=c99 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$PREFIX/include" -x c - ||
  die "kvevict/kvevict.h does not compile as C99"
step "installed $(wc -l <<<"$installed") public headers, $(ls "$LIBDIR"/libkvevict*.so | wc -l) libraries, version $VERSION"

if [ -x "$PREFIX/bin/kvevict" ]; then
  tool="$PREFIX/bin/kvevict"
  # A clean environment: the run paths alone find the libraries.
  out="$(env -i PATH=/usr/bin:/bin "$tool" --version)"
  [ "$out" = "kvevict $VERSION" ] || die "installed tool says '$out'; expected 'kvevict $VERSION'"
  if ldd "$tool" | grep -E 'libcudart|libcublas|libcuda\.|libkvevict_cuda'; then
    die "the installed tool links a CUDA library"
  fi
  # --device cuda loads libkvevict_cuda from next to libkvevict (a machine without a GPU then
  # says there is no device; one without the library says this build has none).
  err="$(env -i PATH=/usr/bin:/bin "$tool" generate --dummy smollm2-135m --prompt-tokens 4 -n 1 \
         --device cuda -q 2>&1 >/dev/null || true)"
  if [ "$HAS_CUDA" = 1 ]; then
    grep -q 'has no CUDA runtime\|could not be loaded' <<<"$err" &&
      die "the installed tool did not load $LIBDIR/libkvevict_cuda.so: $err"
  else
    grep -q 'this build has no CUDA runtime' <<<"$err" || die "unexpected --device cuda error: $err"
  fi
  step "installed tool starts with a clean environment, no CUDA library linked (--device cuda: ${err:-ran})"
fi

# Versioned libraries: each SONAME is lib<name>.so.<SOVERSION>; the runtime component alone (no
# headers, no development links, no CMake or pkg-config files) is enough to run the tool.
SOVERSION="$(sed -n 's/^\([0-9]*\)\.\([0-9]*\)\..*/\1.\2/p' <<<"$VERSION")"
[ "${SOVERSION%%.*}" = 0 ] || SOVERSION="${SOVERSION%%.*}"
for lib in "$LIBDIR"/libkvevict*.so; do
  name="$(basename "$lib")"
  soname="$(objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }')"
  [ "$soname" = "$name.$SOVERSION" ] || die "$name has SONAME '$soname'; expected $name.$SOVERSION"
done
cmake --install "$BUILD" --prefix "$WORK/runtime" --component kvevict_runtime >/dev/null
extra="$(cd "$WORK/runtime" && find . -name '*.h' -o -name '*.so' -o -name '*.pc' -o -name '*.cmake')"
[ -z "$extra" ] || die "the runtime component installs development files: $extra"
if [ -x "$WORK/runtime/bin/kvevict" ]; then
  out="$(env -i PATH=/usr/bin:/bin "$WORK/runtime/bin/kvevict" --version)" ||
    die "the tool of a runtime-only install does not start"
  if [ "$HAS_CUDA" = 1 ]; then
    err="$(env -i PATH=/usr/bin:/bin "$WORK/runtime/bin/kvevict" generate --dummy smollm2-135m \
           --prompt-tokens 4 -n 1 --device cuda -q 2>&1 >/dev/null || true)"
    grep -q 'has no CUDA runtime\|could not be loaded' <<<"$err" &&
      die "a runtime-only install does not load libkvevict_cuda.so.$SOVERSION: $err"
  fi
fi
step "libraries versioned (SONAME lib*.so.$SOVERSION); a runtime-only install runs the tool"

# --- 2. find_package(kvevict): examples/ -----------------------------------------------------
cmake -S examples -B "$WORK/examples" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_BUILD_TYPE=Release \
  >"$WORK/examples.log" || { cat "$WORK/examples.log"; die "examples/ does not configure"; }
cmake --build "$WORK/examples" -j "$JOBS" >>"$WORK/examples.log" 2>&1 ||
  { cat "$WORK/examples.log"; die "examples/ does not build against the installed package"; }
export OMP_WAIT_POLICY=PASSIVE
"$WORK/examples/evict_layer" >/dev/null || die "examples/cpp/evict_layer failed"
"$WORK/examples/generate" >/dev/null || die "examples/cpp/generate failed"
c_out="$("$WORK/examples/evict_layer_c")" || die "examples/c/evict_layer failed"
grep -q "^kvevict $VERSION (C API" <<<"$c_out" || die "the C API reports '$(head -1 <<<"$c_out")'"
built="evict_layer, generate, evict_layer_c"
if [ "$HAS_CUDA" = 1 ]; then
  [ -x "$WORK/examples/cuda_backend" ] || die "find_package(kvevict COMPONENTS cuda) found no kvevict::cuda"
  "$WORK/examples/cuda_backend" >/dev/null || die "examples/cpp/cuda_backend failed"
  built+=", cuda_backend"
fi
step "find_package(kvevict): built and ran $built"

# Components and versions: the core alone defines kvevict::kvevict and no runtime target; another
# MINOR version, an unknown component and (in a build without it) cuda are refused with a reason.
mkdir -p "$WORK/find"
cat >"$WORK/find/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.25)
project(find_kvevict LANGUAGES CXX)
find_package(kvevict ${WANT_VERSION} REQUIRED COMPONENTS ${WANT_COMPONENTS})
if(TARGET kvevict::model AND NOT "model" IN_LIST WANT_COMPONENTS)
  message(FATAL_ERROR "COMPONENTS ${WANT_COMPONENTS} also loaded kvevict::model")
endif()
message(STATUS "found kvevict ${kvevict_VERSION}")
EOF
# CMake wraps the reason it prints: compare with the log's white space folded.
log_has() { tr -s ' \n' '  ' <"$WORK/find.log" | grep -qF "$1"; }
finds=0
find_kvevict() {  # version components...
  local v="$1"; shift
  finds=$((finds + 1))
  cmake -S "$WORK/find" -B "$WORK/find/build-$finds" -DCMAKE_PREFIX_PATH="$PREFIX" \
    -DWANT_VERSION="$v" -DWANT_COMPONENTS="$(IFS=';'; echo "$*")" >"$WORK/find.log" 2>&1
}
find_kvevict "$VERSION" core || { cat "$WORK/find.log"; die "find_package(kvevict COMPONENTS core) failed"; }
minor="${VERSION#*.}"; minor="${minor%%.*}"
next="${VERSION%%.*}.$((minor + 1))"
find_kvevict "$next" core && die "find_package(kvevict $next) accepted kvevict $VERSION"
log_has "kvevictConfig.cmake, version: $VERSION" ||
  { cat "$WORK/find.log"; die "find_package(kvevict $next) failed for another reason"; }
find_kvevict "$VERSION" core bogus && die "find_package accepted the component 'bogus'"
log_has "kvevict has no component 'bogus'; expected core, model or cuda" ||
  { cat "$WORK/find.log"; die "the unknown component's message is wrong"; }
if [ "$HAS_CUDA" = 0 ]; then
  find_kvevict "$VERSION" cuda && die "a package without CUDA found the cuda component"
  log_has "was built without the 'cuda' component" ||
    { cat "$WORK/find.log"; die "the missing cuda component's message is wrong"; }
fi
step "find_package(kvevict): COMPONENTS core alone loads no runtime; $next, 'bogus'$([ "$HAS_CUDA" = 0 ] && echo " and cuda") refused with a reason"

# --- 3. pkg-config ---------------------------------------------------------------------------
export PKG_CONFIG_PATH="$LIBDIR/pkgconfig"
# shellcheck disable=SC2046
c++ -std=c++17 -O1 -Wall -Wextra -Werror examples/cpp/evict_layer.cpp -o "$WORK/evict_layer_pc" \
  $(pkg-config --cflags --libs kvevict) -Wl,-rpath,"$LIBDIR"
# shellcheck disable=SC2046
cc -std=c99 -O1 -Wall -Wextra -Wpedantic -Werror examples/c/evict_layer.c -o "$WORK/evict_layer_c_pc" \
  $(pkg-config --cflags --libs kvevict) -Wl,-rpath,"$LIBDIR"
"$WORK/evict_layer_pc" >/dev/null && "$WORK/evict_layer_c_pc" >/dev/null ||
  die "the pkg-config builds of the examples failed"
# kvevict/version.h (generated, installed with the headers) and the library agree with the
# package's version: a consumer compiled against the prefix prints both.
cat >"$WORK/version.c" <<'EOF'
#include <stdio.h>

#include "kvevict/kvevict.h"
#include "kvevict/version.h"

int main(void) {
  printf("%s %d.%d.%d %s\n", KVEVICT_VERSION_STRING, KVEVICT_VERSION_MAJOR, KVEVICT_VERSION_MINOR,
         KVEVICT_VERSION_PATCH, kvevict_version());
  return 0;
}
EOF
# shellcheck disable=SC2046
cc -std=c99 -Wall -Wextra -Wpedantic -Werror "$WORK/version.c" -o "$WORK/version" \
  $(pkg-config --cflags --libs kvevict) -Wl,-rpath,"$LIBDIR"
out="$("$WORK/version")"
[ "$out" = "$VERSION $VERSION $VERSION" ] ||
  die "kvevict/version.h and kvevict_version() say '$out'; expected the package's $VERSION"
step "pkg-config kvevict $VERSION: built and ran the C++ and the C example; version.h says $VERSION"

# --- 4. add_subdirectory / FetchContent ------------------------------------------------------
# A parent project that sets its own CMAKE_BUILD_TYPE, CMAKE_CUDA_ARCHITECTURES and flags, then
# takes kvevict as a subproject: configure only (the libraries build as in the tree). What kvevict
# may not do to it: make top-level-only targets, need CLI11 / GoogleTest / Google Benchmark, change
# the parent's cache, variables or directory properties, or put compile options (-march=native,
# -fopenmp, warnings) or definitions into the interface of the targets the parent links.
mkdir -p "$WORK/parent"
cat >"$WORK/parent/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.25)
project(parent LANGUAGES CXX)
set(watched CMAKE_CXX_FLAGS CMAKE_CXX_FLAGS_RELWITHDEBINFO CMAKE_EXE_LINKER_FLAGS
    CMAKE_SHARED_LINKER_FLAGS CMAKE_BUILD_TYPE CMAKE_CUDA_ARCHITECTURES CMAKE_CUDA_FLAGS
    CMAKE_POSITION_INDEPENDENT_CODE CMAKE_CXX_STANDARD BUILD_SHARED_LIBS)
set(props COMPILE_OPTIONS COMPILE_DEFINITIONS INCLUDE_DIRECTORIES LINK_OPTIONS LINK_DIRECTORIES)
foreach(v \${watched})
  set(before_\${v} "\${\${v}}")
endforeach()
foreach(p \${props})
  get_directory_property(before_\${p} \${p})
endforeach()
if(HOW STREQUAL "fetchcontent")
  include(FetchContent)
  FetchContent_Declare(kvevict SOURCE_DIR "$ROOT")
  FetchContent_MakeAvailable(kvevict)
else()
  add_subdirectory("$ROOT" kvevict)
endif()
foreach(v \${watched})
  if(NOT "\${before_\${v}}" STREQUAL "\${\${v}}")
    message(FATAL_ERROR "kvevict changed the parent's \${v}: '\${before_\${v}}' -> '\${\${v}}'")
  endif()
endforeach()
foreach(p \${props})
  get_directory_property(after \${p})
  if(NOT "\${before_\${p}}" STREQUAL "\${after}")
    message(FATAL_ERROR "kvevict changed the parent's directory \${p}: '\${before_\${p}}' -> '\${after}'")
  endif()
endforeach()
foreach(t kvevict_cli kvevict_eval test_capi_c99 gtest benchmark)
  if(TARGET \${t})
    message(FATAL_ERROR "a subproject build made the top-level-only target \${t}")
  endif()
endforeach()
foreach(t kvevict::kvevict kvevict::model kvevict::cuda)
  if(NOT TARGET \${t})
    if(t STREQUAL "kvevict::cuda" AND NOT EXPECT_CUDA)
      continue()
    endif()
    message(FATAL_ERROR "no target \${t} under a parent project")
  endif()
  get_target_property(opts \${t} INTERFACE_COMPILE_OPTIONS)
  get_target_property(defs \${t} INTERFACE_COMPILE_DEFINITIONS)
  if(opts OR defs)
    message(FATAL_ERROR "\${t} hands its users compile options '\${opts}' / definitions '\${defs}'")
  endif()
endforeach()
if(EXPECT_CUDA)
  get_target_property(arch kvevict_cuda CUDA_ARCHITECTURES)
  if(NOT arch STREQUAL "90a")
    message(FATAL_ERROR "kvevict_cuda builds for '\${arch}' under a parent; expected 90a")
  endif()
endif()
add_executable(consumer consumer.cpp)
target_link_libraries(consumer PRIVATE kvevict::kvevict)
EOF
echo 'int main() { return 0; }' >"$WORK/parent/consumer.cpp"
# The parent's own settings, which must survive: a build type, CUDA architectures (80, not
# kvevict's 90a) and flags. With a CUDA toolkit the subproject builds its CUDA library too.
parent_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS=-DPARENT_FLAG
             -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON
             -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON)
cuda_args=(-DKVEVICT_CUDA=OFF -DEXPECT_CUDA=OFF)
if [ "$HAS_CUDA" = 1 ]; then
  # The build's nvcc (cmake/Cuda.cmake sets it as a plain variable: it is not in the cache).
  nvcc="$(sed -n 's/^set(CMAKE_CUDA_COMPILER "\(.*\)")$/\1/p' \
          "$BUILD"/CMakeFiles/*/CMakeCUDACompiler.cmake 2>/dev/null | head -1)"
  [ -x "$nvcc" ] || die "found no nvcc in $BUILD/CMakeFiles/*/CMakeCUDACompiler.cmake"
  cuda_args=(-DKVEVICT_CUDA=ON -DEXPECT_CUDA=ON "-DCMAKE_CUDA_COMPILER=$nvcc"
             -DCMAKE_CUDA_ARCHITECTURES=80)
fi
for how in add_subdirectory fetchcontent; do
  # CUDA once (add_subdirectory), the other way CPU only: detecting nvcc costs time.
  args=("${parent_args[@]}" -DKVEVICT_CUDA=OFF -DEXPECT_CUDA=OFF)
  [ "$how" = add_subdirectory ] && args=("${parent_args[@]}" "${cuda_args[@]}")
  cmake -S "$WORK/parent" -B "$WORK/parent/$how" -DHOW="$how" "${args[@]}" \
    >"$WORK/parent-$how.log" 2>&1 ||
    { cat "$WORK/parent-$how.log"; die "kvevict does not configure under a parent project ($how)"; }
  cache="$WORK/parent/$how/CMakeCache.txt"
  grep -q '^CMAKE_BUILD_TYPE:[A-Z]*=RelWithDebInfo$' "$cache" ||
    die "$how: the parent's CMAKE_BUILD_TYPE became $(grep '^CMAKE_BUILD_TYPE' "$cache")"
  if [ "$how" = add_subdirectory ] && [ "$HAS_CUDA" = 1 ]; then
    grep -q '^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=80$' "$cache" ||
      die "the parent's CMAKE_CUDA_ARCHITECTURES became $(grep '^CMAKE_CUDA_ARCHITECTURES' "$cache")"
  elif grep -q '^CMAKE_CUDA_ARCHITECTURES' "$cache"; then
    die "$how: a CPU-only subproject put CMAKE_CUDA_ARCHITECTURES into the parent's cache"
  fi
  if grep -E '^KVEVICT_BUILD_(CLI|TESTS|BENCHMARKS):BOOL=ON|^KVEVICT_INSTALL:BOOL=ON' "$cache"; then
    die "$how: a top-level-only option defaults ON under a parent"
  fi
done
cuda_note="CPU only"
[ "$HAS_CUDA" = 1 ] && cuda_note="kvevict::cuda at sm_90a under a parent's sm_80"
step "add_subdirectory and FetchContent ($cuda_note): no CLI11 / GoogleTest / benchmark; the parent's cache, flags and directory properties untouched; no compile options in kvevict's interface"

echo "check_package: passed in $(($(date +%s) - start)) s"
