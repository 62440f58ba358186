#!/usr/bin/env bash
# Device call 1 (2026-12-07 (i)): keydiff's test after 1fbbd49, keydiff / knorm against 38afced's
# key_scores.cu, then where the top keys cost time at w = 32: ncu kernel durations per top mode.
set -u
K=/tmp/kv
mkdir -p $K/lib_base "$OUT"
xz -dc .gpu/c0/bins.tar.xz | tar -xf - -C $K || exit 3
xz -dc .gpu/c0/lib_base.tar.xz | tar -xf - -C $K/lib_base || exit 3
export LD_LIBRARY_PATH=$K/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
for t in test_cuda_backend_test test_cuda_score_test; do
  s=$(date +%s); timeout 200 $K/bin/$t >"$OUT/$t.txt" 2>&1
  echo "$t rc=$? $(($(date +%s) - s)) s: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$t.txt" | tr '\n' ' ')"
done
for r in 1 2 3; do
  for v in base new; do
    lib=$K/lib; [ $v = base ] && lib=$K/lib_base/lib:$K/lib
    LD_LIBRARY_PATH=$lib:/usr/local/cuda/lib64 timeout 100 $K/bin/gpu_score_bench --small-n \
      --methods knorm,keydiff >"$OUT/keys_${v}_$r.txt" 2>&1 || echo "keys $v $r rc=$?"
  done
done
python3 - "$OUT" <<'PY'
import collections, glob, re, statistics, sys
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(sys.argv[1] + "/keys_*_[123].txt")):
    v = re.search(r"keys_(new|base)_", f).group(1)
    for line in open(f):
        m = re.match(r"(.*?)\s+(\d+\.\d+) ms\s+floor", line)
        if m:
            rows[m.group(1).strip()][v].append(float(m.group(2)))
for k, d in rows.items():
    if d["new"] and d["base"]:
        a, b = statistics.median(d["new"]), statistics.median(d["base"])
        print(f"{k:45s} new {a:.4f} base {b:.4f} {100 * (a / b - 1):+.1f}%")
PY
for w in 32 8; do
  for mode in 0 2; do
    csv=$OUT/ncu_w${w}_mode$mode.csv
    timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
      $K/bin/gpu_score_bench --profile --window $w --top-mode $mode --reps 20 >$csv 2>/dev/null
    echo "== w=$w top mode $mode (ncu rc=$?)"
    python3 tools/kernel_breakdown.py $csv --top 8 | cut -c1-150
  done
done
s=$(date +%s); timeout 200 $K/bin/gpu_score_bench --top-ab >"$OUT/topab.txt" 2>&1
echo "top-ab rc=$? $(($(date +%s) - s)) s"
python3 - "$OUT/topab.txt" <<'PY'
import collections, re, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"(.*?)\s+(\d+\.\d+) ms\s+floor", line)
    if m: d[m.group(1).strip()].append(float(m.group(2)))
for k, v in d.items(): print(f"{k:60s} {statistics.median(v):.4f} ({len(v)})")
PY
