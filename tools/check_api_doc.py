#!/usr/bin/env python3
"""docs/embedding.md's API section against the public header it summarises, and docs/cli.md's
usage texts against the CLI's (experiments/cli/usage.cpp), and docs/extending.md's base classes
against the headers that declare them.

Every declaration of the option structs and of `class Model`'s, `class Plan`'s and `class Engine`'s public parts
(and their base classes) in include/gengraph/gengraph.h must appear in the page's "## The API" block, and the block must
declare nothing the header does not: the same declarations, compared without comments and with
whitespace collapsed (the page's comments may be shorter). docs/cli.md holds, under "## gengraph
--help" and "## gengraph NAME", a ```text block with exactly what `gengraph --help` and
`gengraph NAME --help` print, for every command usage.cpp knows and no other. Exit 1 listing each
difference.

Usage: check_api_doc.py SOURCE_DIR     (--self-test: the check finds planted differences)
"""
import re
import sys
from pathlib import Path

CLASSES = ("struct Device", "struct ModelOptions", "struct RunOptions", "struct EngineOptions", "class Model",
           "class Plan", "class Engine")


def declarations(body):
    """The declarations of a class body: comments dropped, joined up to each ';', normalised."""
    text = re.sub(r"//[^\n]*", "", body)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out = []
    for part in text.split(";"):
        decl = " ".join(part.split())
        decl = re.sub(r"\s*([(),&<>{}=*])\s*", r"\1", decl)
        if decl and decl not in ("public:", "private:", "protected:"):
            out.append(decl)
    return out


def class_bodies(text, classes=CLASSES, keep_protected=False):
    """{name: body} for each class of CLASSES in `text`: its base classes as a first line
    ("bases: A,B;") and its public part (and its protected one, marked, with keep_protected)."""
    bodies = {}
    for name in classes:
        m = re.search(re.escape(name) + r"\b([^{;]*)\{", text)
        if not m:
            continue
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = text[m.end() : i - 1]
        body = re.split(r"\n\s*(?:private|protected):" if not keep_protected else r"\n\s*private:",
                        body)[0]
        body = body.replace("public:", "")
        bases = m.group(1).strip().lstrip(":").strip()
        bodies[name] = (f"bases: {bases};" if bases else "") + body
    return bodies


def api_block(page):
    m = re.search(r"## The API\s*\n+```cpp\n(.*?)```", page, flags=re.S)
    return m.group(1) if m else None


def compare(header_text, page_text, classes=CLASSES):
    problems = []
    block = api_block(page_text)
    if block is None:
        return ["docs/embedding.md: no ```cpp block under '## The API'"]
    header, page = class_bodies(header_text, classes), class_bodies(block, classes)
    for name in classes:
        if name not in header:
            problems.append(f"include/gengraph/gengraph.h: no '{name}'")
            continue
        if name not in page:
            problems.append(f"docs/embedding.md: the API block has no '{name}'")
            continue
        h, p = declarations(header[name]), declarations(page[name])
        # Members the page leaves out on purpose (special members of the pimpl) are not API.
        h = [d for d in h if not re.match(r"(~Engine|Engine\(Engine&&|Engine&operator=)", d)]
        for d in h:
            if d not in p:
                problems.append(f"{name}: in the header, not on the page: {d}")
        for d in p:
            if d not in h:
                problems.append(f"{name}: on the page, not in the header: {d}")
    return problems


# docs/extending.md's "## The base classes" block: the classes a part derives from, each with
# its public and protected members as the header declares them.
BASES = {"class ForwardBackend": "include/gengraph/ext/backend.h",
         "class StaticDecode": "include/gengraph/ext/backend.h",
         "class LogitsProcessor": "include/gengraph/ext/decoding.h",
         "class StoppingCriterion": "include/gengraph/ext/decoding.h",
         "class SearchStrategy": "include/gengraph/ext/decoding.h",
         "class RowwiseSearch": "include/gengraph/ext/decoding.h",
         "class CandidateGenerator": "include/gengraph/ext/decoding.h",
         "class ModelStep": "framework/backend/model_step.h"}


def compare_bases(headers, page, bases=BASES):
    """`headers`: {path: text}. Each class of `bases` on the page against its header."""
    m = re.search(r"## The base classes\s*\n.*?```cpp\n(.*?)```", page, flags=re.S)
    if not m:
        return ["docs/extending.md: no ```cpp block under '## The base classes'"]
    problems = []
    shown = class_bodies(m.group(1), tuple(bases), keep_protected=True)
    for name, path in bases.items():
        declared = class_bodies(headers[path], (name,), keep_protected=True)
        if name not in declared:
            problems.append(f"{path}: no '{name}'")
            continue
        if name not in shown:
            problems.append(f"docs/extending.md: the base classes have no '{name}'")
            continue
        h, p = declarations(declared[name]), declarations(shown[name])
        problems += [f"{name}: in {path}, not in docs/extending.md: {d}" for d in h if d not in p]
        problems += [f"{name}: in docs/extending.md, not in {path}: {d}" for d in p if d not in h]
    return problems


def cli_texts(source):
    """{"--help": the overview, NAME: NAME's usage} as experiments/cli/usage.cpp builds them."""
    raw = lambda name: re.search(name + r'\s*=\s*R"\((.*?)\)";', source, flags=re.S).group(1)
    texts, lines = {}, []
    entry = re.compile(r'\{"([a-z-]+)",\s*((?:"(?:[^"\\]|\\.)*"\s*)+),\s*R"\((.*?)\)"\}', re.S)
    for name, summary, text in entry.findall(source):
        summary = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', summary)).replace('\\"', '"')
        lines.append("  " + name.ljust(10)[:10] + summary + "\n")
        texts[name] = text
    texts["--help"] = raw("kOverviewHead") + "".join(lines) + raw("kOverviewTail")
    return texts


def compare_cli(source, page):
    """Each usage text of the CLI against docs/cli.md's block for it."""
    problems = []
    code = cli_texts(source)
    doc = dict(re.findall(r"^## gengraph (\S+)\n+```text\n(.*?)^```", page, flags=re.M | re.S))
    for name, text in code.items():
        if name not in doc:
            problems.append(f"docs/cli.md: no '## gengraph {name}' with a ```text block")
            continue
        if doc[name] != text:
            a, b = text.splitlines(), doc[name].splitlines()
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            problems.append(f"gengraph {name}: usage.cpp and docs/cli.md differ at line {i + 1}: "
                            f"{a[i] if i < len(a) else '(end)'!r} vs {b[i] if i < len(b) else '(end)'!r}")
    for name in doc:
        if name not in code:
            problems.append(f"docs/cli.md: '## gengraph {name}' is no command of usage.cpp")
    return problems


def self_test():
    two = ("struct EngineOptions", "class Engine")
    header = "struct EngineOptions : A, B {\n  int a = 1;  // x\n};\nclass Engine {\n public:\n  void f(int x) const;\n  ~Engine();\n private:\n  int hidden;\n};\n"
    good = "## The API\n\n```cpp\nstruct EngineOptions : A, B {\n  int a = 1;\n};\nclass Engine {\n public:\n  void f(int  x) const;  // y\n};\n```\n"
    assert compare(header, good, two) == [], compare(header, good, two)
    missing = good.replace("  int a = 1;\n", "")
    assert any("in the header, not on the page: int a=1" in p for p in compare(header, missing, two))
    extra = good.replace("void f(int  x) const;", "void f(int x) const;\n  void g();")
    assert any("on the page, not in the header: void g()" in p for p in compare(header, extra, two))
    changed = good.replace("int a = 1", "int a = 2")
    assert len(compare(header, changed, two)) == 2
    bases = good.replace(": A, B {", ": A {")
    assert any("bases: A,B" in p for p in compare(header, bases, two)), compare(header, bases, two)
    assert compare(header, "no block", two) == [
        "docs/embedding.md: no ```cpp block under '## The API'"]
    assert any("no 'class Model'" in p for p in compare(header, good))
    source = ('const char* const kOverviewHead = R"(usage: x\n)";\nconst char* const kOverviewTail = '
              'R"(end\n)";\n{"run", "Run it" " all",\n R"(usage: gengraph run\n  --set\n)"},\n')
    doc = ("## gengraph --help\n\n```text\nusage: x\n  run       Run it all\nend\n```\n\n"
           "## gengraph run\n\n```text\nusage: gengraph run\n  --set\n```\n")
    assert compare_cli(source, doc) == [], compare_cli(source, doc)
    assert "line 2: '  --set' vs '  --sat'" in compare_cli(source, doc.replace("--set", "--sat"))[0]
    assert "line 2: '  run       Run it all' vs 'end'" in compare_cli(source, doc.replace(
        "  run       Run it all\n", ""))[0]
    assert compare_cli(source, doc.replace("## gengraph run", "## gengraph ran")) == [
        "docs/cli.md: no '## gengraph run' with a ```text block",
        "docs/cli.md: '## gengraph ran' is no command of usage.cpp"]
    header = "class A : B {\n public:\n  virtual int f() const = 0;  // x\n protected:\n  void g();\n private:\n  int h;\n};\n"
    page = "## The base classes\n\ntext\n\n```cpp\nclass A : B {\n public:\n  virtual int f() const = 0;\n protected:\n  void g();\n};\n```\n"
    one = {"class A": "a.h"}
    assert compare_bases({"a.h": header}, page, one) == [], compare_bases({"a.h": header}, page, one)
    assert compare_bases({"a.h": header}, page.replace(" protected:\n", ""), one) == [
        "class A: in a.h, not in docs/extending.md: protected: void g()",
        "class A: in docs/extending.md, not in a.h: void g()"]
    assert "int f()const=0" in compare_bases({"a.h": header}, page.replace("= 0", ""), one)[0]
    print("check_api_doc self-test: planted differences found")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    src = Path(sys.argv[1])
    problems = compare((src / "include/gengraph/gengraph.h").read_text(),
                       (src / "docs/embedding.md").read_text())
    problems += compare_bases({p: (src / p).read_text() for p in set(BASES.values())},
                              (src / "docs/extending.md").read_text())
    problems += compare_cli((src / "experiments/cli/usage.cpp").read_text(),
                            (src / "docs/cli.md").read_text())
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"docs/embedding.md's API section, docs/extending.md's base classes or docs/cli.md "
              f"differ from the code they show "
              f"({len(problems)} difference(s))", file=sys.stderr)
        return 1
    print("docs/embedding.md's API section matches include/gengraph/gengraph.h, docs/extending.md's "
          "base classes their headers, docs/cli.md the CLI's usage texts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
