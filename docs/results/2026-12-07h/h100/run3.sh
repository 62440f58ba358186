#!/usr/bin/env bash
# Device call (2026-12-07 (h), late): knorm and keydiff against 38afced's key_scores.cu, then pytest on CUDA.
set -u
K=/tmp/kv
mkdir -p $K/lib_base "$OUT"
xz -dc .gpu/c0/bins.tar.xz | tar -xf - -C $K || exit 3
xz -dc .gpu/c0/lib_base.tar.xz | tar -xf - -C $K/lib_base || exit 3
for r in 1 2; do
  for v in base new; do
    lib=$K/lib; [ $v = base ] && lib=$K/lib_base:$K/lib
    s=$(date +%s)
    LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64 timeout 150 $K/bin/gpu_score_bench --small-n \
      >"$OUT/smalln2_${v}_$r.txt" 2>&1
    echo "small-n $v $r rc=$? $(($(date +%s) - s)) s"
  done
done
python3 - "$OUT" <<'PY'
import collections, glob, re, statistics, sys
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(sys.argv[1] + "/smalln2_*_[12].txt")):
    v = re.search(r"smalln2_(new|base)_", f).group(1)
    for line in open(f):
        m = re.match(r"(.*?)\s+(\d+\.\d+) ms\s+floor", line)
        if m and ("knorm" in line or "keydiff" in line):
            rows[m.group(1).strip()][v].append(float(m.group(2)))
for k, d in rows.items():
    a, b = statistics.median(d["new"]), statistics.median(d["base"])
    print(f"{k:50s} new {a:.4f} base {b:.4f} {100 * (a / b - 1):+.1f}%")
PY
bash tools/python_gpu_check.sh --tests 2>&1 | tail -15
