#!/usr/bin/env bash
# End-to-end: what a user sees when an input is wrong. Each bad input must
# end `strata` with exit code 1 (an error, not a crash: never 0, never a
# signal) and a message that names the problem. A failed run must never
# replace a good snapshot, nor leave temporary files behind.
# Usage: bad_input_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_error LABEL TEXT... -- COMMAND...
# COMMAND must exit 1 with a strata error (not an internal one) containing every TEXT.
expect_error() {
  local label="$1"
  shift
  local texts=()
  while [ "$1" != "--" ]; do
    texts+=("$1")
    shift
  done
  shift
  local rc=0
  "$@" > "$work/out.txt" 2>&1 || rc=$?
  if [ "$rc" -ne 1 ]; then
    fail "$label: exit code $rc, expected 1 ($( [ "$rc" -ge 128 ] && echo "killed by signal $((rc - 128))" || echo "no error"))"
    sed 's/^/    /' "$work/out.txt" | tail -n 5
    return
  fi
  if ! grep -q "^strata [a-z]*: error: " "$work/out.txt"; then
    fail "$label: no 'strata COMMAND: error:' line"
    sed 's/^/    /' "$work/out.txt" | tail -n 5
    return
  fi
  local t
  for t in "${texts[@]}"; do
    if ! grep -qF -- "$t" "$work/out.txt"; then
      fail "$label: message lacks '$t'"
      sed 's/^/    /' "$work/out.txt" | tail -n 5
      return
    fi
  done
  echo "ok: $label: $(grep -m1 'error: ' "$work/out.txt" | cut -c1-160)"
}

# A user's copy of the digits example, as in train_digits_test.sh.
mkdir -p "$work/models" "$work/data"
cp -r "$src/models/digits" "$work/models/digits"
rm -rf "$work/models/digits/snapshots"
cp -r "$src/data/digits" "$work/data/digits"
dir="$work/models/digits"
data="$work/data/digits"
# 10 iterations, snapshots at 5 and 10, no tests after the first.
sed -e 's|^max_iter:.*|max_iter: 10|' -e 's|^snapshot:.*|snapshot: 5|' -e 's|^test_interval:.*|test_interval: 0|' \
  "$dir/solver.prototxt" > "$dir/s10.prototxt"
grep -q '^max_iter: 10$' "$dir/s10.prototxt" || { echo "FAIL: could not rewrite the solver"; exit 1; }

# A solver for a modified copy of the net: with_net NAME -> solver path; edit $dir/NAME.prototxt first.
with_net() {
  sed "s|^net:.*|net: \"$1.prototxt\"|" "$dir/s10.prototxt" > "$dir/solver_$1.prototxt"
  echo "$dir/solver_$1.prototxt"
}

# ---- files that are not there, or not prototxt ----
expect_error "missing solver file" "$work/nope.prototxt" "No such file" -- \
  "$strata" train --solver "$work/nope.prototxt"
sed 's|^net:.*|net: "nope.prototxt"|' "$dir/s10.prototxt" > "$dir/solver_nonet.prototxt"
expect_error "missing net file" "nope.prototxt" -- "$strata" train --solver "$dir/solver_nonet.prototxt"

cat > "$work/syntax.prototxt" <<'EOF'
name: "syntax"
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "r" type: "ReLU" bottom: "x" top "y" }
EOF
expect_error "syntax error in a net" "syntax.prototxt:3:48:" "top" -- "$strata" time --model "$work/syntax.prototxt"
head -n -1 "$dir/train.prototxt" > "$dir/unclosed.prototxt"
echo 'layer { name: "loss"  type: "SoftmaxWithLoss"  bottom: "fc2"  bottom: "label"  top: "loss"' >> "$dir/unclosed.prototxt"
expect_error "unclosed block in a net" "unclosed.prototxt:" "never closed" -- "$strata" train --solver "$(with_net unclosed)"
printf 'net: "train.prototxt"\nbase_lr 0.1\n' > "$dir/solver_syntax.prototxt"
expect_error "syntax error in a solver" "solver_syntax.prototxt:2:" -- "$strata" train --solver "$dir/solver_syntax.prototxt"

# ---- what the net asks for ----
sed 's|name: "relu1"  type: "ReLU"|name: "relu1"  type: "Relu"|' "$dir/train.prototxt" > "$dir/unknown_type.prototxt"
grep -q '"Relu"' "$dir/unknown_type.prototxt" || fail "could not write unknown_type.prototxt"
expect_error "unknown layer type" "unknown layer type 'Relu'" "did you mean 'ReLU'?" "known types:" "layer 'relu1'" \
  "unknown_type.prototxt:" -- "$strata" train --solver "$(with_net unknown_type)"

sed 's|num_output: 32 kernel_size: 3 pad: 1 weight_filler { type: "msra" } }|num_ouput: 32 kernel_size: 3 pad: 1 weight_filler { type: "msra" } }|' \
  "$dir/train.prototxt" > "$dir/unknown_key.prototxt"
line=$(grep -n 'num_ouput' "$dir/unknown_key.prototxt" | head -n 1 | cut -d: -f1)
[ -n "$line" ] || fail "could not write unknown_key.prototxt"
expect_error "unknown key" "unknown key 'num_ouput'" "did you mean 'num_output'?" "layer 'conv1'" \
  "unknown_key.prototxt:$line:" -- "$strata" train --solver "$(with_net unknown_key)"
sed 's|^warmup_iter:|warmup_iters:|' "$dir/s10.prototxt" > "$dir/solver_key.prototxt"
expect_error "unknown key in a solver" "warmup_iters" "warmup_iter" -- "$strata" train --solver "$dir/solver_key.prototxt"

# Element-wise sum of conv1 [64, 32, 8, 8] and pool1 [64, 32, 4, 4].
sed 's|^layer { name: "relu4"|layer { name: "bad_sum" type: "Eltwise" bottom: "conv1" bottom: "pool1" top: "bad" }\nlayer { name: "relu4"|' \
  "$dir/train.prototxt" > "$dir/shape.prototxt"
expect_error "shape mismatch" "layer 'bad_sum' (Eltwise)" "[64, 32, 8, 8]" "[64, 32, 4, 4]" "from layer 'conv1'" \
  "from layer 'pool1'" -- "$strata" train --solver "$(with_net shape)"

# ---- data files ----
sed 's|train_images.npy|missing_images.npy|' "$dir/train.prototxt" > "$dir/missing_data.prototxt"
expect_error "missing data file" "data/digits/missing_images.npy" "No such file" -- \
  "$strata" train --solver "$(with_net missing_data)"

cp "$data/train_images.npy" "$data/train_images.npy.good"
head -c 5000 "$data/train_images.npy.good" > "$data/train_images.npy"
expect_error "truncated .npy" "train_images.npy" "bytes" -- "$strata" train --solver "$dir/s10.prototxt"
{ printf 'NOTNUMPY'; tail -c +9 "$data/train_images.npy.good"; } > "$data/train_images.npy"
expect_error "corrupt .npy header" "train_images.npy" "not a .npy file" -- "$strata" train --solver "$dir/s10.prototxt"
cp "$data/train_images.npy.good" "$data/train_images.npy"
# Labels out of range: every int32 label (after the 128-byte header) set to
# 99. Only the loss knows the class count, so this fails in the first iteration.
cp "$data/train_labels.npy" "$data/train_labels.npy.good"
n_labels=$((($(wc -c < "$data/train_labels.npy.good") - 128) / 4))
[ "$n_labels" -eq 1437 ] || fail "unexpected train_labels.npy size ($n_labels labels)"
head -c 128 "$data/train_labels.npy.good" > "$work/bad_labels.npy"
for _ in $(seq 1 "$n_labels"); do printf 'c\000\000\000'; done >> "$work/bad_labels.npy"
cp "$work/bad_labels.npy" "$data/train_labels.npy"
expect_error "labels out of range" "layer 'loss' (SoftmaxWithLoss)" "label 99" -- "$strata" train --solver "$dir/s10.prototxt"
cp "$data/train_labels.npy.good" "$data/train_labels.npy"

# ---- flags ----
# A device that cannot be used: a CPU-only build has no CUDA backend; a CUDA
# build says no GPU is available, or (on a GPU machine) that cuda:99 does not exist.
expect_error "--device cuda:99" "cuda:99" "CUDA" -- \
  "$strata" train --solver "$dir/s10.prototxt" --device cuda:99
if ! nvidia-smi > /dev/null 2>&1; then
  expect_error "--device cuda" "cuda" "--device cpu" -- \
    "$strata" train --solver "$dir/s10.prototxt" --device cuda
fi
expect_error "unknown flag" "--solvr" "did you mean --solver?" -- "$strata" train --solvr "$dir/s10.prototxt"

# ---- a good run, then weight and snapshot files that are damaged ----
"$strata" train --solver "$dir/s10.prototxt" --threads 2 > "$work/good.txt" || { cat "$work/good.txt"; echo "FAIL: the good run failed"; exit 1; }
snap="$dir/snapshots/digits_iter_10"
[ -f "$snap.safetensors" ] && [ -f "$snap.solverstate.safetensors" ] || { echo "FAIL: no snapshot at 10"; exit 1; }
"$strata" test --model "$dir/train.prototxt" --weights "$snap.safetensors" --iterations 1 > "$work/score.txt" ||
  fail "strata test on good weights failed"

size=$(wc -c < "$snap.safetensors")
head -c $((size / 2)) "$snap.safetensors" > "$work/truncated.safetensors"
expect_error "truncated .safetensors" "truncated.safetensors" "truncated" -- \
  "$strata" test --model "$dir/train.prototxt" --weights "$work/truncated.safetensors" --iterations 1
head -c 6 "$snap.safetensors" > "$work/tiny.safetensors"
expect_error "6-byte .safetensors" "tiny.safetensors" -- \
  "$strata" test --model "$dir/train.prototxt" --weights "$work/tiny.safetensors" --iterations 1
{ head -c 8 "$snap.safetensors"; printf '{"garbage'; tail -c +18 "$snap.safetensors"; } > "$work/corrupt.safetensors"
expect_error "corrupt .safetensors header" "corrupt.safetensors" -- \
  "$strata" test --model "$dir/train.prototxt" --weights "$work/corrupt.safetensors" --iterations 1
printf '\377\377\377\377\377\377\377\177{}' > "$work/huge.safetensors"
expect_error "header length beyond the file" "huge.safetensors" -- \
  "$strata" test --model "$dir/train.prototxt" --weights "$work/huge.safetensors" --iterations 1
expect_error "missing weights file" "$work/none.safetensors" -- \
  "$strata" test --model "$dir/train.prototxt" --weights "$work/none.safetensors" --iterations 1
sed 's|inner_product_param { num_output: 10 }|inner_product_param { num_output: 5 }|' "$dir/train.prototxt" > "$dir/five.prototxt"
expect_error "weights of another shape" "fc2.weight" "[10, 128]" "[5, 128]" -- \
  "$strata" test --model "$dir/five.prototxt" --weights "$snap.safetensors" --iterations 1

mkdir -p "$work/bad_state"
head -c 3000 "$snap.solverstate.safetensors" > "$work/bad_state/digits_iter_10.solverstate.safetensors"
cp "$snap.safetensors" "$work/bad_state/digits_iter_10.safetensors"
expect_error "truncated solver state" "bad_state/digits_iter_10.solverstate.safetensors" -- \
  "$strata" train --solver "$dir/s10.prototxt" --snapshot "$work/bad_state/digits_iter_10.solverstate.safetensors"
mkdir -p "$work/lonely_state"
cp "$snap.solverstate.safetensors" "$work/lonely_state/"
expect_error "solver state without its weights" "digits_iter_10.safetensors" "does not exist" -- \
  "$strata" train --solver "$dir/s10.prototxt" --snapshot "$work/lonely_state/digits_iter_10.solverstate.safetensors"

# ---- failed runs leave the good snapshot alone ----
sums() { sha256sum "$snap.safetensors" "$snap.solverstate.safetensors" | awk '{print $1}'; }
good=$(sums)
no_temp_files() {
  if ls -a "$dir/snapshots" | grep -q '\.tmp'; then fail "$1: temporary files left: $(ls "$dir/snapshots" | tr '\n' ' ')"; fi
}
# Other runs differ from the good one (another seed), so an overwrite shows.
sed 's|^random_seed:.*|random_seed: 2|' "$dir/s10.prototxt" > "$dir/s10_seed2.prototxt"

# (a) A fresh run over the good run's files is refused before anything
# (they are an earlier run's); with --overwrite, one that fails on its data
# while building the net (a truncated image file) has not removed them yet.
cp "$work/bad_labels.npy" "$data/train_labels.npy"
expect_error "fresh run over an earlier run" "an earlier run" "--snapshot $snap.solverstate.safetensors" "--overwrite" -- \
  "$strata" train --solver "$dir/s10_seed2.prototxt"
cp "$data/train_labels.npy.good" "$data/train_labels.npy"
head -c 5000 "$data/train_images.npy.good" > "$data/train_images.npy"
expect_error "--overwrite run with a truncated data file" "train_images.npy" -- \
  "$strata" train --solver "$dir/s10_seed2.prototxt" --overwrite
cp "$data/train_images.npy.good" "$data/train_images.npy"
[ "$(sums)" = "$good" ] || fail "a run that failed on its data changed the snapshot"
no_temp_files "bad data"

# (b) A resumed run (from 10) fails while writing its first snapshot (at 15):
# that path is a folder.
sed -e 's|^max_iter:.*|max_iter: 20|' "$dir/s10_seed2.prototxt" > "$dir/s20.prototxt"
mkdir -p "$dir/snapshots/digits_iter_15.safetensors/occupied"
expect_error "snapshot path taken by a folder" "digits_iter_15.safetensors" -- \
  "$strata" train --solver "$dir/s20.prototxt" --snapshot "$snap.solverstate.safetensors"
[ "$(sums)" = "$good" ] || fail "a run that failed writing a snapshot at 15 changed the snapshot at 10"
no_temp_files "snapshot path taken"
rm -rf "$dir/snapshots/digits_iter_15.safetensors"

# (c) A run resumed from 5 fails while writing the snapshot at 10 itself, as on a full disk: a
# file size limit between the sizes of the weights file and the (larger)
# solver state file lets the weights be written but not the state. The good
# snapshot at 10 is newer than 5, so the run writes under the branch
# digits_from5 and must leave it alone; and the branch must not keep a weights
# file without its state (both are staged first, then renamed).
# (SIGXFSZ ignored: writes fail with EFBIG.)
w_size=$(wc -c < "$snap.safetensors")
s_size=$(wc -c < "$snap.solverstate.safetensors")
if [ "$s_size" -gt $((w_size + 8192)) ]; then
  limit=$(((w_size + s_size) / 2 / 1024))
  expect_error "disk full while writing the solver state" "digits_from5_iter_10.solverstate.safetensors" -- \
    bash -c 'ulimit -f "$1"; trap "" XFSZ; exec "$2" train --solver "$3" --snapshot "$4"' _ "$limit" "$strata" \
    "$dir/s10_seed2.prototxt" "$dir/snapshots/digits_iter_5.solverstate.safetensors"
  [ "$(sums)" = "$good" ] ||
    fail "a run resumed from 5 that failed writing its solver state changed the good snapshot at 10"
  [ ! -e "$dir/snapshots/digits_from5_iter_10.safetensors" ] ||
    fail "a run that failed writing its solver state left its weights file at 10 without the state"
  no_temp_files "disk full while writing the solver state"
else
  fail "the solver state ($s_size bytes) is not larger than the weights ($w_size bytes); cannot place a size limit between them"
fi

# The good snapshot still resumes.
sed 's|^max_iter:.*|max_iter: 12|' "$dir/s10.prototxt" > "$dir/s12.prototxt"
if "$strata" train --solver "$dir/s12.prototxt" --snapshot "$snap.solverstate.safetensors" > "$work/resume.txt" 2>&1; then
  grep -q "resumed from .* at iteration 10" "$work/resume.txt" || fail "the good snapshot did not resume at 10"
else
  fail "the good snapshot no longer resumes: $(tail -n 2 "$work/resume.txt")"
fi

# ---- messages a terminal can show ----
# Control bytes a config holds are shown as \xNN, not sent to the terminal.
printf 'base_lr: 0.1\nnet: abc\001\033[2J\n' > "$work/garbage.prototxt"
expect_error "control bytes in a config" 'abc\x01\x1B' -- "$strata" train --solver "$work/garbage.prototxt"
if grep -q $'\033' "$work/out.txt"; then fail "control bytes in a config: an escape byte reached the terminal"; fi
# A command a letter off gets a suggestion (usage errors exit 2).
"$strata" trian > "$work/out.txt" 2>&1 && fail "strata trian: exit 0"
grep -q "did you mean 'train'" "$work/out.txt" || fail "strata trian: no suggestion: $(head -n 1 "$work/out.txt")"
# The command is named once, not again by the message.
expect_error "launch with --nproc 0" "--nproc must be at least 1" -- "$strata" launch --nproc 0 -- true
if grep -q "strata launch: error: strata launch:" "$work/out.txt"; then fail "the prefix is repeated: $(cat "$work/out.txt")"; fi
# strata test reads the test set once by default (360 images, batches of 120).
"$strata" test --model "$dir/train.prototxt" --weights "$snap.safetensors" > "$work/once.txt" 2>&1 ||
  fail "strata test without --iterations failed: $(tail -n 2 "$work/once.txt")"
grep -q "scoring one pass: 360 samples of layer 'data' in batches of 120" "$work/once.txt" &&
  grep -q "scored 3 batches" "$work/once.txt" || fail "strata test did not score one pass: $(cat "$work/once.txt")"

# An ImageData net: the layer says what it found, and strata test scores one
# pass over the folder (3 classes, 3 images each: 9 images in batches of 4 is
# 3 batches), not 50 batches.
cat > "$work/images.prototxt" <<NET
name: "mean_colour"
layer { name: "data" type: "ImageData" top: "data" top: "label"
        image_data_param { source: "$src/data/images/val" batch_size: 4 shuffle: false }
        transform_param { resize: 8 crop_size: 8 } }
layer { name: "pool" type: "Pooling" bottom: "data" top: "pool" pooling_param { pool: AVE global_pooling: true } }
layer { name: "accuracy" type: "Accuracy" bottom: "pool" bottom: "label" top: "accuracy" }
NET
printf '\x08\x00\x00\x00\x00\x00\x00\x00{}      ' > "$work/empty.safetensors"
"$strata" test --model "$work/images.prototxt" --weights "$work/empty.safetensors" > "$work/images.txt" 2>&1 ||
  fail "strata test on an ImageData net failed: $(tail -n 3 "$work/images.txt")"
grep -q "9 images from '$src/data/images/val' in 3 classes" "$work/images.txt" ||
  fail "ImageData does not say what it found: $(head -n 3 "$work/images.txt")"
grep -q "scoring one pass: 9 samples of layer 'data' in batches of 4" "$work/images.txt" &&
  grep -q "scored 3 batches" "$work/images.txt" || fail "strata test did not score one pass: $(cat "$work/images.txt")"

# Mistakes caught before the run: no max_iter, a device as the solver, far too many threads.
sed -e '/^max_iter:/d' -e 's|^lr_policy:.*|lr_policy: "fixed"|' "$dir/s10.prototxt" > "$dir/no_max_iter.prototxt"
expect_error "no max_iter" "max_iter is 0 (a missing max_iter means 0): there is nothing to train" -- \
  "$strata" train --solver "$dir/no_max_iter.prototxt"
expect_error "a device as the solver" "config file '/dev/zero' is not a regular file" -- \
  timeout 20 "$strata" train --solver /dev/zero
sed -e 's|^max_iter:.*|max_iter: 2|' -e 's|^snapshot:.*|snapshot: 0|' -e 's|^snapshot_prefix:.*|snapshot_prefix: "threads/d"|' \
  "$dir/s10.prototxt" > "$dir/s2.prototxt"
"$strata" train --solver "$dir/s2.prototxt" --threads 1000 > "$work/threads.txt" 2>&1 ||
  fail "--threads 1000 failed: $(tail -n 2 "$work/threads.txt")"
grep -q "note: --threads 1000 on a machine with $(nproc) core" "$work/threads.txt" ||
  fail "--threads 1000: no note about the cap: $(head -n 3 "$work/threads.txt")"
# convert: never onto its input; an existing file only with --overwrite (checked before reading).
echo "weights" > "$work/keep.safetensors"
expect_error "convert onto its input" "OUT '$work/keep.safetensors' is the same file as IN" -- \
  "$strata" convert "$work/keep.safetensors" "$work/keep.safetensors" --overwrite
expect_error "convert onto a file" "pass --overwrite to replace it" -- \
  "$strata" convert "$work/missing.caffemodel" "$work/keep.safetensors"
[ "$(cat "$work/keep.safetensors")" = "weights" ] || fail "convert replaced a file"
if STRATA_SHM=false "$strata" launch --nproc 2 -- "$strata" train --solver "$dir/s2.prototxt" --overwrite \
  > "$work/shm.txt" 2>&1; then
  fail "STRATA_SHM=false was accepted"
fi
grep -q "^\[rank 0\] strata train: error: STRATA_SHM is 'false': expected 1" "$work/shm.txt" ||
  fail "STRATA_SHM=false: unclear message: $(head -n 3 "$work/shm.txt")"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS"
