#!/usr/bin/env bash
# The include-rules check (tests/lint/include_rules.py) passes on the tree and
# catches, on a small tree made here: framework/ including a layer, a CPU
# kernel including the solver, tools/ including a layer's header, a folder
# of framework/ no rule knows, the sockets of parallel/ including the
# rendezvous above them; and it passes the same tree without them.
# Usage: include_rules_test.sh SOURCE_DIR
set -euo pipefail
src="$1"
lint="$src/tests/lint/include_rules.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

python3 "$lint" "$src" > "$work/tree.txt" || { cat "$work/tree.txt"; fail "the tree breaks its include rules"; }

t="$work/t"
mkdir -p "$t/framework/cpu" "$t/framework/solver" "$t/layers" "$t/tools/strata" "$t/parallel/socket" \
         "$t/parallel/rendezvous" "$t/transfer"
echo '#include "framework/tensor.h"' > "$t/framework/net.h"
echo '#include "framework/net.h"' > "$t/framework/solver/solver.h"
echo '#include "framework/tensor.h"' > "$t/framework/cpu/math.h"
printf '#include "framework/layer.h"\n#include <vector>\n#include "cudnn.h"\n' > "$t/layers/relu.h"
echo '#include "framework/solver/solver.h"' > "$t/tools/strata/cmd_train.cpp"
echo '#include "framework/net.h"' > "$t/parallel/training_run.cpp"
echo '#include "parallel/socket/socket.h"' > "$t/parallel/rendezvous/store.cpp"
echo '#include "framework/error.h"' > "$t/parallel/socket/socket.h"
python3 "$lint" "$t" > "$work/clean.txt" || { cat "$work/clean.txt"; fail "a tree that keeps the rules was refused"; }

echo '#include "layers/relu.h"' >> "$t/framework/net.h"
echo '#include "framework/solver/solver.h"' >> "$t/framework/cpu/math.h"
echo '#include "layers/relu.h"' >> "$t/tools/strata/cmd_train.cpp"
mkdir -p "$t/framework/misc" && echo '#include "framework/net.h"' > "$t/framework/misc/x.h"
echo '#include "parallel/rendezvous/store.h"' >> "$t/parallel/socket/socket.h"
if python3 "$lint" "$t" > "$work/broken.txt"; then cat "$work/broken.txt"; fail "broken rules passed"; fi
for want in "framework/net.h:2: includes layers/relu.h: framework/ may include only framework/" \
            "framework/cpu/math.h:2: includes framework/solver/solver.h: the framework room 'cpu' may include only core" \
            "tools/strata/cmd_train.cpp:2: includes layers/relu.h" \
            "framework/misc/x.h: framework/misc/ is not a room" \
            "parallel/socket/socket.h:2: includes parallel/rendezvous/store.h: the parallel room 'socket' may include only itself" \
            "5 include(s) break the house rules"; do
  grep -qF "$want" "$work/broken.txt" || { cat "$work/broken.txt"; fail "not reported: $want"; }
done
echo "PASS"
