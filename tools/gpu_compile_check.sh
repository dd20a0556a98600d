#!/usr/bin/env bash
# Cross-compile the binding for the GPU vendors (cuda sm_90, hip gfx942) in both numeric modes,
# without a GPU, and read the generated code (profile v2: every dot product is an explicit fma
# chain, nothing else fused). The identical cuda build's PTX has fma.rn.f32 and no .approx,
# .ftz or f64 fma; the same build with the dot products written as a multiply and an add
# (-D MOJOLEARN_CHECK_DOT_MULADD=1) has no fma at all, so every fma is a dot product's. The
# identical hip build's gfx942 assembly: that check build has no fused or approximate f32
# instruction outside the backend's correctly rounded expansions, and the real one has more
# fma-family instructions than it (the dot products'). Needs max-core==26.7.0.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
PY=${PYTHON:-.venv/bin/python}
case "$PY" in /*) ;; */*) PY="$PWD/$PY" ;; esac  # absolute: later commands run from /
MOJOLEARN_VENDORS=cpu,cuda,hip "$PY" setup.py -q build_ext --build-lib "$out" --build-temp "$out/tmp" \
  2>&1 | grep -E "mojolearn build|error|Error" || true
status=0
for vendor in cuda hip; do
  for mode in identical fast; do
    so="$out/mojolearn/_mojolearn_training_${vendor}_${mode}.so"
    [ -f "$so" ] || { echo "FAIL: $so was not built"; status=1; continue; }
    echo "built $(basename "$so") ($(du -k "$so" | cut -f1) KiB)"
  done
done
ptx_ops() { strings "$1" | grep -oE '\b(fma|mul|add|sub|div|sqrt|ex2|lg2|rcp)\.[a-z0-9.]*' | sort | uniq -c; }
so="$out/mojolearn/_mojolearn_training_cuda_identical.so"
if [ -f "$so" ]; then
  echo "float instructions in the identical cuda build's PTX:"; ptx_ops "$so" || true
  bad=$(strings "$so" | grep -cE '\.approx\.|\.ftz\.|\bfma\.rn\.f64' || true)
  fmas=$(strings "$so" | grep -cE '\bfma\.rn\.f32' || true)
  if [ "$bad" != 0 ]; then echo "FAIL: $bad approximate/flush-to-zero/f64 fma instructions"; status=1
  elif [ "$fmas" = 0 ]; then echo "FAIL: no fma.rn.f32 (the dot products must be fma chains)"; status=1
  else echo "identical cuda PTX: $fmas lines with fma.rn.f32, no approx/ftz/f64 fma"; fi
  MOJOLEARN_VENDORS=cuda MOJOLEARN_MOJO_FLAGS="-D MOJOLEARN_CHECK_DOT_MULADD=1" "$PY" setup.py -q \
    build_ext --build-lib "$out/muladd" --build-temp "$out/muladd/tmp" 2>&1 | grep -E "error|Error" || true
  chk="$out/muladd/mojolearn/_mojolearn_training_cuda_identical.so"
  left=$(strings "$chk" 2>/dev/null | grep -cE '\bfma\.' || true)
  if [ ! -f "$chk" ]; then echo "FAIL: the dot-as-multiply-add check build was not built"; status=1
  elif [ "$left" != 0 ]; then echo "FAIL: $left fma lines that are not a dot product's"; status=1
  else echo "identical cuda PTX with the dots as multiply + add: no fma left (every fma is a dot's)"; fi
fi
# AMD: the .so embeds a binary code object, so emit the identical hip build's gfx942 assembly
# (one sidecar per kernel) with setup.py's flags. The backend expands IEEE fdiv, sqrt and 64-bit
# integer division / float-to-int conversion with v_fma / v_fmac / v_rcp; the classifier accepts
# exactly those shapes and fails on any other fused or approximate f32 instruction (a fast build
# shows the contracted inner products it would catch).
# The wrapper setup.py generated for this module above (one template, in setup.py).
wrapper="$out/tmp/mojo_wrappers/_mojolearn_training_hip_identical.mojo"
amd_unexplained() {  # the fused/approximate f32 lines of one gfx9 kernel listing that no rule explains
  awk '
  function next_op(i,  j) { for (j = i + 1; j <= NR && (a[j] ~ /^[ \t]*s_nop/ || a[j] !~ /^[ \t]+[a-z]/); j++); return a[j] }
  # The 64-bit integer division expansion: the reciprocal is scaled by 0x5f7ffffc (2^64) before
  # anything overwrites it; the scheduler may put unrelated instructions in between.
  function u64_div_rcp(i,  f, d, j, n) {
    split(a[i], f, /[ \t,]+/); d = f[3]
    for (j = i + 1; j <= NR && n < 8; j++) {
      if (a[j] ~ /^[ \t]*s_nop/ || a[j] !~ /^[ \t]+[a-z]/) continue
      n++
      if (a[j] ~ ("^[ \t]+v_mul_f32_e32 v[0-9]+, 0x5f7ffffc, " d "$")) return 1
      split(a[j], f, /[ \t,]+/); if (f[3] == d) return 0
    }
    return 0
  }
  { a[NR] = $0 }
  END {
    for (i = 1; i <= NR; i++) {
      if (a[i] ~ /^[ \t]+v_div_scale_f32/) indiv = 1
      if (indiv) div[i] = 1
      if (a[i] ~ /^[ \t]+v_div_fixup_f32/) indiv = 0
    }
    for (i = 1; i <= NR; i++) {
      l = a[i]
      if (l !~ /^[ \t]+v_(fma|fmac|mad|mac|pk_fma|fmaak|fmamk|fma_mix|dot2|exp|log|rsq|rcp|sqrt|sin|cos)[a-z0-9_]*/) continue
      if (l ~ /^[ \t]+v_(rcp_iflag_f32|mad_u64_u32|mad_i64_i32|mad_u32_u24|mad_i32_i24|mad_u16|mad_i16)/) continue
      # binary64: only the optimizer per-step scalars (profile v2) use it, through the
      # backend IEEE f64 division (div_scale, div_fmas, div_fixup) and its correctly
      # rounded f64 sqrt expansion (rsq, then fma refinement and fix-up)
      if (l ~ /_f64/) continue
      if (div[i] && l ~ /^[ \t]+v_(rcp_f32|fma_f32|fmac_f32|div_fmas_f32)/) continue   # IEEE fdiv
      if (l ~ /^[ \t]+v_sqrt_f32/) {        # correctly rounded only with the residual fix-up
        for (j = i + 1; j <= i + 8 && j <= NR; j++)
          if (a[j] ~ /v_fma_f32 v[0-9]+, -v[0-9]+, v[0-9]+, v[0-9]+/) { sq = i; break }
        if (sq == i) continue
      }
      if (sq && i - sq <= 14 && l ~ /v_fma_f32 v[0-9]+, -v[0-9]+, v[0-9]+, v[0-9]+/) continue
      if (l ~ /^[ \t]+v_fmac_f32_e32 v[0-9]+, 0x[4c]f800000, v[0-9]+/) continue   # i64 <-> f32 split
      if (l ~ /^[ \t]+v_fma_f32/ && next_op(i) ~ /v_cvt_u32_f32/) continue       # f32 -> i64 split
      if (l ~ /^[ \t]+v_rcp_f32_e32 v[0-9]+, / && u64_div_rcp(i)) continue
      n = split(FILENAME, p, "/"); print p[n] ":" i ":" l
    }
  }' "$1"
}
arch=${MOJOLEARN_HIP_ARCH:-gfx942}
host=(-D MOJOLEARN_TARGET_CPU=native)  # setup.py's default host target; the device code ignores it
[ "$(uname -m)" = x86_64 ] && host=(--target-cpu x86-64-v3 -D MOJOLEARN_TARGET_CPU=x86-64-v3)
fma_family() { cat "$@" | grep -E '^\s+v_(fma|fmac|mad|mac|pk_fma|fmaak|fmamk|fma_mix)[a-z0-9_]*' | grep -c f32 || true; }
emit_hip() {  # emit_hip DIR [extra flags]: the identical hip build's kernels as DIR/*.amdgcn
  local dir=$1; shift; mkdir -p "$dir"
  PATH="$(dirname "$PY"):$PATH" mojo build "$wrapper" -I mojo -I mojo/bindings \
    -D MOJOLEARN_VENDOR=hip -D MOJOLEARN_MODE=identical --fp-mode contract=off \
    "${host[@]}" --target-accelerator "$arch" "$@" \
    -D MOJOLEARN_ACCELERATOR="$arch" --emit asm -o "$dir/hip.s" >"$dir/log" 2>&1 &&
    ls "$dir"/*.amdgcn >/dev/null 2>&1
}
if emit_hip "$out/asm" && emit_hip "$out/asm_muladd" -D MOJOLEARN_CHECK_DOT_MULADD=1; then
  echo "fused/approximate f32 instructions in the identical hip build's $arch kernels:"
  cat "$out"/asm/*.amdgcn | grep -oE '^\s+v_(fma|fmac|mad|mac|pk_fma|fmaak|fmamk|fma_mix|dot2|exp|log|rsq|rcp|sqrt|div_fmas)[a-z0-9_]*' \
    | tr -d ' \t' | grep -vE '^v_(rcp_iflag|mad_[iu](64|32|16))' | sort | uniq -c || true
  bad=$(for k in "$out"/asm_muladd/*.amdgcn; do amd_unexplained "$k"; done)
  real=$(fma_family "$out"/asm/*.amdgcn); check=$(fma_family "$out"/asm_muladd/*.amdgcn)
  if [ -n "$bad" ]; then echo "FAIL: with the dots as multiply + add, fused/approximate f32 instructions outside fdiv/sqrt/int expansions:"
    echo "$bad" | head -20; status=1
  elif [ "$real" -le "$check" ]; then echo "FAIL: the dot products emit no fma ($real fma-family lines, $check without them)"; status=1
  else echo "identical hip $arch code: $real fma-family lines, $check with the dots as multiply + add, all inside IEEE fdiv/sqrt and integer expansions"; fi
else
  echo "FAIL: could not emit the identical hip build's assembly"; tail -20 "$out"/asm*/log; status=1
fi
# On this GPU-less host: the cuda binding imports, vendor auto-selection falls back to cpu, and a
# forced cuda step fails with a RuntimeError that changes nothing.
(cd python && find mojolearn -name '*.py' -not -path '*/__pycache__/*' -exec cp --parents {} "$out" \;)
check=$(cd / && PYTHONPATH="$out" timeout 120 "$PY" -c "
import mojolearn
assert mojolearn.vendor_used() == 'cpu', mojolearn.vendor_used()
print('auto-selected vendor without a GPU: cpu')" 2>&1) || status=1
echo "$check"
check=$(cd / && PYTHONPATH="$out" MOJOLEARN_VENDOR=cuda timeout 120 "$PY" -c "
import mojolearn
t = mojolearn.SmallMLPTrainer(*mojolearn.init_small_mlp(0), data_schedule={'check': 1})
before = t.state_hash()
try:
    t.train_step(mojolearn.zeros((4, 8)), mojolearn.Array.from_list([0, 1, 2, 0], dtype='<i4'))
    raise SystemExit('a cuda step ran on a host without a GPU?')
except RuntimeError as e:
    assert t.state_hash() == before and t.step_ == 0
    print('forced cuda without a GPU:', e)" 2>&1) || status=1
echo "$check"
exit $status
