#!/usr/bin/env bash
# Configures and builds strata (Release) on every core, showing progress: on a
# terminal one line that updates (percentage, elapsed time, the file being
# compiled), elsewhere a line every 10%. The full output goes to build.log,
# whose end is shown when a step fails.
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
tty=0
[ -t 1 ] && tty=1

# Reads the build's output (kept in the log) and shows its progress. Make
# prints "[ 45%] Building CXX object .../net.cpp.o", Ninja "[12/300] ...".
show_progress() {
  local t0=$SECONDS shown=-1 pct=0 what="" line
  while IFS= read -r line; do
    printf '%s\n' "$line" >> "$log"
    if [[ $line =~ ^\[\ *([0-9]+)%\]\ (.*)$ ]]; then
      pct=${BASH_REMATCH[1]}
      what=${BASH_REMATCH[2]}
    elif [[ $line =~ ^\[([0-9]+)/([0-9]+)\]\ (.*)$ ]]; then
      pct=$((100 * BASH_REMATCH[1] / BASH_REMATCH[2]))
      what=${BASH_REMATCH[3]}
    else
      continue
    fi
    what=${what##*/}  # "Building CXX object framework/CMakeFiles/x.dir/net.cpp.o" -> "net.cpp.o"
    what=${what%.o}
    if [ "$tty" -eq 1 ]; then
      printf '\r\033[K    building: %3d%%  %s  %s' "$pct" "$(elapsed $((SECONDS - t0)))" "${what:0:50}"
    elif [ $((pct / 10)) -gt "$shown" ]; then
      shown=$((pct / 10))
      printf '    building: %3d%%  %s\n' "$pct" "$(elapsed $((SECONDS - t0)))"
    fi
  done
  [ "$tty" -eq 1 ] && printf '\r\033[K'
  return 0
}

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
cmake --build "$dir" -j "$jobs" "${targets[@]}" 2>&1 | show_progress
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  echo "build failed (exit $rc) after $(elapsed $((SECONDS - t0))); the errors in $log:"
  grep -nE "error|Error [0-9]" "$log" | head -n 20 | sed 's/^/    | /'
  tail -n 40 "$log" | sed 's/^/    | /'
  exit "$rc"
fi
echo "    done in $(elapsed $((SECONDS - t0)))"
echo "built $dir/ in $(elapsed $((SECONDS - t_start))) (log: $log)"
