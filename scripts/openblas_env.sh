# Sourced by the scripts that run models: OpenBLAS does not recognize some CPUs (this project's
# Xeon under a hypervisor among them) and falls back to generic SSE3 kernels, ~4x slower for the
# projections. Pick the kernels from the CPU flags unless the caller chose already.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -r /proc/cpuinfo ]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
  fi
fi
