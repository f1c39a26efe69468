#!/usr/bin/python3
"""Writes the layer golden cases under tests/golden/layers/ (see README.md).

Each case is one layer under test, fed by an Input layer, with inputs,
parameters, forward outputs and backward gradients computed by PyTorch in
float64 (the independent oracle) and stored as float32 .npy files. The C++
test tests/layer_golden_test.cpp replays every folder.

The cases live in tests/golden/layer_cases/, one module per layer type
(named after its layers/<stem>.cpp); a new layer adds a module there.

    /usr/bin/python3 tests/golden/make_layer_golden.py            # every case
    /usr/bin/python3 tests/golden/make_layer_golden.py --only ReLU gelu_tanh
    /usr/bin/python3 tests/golden/make_layer_golden.py --list

--only takes case names or layer types and rewrites only those cases'
folders; every other folder is left as it is. Without it the whole folder is
deleted and rewritten (which also drops cases that no longer exist).
Deterministic: every case draws from its own fixed seed (CRC32 of its name),
so regenerating rewrites identical bytes whatever else is selected.
"""

import argparse
import importlib
import os
import pkgutil
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from layer_cases import common  # noqa: E402  (needs the path above)


def load_cases():
    """Imports every case module; returns {case name: function}, in module order."""
    package = os.path.join(HERE, "layer_cases")
    for info in sorted(pkgutil.iter_modules([package]), key=lambda m: m.name):
        if info.name != "common":
            importlib.import_module("layer_cases." + info.name)
    cases = {}
    for fn in common.CASES:
        if fn.__name__ in cases:
            sys.exit("two golden cases are named %s (%s and %s); rename one"
                     % (fn.__name__, cases[fn.__name__].__module__, fn.__module__))
        cases[fn.__name__] = fn
    return cases


def build(fn):
    c = fn()
    if c.name != fn.__name__:
        sys.exit("case function %s.%s builds a case named %r; the two names must agree"
                 % (fn.__module__, fn.__name__, c.name))
    return c


def folder_size(d):
    return sum(os.path.getsize(os.path.join(d, x)) for x in os.listdir(d))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", metavar="NAME",
                    help="case names (relu_negative_slope) or layer types (ReLU) to rewrite; others stay untouched")
    ap.add_argument("--list", action="store_true", help="print every case with its layer type and module, then exit")
    args = ap.parse_args()
    cases = load_cases()

    if args.list:
        for name, fn in cases.items():
            print("%-28s %-20s %s" % (name, build(fn).type, fn.__module__))
        return

    if args.only is None:
        if os.path.isdir(common.OUT_DIR):
            shutil.rmtree(common.OUT_DIR)
        built = [build(fn) for fn in cases.values()]
    else:
        wanted = set(args.only)
        # A layer type is only known once a case is built; building is cheap
        # (tiny tensors), writing is what --only limits.
        built = [c for c in (build(fn) for fn in cases.values()) if c.name in wanted or c.type in wanted]
        unknown = wanted - {c.name for c in built} - {c.type for c in built}
        if unknown:
            sys.exit("no golden case or layer type named %s; --list shows them"
                     % ", ".join(sorted(unknown)))
    os.makedirs(common.OUT_DIR, exist_ok=True)
    for c in built:
        d = os.path.join(common.OUT_DIR, c.name)
        if os.path.isdir(d):
            shutil.rmtree(d)
        common.write(c)

    folders = [os.path.join(common.OUT_DIR, n) for n in sorted(os.listdir(common.OUT_DIR))]
    total = sum(folder_size(d) for d in folders if os.path.isdir(d))
    print("%d case(s) written; %d cases, %d bytes in %s" % (len(built), len(folders), total, common.OUT_DIR))
    if total > common.SIZE_LIMIT:
        sys.exit("golden files total %d bytes, over the %d limit: shrink the cases" % (total, common.SIZE_LIMIT))


if __name__ == "__main__":
    main()
