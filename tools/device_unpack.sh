#!/usr/bin/env bash
# On the lent GPU machine: collects what tools/device_bundle.sh packed, from one or more calls.
#   tools/device_unpack.sh DIR part      copy DIR/models.part-* of this call into /tmp/kv/parts
#   tools/device_unpack.sh DIR finish    unpack DIR/bins.tar.xz into /tmp/kv, rebuild the models
#                                        into /tmp/kv/models and check their sha256
# Prints the environment to use: LD_LIBRARY_PATH (the bundled libraries and CUDA's) and
# KVEVICT_MODEL_DIR.
set -euo pipefail
dir="${1:?usage: device_unpack.sh DIR part|finish}"
mode="${2:?usage: device_unpack.sh DIR part|finish}"
kv=/tmp/kv
mkdir -p "$kv/parts" "$kv/models"
case "$mode" in
  part)
    for p in "$dir"/models.part-*; do [[ -f "$p" ]] && cp "$p" "$kv/parts/"; done
    cp "$dir"/models.sha256 "$dir"/models.sizes "$kv/" 2>/dev/null || true
    ls "$kv/parts"
    ;;
  finish)
    [[ -f "$dir/bins.tar.xz" ]] && xz -dc "$dir/bins.tar.xz" | tar -xf - -C "$kv"
    for p in "$dir"/models.part-*; do [[ -f "$p" ]] && cp "$p" "$kv/parts/"; done
    cp "$dir"/models.sha256 "$dir"/models.sizes "$kv/" 2>/dev/null || true
    if [[ -f "$kv/models.sizes" ]]; then
      cat "$kv"/parts/models.part-* >"$kv/models.stream"
      off=0
      while read -r name size; do
        # dd, not tail | head: head closing the pipe early fails tail (SIGPIPE), and with
        # pipefail that stopped the script after the first model.
        dd if="$kv/models.stream" of="$kv/models/$name" bs=4M iflag=skip_bytes,count_bytes \
          skip="$off" count="$size" status=none
        off=$((off + size))
      done <"$kv/models.sizes"
      rm -f "$kv/models.stream"
      (cd "$kv/models" && sha256sum -c "$kv/models.sha256")
    fi
    ;;
  *) echo "device_unpack: unknown mode '$mode'; expected part or finish" >&2; exit 2 ;;
esac
