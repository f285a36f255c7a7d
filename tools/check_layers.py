#!/usr/bin/env python3
"""Checks the C++ tree's include layering (docs/architecture.md#layers).

Layers, lowest first:
  public vocabulary  include/gengraph/*.h except the three below (the error, stream, settings
                     types, ...)
  framework          framework/
  backends           backends/ (a backend never includes a sibling backend; register_builtin
                     lists them all)
  engine             engine/, include/gengraph/gengraph.h and include/gengraph/extension.h
  experiments        experiments/ (the CLI's library; experiments/cli/main.cpp is the CLI) and
                     include/gengraph/cli.h
  python             python/ (the Python package's extension module)
  bench              bench/

A file may include its own layer and the layers below it, never one above. Public headers include
only public headers (and system or third-party ones), except extension.h, which gathers the
framework's extension API (the headers it reaches are installed beside it). Tests are not checked: they may include
anything. Exit 0 when the tree is clean, 1 listing every violation.

  tools/check_layers.py [ROOT]      check the tree at ROOT (default: this checkout)
  tools/check_layers.py --self-test check that a tree with one violation of each kind is refused
"""
import os
import re
import sys
import tempfile

LAYERS = ["public", "framework", "backends", "engine", "experiments", "python", "bench"]
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
PUBLIC_LAYERS = {"include/gengraph/gengraph.h": "engine",
                 "include/gengraph/extension.h": "engine",
                 "include/gengraph/cli.h": "experiments"}
EXTENSION_HEADER = "include/gengraph/extension.h"
CHECKED = ("include/gengraph/", "framework/", "backends/", "engine/", "experiments/", "python/",
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
                    if path.startswith("include/gengraph/") and path != EXTENSION_HEADER and \
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


def self_test():
    cases = {
        "framework/a.h": '#include "backends/eager/eager_backend.h"\n',
        "backends/trace/b.cpp": '#include "backends/aoti/aoti_step.h"\n',
        "include/gengraph/c.h": '#include "framework/util/error.h"\n',
        "engine/d.cpp": '#include <gengraph/cli.h>\n',
        "include/gengraph/extension.h": '#include "framework/backend/forward_backend.h"\n',
        "include/gengraph/e.h": '#include <gengraph/extension.h>\n',
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
            "include/gengraph/e.h"]
    flagged = sorted(v.split(":", 1)[0] for v in got)
    if flagged != sorted(want):
        print("self-test failed: flagged %s, expected %s" % (flagged, sorted(want)))
        for v in got:
            print("  " + v)
        return 1
    print("self-test: the %d planted violations were found, the 3 allowed includes passed" %
          len(want))
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = violations(root)
    for v in found:
        print(v)
    if found:
        print("%d include(s) break the layering (tools/check_layers.py, docs/architecture.md)" %
              len(found))
        return 1
    print("include layering: clean")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
