#!/usr/bin/env bash
# The quickstart's choices and its build progress, without building: where
# there is no GPU driver it builds only `strata`, CPU-only, in build-cpu/
# (configured as tools/run_tests.sh's cpu stage, so build/ keeps its CUDA
# code); STRATA_CUDA overrides; and the build's output becomes progress lines.
# Usage: quickstart_test.sh SOURCE_DIR
set -euo pipefail
src="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# A fake nvidia-smi first on PATH: one that lists a GPU, one that fails (a
# driver that is not loaded).
mkdir -p "$work/gpu" "$work/nogpu"
printf '#!/bin/sh\necho "GPU 0: NVIDIA H100 (UUID: GPU-0)"\n' > "$work/gpu/nvidia-smi"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver" >&2\nexit 9\n' \
  > "$work/nogpu/nvidia-smi"
chmod +x "$work/gpu/nvidia-smi" "$work/nogpu/nvidia-smi"
plan() {
  local bin=$1
  shift
  env PATH="$bin:$PATH" STRATA_QUICKSTART_DRY_RUN=1 "$@" bash "$src/tools/quickstart.sh" 2>&1
}

out=$(plan "$work/nogpu")
[[ $out == *"no GPU driver found"* ]] || fail "no driver: reason not given: $out"
[[ $out == *"would run: bash tools/build.sh --dir build-cpu --target strata -DSTRATA_CUDA=OFF -DSTRATA_BUILD_BENCH=OFF"* ]] ||
  fail "no driver: not the CPU-only strata build in build-cpu/: $out"
out=$(plan "$work/gpu")
[[ $out == *"would run: bash tools/build.sh --dir build --target strata" ]] || fail "GPU: not build/ with CUDA: $out"
out=$(plan "$work/nogpu" STRATA_CUDA=ON)
[[ $out == *"STRATA_CUDA=ON"*"would run: bash tools/build.sh --dir build --target strata" ]] ||
  fail "STRATA_CUDA=ON: not build/: $out"
out=$(plan "$work/gpu" STRATA_CUDA=OFF)
[[ $out == *"--dir build-cpu"* ]] || fail "STRATA_CUDA=OFF: not build-cpu/: $out"
rc=0
out=$(plan "$work/gpu" STRATA_CUDA=maybe) || rc=$?
[ "$rc" -eq 2 ] && [[ $out == *"STRATA_CUDA must be ON or OFF"* ]] || fail "STRATA_CUDA=maybe: exit $rc, $out"

# tools/run_tests.sh's cpu stage configures build-cpu/ with the same settings
# (the two must not fight over its cache).
grep -q -- '-B build-cpu -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=OFF' "$src/tools/run_tests.sh" &&
  grep -q -- '-DSTRATA_BUILD_BENCH=OFF' "$src/tools/run_tests.sh" ||
  fail "tools/run_tests.sh no longer configures build-cpu/ as the quickstart does"

# Progress: Make's and Ninja's lines become one line per 10% (not a
# terminal), all of the output goes to the log.
{
  for p in 0 3 9 10 12 25 26 50 77 99 100; do printf '[%3d%%] Building CXX object framework/CMakeFiles/e.dir/f%d.cpp.o\n' "$p" "$p"; done
  echo "In file included from x.h:1: warning: something"
} | STRATA_PROGRESS=lines bash "$src/tools/build_progress.sh" "$work/make.log" > "$work/make.out"
[ "$(grep -c 'building:' "$work/make.out")" -eq 7 ] || fail "make progress: $(cat "$work/make.out")"
grep -q "building: 100%" "$work/make.out" || fail "make progress does not reach 100%: $(cat "$work/make.out")"
[ "$(wc -l < "$work/make.log")" -eq 12 ] || fail "the log does not hold every line: $(cat "$work/make.log")"
for i in 1 2 3 4; do echo "[$i/4] Building CXX object a/b$i.cpp.o"; done |
  STRATA_PROGRESS=tty bash "$src/tools/build_progress.sh" "$work/ninja.log" > "$work/ninja.out"
grep -q "building:  50%.*b2.cpp" "$work/ninja.out" || fail "ninja progress (terminal): $(cat -v "$work/ninja.out")"
[ "$(grep -c '' "$work/ninja.out")" -le 1 ] || fail "terminal progress is not one updating line: $(cat -v "$work/ninja.out")"

[ "$failures" -eq 0 ] && echo "PASS: quickstart choices and build progress"
exit "$failures"
