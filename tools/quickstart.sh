#!/usr/bin/env bash
# The README's first command: install what is missing, build, and train the
# digits convnet on the bundled data (under a minute on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
exec ./build/strata train --solver models/digits/solver.prototxt "$@"
