# Sourced by the device-side MMP scripts (mmp-bench.sh, mmp-switch-ab.sh, mmp-builds-ab.sh,
# mmp-configs-ab.sh, mmp-chain-trace.sh, mmp-perf.sh): T, a scratch folder removed on exit,
# PY, a python3 with numpy (the device's own, or the system's where a virtual environment's
# lacks it), and two helpers.
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
PY=python3
$PY -c "import numpy" 2> /dev/null || PY=/usr/bin/python3
# envs_of "A=1,B=2": the comma-separated list as arguments of env(1), one a line (none for
# an empty list); read them with mapfile.
envs_of() {
  local IFS=,
  local e
  for e in $1; do [ -n "$e" ] && printf '%s\n' "$e"; done
  return 0
}
# build_kernel_tracer: scripts/kernel-trace/'s CUPTI tracer against the device's CUDA, as
# $T/libkernel_trace.so (load it with CUDA_INJECTION64_PATH and $TRACE_LIBS first in
# LD_LIBRARY_PATH).
TRACE_LIBS=/usr/local/cuda/extras/CUPTI/lib64:/usr/local/cuda/lib64
build_kernel_tracer() {
  local cuda=/usr/local/cuda
  g++ -O2 -shared -fPIC -o "$T/libkernel_trace.so" scripts/kernel-trace/kernel_trace.cpp -I$cuda/include \
    -I$cuda/extras/CUPTI/include -L$cuda/lib64 -L$cuda/extras/CUPTI/lib64 -lcupti
}
