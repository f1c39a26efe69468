#!/usr/bin/env python3
"""Finds CUDA code that reads tensor memory on the host.

A layer's CUDA path (its forward_cuda/backward_cuda, any *_cuda function, and
every function in a .cu file) must reach tensor memory through
device_data<T>() only: data<T>() is the host accessor, and on a tensor in
device memory it throws at run time. In a .cu file the compiler already
refuses it (framework/tensor.h); this check also follows the helpers a CUDA
function calls that are defined in the layer's own files (its .h, .cpp, .cuh)
or in the layers/ headers its .cu includes, where the compiler of a .cpp file
cannot tell a CUDA caller from a CPU one. It runs on the CPU, in CI.

A CUDA path that deliberately copies a tensor to the host first (HDF5Output
writes its bottoms to a file) says so on that line with the comment
`// device access: host copy`, and is not reported.

Usage: device_access.py [SOURCE_ROOT]   (default: the checkout this file is in)
Exit status 0 when clean; 1 with one line per finding (file:line, function,
the chain of helpers, and what to do instead).
"""
import os
import re
import sys

HOST_READ = re.compile(r"\bdata\s*<")
HOST_COPY_MARK = "// device access: host copy"
CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
NOT_CALLS = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "static_assert",
             "alignof", "defined", "static_cast", "reinterpret_cast", "const_cast", "dynamic_cast"}
# The start of a function definition: a (qualified) name, its parameter list,
# qualifiers, then the body's brace.
DEF_NAME = re.compile(r"((?:[A-Za-z_]\w*::)*~?[A-Za-z_]\w*)\s*\($")


def strip(text):
    """Comments and string/char literals blanked out, line breaks kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def match_brace(text, open_at):
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(text) - 1


class Function:
    def __init__(self, path, name, line, body):
        self.path, self.name, self.line, self.body = path, name, line, body
        self.short = name.split("::")[-1]


def functions_in(path, text):
    """Every function defined in `text`, with the class it sits in when it is
    defined inline in a class body."""
    classes = []
    for m in re.finditer(r"\b(?:class|struct)\s+([A-Za-z_]\w*)[^;{()]*\{", text):
        classes.append((m.end() - 1, match_brace(text, m.end() - 1), m.group(1)))
    found = []
    i = 0
    while True:
        brace = text.find("{", i)
        if brace < 0:
            break
        # Walk back over qualifiers to the closing parenthesis of a parameter list.
        k = brace - 1
        head = text[max(0, brace - 400):brace]
        tail = re.search(r"\)\s*(?:const\s*)?(?:noexcept\s*)?(?:override\s*)?(?:final\s*)?(?:->\s*[\w:<>&*\s]+)?$",
                         head)
        if tail is None:
            i = brace + 1
            continue
        close = brace - (len(head) - tail.start())
        depth, k = 0, close
        while k >= 0:
            if text[k] == ")":
                depth += 1
            elif text[k] == "(":
                depth -= 1
                if depth == 0:
                    break
            k -= 1
        m = DEF_NAME.search(text[max(0, k - 200):k + 1])
        if m is None or m.group(1).split("::")[-1] in NOT_CALLS:
            i = brace + 1
            continue
        end = match_brace(text, brace)
        name = m.group(1)
        if "::" not in name:
            owners = [c for c in classes if c[0] < brace < c[1]]
            if owners:
                name = max(owners, key=lambda c: c[0])[2] + "::" + name
        found.append(Function(path, name, text.count("\n", 0, brace) + 1, (text[brace:end + 1], brace)))
        i = end + 1
    return found


def includes(root, path, seen):
    """The layers/ headers `path` includes, transitively."""
    try:
        text = open(os.path.join(root, path), encoding="utf-8").read()
    except OSError:
        return
    for inc in re.findall(r'#include\s+"(layers/[^"]+)"', text):
        if inc not in seen:
            seen.add(inc)
            includes(root, inc, seen)


def check(root):
    findings = []
    texts, raws = {}, {}

    def load(rel):
        if rel not in texts:
            raw = open(os.path.join(root, rel), encoding="utf-8").read()
            raws[rel] = raw.split("\n")
            texts[rel] = strip(raw)
        return texts[rel]

    def marked(rel, line):
        return HOST_COPY_MARK in raws[rel][line - 1]

    layer_dir = os.path.join(root, "layers")
    sources = sorted(
        os.path.relpath(os.path.join(d, f), layer_dir)
        for d, _, names in os.walk(layer_dir)
        for f in names
        if f.endswith((".cu", ".cpp", ".h", ".cuh")))
    stems = sorted({os.path.splitext(f)[0] for f in sources})
    for stem in stems:
        own = [f"layers/{f}" for f in sources if os.path.splitext(f)[0] == stem]
        scope = set(own)
        for f in own:
            if f.endswith(".cu"):
                includes(root, f, scope)
        helpers = {}
        cuda_functions = []
        for rel in sorted(scope):
            text = load(rel)
            for fn in functions_in(rel, text):
                helpers.setdefault(fn.short, []).append(fn)
                if rel in own and (rel.endswith(".cu") or fn.short.endswith("_cuda")):
                    cuda_functions.append(fn)
        for fn in cuda_functions:
            finding = host_read(fn, helpers, load, marked)
            if finding:
                findings.append(finding)
    return findings


def line_of(fn, load, offset):
    text = load(fn.path)
    return text.count("\n", 0, fn.body[1] + offset) + 1


def host_read(fn, helpers, load, marked):
    """A message when `fn`, or a helper it calls, reads with data<T>()."""
    stack = [(fn, [])]
    visited = set()
    while stack:
        f, chain = stack.pop()
        key = (f.path, f.name, f.line)
        if key in visited:
            continue
        visited.add(key)
        body, _ = f.body
        m = next((m for m in HOST_READ.finditer(body) if not marked(f.path, line_of(f, load, m.start()))), None)
        if m:
            at = f"{f.path}:{line_of(f, load, m.start())}"
            via = "".join(f" -> {c.name} ({c.path}:{c.line})" for c in chain)
            return (f"{fn.path}:{fn.line}: {fn.name} is CUDA code and reads tensor memory on the host: "
                    f"data<T>() at {at}" + (f", reached through{via}" if via else "") +
                    "; CUDA code takes device_data<T>() (a helper shared with the CPU path should return the "
                    "Tensor and let each caller pick its accessor)")
        for call in CALL.findall(body):
            if call in NOT_CALLS or call == f.short:
                continue
            for h in helpers.get(call, []):
                stack.append((h, chain + [h]))
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    if not os.path.isdir(os.path.join(root, "layers")):
        print(f"device_access.py: {root} has no layers/ folder; give the source root", file=sys.stderr)
        return 2
    findings = check(root)
    for f in findings:
        print(f)
    if findings:
        print(f"{len(findings)} CUDA function(s) read tensor memory on the host", file=sys.stderr)
        return 1
    print("device access: no CUDA function of layers/ reads tensor memory on the host")
    return 0


if __name__ == "__main__":
    sys.exit(main())
