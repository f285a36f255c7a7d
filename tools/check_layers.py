#!/usr/bin/env python3
"""Checks the C++ tree's include layering (docs/architecture.md#layers).

Layers, lowest first:
  public vocabulary  include/gengraph/*.h except the three below (the error, stream, settings
                     types, ...) and include/gengraph/ext/*.h (the extension surface)
  framework          framework/
  backends           backends/ (a backend never includes a sibling backend; register_builtin
                     lists them all)
  serving            serving/ (the scheduler's core: requests, policies, one step at a time)
  engine             engine/, include/gengraph/gengraph.h, serving.h and extension.h
  server             server/ (gengraph serve: OpenAI's HTTP API over the public Scheduler)
  experiments        experiments/ (the CLI's library; experiments/cli/main.cpp is the CLI) and
                     include/gengraph/cli.h
  python             python/ (the Python package's extension module)
  bench              bench/

A file may include its own layer and the layers below it, never one above. Public headers include
only public headers (and system or third-party ones), extension.h and ext/ among them: the install
holds no other. Tests are not checked: they may include anything. Exit 0 when the tree is clean, 1
listing every violation.

The sub-folders of a layer's folder (experiments/cli/, experiments/results/, ...) are that layer.

Include cycles are refused too, in every layer: a header and its .cpp count as one file (a unit,
"experiments/results/table"), and units that lead back to themselves through includes (a.cpp
includes b.h and b.cpp includes a.h, or a longer ring) are reported with the include line of each
step of the ring. There are none: KNOWN_CYCLES, where cycles present when the check came were
tolerated until removed, is empty, and a new cycle fails.

  tools/check_layers.py [ROOT]      check the tree at ROOT (default: this checkout)
  tools/check_layers.py --self-test check that a tree with one violation of each kind is refused,
                                    and that planted include cycles are found
"""
import os
import re
import sys
import tempfile

LAYERS = ["public", "framework", "backends", "serving", "engine", "server", "experiments", "python",
          "bench"]
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
PUBLIC_LAYERS = {"include/gengraph/gengraph.h": "engine",
                 "include/gengraph/serving.h": "engine",
                 "include/gengraph/extension.h": "engine",
                 "include/gengraph/cli.h": "experiments"}
CHECKED = ("include/gengraph/", "framework/", "backends/", "serving/", "engine/", "server/",
           "experiments/",
           "python/",
           "bench/")


def layer_of(path):
    """The layer of a project path ("framework/a.h", "include/gengraph/x.h"), or None."""
    if path.startswith("include/gengraph/"):
        return PUBLIC_LAYERS.get(path, "public")
    top = path.split("/", 1)[0]
    return top if top in LAYERS else None


def target_of(spelled, angle):
    """The project path an include names, or None for a system or third-party header."""
    if angle:
        return "include/" + spelled if spelled.startswith("gengraph/") else None
    return spelled if layer_of(spelled) else None


def backend_of(path):
    """The backend folder of a path under backends/ ("trace"), or None for backends/*.h|cpp."""
    parts = path.split("/")
    return parts[1] if parts[0] == "backends" and len(parts) > 2 else None


def violations(root):
    found = []
    for folder in CHECKED:
        base = os.path.join(root, folder)
        for dirpath, _, files in os.walk(base):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp", ".cu")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                src = layer_of(path)
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    text = f.read()
                for m in INCLUDE.finditer(text):
                    angle, spelled = m.group(1) == "<", m.group(2)
                    target = target_of(spelled, angle)
                    line = text.count("\n", 0, m.start()) + 1
                    where = "%s:%d: includes '%s'" % (path, line, spelled)
                    if target is None:
                        continue
                    dst = layer_of(target)
                    if path.startswith("include/gengraph/") and \
                            not target.startswith("include/gengraph/"):
                        found.append(where + ": a public header includes only public headers")
                    elif LAYERS.index(dst) > LAYERS.index(src):
                        found.append("%s: layer '%s' includes the higher layer '%s'" %
                                     (where, src, dst))
                    elif src == "backends" and backend_of(path) and backend_of(target) and \
                            backend_of(path) != backend_of(target):
                        found.append("%s: backend '%s' includes backend '%s' (share through "
                                     "framework/backend, e.g. model_step.h)" %
                                     (where, backend_of(path), backend_of(target)))
    return found


# Include cycles tolerated (reported as known) while the cycle found lies within one of them.
# The four present when the cycle check came are gone; keep it empty.
KNOWN_CYCLES = []


def unit_of(path):
    """A file's unit: its path without the extension, so that x.h and x.cpp are one node."""
    return os.path.splitext(path)[0]


def include_graph(root):
    """{unit: {included unit: (file, line, spelled include)}}: the project includes of the checked
    tree between units (a unit's own header is no edge); the first include of each pair is kept."""
    graph = {}
    for folder in CHECKED:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp", ".cu")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                    text = f.read()
                edges = graph.setdefault(unit_of(path), {})
                for m in INCLUDE.finditer(text):
                    target = target_of(m.group(2), m.group(1) == "<")
                    if target is None or unit_of(target) == unit_of(path):
                        continue
                    line = text.count("\n", 0, m.start(2)) + 1
                    edges.setdefault(unit_of(target), (path, line, m.group(2)))
    return graph


def reachable(graph, start):
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), {}):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def shortest_cycle(graph, start, members):
    """The units of a shortest cycle from `start` back to it within `members`."""
    came_from, todo = {start: None}, [start]
    while todo:
        following = []
        for unit in todo:
            for nxt in sorted(graph.get(unit, {})):
                if nxt == start:
                    ring = [unit]
                    while came_from[ring[-1]] is not None:
                        ring.append(came_from[ring[-1]])
                    return list(reversed(ring))
                if nxt in members and nxt not in came_from:
                    came_from[nxt] = unit
                    following.append(nxt)
        todo = following
    return [start]


def include_cycles(root, known=()):
    """(refused, tolerated): a report per set of units that reach each other through includes,
    refused unless it lies within one of `known` (tuples of units)."""
    graph = include_graph(root)
    reach = {unit: reachable(graph, unit) for unit in graph}
    refused, tolerated, done = [], [], set()
    for unit in sorted(graph):
        if unit in done or unit not in reach[unit]:
            continue
        members = sorted(u for u in reach[unit] if unit in reach.get(u, ()))
        done.update(members)
        ring = shortest_cycle(graph, members[0], set(members))
        lines = ["include cycle between %d units (a header and its .cpp are one): %s" %
                 (len(members), ", ".join(members))]
        for a, b in zip(ring, ring[1:] + ring[:1]):
            lines.append("  %s:%d: includes '%s'" % graph[a][b])
        if any(set(members) <= set(k) for k in known):
            tolerated.append("\n".join(lines))
        else:
            refused.append("\n".join(lines))
    return refused, tolerated


def self_test():
    cases = {
        "framework/a.h": '#include "backends/eager/eager_backend.h"\n',
        "backends/trace/b.cpp": '#include "backends/aoti/aoti_step.h"\n',
        "include/gengraph/c.h": '#include "framework/util/error.h"\n',
        "engine/d.cpp": '#include <gengraph/cli.h>\n',
        "include/gengraph/extension.h": '#include "framework/backend/forward_backend.h"\n',
        "include/gengraph/e.h": '#include <gengraph/extension.h>\n',
        "include/gengraph/ext/f.h": '#include "framework/decoding/registry.h"\n',
        "include/gengraph/ext/ok.h": '#include <gengraph/ext/model.h>\n#include <ATen/Tensor.h>\n',
        "framework/ok.h": '#include <gengraph/error.h>\n#include <vector>\n',
        "backends/register_builtin.cpp": '#include "backends/trace/traced_step.h"\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for path, text in cases.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        got = violations(root)
    want = ["framework/a.h", "backends/trace/b.cpp", "include/gengraph/c.h", "engine/d.cpp",
            "include/gengraph/extension.h", "include/gengraph/e.h", "include/gengraph/ext/f.h"]
    flagged = sorted(v.split(":", 1)[0] for v in got)
    if flagged != sorted(want):
        print("self-test failed: flagged %s, expected %s" % (flagged, sorted(want)))
        for v in got:
            print("  " + v)
        return 1
    print("self-test: the %d planted violations were found, the 4 allowed includes passed" %
          len(want))
    return 0


def self_test_cycles():
    cases = {
        # a.cpp includes b.h and b.cpp includes a.h: no header includes itself, yet a cycle
        "experiments/cli/a.h": "",
        "experiments/cli/a.cpp": '#include "experiments/cli/a.h"\n#include "experiments/results/b.h"\n',
        "experiments/results/b.h": "",
        "experiments/results/b.cpp": '#include "experiments/cli/a.h"\n',
        # a ring of three headers
        "framework/p.h": '#include "framework/q.h"\n',
        "framework/q.h": '#include "framework/r.h"\n',
        "framework/r.h": '#include "framework/p.h"\n',
        # one way only: no cycle
        "framework/s.h": '#include "framework/p.h"\n',
        "framework/s.cpp": '#include "framework/s.h"\n#include "framework/q.h"\n',
        # a known cycle is tolerated
        "engine/k.cpp": '#include "engine/m.h"\n',
        "engine/m.cpp": '#include "engine/k.h"\n',
        "engine/k.h": "",
        "engine/m.h": "",
    }
    with tempfile.TemporaryDirectory() as root:
        for path, text in cases.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        refused, tolerated = include_cycles(root, known=[("engine/k", "engine/m")])
    want = ["experiments/cli/a, experiments/results/b", "framework/p, framework/q, framework/r"]
    got = sorted(r.split("\n", 1)[0].split(": ", 1)[1] for r in refused)
    ring_lines = sum(r.count("\n") for r in refused)
    if got != want or ring_lines != 5 or len(tolerated) != 1:
        print("self-test failed: cycles %s (%d include lines), expected %s (5 lines) and 1 known" %
              (got, ring_lines, want))
        for r in refused + tolerated:
            print(r)
        return 1
    print("self-test: the 2 planted include cycles were found with their 5 includes, the known "
          "one tolerated")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test() or self_test_cycles()
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = violations(root)
    for v in found:
        print(v)
    if found:
        print("%d include(s) break the layering (tools/check_layers.py, docs/architecture.md)" %
              len(found))
        return 1
    print("include layering: clean")
    refused, tolerated = include_cycles(root, KNOWN_CYCLES)
    for report in tolerated:
        print("known, to be removed: " + report)
    for report in refused:
        print(report)
    if refused:
        print("%d include cycle(s) (tools/check_layers.py, docs/architecture.md)" % len(refused))
        return 1
    print("include cycles: none" + (" beyond the %d known" % len(tolerated) if tolerated else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
