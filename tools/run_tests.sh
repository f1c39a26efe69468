#!/usr/bin/env bash
# The README's test command (and CI's, .ci/run): installs what is missing, then
# builds and tests every configuration, one stage after another:
#   default  build/       the normal Release build (CUDA compiled when nvcc is
#                         found; GPU tests skip without a GPU) and every ctest test
#   cpu      build-cpu/   -DSTRATA_CUDA=OFF and every ctest test
#   asan     build-asan/  gcc AddressSanitizer + UndefinedBehaviorSanitizer, -O1,
#                         CPU-only: strata_tests on the parsers and config, the
#                         file formats, the store protocol, transports and collectives
#   fuzz     build-fuzz/  clang libFuzzer: each tests/fuzz target for
#                         STRATA_FUZZ_SECONDS (default 45) over its committed corpus
#   gpu      build-gpu/   only on request, on a machine with an NVIDIA GPU: built
#                         for that GPU's compute capability, then every test that
#                         needs a GPU (tools/gpu_tests.py), ending with one line:
#                         how many ran, passed, failed, skipped
# Usage: bash tools/run_tests.sh [default] [cpu] [asan] [fuzz] [gpu]
#   (no argument: default, cpu, asan and fuzz, in this order; CI has no GPU).
#   STRATA_GPU_TEST_SECONDS bounds the gpu stage's tests (default 420 s);
#   STRATA_GPU_BUILD_DIR names another folder for the gpu stage (one configured
#   before with the -D flags a machine needs), STRATA_NO_INSTALL=1 skips the
#   package step (a machine without a package registry). Each stage prints a line when it
#   starts and ends with its elapsed time, and a progress line every 5 minutes;
#   build output goes to build-logs/<stage>.log, shown when a step fails.
# The benchmark programs and the CUDA code are built once, in build/.
set -euo pipefail
cd "$(dirname "$0")/.."

stages=("$@")
if [ ${#stages[@]} -eq 0 ]; then stages=(default cpu asan fuzz); fi
for s in "${stages[@]}"; do
  case "$s" in
    default | cpu | asan | fuzz | gpu) ;;
    *) echo "run_tests.sh: unknown stage '$s' (stages: default cpu asan fuzz gpu)" >&2; exit 2 ;;
  esac
done
wants() { [[ " ${stages[*]} " == *" $1 "* ]]; }

jobs=$(nproc 2>/dev/null || echo 2)
fuzz_seconds=${STRATA_FUZZ_SECONDS:-45}
mkdir -p build-logs
t_start=$SECONDS
summary=()

elapsed() { local s=$(($1)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

# step LABEL LOG COMMAND...: runs COMMAND with its output appended to LOG; a
# progress line every 5 minutes (the log's last line), the log's tail on failure.
step() {
  local label=$1 log=$2
  shift 2
  local t0=$SECONDS next=$((SECONDS + 300)) rc=0
  echo "    $label ..."
  "$@" >> "$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2> /dev/null; do
    sleep 2
    if ((SECONDS >= next)); then
      echo "    ... $label: $(elapsed $((SECONDS - t0))) so far; $(tail -n 1 "$log" | cut -c1-150)"
      next=$((SECONDS + 300))
    fi
  done
  wait "$pid" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "    FAILED: $label (exit $rc) after $(elapsed $((SECONDS - t0))); the end of $log:"
    tail -n 80 "$log" | sed 's/^/    | /'
    exit "$rc"
  fi
  echo "    $label: done in $(elapsed $((SECONDS - t0)))"
}

# stage_begin NAME WHAT / stage_end NAME: the per-stage lines CI shows.
stage_begin() {
  stage_t0=$SECONDS
  echo
  echo "==> [$1] $2 (started at +$(elapsed $((SECONDS - t_start))))"
}
stage_end() {
  local line="[$1] passed in $(elapsed $((SECONDS - stage_t0)))"
  summary+=("$line")
  echo "<== $line"
}

# ctest's list of the tests that did not run (hundreds of GPU tests on a
# machine without one) folded into a count by reason, and its summary line
# repeated last, so the result is the last thing on the screen.
fold_ctest_output() {
  awk -v logfile="$1" '
    function flush() {
      if (!skipping) return
      line = "    " skipped " test" (skipped == 1 ? "" : "s") " did not run:"
      sep = " "
      for (r in reasons) { line = line sep reasons[r] " " tolower(r); sep = ", " }
      print line " (listed in " logfile ")"
      skipping = 0
    }
    /^The following tests did not run:/ { skipping = 1; skipped = 0; delete reasons; next }
    skipping && /^[ \t]+[0-9]+ - / {
      skipped++
      reason = $0; sub(/^.*\(/, "", reason); sub(/\).*$/, "", reason)
      reasons[reason]++
      next
    }
    { flush(); print }
    /tests passed, [0-9]+ tests failed out of/ { result = $0 }
    END { flush(); if (result != "") print "    ctest: " result }'
}

# ctest in DIR, its output shown as it runs (one line per test) and kept in LOG.
run_ctest() {
  local dir=$1 log=$2 t0=$SECONDS
  echo "    ctest in $dir ..."
  if ! (cd "$dir" && ctest --output-on-failure -j "$jobs") 2>&1 | tee -a "$log" | fold_ctest_output "$log"; then
    echo "    FAILED: ctest in $dir after $(elapsed $((SECONDS - t0))) (the failing tests' output is above)"
    exit 1
  fi
  echo "    ctest in $dir: done in $(elapsed $((SECONDS - t0)))"
}

# ---- dependencies --------------------------------------------------------------
if [ "${STRATA_NO_INSTALL:-}" != 1 ]; then
  stage_begin deps "installing what is missing (tools/install_deps.sh)"
  extra=()
  command -v python3 > /dev/null || extra+=(python3)  # the tools.model_prototxts and lint tests
  if wants fuzz; then
    command -v clang++ > /dev/null || extra+=(clang)
    extra+=(libclang-rt-dev libomp-dev)  # libFuzzer's runtime; OpenMP for clang
  fi
  bash tools/install_deps.sh "${extra[@]}"
  stage_end deps
fi

# ---- default: today's build, CUDA when nvcc is found ---------------------------
if wants default; then
  log=build-logs/default.log
  : > "$log"
  stage_begin default "Release build in build/ (CUDA when nvcc is found), every ctest test"
  step "configure" "$log" cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DSTRATA_WERROR=ON
  # What this machine gave the build: the backends on or off, and why.
  grep -E "^-- (CUDA [0-9]|CUDA not|STRATA_CUDA|NCCL|no CUDA|MPI [0-9]|MPI not)" "$log" | sed 's/^/    /' || true
  step "build (all targets, benchmarks included)" "$log" cmake --build build -j "$jobs"
  run_ctest build "$log"
  stage_end default
fi

# ---- cpu: the CPU-only configuration --------------------------------------------
if wants cpu; then
  log=build-logs/cpu.log
  : > "$log"
  stage_begin cpu "CPU-only build in build-cpu/ (-DSTRATA_CUDA=OFF), every ctest test"
  step "configure" "$log" cmake -S . -B build-cpu -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=OFF \
    -DSTRATA_BUILD_BENCH=OFF -DSTRATA_WERROR=ON
  step "build (no benchmarks)" "$log" cmake --build build-cpu -j "$jobs"
  run_ctest build-cpu "$log"
  stage_end cpu
fi

# ---- asan: AddressSanitizer + UndefinedBehaviorSanitizer ------------------------
# The suites that parse untrusted bytes or speak a protocol, by area: prototxt
# and config parsing; safetensors / npy / json / checkpoint files; the
# rendezvous store and launch; the tcp and shm transports; the collectives and
# communicators (threads as ranks, and processes); the blob memory plan (views
# into one arena) and sharded data parallel; the image decoders (libjpeg's
# error jumps), the image-folder walk, the vector Winograd transforms, the
# snapshot-prefix files and the heartbeats; the layers' shared scratch, the
# flat gradient buffer (data parallel reduces views of it), recomputation
# (values rebound between two places) and 16-bit storage (blobs rebound to
# each call's copies; the layers that read and write 16-bit blobs through
# their own f32 scratch), and the bf16 GEMM's packers (on a CPU with AMX).
# Two shards run side by side.
asan_filter='Parse.*:ParseErrors.*:Blocks.*:Conversions.*:SourceLocation.*:ToString.*:CheckKeys.*'
asan_filter+=':NearestKey.*:Files.*:LeNet.*:SolverConfigTest.*:LrPolicyTest.*:NetErrors.*:NetCaffeCompat.*'
asan_filter+=':NetLegacy.*:SolverStrategyTest.*:SolverNonFinite.*:SolverRetention.*'
asan_filter+=':Json*:Safetensors*:Npy*:FileUtilTest.*:PathTest.*:WeightsTest.*:SnapshotTest.*:*ResumeTest.*'
asan_filter+=':ResumeExtendTest.*:RestoreErrorsTest.*:TransferWeightsFiles.*'
asan_filter+=':ProtobufWire.*:CaffeProto.*:CaffeTransform.*:Caffemodel.*:*CaffeData*:Hdf5*'
asan_filter+=':ParallelStore.*:ParallelSocket.*:ParallelRankEnv.*:ParallelLaunch.*'
asan_filter+=':*Transport*:PeerFailure.*'
asan_filter+=':*Collectives*:*Communicator*:ReduceKernels.*:*ProcessTest.*:ProcessFailure.*'
asan_filter+=':PsKeyLayout.*:PsShardServer.*'
asan_filter+=':LifetimePlacement.*:BlobMemory.*:Shard*:ShardedTraining*:ReduceScatterAsync*:AllgatherAsync*'
asan_filter+=':ImageDecode.*:ImageSources.*:WinogradTransforms.*:SnapshotFiles.*:ParallelHeartbeat.*'
asan_filter+=':ScratchCarver.*:SharedScratch.*:NetScratch.*:NetGradients.*:Recompute.*'
asan_filter+=':DataParallelTest.BucketsAreAveragedInPlace*:GradientSlots.*:*PipelineEquivalence*shard*'
asan_filter+=':PipelinePlan.*:*PipelineEquivalence*recompute*'
asan_filter+=':CastInto.*:StorageDtype.*:LayerStorage.*:GemmBf16.*:Fusion.*:FlashAttentionEmulated.*'
asan_filter+=':StepLedger.*:StepResultsOneStepLater.*:CompletionWatchdog.*:BatchPipeline.*:StepGraph.*:SharedTops.*:ChannelsLast.*:ConvertLayout.*'
asan_filter+=':CachingAllocatorTest.*'
if wants asan; then
  log=build-logs/asan.log
  : > "$log"
  stage_begin asan "gcc ASan + UBSan build in build-asan/ (-O1, CPU-only), strata_tests on parsers, files, store, transports, collectives"
  step "configure" "$log" cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DSTRATA_SANITIZE=address,undefined \
    -DSTRATA_CUDA=OFF -DSTRATA_MPI=OFF -DSTRATA_BUILD_BENCH=OFF
  step "build strata_tests" "$log" cmake --build build-asan -j "$jobs" --target strata_tests
  export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:strict_init_order=1:detect_stack_use_after_return=1
  export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  shards=2
  pids=()
  for ((i = 0; i < shards; ++i)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i ./build-asan/tests/strata_tests --gtest_filter="$asan_filter" \
      > "build-logs/asan-shard$i.log" 2>&1 &
    pids+=($!)
  done
  asan_t0=$SECONDS
  failed=0
  for ((i = 0; i < shards; ++i)); do
    rc=0
    wait "${pids[$i]}" || rc=$?
    log_i=build-logs/asan-shard$i.log
    echo "    shard $((i + 1))/$shards: $(grep -E '^\[  PASSED  \]' "$log_i" || echo 'did not pass') (exit $rc)"
    if [ "$rc" -ne 0 ] || grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:" "$log_i"; then
      failed=1
      echo "    FAILED: shard $((i + 1)); the end of $log_i:"
      grep -nE "ERROR: (Address|Leak)Sanitizer|runtime error:|^\[  FAILED  \]" "$log_i" | head -n 20 | sed 's/^/    | /'
      tail -n 60 "$log_i" | sed 's/^/    | /'
    fi
  done
  echo "    tests: done in $(elapsed $((SECONDS - asan_t0)))"
  [ "$failed" -eq 0 ] || exit 1
  unset ASAN_OPTIONS UBSAN_OPTIONS
  stage_end asan
fi

# ---- fuzz: libFuzzer over the committed corpora ---------------------------------
if wants fuzz; then
  log=build-logs/fuzz.log
  : > "$log"
  stage_begin fuzz "clang libFuzzer targets in build-fuzz/, ${fuzz_seconds} s each"
  step "configure" "$log" cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DSTRATA_FUZZ=ON -DSTRATA_CUDA=OFF -DSTRATA_MPI=OFF \
    -DSTRATA_BUILD_TESTS=OFF -DSTRATA_BUILD_BENCH=OFF
  step "build the fuzz targets" "$log" cmake --build build-fuzz -j "$jobs" --target strata_fuzz
  for src in tests/fuzz/*_fuzz.cpp; do
    name=$(basename "$src" _fuzz.cpp)
    corpus=tests/fuzz/corpus_$name
    # New inputs go to the first folder, a scratch copy; the committed corpus is only read.
    work=build-fuzz/corpus-work/$name
    mkdir -p "$work" build-fuzz/artifacts
    step "strata_fuzz_$name over $corpus" "$log" ./build-fuzz/strata_fuzz_"$name" "$work" "$corpus" \
      -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix=build-fuzz/artifacts/"$name"-
    grep -E "^stat::number_of_executed_units|^Done [0-9]+ runs" "$log" | tail -n 1 | sed 's/^/    /' || true
  done
  stage_end fuzz
fi

# ---- gpu: every test that needs a GPU, on this machine's GPU ---------------------
if wants gpu; then
  dir=${STRATA_GPU_BUILD_DIR:-build-gpu}
  log=build-logs/gpu.log
  : > "$log"
  stage_begin gpu "build in $dir/ for this machine's GPU, every test that needs a GPU"
  if ! gpu=$(nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2> /dev/null | head -n 1) || [ -z "$gpu" ]; then
    echo "    FAILED: no NVIDIA GPU here (nvidia-smi found none, or no driver); the gpu stage needs one." \
      "The other stages run without it: bash tools/run_tests.sh"
    exit 1
  fi
  arch=$(echo "${gpu##*,}" | tr -d ' .')
  echo "    GPU: ${gpu%,*}, compute capability ${gpu##*, } (sm_$arch)"
  step "configure" "$log" cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DSTRATA_BUILD_BENCH=ON
  grep -E "^-- (CUDA [0-9]|CUDA not|STRATA_CUDA|NCCL|no CUDA)" "$log" | sed 's/^/    /' || true
  if ! grep -q "^-- CUDA .*CUDA backend on" "$log"; then
    echo "    FAILED: cmake did not turn the CUDA backend on (nvcc, cuBLAS and cuDNN 9 are needed; $log says why)"
    exit 1
  fi
  step "build (strata, the tests, the benchmarks)" "$log" cmake --build "$dir" -j "$jobs"
  gpu_t0=$SECONDS
  if ! python3 tools/gpu_tests.py "$dir" ${STRATA_GPU_TEST_SECONDS:+--timeout "$STRATA_GPU_TEST_SECONDS"} | tee -a "$log"; then
    echo "    FAILED: GPU tests after $(elapsed $((SECONDS - gpu_t0))) (reports and logs in $dir/gpu-tests/)"
    exit 1
  fi
  stage_end gpu
fi

echo
for line in "${summary[@]}"; do echo "$line"; done
echo "all stages passed in $(elapsed $((SECONDS - t_start)))"
