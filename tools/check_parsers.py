#!/usr/bin/env python3
"""Checks that each user-facing setting is parsed and checked in exactly one place.

A setting parsed twice drifts: one entry point accepts what another refuses, or says it in other
words. Each row of RULES below is a pattern that only the one parser (and the few files listed
beside it, each with its reason) may contain; a match anywhere else in the C++ tree is reported
with its file, line and row. Tests, docs and tools are not scanned (tests repeat the error texts
on purpose).

  tools/check_parsers.py [ROOT]      check the tree at ROOT (default: this checkout); exit 0 when
                                     clean, 1 listing every file that should not hold a pattern
  tools/check_parsers.py --self-test check that a tree with a stray copy of each row's pattern is
                                     refused, and the clean tree of allowed files is not

Run by ctest as one_parser (and one_parser_self_test).

Adding a row: append a Rule(name, pattern, allowed) to RULES.
  name     what the row guards, said in the failure ("weight-kind names parsed from text").
  pattern  a Python regular expression matched against each file's text (re.M). Make it match
           the code that parses or checks (a comparison with the names, a call, an error text),
           not a mention in a comment, so that a comment in another file is not a violation.
  allowed  {path: reason}: the only files that may contain it, each with why. Every allowed path
           must exist (a moved parser must move its row too; a stale path is reported).
For example, model-name resolution (a known model's name to its folder) in one place would be
    Rule("known-model name resolution",
         r"\b(?:resolve_known_model|find_known_model)\s*\(",
         {"framework/model/known_models.h": "declares them",
          "framework/model/known_models.cpp": "the resolver",
          "framework/model/model_names.cpp": "the one caller that turns a name into a source"}),
with the callers that remain listed in `allowed` (each with its reason) until they go through the
one resolver.
"""
import collections
import os
import re
import sys
import tempfile

Rule = collections.namedtuple("Rule", "name pattern allowed")

WEIGHT_FORMAT_H = "framework/quant/weight_format.h"
WEIGHT_FORMAT_CPP = "framework/quant/weight_format.cpp"
THE_PARSER = {WEIGHT_FORMAT_H: "declares the parser", WEIGHT_FORMAT_CPP: "the parser"}

RULES = [
    # model.weights, EngineOptions::weights, --weights, the draft's 'weights': the names compared
    # with a string the user gave.
    Rule("weight-kind names parsed from text",
         # "float" and "bfloat16" are dtype names too: only a weights variable's comparison.
         r'[!=]=\s*"(?:int8|int4)"|"(?:int8|int4)"\s*[!=]=|'
         r'weights\s*[!=]=\s*"(?:float|bfloat16)"',
         {WEIGHT_FORMAT_CPP: "the parser",
          "backends/aoti/aoti_step.cpp": "the package cache name's tag from aoti_weights_tag, "
                                         "not a parse"}),
    Rule("the weight-kind parser called outside the one parser",
         r"\bparse_weight_kind\s*\(",
         dict(THE_PARSER)),
    Rule("the int4 group-size check",
         r"\bis_group_size\s*\(",
         dict(THE_PARSER)),
    # The combination rules' texts: another copy of one means a second check of that rule.
    Rule("weight-format combination rule texts",
         r"expected float, int8, int4 or bfloat16|unless weights is int4|"
         r"unless weights is int8 or int4|32 with weights int4 and int8_activation_rows|"
         r"or a multiple of 32 \(a scale per block|float with fused: false",
         dict(THE_PARSER)),
    # Model names (presets, known real models, folders): resolve_model_name decides for every
    # boundary; the known models' table is looked up only there and where it is defined.
    Rule("known-model name resolution",
         r"\b(?:resolve_known_model|find_known_model)\s*\(",
         {"framework/model/known_models.h": "declares them",
          "framework/model/known_models.cpp": "the table and its resolver",
          "framework/model/model_names.cpp": "the one resolver of model names",
          "experiments/experiment/experiment_config.cpp":
              "model.name, a key that names known models only (not a general model name)"}),
    Rule("model-name rules in their own words (a second resolver)",
         r"no such model folder|is not a folder: it is a file \(expected a folder with config|"
         r"is neither a model folder",
         {"framework/model/model_names.cpp": "the one resolver of model names",
          "framework/model/loader.cpp": "check_model_folder: a folder given as model.path"}),
    # The rules' old wordings, each a check written beside the parser before it: allowed nowhere.
    Rule("weight-format rules in their old words (a second check)",
         r"unless model\.weights is|int4 weights with int8 activations take|"
         r"a row count with weights|fused form's projections; the unfused form",
         {}),
]

SCANNED = ("include/", "framework/", "backends/", "engine/", "experiments/", "python/src/",
           "bench/")
EXTENSIONS = (".h", ".cpp", ".cu", ".hpp", ".cc")


def scanned_files(root):
    for folder in SCANNED:
        base = os.path.join(root, folder)
        for dirpath, _, files in os.walk(base):
            for name in sorted(files):
                if name.endswith(EXTENSIONS):
                    path = os.path.join(dirpath, name)
                    yield os.path.relpath(path, root).replace(os.sep, "/"), path


def violations(root, rules=RULES):
    found = []
    compiled = [(r, re.compile(r.pattern, re.M)) for r in rules]
    for rel, path in scanned_files(root):
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for rule, rx in compiled:
            if rel in rule.allowed:
                continue
            for m in rx.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                only = ", ".join(sorted(rule.allowed)) or "no file (the check moved into the parser)"
                found.append("%s:%d: %s: '%s' belongs only in %s" %
                             (rel, line, rule.name, m.group(0), only))
    for rule in rules:
        for allowed in sorted(rule.allowed):
            if not os.path.isfile(os.path.join(root, allowed)):
                found.append("tools/check_parsers.py: row '%s' allows '%s', which does not exist "
                             "(moved? update the row)" % (rule.name, allowed))
    return found


def self_test():
    """A tree holding each allowed file, plus one stray copy of each row's pattern."""
    samples = {
        "weight-kind names parsed from text": 'if (w == "int4") {}\n',
        "the weight-kind parser called outside the one parser": 'parse_weight_kind(s, "x");\n',
        "the int4 group-size check": "if (!is_group_size(g)) {}\n",
        "weight-format combination rule texts": '"expected false unless weights is int4"\n',
        "weight-format rules in their old words (a second check)":
            '"0 unless model.weights is int8"\n',
        "known-model name resolution": "if (find_known_model(name)) {}\n",
        "model-name rules in their own words (a second resolver)":
            '"\': no such model folder"\n',
    }
    ok = True
    with tempfile.TemporaryDirectory() as root:
        for rule in RULES:
            for allowed in rule.allowed:
                full = os.path.join(root, allowed)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "a", encoding="utf-8") as f:
                    f.write(samples[rule.name])
        clean = [v for v in violations(root) if "does not exist" not in v]
        # The allowed files hold their own row's sample; other rows' samples may be strays there.
        for rule in RULES:
            stray = os.path.join(root, "engine", "stray_%d.cpp" % RULES.index(rule))
            os.makedirs(os.path.dirname(stray), exist_ok=True)
            with open(stray, "w", encoding="utf-8") as f:
                f.write(samples[rule.name])
        found = violations(root)
        for i, rule in enumerate(RULES):
            want = "engine/stray_%d.cpp:1: %s:" % (i, rule.name)
            if not any(v.startswith(want) for v in found):
                print("self-test: a stray copy was not refused: " + want)
                ok = False
        if any(v.startswith("engine/") for v in clean):
            print("self-test: the clean tree was refused")
            ok = False
    with tempfile.TemporaryDirectory() as root:
        if not any("does not exist" in v for v in violations(root)):
            print("self-test: a row naming a missing file was not reported")
            ok = False
    print("self-test: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = violations(root)
    for v in found:
        print(v)
    if found:
        print("%d place(s) parse or check a setting that has one parser (tools/check_parsers.py "
              "says which file holds each)" % len(found))
        return 1
    print("one parser per setting: ok (%d rules)" % len(RULES))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
