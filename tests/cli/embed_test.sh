#!/usr/bin/env bash
# End-to-end `strata embed`: rows and paths files as a user gets them, the
# progress line, errors that name the bad input and leave no output behind,
# --skip-bad-images, --reinit on a fine-tuned snapshot, the model's preset,
# the files --out may and may not replace, file names with any byte, folder
# link loops, and every embed flag documented in docs/config.md.
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
grep -qF -- "--skip-bad-images" "$work/err.txt" || fail "bad image: the message does not suggest --skip-bad-images"
[ ! -e "$work/bad.npy" ] && [ ! -e "$work/bad.paths.txt" ] || fail "a failed run left output behind"
ls "$work" | grep -q tmp && fail "a failed run left a temporary file: $(ls "$work")"

# 3b. --skip-bad-images: the broken image is left out, counted and listed; the
# .npy holds the 6 good rows (the same as without the broken file) and the
# paths file names them.
if run_embed --images "$work/imgs" --pool avg --skip-bad-images --out "$work/skip.npy" \
  > "$work/stdout.txt" 2> "$work/stderr.txt"; then
  head -c 128 "$work/skip.npy" | grep -q "'shape': (6, 3)" || fail "skip.npy header does not say shape (6, 3)"
  cmp -s "$work/skip.npy" "$work/feat.npy" || fail "skip.npy differs from the rows of the 6 good images"
  cmp -s "$work/skip.paths.txt" "$work/feat.paths.txt" || fail "skip.paths.txt: $(cat "$work/skip.paths.txt")"
  [ "$(cat "$work/skip.skipped.txt")" = "$work/imgs/zz_broken.png" ] ||
    fail "skip.skipped.txt: '$(cat "$work/skip.skipped.txt")'"
  grep -q "skipped 1 unreadable image (listed in $work/skip.skipped.txt)" "$work/stderr.txt" ||
    fail "no count of skipped images at the end: $(cat "$work/stderr.txt")"
  [ "$(tail -n 1 "$work/stderr.txt")" = "  $work/imgs/zz_broken.png" ] ||
    fail "the skipped image is not listed last on stderr: $(cat "$work/stderr.txt")"
  grep -q "wrote 6 x 3 .*1 skipped, listed in $work/skip.skipped.txt" "$work/stdout.txt" ||
    fail "summary does not count the skipped image: $(cat "$work/stdout.txt")"
else
  fail "embed --skip-bad-images failed: $(cat "$work/stderr.txt")"
fi
rm "$work/imgs/zz_broken.png"
expect_error "unknown blob" "Its blobs are: data, pool" embed_base --images "$work/imgs" --layer fc7 --crop 16 \
  --out "$work/x.npy"
expect_error "wrong crop" "--crop 16" embed_base --images "$work/imgs" --layer pool --crop 12 --out "$work/x.npy"
expect_error "no input" "--images" "$strata" embed --model "$work/deploy.prototxt" --weights "$work/empty.safetensors" \
  --layer pool --out "$work/x.npy"

# 4. A fine-tuned snapshot (5-class head) in a deploy net with a 2-class head:
# the error says --reinit head, and --reinit head embeds with the file's rest.
cat > "$work/head.prototxt" <<'NET'
name: "mean_colour_head"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 16 dim: 16 } } }
layer { name: "pool" type: "Pooling" bottom: "data" top: "pool" pooling_param { pool: AVE global_pooling: true } }
layer { name: "head" type: "InnerProduct" bottom: "pool" top: "head" inner_product_param { num_output: 2 } }
NET
header='{"head.weight":{"dtype":"F32","shape":[5,3],"data_offsets":[0,60]},"head.bias":{"dtype":"F32","shape":[5],"data_offsets":[60,80]}}'
while [ $(( ${#header} % 8 )) -ne 0 ]; do header="$header "; done
{
  printf "$(printf '\\x%02x' $((${#header} & 255)) $((${#header} >> 8)) 0 0 0 0 0 0)"
  printf '%s' "$header"
  head -c 80 /dev/zero
} > "$work/tuned_iter_100.safetensors"
head_embed() {
  "$strata" embed --model "$work/head.prototxt" --weights "$work/tuned_iter_100.safetensors" --preset imagenet \
    --resize 20 --crop 16 --threads 1 --images "$work/imgs" --layer pool --pool avg "$@"
}
expect_error "fine-tuned head" "pass --reinit head" head_embed --out "$work/tuned.npy"
if head_embed --reinit head --out "$work/tuned.npy" > /dev/null 2> "$work/stderr.txt"; then
  grep -q "re-initialised (--reinit): head.weight, head.bias" "$work/stderr.txt" ||
    fail "--reinit head: no load report line: $(cat "$work/stderr.txt")"
  cmp -s "$work/tuned.npy" "$work/feat.npy" || fail "--reinit head: rows differ from the net without a head"
else
  fail "embed --reinit head failed: $(cat "$work/stderr.txt")"
fi

# 5. The preset the model declares is used without --preset (and said); a
# --preset that differs is used with a warning.
{ echo 'preset: NONE'; cat "$work/deploy.prototxt"; } > "$work/none.prototxt"
plain_embed() {
  "$strata" embed --weights "$work/empty.safetensors" --threads 1 --images "$work/imgs" --layer pool --pool avg "$@"
}
if plain_embed --model "$work/none.prototxt" --out "$work/declared.npy" > /dev/null 2> "$work/stderr.txt" &&
  plain_embed --model "$work/deploy.prototxt" --preset none --out "$work/flag.npy" > /dev/null 2>&1; then
  grep -q "preset NONE, declared by the model ($work/none.prototxt:1:" "$work/stderr.txt" ||
    fail "the model's preset is not reported: $(cat "$work/stderr.txt")"
  cmp -s "$work/declared.npy" "$work/flag.npy" || fail "the model's preset NONE gives other rows than --preset none"
  cmp -s "$work/declared.npy" "$work/feat.npy" && fail "preset NONE gives the same rows as imagenet"
else
  fail "embed with the model's preset failed: $(cat "$work/stderr.txt")"
fi
if plain_embed --model "$work/none.prototxt" --preset imagenet --resize 20 --crop 16 --out "$work/override.npy" \
  > /dev/null 2> "$work/stderr.txt"; then
  grep -q "warning: --preset imagenet differs from the model's preset: NONE" "$work/stderr.txt" ||
    fail "no warning for a --preset that differs from the model's: $(cat "$work/stderr.txt")"
  cmp -s "$work/override.npy" "$work/feat.npy" || fail "--preset imagenet over the model's NONE: rows differ"
else
  fail "embed with --preset over the model's failed: $(cat "$work/stderr.txt")"
fi
if plain_embed --model "$work/deploy.prototxt" --resize 20 --crop 16 --out "$work/default.npy" \
  > /dev/null 2> "$work/stderr.txt"; then
  grep -q "preset IMAGENET (the model declares none and --preset is not given" "$work/stderr.txt" ||
    fail "no note when neither the model nor --preset names the transform: $(cat "$work/stderr.txt")"
  cmp -s "$work/default.npy" "$work/feat.npy" || fail "no preset anywhere: rows differ from --preset imagenet"
else
  fail "embed without any preset failed: $(cat "$work/stderr.txt")"
fi

# A typo gets the nearest name; a net without parameters needs no --weights.
expect_error "blob typo" "has no blob 'pol'; did you mean 'pool'?" embed_base --images "$work/imgs" --layer pol \
  --crop 16 --out "$work/x.npy"
"$strata" embed --model "$work/deploy.prototxt" --preset imagenet --resize 20 --crop 16 --layer pool --pool avg \
  --images "$work/imgs" --out "$work/noweights.npy" > /dev/null 2>&1 || fail "embed without --weights on a net without parameters failed"

# 6. --out never replaces an input, nor a file that is not an earlier embed
#    output unless --overwrite; a folder that does not exist fails before work.
sum() { sha256sum "$1" | cut -c1-64; }
before=$(sum "$work/empty.safetensors")
expect_error "--out on the weights" "is the same file as --weights" \
  run_embed --images "$work/imgs" --overwrite --out "$work/empty.safetensors"
[ "$(sum "$work/empty.safetensors")" = "$before" ] || fail "embed --out replaced the weights file"
cp "$work/deploy.prototxt" "$work/model_copy.prototxt"
expect_error "--out on the model" "is the same file as --model" \
  "$strata" embed --model "$work/model_copy.prototxt" --weights "$work/empty.safetensors" --layer pool \
  --images "$work/imgs" --out "$work/model_copy.prototxt"
echo "notes" > "$work/notes.npy"
expect_error "--out on another file" "pass --overwrite to replace it" \
  run_embed --images "$work/imgs" --pool avg --out "$work/notes.npy"
[ "$(cat "$work/notes.npy")" = "notes" ] || fail "embed replaced an unrelated file without --overwrite"
if run_embed --images "$work/imgs" --pool avg --out "$work/notes.npy" --overwrite > /dev/null 2>&1; then
  cmp -s "$work/notes.npy" "$work/feat.npy" || fail "--overwrite: the rows differ from feat.npy"
else
  fail "embed --overwrite on an unrelated file failed"
fi
# feat.npy is an earlier embed output (its paths file is beside it): replaced as it is.
run_embed --images "$work/imgs" --pool avg --out "$work/feat.npy" > /dev/null 2>&1 ||
  fail "embed did not replace its own earlier output"
expect_error "missing folder" "the folder '$work/no/such' does not exist" \
  run_embed --images "$work/imgs" --out "$work/no/such/rows.npy"

# 7. Names with any byte: a newline in a file name must not shift the rows of
#    the paths file (it is written \n, a backslash \\); a folder link loop is
#    read once, and files in other formats are counted on stderr.
mkdir -p "$work/odd/sub"
cp "$src/tests/golden/images/tiny.jpg" "$work/odd/a"$'\n'"new line.jpg"
cp "$src/tests/golden/images/rgb.png" "$work/odd/b\\back.png"
cp "$src/tests/golden/images/gray.png" "$work/odd/c.png"
ln -s .. "$work/odd/sub/loop"
echo x > "$work/odd/d.webp"
if run_embed --images "$work/odd" --pool avg --out "$work/odd.npy" > /dev/null 2> "$work/stderr.txt"; then
  head -c 128 "$work/odd.npy" | grep -q "'shape': (3, 3)" || fail "odd names: expected 3 rows (the loop read once)"
  expected=$(printf '%s\n' "$work/odd/a\\nnew line.jpg" "$work/odd/b\\\\back.png" "$work/odd/c.png")
  [ "$(cat "$work/odd.paths.txt")" = "$expected" ] || fail "odd names: paths file is '$(cat "$work/odd.paths.txt")'"
  # Row i is the image named on line i: the same bytes as that image's row in feat.npy (step 1).
  row() { od -An -v -tx1 -j $((128 + 12 * $2)) -N 12 "$1"; }
  [ "$(row "$work/odd.npy" 0)" = "$(row "$work/feat.npy" 5)" ] || fail "odd names: row 0 is not tiny.jpg's"
  [ "$(row "$work/odd.npy" 1)" = "$(row "$work/feat.npy" 2)" ] || fail "odd names: row 1 is not rgb.png's"
  [ "$(row "$work/odd.npy" 2)" = "$(row "$work/feat.npy" 1)" ] || fail "odd names: row 2 is not gray.png's"
  grep -q "skipped 1 file in formats strata does not read: 1 .webp" "$work/stderr.txt" ||
    fail "odd names: no note of the .webp file: $(cat "$work/stderr.txt")"
  grep -q "$work/odd/sub/loop -> " "$work/stderr.txt" || fail "odd names: no note of the link loop"
else
  fail "embed of odd names failed: $(cat "$work/stderr.txt")"
fi

# 8. Every flag of `strata embed --help` is documented.
for flag in $("$strata" embed --help | grep -o -- '--[a-z0-9-]*' | sort -u); do
  grep -q -- "\`$flag" "$src/docs/config.md" || fail "docs/config.md does not document strata embed $flag"
done

[ "$failures" -eq 0 ] && echo "PASS: strata embed end to end"
exit "$failures"
