#!/usr/bin/env bash
# Packs what a GPU run on a lent machine needs, built here (the device image has no GoogleTest,
# CLI11 or nlohmann): the GPU test binaries, the GPU benchmarks, the kvevict tool and the shared
# libraries, stripped and xz-packed, plus the two checkpoints cut into parts that fit one call's
# transfer each, laid out one folder a device call. On the device, tools/device_session.sh runs
# each call's step and puts them back together under /tmp/kv.
#
#   tools/device_bundle.sh BUILD_DIR OUT_DIR        -> OUT_DIR/c0 (bins.tar.xz, models.part-00,
#                                                     the manifests), OUT_DIR/c1 .. (a part each;
#                                                     the last with corpus.tar.xz)
#   BUNDLE_MODELS=0 tools/device_bundle.sh ...      binaries only
#   BUNDLE_FIRST_PART=BYTES, BUNDLE_PART=BYTES       the first model part's size and the others'
#                                                    (default 60 MB each)
#   BASE_LIB=BUILD_DIR tools/device_bundle.sh ...    also OUT_DIR/c0/lib_base.tar.xz: an earlier
#                                                    build's libraries under their SONAMEs and its
#                                                    GPU benchmarks (bin/), for device_session.sh's
#                                                    A/B verbs, which run each build's own
#                                                    benchmark over its own libraries. A benchmark
#                                                    compiled against other headers reads another
#                                                    layout of the classes it shares with the
#                                                    libraries (2026-12-07 (f)'s decode A/B printed
#                                                    the base's graph replays as its captures)
#   BASE_LIB=PATH[:PATH...]                          libraries alone (no benchmark of their own: the
#                                                    verbs run this build's; only for a change that
#                                                    leaves every shared class and struct alone),
#                                                    e.g. tools/lib_with_files_at.sh's
#   LIB_VARIANTS="NAME=BUILD_DIR|PATH[:PATH...] ..." also OUT_DIR/c0/lib_NAME.tar.xz for each: more
#                                                    builds to time beside base and new (the
#                                                    decode-lib-ab verb runs base, each NAME, new)
set -euo pipefail
build="${1:?usage: device_bundle.sh BUILD_DIR OUT_DIR}"
out="${2:?usage: device_bundle.sh BUILD_DIR OUT_DIR}"
root="$(cd "$(dirname "$0")/.." && pwd)"
for variant in ${LIB_VARIANTS:-}; do  # checked before any work
  name="${variant%%=*}"
  [[ "$name" =~ ^[a-z0-9_]+$ && "$name" != base && "$variant" == *=?* ]] || {
    echo "device_bundle: LIB_VARIANTS entry '$variant' is not NAME=PATH[:PATH...]" \
      "(NAME: a-z, 0-9, _; not base)" >&2
    exit 2
  }
done
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib"
# test_eval_sweep_test: its CUDA cases (the sweep against each setting alone) run only on a GPU.
for f in "$build"/tests/test_cuda_* "$build"/tests/test_model_cuda_* "$build"/benchmarks/gpu_* \
         "$build"/tests/test_eval_sweep_test "$build"/benchmarks/sweep_cost_bench "$build"/kvevict; do
  [[ -f "$f" && -x "$f" && "$f" != *.cmake ]] && cp "$f" "$stage/bin/"
done
# Each shared library under its SONAME (libkvevict.so.0.1: what the programs ask the loader for).
for f in "$build"/src/libkvevict*.so; do
  [[ -f "$f" ]] || continue
  soname="$(objdump -p "$f" | awk '$1 == "SONAME" { print $2 }')"
  cp -L "$f" "$stage/lib/${soname:-$(basename "$f")}"
done
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/* 2>/dev/null || true
tar -C "$stage" -cf - bin lib | xz -T2 -6 >"$out/bins.tar.xz"
echo "device_bundle: $(du -h "$out/bins.tar.xz" | cut -f1) of binaries ($(ls "$stage/bin" | wc -l) programs)"
if [[ "${BUNDLE_MODELS:-1}" == 1 ]]; then
  models=("$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$root/models/gemma-3-270m-q4_k_m.gguf")
  (cd "$root/models" && sha256sum "$(basename "${models[0]}")" "$(basename "${models[1]}")") \
    >"$out/models.sha256"
  rm -f "$out"/models.part-*
  # One stream of both files (sizes in the manifest), cut at 60 MB (BUNDLE_PART): a part a call. The first part
  # travels beside bins.tar.xz, so it can be cut smaller (BUNDLE_FIRST_PART bytes, e.g. 48000000:
  # 48 MB + the binaries + the tree stay under a call's 64 MiB).
  stat -c '%n %s' "${models[@]}" | sed "s|$root/models/||" >"$out/models.sizes"
  first="${BUNDLE_FIRST_PART:-60000000}"
  cat "${models[@]}" >"$stage/models.stream"
  dd if="$stage/models.stream" of="$out/models.part-00" bs=4M iflag=count_bytes count="$first" \
    status=none
  dd if="$stage/models.stream" bs=4M iflag=skip_bytes skip="$first" status=none |
    split -b "${BUNDLE_PART:-60000000}" -d --numeric-suffixes=1 - "$out/models.part-"
  echo "device_bundle: models in $(ls "$out"/models.part-* | wc -l) parts"
fi
# One folder a device call, for tools/device_session.sh: c0 = the binaries, the first part and the
# manifests; c1 .. = one part each; the last also the corpus (scripts/prepare_corpus.sh's output,
# xz-packed) and the manifests. Carry one folder a call (and keep docs/results out of the tree).
rm -rf "$out"/c[0-9]*
mkdir -p "$out/c0"
mv "$out/bins.tar.xz" "$out/c0/"
# Libraries PATH[:PATH...] under their SONAMEs, stripped, into OUT_DIR/c0/lib_NAME.tar.xz; a
# BUILD_DIR gives its libraries and its GPU benchmarks (into bin/ of the same pack).
pack_libs() {  # NAME PATHS|BUILD_DIR
  mkdir -p "$stage/lib_$1"
  local libs=()
  if [[ -d "$2" ]]; then
    libs=("$2"/src/libkvevict*.so)
    [[ -f "${libs[0]}" ]] || { echo "device_bundle: $2 holds no src/libkvevict*.so" >&2; exit 2; }
    mkdir -p "$stage/lib_$1/bin"
    for f in "$2"/benchmarks/gpu_*; do
      [[ -f "$f" && -x "$f" ]] && cp "$f" "$stage/lib_$1/bin/"
    done
  else
    IFS=: read -r -a libs <<<"$2"
  fi
  for lib in "${libs[@]}"; do
    soname="$(objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }')"
    cp -L "$lib" "$stage/lib_$1/${soname:-$(basename "$lib")}"
  done
  strip --strip-unneeded "$stage/lib_$1"/* "$stage/lib_$1"/bin/* 2>/dev/null || true
  tar -C "$stage/lib_$1" -cf - . | xz -T2 -6 >"$out/c0/lib_$1.tar.xz"
  echo "device_bundle: $1 libraries $(ls "$stage/lib_$1" | tr '\n' ' ')"
}
if [[ -n "${BASE_LIB:-}" ]]; then pack_libs base "$BASE_LIB"; fi
for variant in ${LIB_VARIANTS:-}; do pack_libs "${variant%%=*}" "${variant#*=}"; done
i=0
for p in "$out"/models.part-*; do
  [[ -f "$p" ]] || continue
  mkdir -p "$out/c$i"
  mv "$p" "$out/c$i/"
  last="$out/c$i"
  i=$((i + 1))
done
if [[ -n "${last:-}" ]]; then
  cp "$out/models.sha256" "$out/models.sizes" "$out/c0/"
  cp "$out/models.sha256" "$out/models.sizes" "$last/"
  [[ -d "$root/data/corpus" ]] && tar -C "$root/data" -cJf "$last/corpus.tar.xz" corpus
fi
du -sh "$out"/c* | sed 's/^/device_bundle: /'
