#!/usr/bin/env bash
# `strata train --device cuda --timeline FILE`: besides the host's events
# (which on a GPU time the launches), every layer's forward and backward on
# the GPU as a span between CUDA events, on a lane "GPU cuda:0" of the rank's
# track: one "gpu forward" and one "gpu backward" per layer and step, inside
# the step's host span, in the order the layers ran; a test's forwards are
# "gpu test". `strata estimate --timeline` then takes the GPU spans.
# Exits 77 (skipped) when the build has no CUDA backend or the machine no GPU.
# Usage: timeline_gpu_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
py=/usr/bin/python3
"$py" -c 'import json' 2>/dev/null || py=python3
cp "$src/models/digits/"*.prototxt "$work/"
sed -i "s|\.\./\.\./data|$src/data|" "$work/train.prototxt"
sed -i -e 's/^max_iter:.*/max_iter: 6/' -e 's/^display:.*/display: 3/' -e 's/^test_interval:.*/test_interval: 3/' \
    -e 's|^snapshot_prefix:.*|snapshot_prefix: "snap/d"|' "$work/solver.prototxt"
cd "$work"

if ! "$strata" train --solver solver.prototxt --device cuda --timeline gpu.json > gpu.txt 2>&1; then
  if grep -Eq 'no CUDA backend|no CUDA device|no GPU|CUDA driver' gpu.txt; then
    echo "SKIP: $(grep -E 'no CUDA backend|no CUDA device|no GPU|CUDA driver' gpu.txt | head -n 1)"
    exit 77
  fi
  cat gpu.txt
  fail "GPU training with --timeline failed"
fi

"$py" - gpu.json <<'PY' || fail "the GPU spans are not as expected"
import json, sys, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
lanes = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"
         and e["args"]["name"] == "GPU cuda:0"}
assert len(lanes) == 1, "no lane 'GPU cuda:0': %s" % lanes
lane = next(iter(lanes))
steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["ph"] == "X" and e["cat"] == "step")
assert len(steps) == 6, steps
gpu = [e for e in ev if e["ph"] == "X" and e["cat"].startswith("gpu ")]
assert gpu and all((e["pid"], e["tid"]) == lane for e in gpu), "GPU spans off their lane"
host_fwd = collections.Counter(e["name"] for e in ev if e["ph"] == "X" and e["cat"] == "forward")
fwd = collections.Counter(e["name"] for e in gpu if e["cat"] == "gpu forward")
bwd = collections.Counter(e["name"] for e in gpu if e["cat"] == "gpu backward")
assert fwd and set(fwd.values()) == {6}, "gpu forward per layer: %s" % fwd
assert bwd and set(bwd.values()) == {6}, "gpu backward per layer: %s" % bwd
assert any(e["cat"] == "gpu test" for e in gpu), "no GPU span of the test net"
for e in gpu:
    assert e["dur"] >= 0, e
    if e["cat"] != "gpu test":
        # Inside its step's host span (the step waits for its GPU spans), 2 us of clock slack.
        assert any(a - 2 <= e["ts"] and e["ts"] + e["dur"] <= b + 2 for a, b in steps), "outside every step: %s" % e
# On the GPU the spans of one step follow each other: forward in layer order, then backward.
spans = sorted((e for e in gpu if e["cat"] != "gpu test"), key=lambda e: e["ts"])
for a, b in zip(spans, spans[1:]):
    assert a["ts"] + a["dur"] <= b["ts"] + 2, "GPU spans overlap: %s %s" % (a, b)
print("  %d GPU spans on lane %s" % (len(gpu), lane))
PY

"$strata" estimate --model train.prototxt --timeline gpu.json --workers 1,2 --link 10gbe > est.txt 2>&1 ||
  { cat est.txt; fail "estimate from the GPU timeline failed"; }
grep -q '^layer times from the timeline gpu.json, rank 0, 6 steps, GPU spans (CUDA events)' est.txt ||
  { cat est.txt; fail "estimate did not take the GPU spans"; }
echo "PASS"
