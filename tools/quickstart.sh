#!/usr/bin/env bash
# The README's first command: install what is missing, build the strata
# program (only it, on every core, with progress), and train the digits
# convnet on the bundled data. Arguments go to `strata train`.
#
# Where there is no GPU driver (nvidia-smi lists no GPU; without nvidia-smi,
# there is no /dev/nvidiaN),
# compiling the CUDA code would double the build for nothing: the build is
# then CPU-only, in build-cpu/, configured exactly as tools/run_tests.sh's
# cpu stage configures it (so the two share their work), and build/, whose
# CUDA code the tests and CI compile, is left alone. STRATA_CUDA=ON asks for
# build/ (CUDA compiled when nvcc is found) anyway; STRATA_CUDA=OFF for the
# CPU-only build on a machine with a GPU. STRATA_QUICKSTART_DRY_RUN=1 prints
# the choice and the build command without running them.
set -euo pipefail
cd "$(dirname "$0")/.."

elapsed() { local s=$(($1)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

gpu_driver() {
  if command -v nvidia-smi > /dev/null 2>&1; then
    nvidia-smi -L 2> /dev/null | grep -q '^GPU '
  else
    compgen -G '/dev/nvidia[0-9]*' > /dev/null
  fi
}

case "${STRATA_CUDA:-auto}" in
  ON | on | 1) cuda=1; why="STRATA_CUDA=ON" ;;
  OFF | off | 0) cuda=0; why="STRATA_CUDA=OFF" ;;
  auto)
    if gpu_driver; then cuda=1; why="a GPU driver is present"; else cuda=0; why="no GPU driver found"; fi ;;
  *) echo "quickstart.sh: STRATA_CUDA must be ON or OFF, got '$STRATA_CUDA'" >&2; exit 2 ;;
esac

if [ "$cuda" -eq 1 ]; then
  echo "quickstart: building build/strata with CUDA when nvcc is found ($why)"
  dir=build
  build=(bash tools/build.sh --dir build --target strata)
else
  echo "quickstart: building build-cpu/strata, CPU-only ($why; STRATA_CUDA=ON builds the CUDA code too)"
  dir=build-cpu
  build=(bash tools/build.sh --dir build-cpu --target strata -DSTRATA_CUDA=OFF -DSTRATA_BUILD_BENCH=OFF)
fi
# STRATA_QUICKSTART_DRY_RUN=1: say what would be built, and stop.
if [ "${STRATA_QUICKSTART_DRY_RUN:-0}" = 1 ]; then
  echo "would run: ${build[*]}"
  exit 0
fi
t0=$SECONDS
"${build[@]}"
build_s=$((SECONDS - t0))

# --overwrite: running the quickstart again retrains the example, replacing
# its own earlier snapshots in models/digits/snapshots (a plain `strata train`
# refuses to replace an earlier run's files).
echo "==> train: $dir/strata train --solver models/digits/solver.prototxt --overwrite $*"
t1=$SECONDS
rc=0
"./$dir/strata" train --solver models/digits/solver.prototxt --overwrite "$@" || rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
echo "quickstart: done in $(elapsed $((SECONDS - t0))) (build $(elapsed "$build_s"), training $(elapsed $((SECONDS - t1)))); the program is $dir/strata"
