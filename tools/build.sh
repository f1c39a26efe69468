#!/usr/bin/env bash
# Configures and builds strata (Release) on every core, showing progress
# (tools/build_progress.sh: on a terminal one line that updates, elsewhere a
# line every 10%). The full output goes to build.log, whose end is shown when
# a step fails.
# Usage: bash tools/build.sh [--dir DIR] [--target T]... [cmake arguments]
#   --dir DIR     build folder (default: build)
#   --target T    build only T (repeatable; default: every target)
#   other arguments go to cmake's configure step (e.g. -DSTRATA_CUDA=OFF)
# STRATA_BUILD_JOBS sets the number of compile jobs (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=build
targets=()
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=${2:?--dir needs a folder}; shift 2 ;;
    --target) targets+=(--target "${2:?--target needs a target name}"); shift 2 ;;
    *) cmake_args+=("$1"); shift ;;
  esac
done
jobs=${STRATA_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}
log=build.log
: > "$log"

elapsed() { local s=$(($1)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

t_start=$SECONDS
echo "==> packages: installing what is missing (tools/install_deps.sh)"
bash tools/install_deps.sh

echo "==> configure: $dir/ ${cmake_args[*]:-}"
t0=$SECONDS
if ! cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}" >> "$log" 2>&1; then
  echo "configure failed; the end of $log:"
  tail -n 40 "$log" | sed 's/^/    | /'
  exit 1
fi
# What this machine gave the build: the backends on or off, and why.
grep -E "^-- (CUDA [0-9]|CUDA not|STRATA_CUDA|NCCL|no CUDA|MPI [0-9]|MPI not)" "$log" | sed 's/^/    /' || true
echo "    done in $(elapsed $((SECONDS - t0)))"

what=${targets[*]:-every target}
echo "==> build: ${what//--target /} on $jobs cores"
t0=$SECONDS
set +e
cmake --build "$dir" -j "$jobs" "${targets[@]}" 2>&1 | bash tools/build_progress.sh "$log"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  echo "build failed (exit $rc) after $(elapsed $((SECONDS - t0))); the first errors in $log:"
  grep -nE "error|Error [0-9]" "$log" | head -n 20 | sed 's/^/    | /'
  echo "and its end:"
  tail -n 20 "$log" | sed 's/^/    | /'
  exit "$rc"
fi
echo "    done in $(elapsed $((SECONDS - t0)))"
echo "built $dir/ in $(elapsed $((SECONDS - t_start))) (log: $log)"
