"""Python values checked at the package's boundary, before they cross into C++.

Every public call converts its arguments here: a wrong type or an impossible value is refused
naming the argument (or the key path inside it), what was expected and what was found, as a
gengraph.ArgumentTypeError (a gengraph.Error and a TypeError) or a gengraph.ArgumentValueError
(a gengraph.Error and a ValueError). What reaches the module is then plain str, int, bool,
float and JSON-ready values only, so pybind's own "incompatible function arguments" and
json.dumps' texts never come out. The values themselves (a token id in the vocabulary, a
setting's range) are the C++ side's to check.
"""
import math as _math
import operator as _operator
import os as _os

from ._gengraph import Error

INT64_MIN, INT64_MAX, UINT64_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1
# Deeper nesting than any experiment or setting has; also bounds the walk (YAML stops at 64).
MAX_DEPTH = 100


class ArgumentTypeError(Error, TypeError):
    """An argument of the wrong type (also a TypeError)."""

    __module__ = "gengraph"


class ArgumentValueError(Error, ValueError):
    """An argument of the right type with an impossible value (also a ValueError)."""

    __module__ = "gengraph"


def _short(text, limit=60):
    return text if len(text) <= limit else text[:limit - 3] + "..."


def describe(value):
    """What was found: the type, and the value where it is short ("float 1.5", "str 'a'")."""
    if value is None:
        return "None"
    kind = type(value).__name__
    if isinstance(value, (bool, int, float, complex, str, bytes, bytearray)):
        return f"{kind} {_short(repr(value))}"
    return kind


def _bound(n):
    for p in (63, 64):
        if n == (1 << p) - 1:
            return f"2^{p} - 1"
        if n == -(1 << p):
            return f"-2^{p}"
    return str(n)


def integer(value, what, lo=INT64_MIN, hi=INT64_MAX, expected="an int"):
    """`value` as a Python int within [lo, hi]; a bool is not an int here, an object with
    __index__ (a numpy integer) is."""
    if isinstance(value, bool) or isinstance(value, float) or not hasattr(value, "__index__"):
        raise ArgumentTypeError(f"{what}: expected {expected}, found {describe(value)}")
    try:
        n = _operator.index(value)
    except TypeError:  # a tensor of floats, say, has __index__ but refuses it
        raise ArgumentTypeError(f"{what}: expected {expected}, found {describe(value)}") from None
    if not lo <= n <= hi:
        raise ArgumentValueError(f"{what}: expected {expected} within [{_bound(lo)}, "
                                 f"{_bound(hi)}], found {n}")
    return n


def boolean(value, what):
    if not isinstance(value, bool) and type(value).__name__ != "bool_":  # numpy.bool_
        raise ArgumentTypeError(f"{what}: expected True or False, found {describe(value)}")
    return bool(value)


def number(value, what):
    """A finite float (an int is one too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{what}: expected a number, found {describe(value)}")
    if isinstance(value, float) and not _math.isfinite(value):
        raise ArgumentValueError(f"{what}: expected a finite number, found {value!r}")
    return value


def text(value, what, expected="a str"):
    """A str that is valid Unicode (so that it has a UTF-8 form for C++)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise ArgumentTypeError(f"{what}: expected {expected}, found {describe(value)}; bytes "
                                f"are not text: decode them to str first (.decode('utf-8'))")
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{what}: expected {expected}, found {describe(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ArgumentValueError(
            f"{what}: not valid Unicode: a lone surrogate U+{ord(value[e.start]):04X} at "
            f"character {e.start} (text decoded with errors='surrogateescape'?)") from None
    return str(value)


def path(value, what, expected="a path (str or os.PathLike)"):
    """A file or folder name as bytes, the form C++ takes: os.fsencode keeps names that are not
    UTF-8 (a str with surrogates from os.listdir) as the bytes they stand for."""
    try:
        p = _os.fspath(value)
    except TypeError:
        raise ArgumentTypeError(f"{what}: expected {expected}, found {describe(value)}") from None
    if "\0" in (p if isinstance(p, str) else p.decode("latin-1")):
        raise ArgumentValueError(f"{what}: a path holds no NUL character, found {_short(repr(p))}")
    return _os.fsencode(p)


def _key(k, where, kind):
    if isinstance(k, str):
        return text(k, f"{where}: the key {_short(repr(k))}")
    if isinstance(k, int) and not isinstance(k, bool):
        return str(k)  # as json.dumps writes it
    raise ArgumentTypeError(f"{where}: a key of type {type(k).__name__} ({_short(repr(k))}); "
                            f"{kind} keys are str")


def json_value(value, what, kind="JSON"):
    """`value` as plain dicts, lists, str, int, float, bool and None, checked as it goes: a
    non-finite float, a set, bytes, a key that is not a str, a value that contains itself, an
    integer JSON cannot hold, anything else are refused naming the key path
    (`what['inputs']['prompts']`). `kind` names the format in messages ("YAML/JSON")."""
    on_path = []

    def walk(v, where):
        if v is None or isinstance(v, bool):
            return v
        if isinstance(v, str):
            return text(v, where)
        if isinstance(v, int) or (hasattr(v, "__index__") and not isinstance(v, float)
                                  and not hasattr(v, "__len__")):
            try:
                n = _operator.index(v)
            except TypeError:
                raise ArgumentTypeError(f"{where}: expected a {kind} value, found "
                                        f"{describe(v)}") from None
            if not INT64_MIN <= n <= UINT64_MAX:
                raise ArgumentValueError(f"{where}: the integer {_short(str(n))} is out of range "
                                         f"(a {kind} integer here is within [-2^63, 2^64 - 1])")
            return n
        if isinstance(v, float) or type(v).__name__ in ("float32", "float16"):
            f = float(v)
            if not _math.isfinite(f):
                raise ArgumentValueError(f"{where}: expected a finite number, found {f!r}")
            return f
        if isinstance(v, (dict, list, tuple)):
            if any(v is o for o in on_path):
                raise ArgumentValueError(f"{where}: the value contains itself (a circular "
                                         f"reference); {kind} values are trees")
            if len(on_path) >= MAX_DEPTH:
                raise ArgumentValueError(f"{where}: nested more than {MAX_DEPTH} levels deep")
            on_path.append(v)
            try:
                if isinstance(v, dict):
                    out = {}
                    for k, x in v.items():
                        key = _key(k, where, kind)
                        out[key] = walk(x, f"{where}[{key!r}]")
                    return out
                return [walk(x, f"{where}[{i}]") for i, x in enumerate(v)]
            finally:
                on_path.pop()
        if isinstance(v, (set, frozenset)):
            raise ArgumentTypeError(f"{where}: a set is not a {kind} value; use a list")
        if isinstance(v, (bytes, bytearray, memoryview)):
            raise ArgumentTypeError(f"{where}: bytes are not a {kind} value; decode them to str")
        if hasattr(v, "tolist") and hasattr(v, "dtype"):  # a tensor or an array
            return walk(v.tolist(), where)
        raise ArgumentTypeError(f"{where}: expected a {kind} value (dict, list, str, int, float, "
                                f"bool or None), found {describe(v)}")

    return walk(value, what)


PROMPT_FORMS = ("a str, a list of str, a list of int token ids, or a list of lists of int "
                "token ids (or a tensor of ids)")


def token_id(value, what):
    return integer(value, what, expected="an int token id")


def token_ids(values, what):
    """A list of token ids; `what` names the list (positions are added)."""
    if all(type(t) is int for t in values) and (
            not values or INT64_MIN <= min(values) and max(values) <= INT64_MAX):
        return values  # the common case, without a call per id
    return [token_id(t, f"{what}[{i}]") for i, t in enumerate(values)]


def _sequence(value):
    """A list of a list, tuple, tensor or array; None for anything else."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if hasattr(value, "tolist") and hasattr(value, "dtype") and not isinstance(value, str):
        if getattr(value, "ndim", 1) == 0:
            return None
        return value.tolist()
    return None


def prompts(inputs, call):
    """(token-id prompts, texts) of a prompt given as lists (tensors are the caller's): exactly
    one is non-empty."""
    where = f"{call}: prompt"
    if isinstance(inputs, str):
        return [], [text(inputs, where)]
    if isinstance(inputs, (bytes, bytearray, memoryview)):
        raise ArgumentTypeError(f"{where}: expected {PROMPT_FORMS}, found {describe(inputs)}; "
                                f"bytes are neither text nor token ids: decode them to str first "
                                f"(.decode('utf-8'))")
    items = _sequence(inputs)
    if items is None:
        raise ArgumentTypeError(f"{where}: expected {PROMPT_FORMS}, found {describe(inputs)}")
    if not items:
        raise ArgumentValueError(f"{where}: no inputs (an empty {type(inputs).__name__}): "
                                 f"expected texts, token ids or a tensor of them")
    first = items[0]
    if isinstance(first, str):
        return [], [text(x, f"{where}[{i}]", "a str (as prompt[0] is: a list of texts)")
                    for i, x in enumerate(items)]
    if isinstance(first, (int, bool)) or (hasattr(first, "__index__") and
                                          _sequence(first) is None and
                                          not isinstance(first, (float, bytes))):
        return [token_ids(items, where)], []
    if _sequence(first) is not None and not isinstance(first, (bytes, bytearray)):
        rows = []
        for i, row in enumerate(items):
            ids = None if isinstance(row, (str, bytes, bytearray)) else _sequence(row)
            if ids is None:
                raise ArgumentTypeError(
                    f"{where}[{i}]: expected a list of int token ids (as prompt[0] is), found "
                    f"{describe(row)}")
            rows.append(token_ids(ids, f"{where}[{i}]"))
        return rows, []
    hint = ("; bytes are neither text nor token ids: decode them to str first"
            if isinstance(first, (bytes, bytearray, memoryview)) else "")
    raise ArgumentTypeError(f"{where}[0]: expected a str, an int token id or a list of int "
                            f"token ids, found {describe(first)}{hint}")
