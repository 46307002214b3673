#!/usr/bin/env bash
# Probe of the C++ exception path of the built extensions: a TORCH_CHECK thrown inside the CPU extension
# must raise RuntimeError with its whole message, not crash (a toolchain that links the C++ runtime
# statically gives the extension a second runtime; setup.py links -lstdc++ ahead of the driver's
# libraries against that). Each probe runs in its own process so a crash is reported, not fatal.
# Usage: gpu_abi_probe.sh [OUTDIR]
set -u
out="${1:-${OUT:-results/gpu}}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
py=${PYTHON:-python3}
needed() {  # shared libraries a .so names (ELF NEEDED entries), on one line
  readelf -d "$1" 2>/dev/null | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' '
}
probe() {  # name, python code
  "$py" -c "$2" >"$out/abi_$1.txt" 2>&1
  echo "abi probe $1: exit $? ($(tail -n 1 "$out/abi_$1.txt"))"
}
echo "compilers: CXX=${CXX:-unset} c++=$(command -v c++) g++=$(command -v g++) $(g++ --version 2>/dev/null | head -1)"
# Per extension: the C++ runtime it links (NEEDED entries; no libstdc++ but libgcc_s means a static
# runtime), whether the .so defines the C++ ABI itself, then the throw.
for so in vitplast_kernels/_C*.so; do
  echo "$so:"; ldd "$so" | grep -E 'stdc|gcc_s|gomp' | sed 's/^/  /'
  echo "  NEEDED: $(needed "$so")"
  echo "  defines __cxa_throw/__gxx_personality_v0: $(nm -D --defined-only "$so" 2>/dev/null \
    | grep -cE ' (__cxa_throw|__gxx_personality_v0)$') (0 = uses the shared libstdc++)"
done
echo "CXX -v: $(${CXX:-g++} -v 2>&1 | tail -1)"
echo "CXX link of libstdc++: $(echo 'int main(){ try { throw 1; } catch (int) {} }' | \
  ${CXX:-g++} -x c++ - -o /tmp/abi_probe_exe 2>&1 && \
  (ldd /tmp/abi_probe_exe | grep -c 'libstdc++') ) (1 = dynamic)"
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

# The CPU op rebuilt with the system compiler instead of $CXX and probed again: if the throw above
# still crashes, tells whether the crash follows the compiler.
rebuild_probe() {  # name, env assignments...
  local name=$1; shift
  local tmp=/tmp/vitplast_abi_$name
  rm -rf "$tmp"; mkdir -p "$tmp/pkg"
  if env VITPLAST_BUILD_CUDA=0 "$@" "$py" setup.py build_ext --build-lib "$tmp/lib" --build-temp "$tmp/tmp" \
      >"$out/abi_build_$name.txt" 2>&1; then
    cp -r vitplast_kernels "$tmp/pkg/" && rm -f "$tmp/pkg/vitplast_kernels/"_C*.so
    cp "$tmp/lib/vitplast_kernels/"_C*.so "$tmp/pkg/vitplast_kernels/"
    echo "  $name NEEDED: $(needed "$tmp/pkg/vitplast_kernels/"_C.*.so)"
    # from inside $tmp/pkg: `python -c` puts the working directory ahead of PYTHONPATH
    (cd "$tmp/pkg" && probe "cpu_check_$name" "import torch, vitplast_kernels
assert vitplast_kernels.__file__.startswith('$tmp'), vitplast_kernels.__file__
try:
    torch.ops.vitplast.pair_sq_distances(torch.zeros(2, 3), torch.zeros(2, 4))
except RuntimeError as e:
    print('raised RuntimeError ok:', str(e).splitlines()[0])")
  else
    echo "abi probe: $name build failed (see abi_build_$name.txt)"
  fi
}
if [[ -n "${CXX:-}" && "$(command -v g++)" != "$CXX" ]]; then
  rebuild_probe system_gxx CC=gcc CXX=g++
fi
