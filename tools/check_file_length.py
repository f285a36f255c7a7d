#!/usr/bin/env python3
"""Checks that no source file is longer than 600 lines (docs/architecture.md#layers).

A longer file holds more than one concern: split it by what its parts do. The files checked are
the .h, .cpp, .cu and .py files under framework/, backends/, engine/, experiments/, include/,
python/, bench/, tests/ and tools/ (hidden folders and __pycache__ skipped). Exit 0 when every
file fits, 1 naming each longer file with its line count.

  tools/check_file_length.py [ROOT]       check the tree at ROOT (default: this checkout)
  tools/check_file_length.py --self-test  check that a planted long file is found
"""
import os
import sys
import tempfile

MAX_LINES = 600
FOLDERS = ("framework", "backends", "engine", "experiments", "include", "python", "bench", "tests",
           "tools")
SUFFIXES = (".h", ".cpp", ".cu", ".py")


def line_count(path):
    with open(path, "rb") as f:
        data = f.read()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def too_long(root):
    """[(path, lines)] of the checked files longer than MAX_LINES, paths relative to root."""
    found = []
    for folder in FOLDERS:
        for dirpath, dirs, files in os.walk(os.path.join(root, folder)):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
            for name in sorted(files):
                if not name.endswith(SUFFIXES):
                    continue
                full = os.path.join(dirpath, name)
                lines = line_count(full)
                if lines > MAX_LINES:
                    found.append((os.path.relpath(full, root).replace(os.sep, "/"), lines))
    return found


def self_test():
    cases = {"framework/long.cpp": MAX_LINES + 1, "tools/long.py": MAX_LINES + 40,
             "framework/fits.h": MAX_LINES, "docs/long.cpp": MAX_LINES + 1,
             "tests/long.txt": MAX_LINES + 1}
    with tempfile.TemporaryDirectory() as root:
        for path, lines in cases.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write("x\n" * lines)
        got = too_long(root)
    want = [("framework/long.cpp", MAX_LINES + 1), ("tools/long.py", MAX_LINES + 40)]
    if got != want:
        print("self-test failed: found %s, expected %s" % (got, want))
        return 1
    print("self-test: the 2 planted long files were found; a file of %d lines, a folder and a "
          "kind not checked passed" % MAX_LINES)
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = too_long(root)
    for path, lines in found:
        print("%s: %d lines, more than %d: split it by concern" % (path, lines, MAX_LINES))
    if found:
        print("%d file(s) longer than %d lines (tools/check_file_length.py)" %
              (len(found), MAX_LINES))
        return 1
    print("file length: every checked file has at most %d lines" % MAX_LINES)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
