# shellcheck shell=bash
# Shared by data_parallel_test.sh and data_parallel_mpi_test.sh, which source
# it: a private copy of the digits model and data, the nets they train, and
# the comparisons of a data-parallel run with one process. The sourcing
# script defines fail() and sets $src (the source tree); $work comes from
# digits_lib.sh.

# setup_digits: a private copy of the digits model and data (digits_lib.sh).
# shellcheck source=tests/cli/digits_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/digits_lib.sh"

# The digits net without dropout (its masks differ with the batch split) and
# without shuffling, with the TRAIN batch given.
make_net() {  # make_net OUT BATCH
  sed -e '/type: "Dropout"/d' \
      -e 's|shuffle: true|shuffle: false|' \
      -e "0,/batch_size: 64/s//batch_size: $2/" "$dir/train.prototxt" > "$1"
  grep -q "batch_size: $2" "$1" || fail "could not set the batch size in $1"
  ! grep -q Dropout "$1" || fail "could not remove the dropout layer from $1"
}

# Float-by-float comparison of two safetensors files written by the same net:
# identical headers, data within a relative tolerance.
compare_weights() {  # compare_weights A B TOL
  local ha hb
  ha=$(od -An -tu8 -N8 "$1" | tr -d ' ')
  hb=$(od -An -tu8 -N8 "$2" | tr -d ' ')
  [ "$ha" = "$hb" ] || fail "$1 and $2 have different headers"
  # The same header but for each tensor's checksum (the data may differ within TOL).
  local mask='s/("crc32c\.[^"]*":")[0-9a-f]{8}/\1/g'
  cmp -s <(head -c $((8 + ha)) "$1" | sed -E "$mask") <(head -c $((8 + hb)) "$2" | sed -E "$mask") ||
    fail "$1 and $2 have different headers"
  paste <(od -An -v -tf4 -w4 -j $((8 + ha)) "$1") <(od -An -v -tf4 -w4 -j $((8 + hb)) "$2") |
    awk -v tol="$3" -v what="$1 vs $2" '
      { d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1; if (a < 1) a = 1;
        n++; if (d / a > worst) worst = d / a; if (d > tol * a) bad++ }
      END { printf "  %s: %d values, largest relative difference %.3g\n", what, n, worst;
            if (n == 0 || bad > 0) exit 1 }' || fail "weights differ by more than $3"
}
# The logged loss of every iteration.
losses() { grep '"event":"iteration"' "$1" | sed 's/.*"loss":\([^,]*\),.*/\1/'; }
compare_losses() {  # compare_losses LOG_A LOG_B TOL
  paste <(losses "$1") <(losses "$2") | awk -v tol="$3" '
    { d = $1 - $2; if (d < 0) d = -d; n++; if (d > tol * ($1 < 0 ? -$1 : $1)) bad++ }
    END { printf "  %d logged losses compared\n", n; if (n < 8 || bad > 0) exit 1 }' ||
    fail "losses differ: $(paste <(losses "$1") <(losses "$2") | tr '\n' ' ')"
}
