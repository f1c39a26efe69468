#!/usr/bin/env bash
# Every command-line flag that `strata COMMAND --help` lists must be
# documented in docs/config.md.
set -euo pipefail
strata="$1"
docs="$2/docs/config.md"
missing=0
for cmd in train test time launch embed estimate convert layers check-layers; do
  for flag in $("$strata" "$cmd" --help | grep -o -- '--[a-z0-9-]*' | sort -u); do
    if ! grep -q -- "\`$flag" "$docs"; then
      echo "docs/config.md does not document strata $cmd $flag"
      missing=1
    fi
  done
done
[ "$missing" -eq 0 ] && echo "PASS: every flag is documented"
exit "$missing"
