#!/usr/bin/env bash
# Download the CIFAR-10 *binary* version into data/cifar10/, as read by
# strata's "Cifar10Data" layer:
#
#   data_batch_1.bin .. data_batch_5.bin  (30,730,000 bytes each: 10000 records
#   test_batch.bin                         of 1 label byte + 3072 pixel bytes,
#                                          32x32, channel-major R, G, B)
#   batches.meta.txt                       (the 10 class names, one a line)
#
# Source: https://www.cs.toronto.edu/~kriz/cifar.html (Krizhevsky, 2009,
# "Learning Multiple Layers of Features from Tiny Images").
# Archive: https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz
#          (170,052,171 bytes, MD5 c32a1d4ab5d03f1284b67883e8d87530).
# Override with CIFAR10_URL=<url>.
#
# Usage: data/get_cifar10.sh [dest_dir]   (default: data/cifar10 next to this script)
# If all files are already present with the right sizes, nothing is downloaded.
set -euo pipefail

URL="${CIFAR10_URL:-https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz}"
ARCHIVE_MD5="c32a1d4ab5d03f1284b67883e8d87530"
ARCHIVE_SIZE=170052171
BATCH_SIZE=30730000
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEST="${1:-${SCRIPT_DIR}/cifar10}"
BATCHES=(data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin
         data_batch_5.bin test_batch.bin)

die() { echo "get_cifar10.sh: error: $*" >&2; exit 1; }

fetch() {  # fetch URL OUTFILE
  if command -v curl >/dev/null 2>&1; then
    curl -fL --retry 3 -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then
    wget -O "$2" "$1"
  else
    die "need curl or wget"
  fi
}

md5_of() {  # md5_of FILE -> prints hex digest, or nothing if no tool
  if command -v md5sum >/dev/null 2>&1; then
    md5sum "$1" | cut -d' ' -f1
  elif command -v md5 >/dev/null 2>&1; then
    md5 -q "$1"
  fi
}

size_of() { wc -c <"$1" | tr -d ' '; }

all_present() {
  local f
  for f in "${BATCHES[@]}"; do
    [[ -f "$DEST/$f" && "$(size_of "$DEST/$f")" == "$BATCH_SIZE" ]] || return 1
  done
  [[ -s "$DEST/batches.meta.txt" ]]
}

command -v tar >/dev/null 2>&1 || die "need tar"
mkdir -p "$DEST"
echo "CIFAR-10 (binary) -> $DEST"

if all_present; then
  echo "  skip     all files already present"
  echo "CIFAR-10 done."
  exit 0
fi

archive="$DEST/cifar-10-binary.tar.gz"
if [[ -f "$archive" && "$(size_of "$archive")" == "$ARCHIVE_SIZE" ]]; then
  echo "  skip     download ($archive already present)"
else
  echo "  download $URL"
  fetch "$URL" "$archive.part"
  mv "$archive.part" "$archive"
fi

got_size="$(size_of "$archive")"
[[ "$got_size" == "$ARCHIVE_SIZE" ]] ||
  die "archive is $got_size bytes, expected $ARCHIVE_SIZE (delete $archive and retry)"
got="$(md5_of "$archive")"
if [[ -z "$got" ]]; then
  echo "  warning: no md5sum/md5 tool; MD5 not checked" >&2
elif [[ "$got" != "$ARCHIVE_MD5" ]]; then
  die "archive MD5 $got, expected $ARCHIVE_MD5 (delete $archive and retry)"
else
  echo "  md5 ok   cifar-10-binary.tar.gz ($ARCHIVE_MD5)"
fi

# The archive holds cifar-10-batches-bin/{data_batch_*.bin,test_batch.bin,
# batches.meta.txt,readme.html}; extract only the files we need, flattened.
tmp="$(mktemp -d "$DEST/.extract.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
members=()
for f in "${BATCHES[@]}" batches.meta.txt; do
  members+=("cifar-10-batches-bin/$f")
done
echo "  extract  ${#members[@]} files"
tar -xzf "$archive" -C "$tmp" "${members[@]}"
for f in "${BATCHES[@]}"; do
  got_size="$(size_of "$tmp/cifar-10-batches-bin/$f")"
  [[ "$got_size" == "$BATCH_SIZE" ]] ||
    die "$f: $got_size bytes, expected $BATCH_SIZE"
done
for f in "${BATCHES[@]}" batches.meta.txt; do
  mv -f "$tmp/cifar-10-batches-bin/$f" "$DEST/$f"
  echo "  wrote    $DEST/$f ($(size_of "$DEST/$f") bytes)"
done
rm -f "$archive"
echo "  removed  $archive"
echo "CIFAR-10 done."
