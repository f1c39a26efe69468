#!/usr/bin/env bash
# The host-access check catches the mistake that broke every ViT on a GPU
# (GELU's backward_cuda read its saved input with data<T>() through an
# inline helper of gelu.h), and its kin, on copies of layers/:
#  A. the GELU mistake as it was: tests/lint/device_access.py names
#     layers/gelu.cu, GELULayer::backward_cuda and the helper; and, when a
#     CUDA compiler is given, nvcc refuses to compile that gelu.cu, saying to
#     use device_data<T>() (framework/tensor.h);
#  B. a helper defined in gelu.cpp, which the compiler cannot catch;
#  C. data<T>() written in the .cu itself;
# and the unmodified copy passes.
# Usage: device_access_test.sh SOURCE_DIR [NVCC CUDA_INCLUDE_DIR...]
set -euo pipefail
src="$1"
shift
nvcc="${1:-}"
[ $# -gt 0 ] && shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
lint="$src/tests/lint/device_access.py"

fresh_copy() {  # fresh_copy DIR: layers/ and framework/ headers of the source tree
  rm -rf "$1"
  mkdir -p "$1"
  cp -r "$src/layers" "$1/layers"
  cp -r "$src/framework" "$1/framework"
}

expect_found() {  # expect_found DIR WHAT PATTERN...
  local dir="$1" what="$2"
  shift 2
  local out rc=0
  out=$(python3 "$lint" "$dir" 2>&1) || rc=$?
  [ "$rc" -eq 1 ] || fail "$what: the check exited $rc, expected 1; it said: $out"
  for p in "$@"; do
    grep -qF -- "$p" <<< "$out" || fail "$what: the report does not name '$p': $out"
  done
  echo "  $what: found ($(head -n 1 <<< "$out" | cut -c1-160)...)"
}

echo "== the tree as it is passes"
fresh_copy "$work/clean"
python3 "$lint" "$work/clean" || fail "the unmodified copy of layers/ was reported"

echo "== A: GELU's mistake as it was (an inline helper of gelu.h reads data<float>())"
fresh_copy "$work/a"
python3 - "$work/a" <<'PY'
import sys
root = sys.argv[1]
h = open(f"{root}/layers/gelu.h").read()
start = h.index("  const Tensor& saved_input(")
end = h.index("  }\n", start) + 4
h = h[:start] + ("  const float* saved_input(const BlobVec& top, const BlobVec& bottom) const {\n"
                 "    return top[0] == bottom[0] ? input_copy_.data<float>() : bottom[0]->data.data<float>();\n"
                 "  }\n") + h[end:]
open(f"{root}/layers/gelu.h", "w").write(h)
# The layer now passes Tensors (it takes 16-bit blobs); the planted helper
# hands out a float pointer, taken beside the Tensor the call goes on with.
for f in ("gelu.cu", "gelu.cpp"):
    t = open(f"{root}/layers/{f}").read()
    call = "const Tensor& x = saved_input(top, bottom);"
    assert call in t, (f, call)
    open(f"{root}/layers/{f}", "w").write(t.replace(
        call, "const float* xp = saved_input(top, bottom);\n  (void)xp;\n  const Tensor& x = bottom[0]->data;"))
PY
expect_found "$work/a" "A" "layers/gelu.cu:" "GELULayer::backward_cuda" "GELULayer::saved_input (layers/gelu.h:" \
  "device_data<T>()"
if [ -n "$nvcc" ]; then
  echo "   and nvcc refuses to compile that gelu.cu"
  incs=(-I"$work/a" -I"$src")
  for d in "$@"; do incs+=(-I"$d"); done
  if "$nvcc" -std=c++17 -DSTRATA_WITH_CUDA -arch=sm_80 "${incs[@]}" -c "$work/a/layers/gelu.cu" -o "$work/a.o" \
      > "$work/nvcc.txt" 2>&1; then
    fail "nvcc compiled a gelu.cu whose backward_cuda reads data<float>()"
  fi
  grep -q "Tensor::data<T>() reads memory on the host and is not for CUDA code: use device_data<T>()" "$work/nvcc.txt" ||
    fail "nvcc failed for another reason: $(head -c 2000 "$work/nvcc.txt")"
  "$nvcc" -std=c++17 -DSTRATA_WITH_CUDA -arch=sm_80 -I"$src" "${incs[@]:2}" -c "$src/layers/gelu.cu" -o "$work/ok.o" \
    > "$work/nvcc_ok.txt" 2>&1 || fail "the real gelu.cu did not compile: $(head -c 2000 "$work/nvcc_ok.txt")"
  echo "  A (compiler): refused with the accessor's message; the real gelu.cu compiles"
fi

echo "== B: a helper in gelu.cpp that reads data<float>(), called by backward_cuda"
fresh_copy "$work/b"
python3 - "$work/b" <<'PY'
import sys
root = sys.argv[1]
h = open(f"{root}/layers/gelu.h").read()
h = h.replace("  Approximate approximate_;", "  const float* input_for_backward(const BlobVec& bottom) const;\n  Approximate approximate_;", 1)
open(f"{root}/layers/gelu.h", "w").write(h)
c = open(f"{root}/layers/gelu.cpp").read()
c = c.replace("STRATA_REGISTER_LAYER(", "const float* GELULayer::input_for_backward(const BlobVec& bottom) const {\n"
              "  return bottom[0]->data.data<float>();\n}\n\nSTRATA_REGISTER_LAYER(", 1)
open(f"{root}/layers/gelu.cpp", "w").write(c)
u = open(f"{root}/layers/gelu.cu").read()
old = "const Tensor& x = saved_input(top, bottom);"
assert old in u
open(f"{root}/layers/gelu.cu", "w").write(u.replace(
    old, "const float* xp = input_for_backward(bottom);\n  (void)xp;\n  const Tensor& x = bottom[0]->data;"))
PY
expect_found "$work/b" "B" "layers/gelu.cu:" "GELULayer::backward_cuda" "GELULayer::input_for_backward (layers/gelu.cpp:"

echo "== C: data<float>() in the .cu itself"
fresh_copy "$work/c"
sed -i 's/const Tensor& dy = top\[0\]->diff;/const float* dyp = top[0]->diff.data<float>();\n  (void)dyp;\n  const Tensor\& dy = top[0]->diff;/' \
  "$work/c/layers/gelu.cu"
grep -q 'diff.data<float>()' "$work/c/layers/gelu.cu" || fail "could not plant the mistake in gelu.cu"
expect_found "$work/c" "C" "layers/gelu.cu:" "GELULayer::backward_cuda" "data<T>() at layers/gelu.cu:"
echo "PASS"
