#!/usr/bin/env bash
# Probe for a C++-exception crash seen once on the GPU machine: a TORCH_CHECK thrown inside the CPU
# extension (built there with /opt/gcc/bin/g++) segfaulted instead of raising RuntimeError.
# Each probe runs in its own process so a crash is reported, not fatal. Usage: gpu_abi_probe.sh [OUTDIR]
set -u
out="${1:-${OUT:-results/gpu}}"
mkdir -p "$out"
py=${PYTHON:-python3}
probe() {  # name, python code
  "$py" -c "$2" >"$out/abi_$1.txt" 2>&1
  echo "abi probe $1: exit $? ($(tail -n 1 "$out/abi_$1.txt"))"
}
echo "compilers: CXX=${CXX:-unset} c++=$(command -v c++) g++=$(command -v g++) $(g++ --version 2>/dev/null | head -1)"
for so in vitplast_kernels/_C*.so; do
  echo "$so:"; ldd "$so" | grep -E 'stdc|gcc_s|gomp' | sed 's/^/  /'
done
probe cpu_check "import torch, vitplast_kernels
try:
    torch.ops.vitplast.pair_sq_distances(torch.zeros(2, 3), torch.zeros(2, 4))
except RuntimeError as e:
    print('raised RuntimeError ok:', str(e).splitlines()[0])"
probe cuda_check "import torch, vitplast_kernels
vitplast_kernels.cuda_extension_available()
try:
    torch.ops.vitplast.pair_sq_distances(torch.zeros(2, 3, device='cuda'), torch.zeros(2, 4, device='cuda'))
except RuntimeError as e:
    print('raised RuntimeError ok:', str(e).splitlines()[0])"
probe torch_own_check "import torch
try:
    torch.zeros(2, 3) @ torch.zeros(4, 5)
except RuntimeError as e:
    print('raised RuntimeError ok:', str(e).splitlines()[0])"

# Same CPU op rebuilt with the system compiler (CC=gcc CXX=g++) instead of $CXX, probed again:
# tells whether the crash follows the compiler.
if [[ -n "${CXX:-}" && "$(command -v g++)" != "$CXX" ]]; then
  tmp=/tmp/vitplast_abi_sys
  rm -rf "$tmp"; mkdir -p "$tmp/pkg"
  if VITPLAST_BUILD_CUDA=0 CC=gcc CXX=g++ "$py" setup.py build_ext --build-lib "$tmp/lib" --build-temp "$tmp/tmp" \
      >"$out/abi_sys_build.txt" 2>&1; then
    cp -r vitplast_kernels "$tmp/pkg/" && rm -f "$tmp/pkg/vitplast_kernels/"_C*.so
    cp "$tmp/lib/vitplast_kernels/"_C*.so "$tmp/pkg/vitplast_kernels/"
    PYTHONPATH="$tmp/pkg${PYTHONPATH:+:$PYTHONPATH}" probe cpu_check_system_gxx "import torch, vitplast_kernels
assert vitplast_kernels.__file__.startswith('$tmp'), vitplast_kernels.__file__
try:
    torch.ops.vitplast.pair_sq_distances(torch.zeros(2, 3), torch.zeros(2, 4))
except RuntimeError as e:
    print('raised RuntimeError ok:', str(e).splitlines()[0])"
  else
    echo "abi probe: system g++ build failed (see abi_sys_build.txt)"
  fi
fi
