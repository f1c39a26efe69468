#!/usr/bin/env python3
"""The include rules of the house, checked on every #include "..." of the tree.

Top level (the dependency direction of the design, never the reverse):

    tools ──> transfer ──> framework <── layers
       └────> parallel ──> framework

framework/ includes only framework/; layers/ framework/ and layers/;
parallel/ framework/ and parallel/; transfer/ framework/ and transfer/;
tools/ everything but layers/ (it asks a layer what it declares through
framework/layer.h, never through a layer's own header), except
tools/examples/, whose projects are layer libraries built against an
installed strata: framework/ and layers/ only. tests/ may include anything.

Inside framework/, each room (framework/README.md) includes only the rooms
listed for it in ROOMS below; the root of framework/ is the room "core".
Inside parallel/ likewise (PARALLEL_ROOMS, parallel/README.md); its root is
the room "run".

Usage: include_rules.py SOURCE_DIR   (exit 1 and one line per broken rule)
"""
import os
import re
import sys

TOP = {
    "framework": {"framework"},
    "layers": {"framework", "layers"},
    "parallel": {"framework", "parallel"},
    "transfer": {"framework", "transfer"},
    "tools": {"framework", "parallel", "transfer", "tools"},
}

# room -> the rooms its files may include (besides itself). The Caffe room is
# consulted by the core (Caffe's layer types in the unknown-type error), the
# config room (Caffe's V1 nets read as their upgrade) and the data room
# (Caffe's relative paths in list files); nothing below the solver includes it.
ROOMS = {
    "core": {"config", "cuda", "io", "caffe", "plan"},
    "plan": {"core"},
    "config": {"core", "caffe"},
    "cpu": {"core"},
    "cuda": {"core", "cpu", "io"},
    "io": {"core"},
    "data": {"core", "config", "cpu", "io", "caffe"},
    "caffe": {"core", "config", "data", "io"},
    "solver": {"core", "config", "cpu", "cuda", "io"},
}

# parallel/'s rooms (parallel/README.md): dependencies run downwards, never
# upwards; the strategies do not include each other (the cost model reads
# the configs of two of them); the root (training_run, slowdown) puts a run
# together from all of them.
BELOW_STRATEGIES = {"socket", "rendezvous", "transport", "collectives", "backends", "codec"}
PARALLEL_ROOMS = {
    "socket": set(),
    "rendezvous": {"socket"},
    "transport": {"socket", "rendezvous"},
    "collectives": {"transport"},
    "codec": set(),
    "backends": {"socket", "rendezvous", "transport", "collectives"},
    "data_parallel": BELOW_STRATEGIES,
    "parameter_server": BELOW_STRATEGIES,
    "model_parallel": BELOW_STRATEGIES,
    "estimate": BELOW_STRATEGIES | {"data_parallel", "model_parallel"},
    "run": BELOW_STRATEGIES | {"data_parallel", "parameter_server", "model_parallel", "estimate"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SOURCES = (".h", ".cpp", ".cu", ".cuh")


def room_of(path, root_room="core"):
    """framework/solver/solver.h -> solver; framework/net.h -> core."""
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else root_room


def check(root):
    problems = []
    for top, allowed in TOP.items():
        base = os.path.join(root, top)
        for d, _, names in os.walk(base):
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                rel = os.path.relpath(os.path.join(d, name), root).replace(os.sep, "/")
                may = {"framework", "layers"} if rel.startswith("tools/examples/") else allowed
                text = open(os.path.join(d, name), encoding="utf-8", errors="replace").read()
                for m in INCLUDE.finditer(text):
                    target = m.group(1)
                    line = text.count("\n", 0, m.start()) + 1
                    target_top = target.split("/")[0]
                    if target_top not in TOP and target_top not in ("tests", "models", "data"):
                        continue  # a third-party or generated header
                    if target_top not in may:
                        problems.append(f"{rel}:{line}: includes {target}: {top}/ may include only "
                                        f"{', '.join(sorted(a + '/' for a in may))}")
                        continue
                    if top == "framework" and target_top == "framework":
                        src, dst = room_of(rel), room_of(target)
                        if src in ROOMS and dst != src and dst not in ROOMS[src]:
                            problems.append(f"{rel}:{line}: includes {target}: the framework room '{src}' may "
                                            f"include only {', '.join(sorted(ROOMS[src]))} (and itself)")
                        elif src not in ROOMS:
                            problems.append(f"{rel}: framework/{src}/ is not a room the include rules know; "
                                            f"add it to ROOMS in tests/lint/include_rules.py and framework/README.md")
                    if top == "parallel" and target_top == "parallel":
                        src, dst = room_of(rel, "run"), room_of(target, "run")
                        if src not in PARALLEL_ROOMS:
                            problems.append(f"{rel}: parallel/{src}/ is not a room the include rules know; add it "
                                            f"to PARALLEL_ROOMS in tests/lint/include_rules.py and parallel/README.md")
                        elif dst != src and dst not in PARALLEL_ROOMS[src]:
                            problems.append(f"{rel}:{line}: includes {target}: the parallel room '{src}' may "
                                            f"include only {', '.join(sorted(PARALLEL_ROOMS[src])) or 'itself'}")
    return problems


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    problems = check(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) break the house rules (tests/lint/include_rules.py)")
        return 1
    print("include rules: every include of framework/, layers/, parallel/, transfer/ and tools/ keeps them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
