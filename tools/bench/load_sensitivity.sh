#!/usr/bin/env bash
# How much a busy neighbour slows CPU training: each build is timed alone,
# beside one busy process (`yes > /dev/null`, nice 0), and as two runs at once,
# alternating the builds every round (shared machines are noisy: read medians).
#
#   tools/bench/load_sensitivity.sh [--rounds N] [--models digits,cifar_vgg]
#       [--conditions alone,busy,pair] [--threads N] LABEL=BUILD_DIR [LABEL=BUILD_DIR ...]
#
# BUILD_DIR holds `strata` (digits: `strata train` on models/digits, 600
# iterations) and `strata_bench_train` (cifar_vgg: synthetic 3x32x32 inputs,
# batch 32, 2 warm-up + 16 timed iterations: CIFAR-10 itself is not bundled).
# A BUILD_DIR may also hold a file `env` with VAR=value lines exported for its
# runs (to try runtime settings without rebuilding).
# --threads N passes --threads N to every run (default: none, i.e. all cores).
#
# Prints one line per run, then per model and condition the median wall time
# of each build and its ratio to the first build's median.
set -euo pipefail

rounds=5
models=digits,cifar_vgg
conditions=alone,busy,pair
threads=""
builds=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --conditions) conditions="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *=*) builds+=("$1"); shift ;;
    *) echo "load_sensitivity.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ ${#builds[@]} -gt 0 ]] || { echo "load_sensitivity.sh: give at least one LABEL=BUILD_DIR" >&2; exit 2; }

repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/load_sensitivity.XXXXXX)
busy_pid=""
cleanup() {
  if [[ -n "$busy_pid" ]]; then kill "$busy_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# Each digits run gets its own copy of the model folder, so that two runs at
# once do not share a snapshot prefix (the second would be refused).
digits_copy() {
  local dir="$work/run$1"
  rm -rf "$dir"
  mkdir -p "$dir/models"
  cp -r "$repo/models/digits" "$dir/models/digits"
  rm -rf "$dir/models/digits/snapshots"
  ln -s "$repo/data" "$dir/data"
  echo "$dir/models/digits/solver.prototxt"
}

# run_one BUILD_DIR MODEL SLOT: runs the work once, prints its wall seconds.
run_one() {
  local dir="$1" model="$2" slot="$3" start end
  local thread_flag=()
  [[ -n "$threads" ]] && thread_flag=(--threads "$threads")
  # strata_bench_train's own default is 2 threads; 0 asks for strata's default.
  local bench_threads=(--threads "${threads:-0}")
  local cmd
  if [[ "$model" == digits ]]; then
    cmd=("$dir/strata" train --solver "$(digits_copy "$slot")" "${thread_flag[@]}")
  else
    cmd=("$dir/strata_bench_train" --models "$model" --iters 8 --repeats 2 --warmup 2
         --source-dir "$repo" "${bench_threads[@]}")
  fi
  start=$(date +%s.%N)
  (
    if [[ -f "$dir/env" ]]; then set -a; source "$dir/env"; set +a; fi
    "${cmd[@]}" > "$work/out$slot.txt" 2>&1
  ) || { echo "load_sensitivity.sh: run failed: ${cmd[*]}" >&2; cat "$work/out$slot.txt" >&2; exit 1; }
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f\n", e - s }'
}

results="$work/results.tsv"
: > "$results"
echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
  for model in ${models//,/ }; do
    for condition in ${conditions//,/ }; do
      for build in "${builds[@]}"; do
        label="${build%%=*}"
        dir="${build#*=}"
        case "$condition" in
          alone) t=$(run_one "$dir" "$model" 0); times=("$t") ;;
          busy)
            nice -n 0 yes > /dev/null &
            busy_pid=$!
            t=$(run_one "$dir" "$model" 0); times=("$t")
            kill "$busy_pid"; wait "$busy_pid" 2>/dev/null || true; busy_pid="" ;;
          pair)
            run_one "$dir" "$model" 1 > "$work/pair1" &
            p1=$!
            run_one "$dir" "$model" 2 > "$work/pair2" &
            p2=$!
            wait "$p1"; wait "$p2"
            times=("$(cat "$work/pair1")" "$(cat "$work/pair2")") ;;
          *) echo "load_sensitivity.sh: unknown condition '$condition' (alone, busy, pair)" >&2; exit 2 ;;
        esac
        for t in "${times[@]}"; do
          printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$model" "$condition" "$label" "$t" | tee -a "$results"
        done
      done
    done
  done
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"

# Medians per (model, condition, build), and each build's ratio to the first.
first="${builds[0]%%=*}"
echo
echo "| model | condition | build | median s | runs | / $first |"
echo "|---|---|---|---|---|---|"
for model in ${models//,/ }; do
  for condition in ${conditions//,/ }; do
    base=""
    for build in "${builds[@]}"; do
      label="${build%%=*}"
      med=$(awk -F'\t' -v m="$model" -v c="$condition" -v l="$label" \
              '$2 == m && $3 == c && $4 == l { print $5 }' "$results" | sort -g |
            awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
      n=$(awk -F'\t' -v m="$model" -v c="$condition" -v l="$label" \
            '$2 == m && $3 == c && $4 == l' "$results" | wc -l)
      [[ -z "$base" ]] && base="$med"
      ratio=$(awk -v a="$med" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
      echo "| $model | $condition | $label | $med | $n | $ratio |"
    done
  done
done
