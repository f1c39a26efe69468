#!/usr/bin/env bash
# Configures and builds strata into build/ (Release). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" > build.log 2>&1 || { cat build.log; exit 1; }
jobs=$(nproc 2>/dev/null || echo 2)
cmake --build build -j "$jobs" >> build.log 2>&1 || { tail -n 60 build.log; exit 1; }
echo "built: build/strata (log: build.log)"
