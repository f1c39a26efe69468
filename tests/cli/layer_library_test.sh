#!/usr/bin/env bash
# A layer written outside strata's tree, as a researcher writes one:
#  1. `cmake --install` puts strata, its headers and strataConfig.cmake in a
#     temporary prefix;
#  2. tools/examples/swish_layer (a Swish layer with CPU and CUDA code) builds
#     against it with find_package(strata);
#  3. the installed strata loads it: `strata layers` lists Swish with its
#     library; `strata check-layers --plugin` runs the generic checks on it
#     and passes; `strata train --plugin` (and STRATA_PLUGINS) trains the
#     digits with a Swish layer in the net to >= 90% test accuracy;
#  4. refusals, each naming what to do: a second library that registers a
#     taken name, a library built against another strata version, a shared
#     library that is no layer library, a missing file, and a net that names
#     Swish without the library; a layer whose gradient is wrong fails
#     check-layers.
# Usage: layer_library_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

echo "== cmake --install into a temporary prefix"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" > "$work/install.txt" 2>&1 || { cat "$work/install.txt"; fail "install failed"; }
strata="$prefix/bin/strata"
[ -x "$strata" ] || fail "no bin/strata in the prefix"
[ -f "$prefix/include/strata/framework/plugin_api.h" ] || fail "no headers in the prefix"
[ -f "$prefix/lib/cmake/strata/strataConfig.cmake" ] || fail "no strataConfig.cmake in the prefix"

echo "== build tools/examples/swish_layer against it"
cp -r "$src/tools/examples/swish_layer" "$work/swish"
cmake -S "$work/swish" -B "$work/swish/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  > "$work/configure.txt" 2>&1 || { cat "$work/configure.txt"; fail "the example did not configure"; }
grep -q "swish_layer: a strata layer library" "$work/configure.txt" || { cat "$work/configure.txt"; fail "no summary line"; }
grep -o "swish_layer: a strata layer library.*" "$work/configure.txt" | sed 's/^/  /'

cmake --build "$work/swish/build" -j 2 > "$work/compile.txt" 2>&1 || { cat "$work/compile.txt"; fail "the example did not build"; }
lib="$work/swish/build/libswish_layer.so"
[ -f "$lib" ] || fail "no $lib"

echo "== strata layers --plugin"
"$strata" layers --plugin "$lib" > "$work/layers.txt" 2>&1 || { cat "$work/layers.txt"; fail "strata layers --plugin failed"; }
grep -q "^Swish .*\[from $lib\]" "$work/layers.txt" || { cat "$work/layers.txt"; fail "Swish not listed with its library"; }
grep -q "^Convolution " "$work/layers.txt" || fail "the built-in layers are gone"

echo "== strata check-layers --plugin"
"$strata" check-layers --plugin "$lib" > "$work/check.txt" 2>&1 || { cat "$work/check.txt"; fail "check-layers failed on Swish"; }
cat "$work/check.txt"
[ "$(grep -c '^Swish ' "$work/check.txt")" = 2 ] || fail "not both examples of Swish checked"
grep -q "2 example(s) of 1 type(s) checked on the CPU, 0 failed: all passed" "$work/check.txt" || fail "no summary"
# The 16-bit storage column: "-" for a layer that takes f32 alone, as Swish does.
grep -q "16-bit storage" "$work/check.txt" || fail "no 16-bit storage column"
# The NHWC column: Swish is element-wise (a NeuronLayer), so it takes
# channels-last blobs, and its NHWC calls give its NCHW bits.
grep -q "NHWC" "$work/check.txt" || fail "no NHWC column"
# The CPU-vs-CUDA column: run where a CUDA build finds a GPU, else "-" and why.
grep -q "CPU vs CUDA" "$work/check.txt" || fail "no CPU vs CUDA column"
if grep -Eq '^Swish +0 +ok +ok +ok +- +ok +- *$' "$work/check.txt"; then
  grep -q "CPU vs CUDA not run for 2 example(s): " "$work/check.txt" || fail "CPU vs CUDA not run, and no reason given"
else
  grep -Eq '^Swish +0 +ok +ok +ok +- +ok +ok *$' "$work/check.txt" || fail "CPU vs CUDA neither passed nor said why it did not run"
fi

echo "== strata train --plugin: the digits with a Swish layer"
mkdir -p "$work/models" "$work/data"
cp -r "$src/models/digits" "$work/models/digits"
rm -rf "$work/models/digits/snapshots"
cp -r "$src/data/digits" "$work/data/digits"
d="$work/models/digits"
# Swish in place of the first ReLU (in place, as the ReLU ran).
sed -e 's|layer { name: "relu1"  type: "ReLU"  bottom: "conv1"  top: "conv1" }|layer { name: "swish1"  type: "Swish"  bottom: "conv1"  top: "conv1" }|' \
    "$d/train.prototxt" > "$d/swish.prototxt"
grep -q '"Swish"' "$d/swish.prototxt" || fail "could not put Swish into the net"
sed -e 's|^net:.*|net: "swish.prototxt"|' -e 's|^max_iter:.*|max_iter: 200|' -e 's|^test_interval:.*|test_interval: 200|' \
    "$d/solver.prototxt" > "$d/swish_solver.prototxt"
"$strata" train --solver "$d/swish_solver.prototxt" --plugin "$lib" --threads 2 > "$work/train.txt" 2>&1 ||
  { cat "$work/train.txt"; fail "training with the Swish layer failed"; }
acc=$(grep -o 'accuracy = [0-9.]*' "$work/train.txt" | tail -n 1 | awk '{print $3}')
echo "  test accuracy with Swish after 200 iterations: $acc"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.90) }' || { cat "$work/train.txt"; fail "accuracy $acc < 0.90"; }
rm -rf "$d/snapshots"
STRATA_PLUGINS="$lib" "$strata" train --solver "$d/swish_solver.prototxt" --threads 2 --overwrite > "$work/train_env.txt" 2>&1 ||
  { cat "$work/train_env.txt"; fail "STRATA_PLUGINS did not load the library"; }

echo "== refusals"
expect_error() {  # expect_error WHAT PATTERN COMMAND...
  local what="$1" pattern="$2"
  shift 2
  if "$@" > "$work/err.txt" 2>&1; then cat "$work/err.txt"; fail "$what was accepted"; fi
  grep -q -- "$pattern" "$work/err.txt" || { cat "$work/err.txt"; fail "$what: no message matching '$pattern'"; }
  echo "  $what: $(grep -m1 -e 'error: ' -e "$pattern" "$work/err.txt" | sed 's/^.*error: /error: /' | cut -c1-160)"
}
# The net names Swish, but no library registers it.
expect_error "Swish without its library" "load a layer library of yours that registers it with --plugin PATH" "$strata" train --solver "$d/swish_solver.prototxt" --overwrite
# A second library registering the same name.
cp "$lib" "$work/copy_of_swish.so"
expect_error "a taken layer name" "registers layer type 'Swish', which is taken (from $lib)" \
  "$strata" layers --plugin "$lib" --plugin "$work/copy_of_swish.so"
# The same path twice loads once.
"$strata" layers --plugin "$lib" --plugin "$lib" > /dev/null || fail "one library given twice was refused"
# Built against another version.
cat > "$work/old.cpp" <<'CPP'
#include "framework/plugin_api.h"
STRATA_PLUGIN();
CPP
g++ -std=c++17 -shared -fPIC -DSTRATA_BUILDING_PLUGIN -DSTRATA_VERSION='"0.0.1"' -I"$prefix/include/strata" \
  "$work/old.cpp" -o "$work/old.so"
expect_error "another version" "was built against strata 0.0.1, .*; this strata is strata .*rebuild it against this strata" \
  "$strata" layers --plugin "$work/old.so"
# No layer library at all, and no file.
echo 'int not_a_layer_library() { return 1; }' > "$work/other.cpp"
g++ -shared -fPIC "$work/other.cpp" -o "$work/other.so"
expect_error "a shared library that is no layer library" "is no strata layer library: it defines no strata_plugin_abi" \
  "$strata" layers --plugin "$work/other.so"
expect_error "a missing file" "cannot load layer library '$work/missing.so'" "$strata" layers --plugin "$work/missing.so"
# A library whose layer registers nothing.
cat > "$work/empty.cpp" <<'CPP'
#include "framework/plugin_api.h"
STRATA_PLUGIN();
CPP
version=$(sed -n 's/^set(strata_VERSION "\(.*\)")$/\1/p' "$prefix/lib/cmake/strata/strataConfig.cmake")
[ -n "$version" ] || fail "no strata_VERSION in strataConfig.cmake"
g++ -std=c++17 -shared -fPIC -DSTRATA_BUILDING_PLUGIN -DSTRATA_VERSION="\"$version\"" -I"$prefix/include/strata" \
  "$work/empty.cpp" -o "$work/empty.so"
expect_error "a library without layers" "registers no layer" "$strata" layers --plugin "$work/empty.so"
# check-layers fails a layer whose backward is wrong: Swish with a wrong derivative.
cp -r "$src/tools/examples/swish_layer" "$work/wrong"
sed -i 's|return dy \* (s + x \* s \* (1.0f - s));|return dy * s;|; s|"Swish"|"WrongSwish"|' "$work/wrong/swish.h" "$work/wrong/swish.cpp"
grep -q 'return dy \* s;' "$work/wrong/swish.h" || fail "could not break the example's derivative"
cmake -S "$work/wrong" -B "$work/wrong/build" -DCMAKE_PREFIX_PATH="$prefix" > /dev/null 2>&1 &&
  cmake --build "$work/wrong/build" -j 2 > /dev/null 2>&1 || fail "the broken example did not build"
expect_error "a wrong gradient" "WrongSwish example {} bottoms \[2, 3, 4\] phase TRAIN: gradients: bottom 0 gradient element" \
  "$strata" check-layers --plugin "$work/wrong/build/libswish_layer.so"
echo "PASS"
