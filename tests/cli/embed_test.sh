#!/usr/bin/env bash
# End-to-end `strata embed`: rows and paths files as a user gets them, the
# progress line, errors that name the bad input and leave no output behind,
# and every embed flag documented in docs/config.md.
# Usage: embed_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The golden test images (PNG, JPEG, BMP; gray, alpha), a net without
# parameters (global average of the normalised image), and an empty weights file.
mkdir -p "$work/imgs/sub"
cp "$src"/tests/golden/images/*.png "$src"/tests/golden/images/*.bmp "$work/imgs/"
cp "$src"/tests/golden/images/*.jpg "$work/imgs/sub/"
cat > "$work/deploy.prototxt" <<'NET'
name: "mean_colour"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 16 dim: 16 } } }
layer { name: "pool" type: "Pooling" bottom: "data" top: "pool" pooling_param { pool: AVE global_pooling: true } }
NET
printf '\x08\x00\x00\x00\x00\x00\x00\x00{}      ' > "$work/empty.safetensors"
embed_base() {
  "$strata" embed --model "$work/deploy.prototxt" --weights "$work/empty.safetensors" \
    --preset imagenet --resize 20 --batch 4 --threads 1 "$@"
}
run_embed() { embed_base --layer pool --crop 16 "$@"; }

# 1. Six images through a folder: 6 x 3 rows, paths in row order.
if run_embed --images "$work/imgs" --pool avg --out "$work/feat.npy" > "$work/stdout.txt" 2> "$work/stderr.txt"; then
  size=$(stat -c %s "$work/feat.npy")
  [ "$size" -eq $((128 + 6 * 3 * 4)) ] || fail "feat.npy has $size bytes, expected a 128-byte header and 6x3 floats"
  head -c 128 "$work/feat.npy" | grep -q "'shape': (6, 3)" || fail "feat.npy header does not say shape (6, 3)"
  lines=$(cat "$work/feat.paths.txt")
  expected=$(printf '%s\n' "$work/imgs/alpha.png" "$work/imgs/gray.png" "$work/imgs/rgb.png" \
    "$work/imgs/small.bmp" "$work/imgs/sub/photo.jpg" "$work/imgs/sub/tiny.jpg")
  [ "$lines" = "$expected" ] || fail "paths file: got '$lines'"
  grep -q "6/6 images" "$work/stderr.txt" || fail "no final progress line on stderr: $(cat "$work/stderr.txt")"
  [ "$(grep -c 'images/s' "$work/stderr.txt")" -eq 1 ] || fail "stderr is not a terminal: expected one progress line"
  grep -q "wrote 6 x 3" "$work/stdout.txt" || fail "no summary on stdout"
else
  fail "embed of a folder failed: $(cat "$work/stderr.txt")"
fi

# 2. A list file gives the order.
printf 'sub/tiny.jpg 0\nrgb.png 1\n' > "$work/imgs/list.txt"
if run_embed --images "$work/imgs/list.txt" --pool none --out "$work/list.npy" > /dev/null 2>&1; then
  [ "$(cat "$work/list.paths.txt")" = "$(printf '%s\n' "$work/imgs/sub/tiny.jpg" "$work/imgs/rgb.png")" ] ||
    fail "list order not kept: $(cat "$work/list.paths.txt")"
else
  fail "embed of a list file failed"
fi

# 3. Errors: exit 1, the message names the problem, no output file.
expect_error() {
  local label="$1" text="$2"
  shift 2
  local rc=0
  "$@" > "$work/err.txt" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] || fail "$label: exit code $rc, expected 1"
  grep -qF -- "$text" "$work/err.txt" || fail "$label: message lacks '$text': $(cat "$work/err.txt")"
}
echo "not an image" > "$work/imgs/zz_broken.png"
expect_error "bad image" "$work/imgs/zz_broken.png" run_embed --images "$work/imgs" --out "$work/bad.npy"
[ ! -e "$work/bad.npy" ] && [ ! -e "$work/bad.paths.txt" ] || fail "a failed run left output behind"
ls "$work" | grep -q tmp && fail "a failed run left a temporary file: $(ls "$work")"
rm "$work/imgs/zz_broken.png"
expect_error "unknown blob" "its blobs are: data, pool" embed_base --images "$work/imgs" --layer fc7 --crop 16 \
  --out "$work/x.npy"
expect_error "wrong crop" "--crop 16" embed_base --images "$work/imgs" --layer pool --crop 12 --out "$work/x.npy"
expect_error "no input" "--images" "$strata" embed --model "$work/deploy.prototxt" --weights "$work/empty.safetensors" \
  --layer pool --out "$work/x.npy"

# 4. Every flag of `strata embed --help` is documented.
for flag in $("$strata" embed --help | grep -o -- '--[a-z0-9-]*' | sort -u); do
  grep -q -- "\`$flag" "$src/docs/config.md" || fail "docs/config.md does not document strata embed $flag"
done

[ "$failures" -eq 0 ] && echo "PASS: strata embed end to end"
exit "$failures"
