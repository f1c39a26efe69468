#!/usr/bin/env bash
# Download MNIST into data/mnist/ as the four uncompressed idx files that
# strata's "MnistData" layer reads:
#
#   train-images-idx3-ubyte  (47,040,016 bytes, 60000 x 28 x 28 uint8)
#   train-labels-idx1-ubyte  (    60,008 bytes)
#   t10k-images-idx3-ubyte   ( 7,840,016 bytes, 10000 x 28 x 28 uint8)
#   t10k-labels-idx1-ubyte   (    10,008 bytes)
#
# Original location: http://yann.lecun.com/exdb/mnist/ (often unreachable now).
# Default mirror:    https://ossci-datasets.s3.amazonaws.com/mnist/ (the one
#                    torchvision uses; byte-identical .gz files).
# Override with MNIST_MIRROR=<url ending in />.
#
# Usage: data/get_mnist.sh [dest_dir]     (default: data/mnist next to this script)
# Files already present with the right size are skipped; the .gz archives are
# checked against their published MD5 sums before being unpacked.
set -euo pipefail

MIRROR="${MNIST_MIRROR:-https://ossci-datasets.s3.amazonaws.com/mnist/}"
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEST="${1:-${SCRIPT_DIR}/mnist}"

# name  md5-of-.gz  size-of-unpacked-file
FILES=(
  "train-images-idx3-ubyte f68b3c2dcbeaaa9fbdd348bbdeb94873 47040016"
  "train-labels-idx1-ubyte d53e105ee54ea40749a09fcbcd1e9432 60008"
  "t10k-images-idx3-ubyte  9fb629c4189551a2d022fa330f9573f3 7840016"
  "t10k-labels-idx1-ubyte  ec29112dd5afa0611ce80d1b7f02629c 10008"
)

die() { echo "get_mnist.sh: error: $*" >&2; exit 1; }

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

command -v gunzip >/dev/null 2>&1 || die "need gunzip"
mkdir -p "$DEST"
echo "MNIST -> $DEST (mirror: $MIRROR)"

for entry in "${FILES[@]}"; do
  read -r name md5 size <<<"$entry"
  out="$DEST/$name"
  if [[ -f "$out" && "$(size_of "$out")" == "$size" ]]; then
    echo "  skip     $name (already present, $size bytes)"
    continue
  fi
  gz="$DEST/$name.gz.part"
  echo "  download ${MIRROR}${name}.gz"
  fetch "${MIRROR}${name}.gz" "$gz"
  got="$(md5_of "$gz")"
  if [[ -z "$got" ]]; then
    echo "  warning: no md5sum/md5 tool; MD5 not checked" >&2
  elif [[ "$got" != "$md5" ]]; then
    rm -f "$gz"
    die "$name.gz: MD5 $got, expected $md5"
  else
    echo "  md5 ok   $name.gz ($md5)"
  fi
  gunzip -c "$gz" >"$out.part"
  rm -f "$gz"
  got_size="$(size_of "$out.part")"
  if [[ "$got_size" != "$size" ]]; then
    rm -f "$out.part"
    die "$name: $got_size bytes after gunzip, expected $size"
  fi
  mv "$out.part" "$out"
  echo "  wrote    $out ($size bytes)"
done
echo "MNIST done."
