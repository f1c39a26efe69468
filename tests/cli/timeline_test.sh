#!/usr/bin/env bash
# `strata train --timeline FILE`: a Chrome trace that parses as JSON, with one
# process (track) per rank, named threads, and events that nest on each
# thread (a layer's forward inside its step); allreduce buckets on a lane of
# their own. One process, 2 data-parallel ranks (one file), and a
# parameter-server run (one file per rank).
# Usage: timeline_test.sh STRATA_BINARY SOURCE_DIR
set -euo pipefail
strata="$1"
src="$2"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
py=/usr/bin/python3
[ -x "$py" ] || py=python3
export STRATA_TIMEOUT_S=20
cp "$src/models/digits/"*.prototxt "$work/"
sed -i "s|\.\./\.\./data|$src/data|" "$work/train.prototxt"
sed -i -e 's/^max_iter:.*/max_iter: 6/' -e 's/^display:.*/display: 3/' -e 's/^test_interval:.*/test_interval: 3/' \
    -e 's|^snapshot_prefix:.*|snapshot_prefix: "snap/d"|' "$work/solver.prototxt"
cd "$work"

check() {  # check FILE RANKS
  "$py" - "$1" "$2" <<'PY' || fail "$1 is not a well-formed trace"
import json, sys, collections
path, ranks = sys.argv[1], int(sys.argv[2])
d = json.load(open(path))
ev = d["traceEvents"]
pids = {e["pid"] for e in ev}
assert pids == set(range(ranks)) if ranks > 1 else len(pids) == 1, "tracks %s for %d ranks" % (pids, ranks)
names = {(e["pid"], e["args"]["name"]) for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
assert len(names) == len(pids), "a process without a name: %s" % names
by_thread = collections.defaultdict(list)
for e in ev:
    if e["ph"] == "X":
        assert e["dur"] >= 0 and e["ts"] > 0, e
        by_thread[(e["pid"], e["tid"])].append(e)
cats = collections.Counter(e["cat"] for e in ev if e["ph"] == "X")
for c in ("step", "forward", "backward", "test"):
    assert cats[c] > 0, "no %s events: %s" % (c, cats)
# Events of one thread either nest or follow each other (1 us of clock slack).
for key, es in by_thread.items():
    es.sort(key=lambda e: (e["ts"], -e["dur"]))
    stack = []
    for e in es:
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
            stack.pop()
        if stack:
            top = stack[-1]
            assert e["ts"] + e["dur"] <= top["ts"] + top["dur"] + 1, "%s overlaps %s on %s" % (e, top, key)
        stack.append(e)
steps = [e for e in ev if e.get("cat") == "step"]
fwd = [e for e in ev if e.get("cat") == "forward" and e["pid"] == steps[0]["pid"] and e["tid"] == steps[0]["tid"]]
assert any(s["ts"] <= f["ts"] and f["ts"] + f["dur"] <= s["ts"] + s["dur"] + 1 for s in steps for f in fwd), \
    "no forward inside a step"
print("  %s: %d events, %d tracks, categories %s" % (path, len(ev), len(pids), dict(cats)))
PY
}

echo "== one process"
"$strata" train --solver solver.prototxt --timeline one.json > one.txt 2>&1 || { cat one.txt; fail "train failed"; }
grep -q '^timeline: one.json' one.txt || { cat one.txt; fail "no timeline line"; }
check one.json 1

echo "== strata estimate takes its layer times from the trace"
"$strata" estimate --model train.prototxt --timeline one.json --workers 1,2 --link 10gbe > est.txt 2>&1 ||
  { cat est.txt; fail "estimate from the timeline failed"; }
grep -q '^layer times from the timeline one.json, rank 0, 6 steps' est.txt || { cat est.txt; fail "no times line"; }
grep -qE '^dp-ring +2 ' est.txt || { cat est.txt; fail "no dp-ring prediction"; }
"$strata" estimate --model train.prototxt --timeline solver.prototxt > bad.txt 2>&1 && fail "a prototxt was taken for a trace"
grep -q 'not a Chrome trace' bad.txt || { cat bad.txt; fail "no clear error for a file that is not a trace"; }

echo "== 2 data-parallel ranks: one file, a track per rank, allreduce lanes"
"$strata" launch --nproc 2 -- "$strata" train --solver solver.prototxt --timeline dp.json --overwrite > dp.txt 2>&1 ||
  { cat dp.txt; fail "launch failed"; }
check dp.json 2
grep -q '"cat":"allreduce","name":"allreduce bucket 0"' dp.json || fail "no allreduce bucket events"
grep -q '"name":"thread_name","args":{"name":"allreduce"}' dp.json || fail "no allreduce lane"
"$strata" estimate --model train.prototxt --timeline dp.json --workers 1,2 --link shm > dpest.txt 2>&1 ||
  { cat dpest.txt; fail "estimate from the 2-rank timeline failed"; }
# The trace's measured allreduce time (busy, exposed) is printed beside the model's at 2 workers, and it is
# the union of rank 0's bucket spans: recompute it here from the file.
line=$(grep -E "^the timeline's run: 2 ranks, rank 0's 6 steps of [0-9.]+ ms: allreduce busy [0-9.]+ ms per step" dpest.txt) ||
  { cat dpest.txt; fail "no measured communication line"; }
grep -qE '^predicted for dp-ring at 2 workers: step [0-9.]+ ms, communication [0-9.]+ ms, exposed [0-9.]+ ms' dpest.txt ||
  { cat dpest.txt; fail "no predicted communication line"; }
"$py" - dp.json "$line" <<'PY' || fail "the busy time printed is not the trace's"
import json, re, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "step" and e["pid"] == 0)
busy = 0.0
for a, b in steps:
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev
                   if e.get("cat") == "allreduce" and e["pid"] == 0 and a <= e["ts"] and e["ts"] + e["dur"] <= b + 1)
    end = -1e300
    for s, t in spans:
        busy += max(0.0, t - max(s, end)); end = max(end, t)
want = busy / len(steps) / 1000.0
got = float(re.search(r"allreduce busy ([0-9.]+) ms", sys.argv[2]).group(1))
assert want > 0 and abs(got - want) <= 1e-3 + 1e-3 * want, (got, want)
print("  busy %.3f ms per step, as in the trace" % got)
PY

echo "== parameter server: a file per rank"
"$strata" launch --nproc 2 --servers 1 -- "$strata" train --solver solver.prototxt --timeline ps.json --overwrite \
  --ps-mode ASYNC > ps.txt 2>&1 || { cat ps.txt; fail "launch failed"; }
for r in 0 1 2; do [ -f "ps.rank$r.json" ] || { cat ps.txt; fail "no ps.rank$r.json"; }; done
check ps.rank0.json 1
grep -q '"cat":"ps","name":"push to server 0"' ps.rank1.json || fail "no push events on worker 1"
grep -q '"cat":"ps","name":"push of step 1"' ps.rank2.json || fail "no push events on the server"
echo "== the trace's path is checked before training"
# A missing folder, the solver itself, or a file that is not an earlier trace:
# refused at once, before training; an earlier trace is replaced (--overwrite:
# the snapshots of the first run are under the same prefix).
if "$strata" train --solver solver.prototxt --timeline no/such/dir/t.json > miss.txt 2>&1; then fail "a missing folder was accepted"; fi
grep -q "the folder 'no/such/dir' does not exist" miss.txt || { cat miss.txt; fail "unclear message for a missing folder"; }
grep -q "^iter" miss.txt && fail "training ran before the missing folder was found"
if "$strata" train --solver solver.prototxt --timeline solver.prototxt --overwrite > same.txt 2>&1; then
  fail "the solver file was taken as the trace's path"
fi
grep -q "is the same file as --solver" same.txt || { cat same.txt; fail "unclear message for --timeline on the solver"; }
echo "keep" > notes.json
if "$strata" train --solver solver.prototxt --timeline notes.json > notes.txt 2>&1; then fail "notes.json was replaced"; fi
grep -q "pass --overwrite to replace it" notes.txt || { cat notes.txt; fail "unclear message for an existing file"; }
[ "$(cat notes.json)" = "keep" ] || fail "notes.json changed"
"$strata" train --solver solver.prototxt --timeline one.json --overwrite > again.txt 2>&1 ||
  { cat again.txt; fail "an earlier trace was not replaced"; }
echo "PASS"
