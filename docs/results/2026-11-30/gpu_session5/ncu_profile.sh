#!/usr/bin/env bash
B=$(cd "$(dirname "$0")" && pwd); W=/tmp/kk; mkdir -p $W
for f in gpu_score_bench; do xz -dc $B/$f.xz > $W/$f; chmod +x $W/$f; done
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
N=/usr/local/cuda/bin/ncu
$N --clock-control none -k regex:keymajor -c 1 --set full --import-source no -o $W/km $W/gpu_score_bench --profile --reps 1 >/dev/null 2>&1
$N -i $W/km.ncu-rep --page details --csv 2>/dev/null | grep -E '"(Duration|Executed Instructions|Issue Slots Busy|Issued Ipc Active|Achieved Occupancy|Registers Per Thread|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|No Eligible|One or More Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Warp Cycles Per Issued Instruction|Stall [A-Za-z ]*|L1/TEX Hit Rate|L2 Hit Rate|Shared Memory Configuration Size|Dynamic Shared Memory Per Block|Grid Size|Waves Per SM)"' | awk -F'","' '{print $(NF-2) " = " $NF}' | sort -u | head -60
$N -i $W/km.ncu-rep --page raw --csv 2>/dev/null | python3 -c "
import csv,sys
r=list(csv.reader(sys.stdin))
h=r[0]; v=r[2] if len(r)>2 else r[1]
for k,x in zip(h,v):
  if any(s in k for s in ['smsp__average_warp_latency_issue_stalled','smsp__pcsamp_warps_issue_stalled','sm__pipe_tensor','sm__inst_executed_pipe_','smsp__inst_executed.sum','sm__throughput','pipe_shared']) and x not in ('0','0.00'):
    print(k,x)
" | sort -t' ' -k2 -g -r | head -60
$N -i $W/km.ncu-rep --page source --print-source sass --csv 2>/dev/null > $W/sass.csv; wc -l $W/sass.csv; head -3 $W/sass.csv
python3 - $W/sass.csv <<'PY'
import csv,sys,collections
rows=list(csv.reader(open(sys.argv[1])))
# find header row (contains 'Source')
hi=next(i for i,r in enumerate(rows) if any('Source' == c or c.startswith('Source') for c in r))
h=rows[hi]; print(h)
def col(name):
  for i,c in enumerate(h):
    if c.startswith(name): return i
  return None
cs=col('Source'); ce=col('Instructions Executed'); cw=col('Warp Stall Sampling (All')
data=[r for r in rows[hi+1:] if len(r)==len(h)]
def f(x):
  try: return float(x.replace(',',''))
  except: return 0.0
tot=sum(f(r[ce]) for r in data); print('total warp instr', tot)
op=collections.Counter()
for r in data:
  o=r[cs].split()[0] if r[cs].split() else '?'
  if o.startswith('@'): o=r[cs].split()[1]
  op[o.split('.')[0]]+=f(r[ce])
for o,c in op.most_common(25): print('%-10s %12.0f %5.1f%%'%(o,c,100*c/tot))
print('--- top stall lines')
for r in sorted(data,key=lambda r:-f(r[cw]))[:40]: print(r[cw], r[ce], r[cs][:90])
PY
