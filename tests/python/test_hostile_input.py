"""Hostile arguments to the package's public calls (issue 49, docs/reliability.md "Third pass"):
each is refused with gengraph's own message naming the argument (or the key path), what was
expected and what was found; never pybind's "incompatible function arguments", never a
json.exception or json.dumps text, never a traceback."""
import re

import pytest
import torch

import gengraph

RAW = ("incompatible function arguments", "json.exception", "not JSON serializable",
       "Circular reference detected", "Traceback", "\nAt:\n", "Unable to cast")


@pytest.fixture(scope="module")
def engine():
    return gengraph.Engine("gpt2-tiny")


def refused(call, kind, message):
    """Runs call(); it must raise `kind` (also a gengraph.Error) matching `message`, with no raw
    library text."""
    with pytest.raises(kind) as info:
        call()
    text = str(info.value)
    assert isinstance(info.value, gengraph.Error), (type(info.value), text)
    assert not any(r in text for r in RAW), text
    assert re.search(message, text), f"{message!r} not in {text!r}"
    return text


# 1. bytes are neither text nor token ids.

@pytest.mark.parametrize("data", [b"abc", bytearray(b"abc"), memoryview(b"abc")])
def test_bytes_are_refused_not_taken_as_token_ids(engine, data):
    for call in (engine.generate, engine.stream):
        refused(lambda: call(data, max_new_tokens=2), TypeError,
                r"prompt: expected a str, a list of str, .* found (bytes|bytearray|memoryview)"
                r".*decode them to str")
    refused(lambda: engine.generate([b"abc"], max_new_tokens=2), TypeError,
            r"generate: prompt\[0\]: .*found bytes b'abc'; bytes are neither text nor token ids")
    refused(lambda: engine.generate(["a", b"b"], max_new_tokens=2), TypeError,
            r"prompt\[1\]: expected a str .*found bytes b'b'; bytes are not text")
    refused(lambda: engine.encode(b"abc"), TypeError, r"encode: text: .*found bytes.*decode")


# 2. non-finite floats are refused by the parameter's name.

@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_settings_are_refused_by_name(engine, value):
    shown = repr(value)
    refused(lambda: engine.generate([[1, 2]], temperature=value, do_sample=True), ValueError,
            rf"^generate: temperature: expected a finite number, found {shown}$")
    refused(lambda: engine.generate([[1, 2]], max_new_tokens=value), ValueError,
            rf"^generate: max_new_tokens: expected a finite number, found {shown}$")
    refused(lambda: engine.stream([[1, 2]], top_p=value), ValueError,
            rf"^stream: top_p: expected a finite number, found {shown}$")
    refused(lambda: engine.generate([[1]], processors=[{"name": "x", "p": [1.0, value]}]),
            ValueError, rf"generate: processors\[0\]\['p'\]\[1\]: expected a finite number")
    experiment = {"name": "n", "model": {"preset": "gpt2-tiny"}, "backends": ["eager"],
                  "inputs": {"prompts": [[1, 2]]}, "generation": {"temperature": value}}
    refused(lambda: gengraph.run(experiment), ValueError,
            rf"experiment\['generation'\]\['temperature'\]: expected a finite number, found "
            rf"{shown}")
    refused(lambda: gengraph.run(experiment, {"generation.top_p": value}), ValueError,
            r"run: overrides\['generation.top_p'\]: expected a finite number")
    refused(lambda: gengraph.Engine("gpt2-tiny", model_config={"layer_norm_epsilon": value}),
            ValueError, r"Engine: model_config\['layer_norm_epsilon'\]: expected a finite number")
    refused(lambda: gengraph.Engine("gpt2-tiny", cache_rows=value), ValueError,
            r"Engine: backend option 'cache_rows': expected a finite number")
    refused(lambda: gengraph.format_table({"runs": [], "x": value}), ValueError,
            r"format_table: doc\['x'\]: expected a finite number")


def test_finite_settings_still_pass(engine):
    out = engine.generate([[1, 2]], max_new_tokens=3, temperature=0.7, do_sample=True, seed=1)
    assert out.steps == 3 and out.settings["temperature"] == pytest.approx(0.7)


# 3. gengraph.run(dict): what json.dumps refuses is named by key path.

def experiment(**changes):
    doc = {"name": "n", "model": {"preset": "gpt2-tiny"}, "backends": ["eager"],
           "inputs": {"prompts": [[1, 2]]}, "generation": {"max_new_tokens": 2},
           "run": {"warmup": 0, "repeats": 1}}
    doc.update(changes)
    return doc


def test_run_names_the_key_path_of_what_is_not_yaml_or_json():
    refused(lambda: gengraph.run(experiment(inputs={"prompts": {1, 2}})), TypeError,
            r"^experiment\['inputs'\]\['prompts'\]: a set is not a YAML/JSON value; use a list$")
    loop = experiment()
    loop["inputs"]["again"] = loop
    refused(lambda: gengraph.run(loop), ValueError,
            r"^experiment\['inputs'\]\['again'\]: the value contains itself \(a circular "
            r"reference\)")
    refused(lambda: gengraph.run(experiment(model={"preset": object()})), TypeError,
            r"experiment\['model'\]\['preset'\]: expected a YAML/JSON value .* found object")
    refused(lambda: gengraph.run(experiment(inputs={"prompts": [[1, 2**70]]})), ValueError,
            r"experiment\['inputs'\]\['prompts'\]\[0\]\[1\]: the integer 1180591620717411303424 "
            r"is out of range")
    refused(lambda: gengraph.run(experiment(inputs={"texts": [b"x"]})), TypeError,
            r"experiment\['inputs'\]\['texts'\]\[0\]: bytes are not a YAML/JSON value")
    refused(lambda: gengraph.run(experiment(generation={(1, 2): 3})), TypeError,
            r"experiment\['generation'\]: a key of type tuple \(\(1, 2\)\); YAML/JSON keys are str")
    deep = []
    for _ in range(500):
        deep = [deep]
    refused(lambda: gengraph.run(experiment(inputs={"prompts": deep})), ValueError,
            r"nested more than 100 levels deep")
    refused(lambda: gengraph.run(experiment(), {"run.repeats": {3}}), TypeError,
            r"run: overrides\['run.repeats'\]: a set is not a YAML/JSON value")
    refused(lambda: gengraph.run(experiment(), 7), TypeError,
            r"run: overrides: expected a dict .* found int 7")
    refused(lambda: gengraph.run(3), TypeError, r"run: config: expected an experiment file's path")


def test_run_takes_tuples_and_numpy_like_values():
    doc = gengraph.run(experiment(inputs={"prompts": ([1, 2],)},
                                  generation={"max_new_tokens": torch.tensor(2)}))
    assert doc["runs"][0]["outputs"][0]["sequences"][0]["tokens"].__len__() == 2


# 4. wrong argument types: our message, TypeError or ValueError, never pybind's.

def test_seeds_token_ids_texts_and_names_out_of_range_or_type(engine):
    for seed, kind, message in ((-1, ValueError, r"expected an int seed within \[0, 2\^64 - 1\], "
                                                 r"found -1"),
                                (2**70, ValueError, r"expected an int seed within "
                                                    r"\[0, 2\^64 - 1\], found "
                                                    r"1180591620717411303424"),
                                (1.5, TypeError, r"expected an int seed, found float 1.5"),
                                ("7", TypeError, r"expected an int seed, found str '7'")):
        refused(lambda: engine.manual_seed(seed), kind, "manual_seed: seed: " + message)
        refused(lambda: engine.generate([[1]], max_new_tokens=1, seed=seed), kind,
                "generate: seed: " + message)
    refused(lambda: engine.generate([[1, 2**64]], max_new_tokens=1), ValueError,
            r"generate: prompt\[0\]\[1\]: expected an int token id within \[-2\^63, 2\^63 - 1\], "
            r"found 18446744073709551616")
    refused(lambda: engine.decode([1, 2**64]), ValueError, r"decode: ids\[1\]: expected an int "
                                                           r"token id within")
    refused(lambda: engine.decode("abc"), TypeError, r"decode: ids: expected a list")
    refused(lambda: engine.generate("a\udcffb", max_new_tokens=1), ValueError,
            r"generate: prompt: not valid Unicode: a lone surrogate U\+DCFF at character 1")
    refused(lambda: engine.generate(["ok", "\ud800"], max_new_tokens=1), ValueError,
            r"prompt\[1\]: not valid Unicode: a lone surrogate U\+D800 at character 0")
    refused(lambda: engine.encode("x\udcff"), ValueError, r"encode: text: not valid Unicode")
    refused(lambda: engine.encode("x", add_special_tokens="yes"), TypeError,
            r"encode: add_special_tokens: expected True or False, found str 'yes'")
    refused(lambda: gengraph.Engine("gpt2-tiny", backend=3), TypeError,
            r"Engine: backend: expected a backend name \(str\), found int 3")
    refused(lambda: gengraph.Engine("gpt2-tiny", backend=b"eager"), TypeError,
            r"Engine: backend: .*found bytes b'eager'")
    refused(lambda: gengraph.Engine("gpt2-tiny", backend="eag\udcffer"), ValueError,
            r"Engine: backend: not valid Unicode")
    refused(lambda: gengraph.Engine(3), TypeError,
            r"Engine: model: expected a model folder, a known model's name or a preset's")
    refused(lambda: gengraph.Engine("gpt2-tiny", capture="no"), TypeError,
            r"Engine: capture: expected True or False, found str 'no'")
    refused(lambda: gengraph.Engine("gpt2-tiny", sync_every=2.5), TypeError,
            r"Engine: sync_every: expected an int, found float 2.5")
    refused(lambda: gengraph.Engine("gpt2-tiny", sync_every=2**64), ValueError,
            r"Engine: sync_every: expected an int within \[-2\^63, 2\^63 - 1\]")
    refused(lambda: gengraph.Engine("gpt2-tiny", whole_step=None), TypeError,
            r"Engine: whole_step: expected 'off', 'auto' or 'on', found None")
    refused(lambda: gengraph.Engine("gpt2-tiny", backend_options=["cache"]), TypeError,
            r"Engine: backend options: expected a dict")
    refused(lambda: gengraph.Engine("gpt2-tiny", cache=[1]), TypeError,
            r"Engine: backend option 'cache': expected a str, int, float or bool, found list")
    refused(lambda: gengraph.Model("gpt2-tiny", weights_seed=-3), ValueError,
            r"Model: weights_seed: expected an int within \[0, 2\^64 - 1\], found -3")
    refused(lambda: gengraph.Model("gpt2-tiny", fused="yes"), TypeError,
            r"Model: fused: expected True or False, found str 'yes'")
    refused(lambda: gengraph.Model("gpt2-tiny", group_size="32"), TypeError,
            r"Model: group_size: expected an int, found str '32'")
    refused(lambda: gengraph.Model("gpt2-tiny", dtype=3), TypeError,
            r"Model: dtype: expected a dtype name")
    refused(lambda: gengraph.Model("gpt2-tiny", model_config=[1]), TypeError,
            r"Model: model_config: expected a dict of config.json keys, found list")
    for call in (gengraph.register_backend, gengraph.unregister_backend):
        args = (3, object) if call is gengraph.register_backend else (3,)
        refused(lambda: call(*args), TypeError, r"_backend: name: expected a backend name "
                                                r"\(str\), found int 3")
    refused(lambda: gengraph.register_backend("x", object, replace=1), TypeError,
            r"register_backend\('x'\): replace: expected True or False, found int 1")
    refused(lambda: gengraph.register_backend("x", object, available=3), TypeError,
            r"register_backend\('x'\): available is int 3")
    refused(lambda: gengraph.check_backend(3), TypeError, r"check_backend: name: expected")
    refused(lambda: gengraph.check_backend("eager", seed=-1), ValueError,
            r"check_backend: seed: expected an int seed within")
    refused(lambda: gengraph.check_backend("eager", models="gpt2-tiny"), TypeError,
            r"check_backend: models: expected a list of model names or folders, found str")
    refused(lambda: gengraph.check_backend("eager", max_new_tokens=0), ValueError,
            r"check_backend: max_new_tokens: expected an int within \[1, 2\^63 - 1\], found 0")
    for listing in (gengraph.backends, gengraph.presets, gengraph.models):
        with pytest.raises(TypeError, match=r"takes 0 positional arguments but 1 was given"):
            listing("x")  # Python's own words, not pybind's
    refused(lambda: gengraph.format_table([1]), TypeError,
            r"format_table: expected a results document \(a dict\), found list")


def test_good_arguments_of_other_integer_types_still_pass(engine):
    np = pytest.importorskip("numpy")
    engine.manual_seed(np.uint64(2**64 - 1))
    engine.manual_seed(torch.tensor(5))
    ids = engine.generate(np.array([[1, 2]]), max_new_tokens=2).tokens
    assert ids == engine.generate([[1, 2]], max_new_tokens=2).tokens
    assert engine.generate([np.int64(1), np.int32(2)], max_new_tokens=2).tokens == ids


def test_paths_that_are_not_utf8_are_named_not_lost(engine, tmp_path):
    # A str from os.listdir of a name that is not UTF-8 holds a surrogate: the bytes go to C++
    # as they are, and the message shows them as \xNN (it was a UnicodeDecodeError).
    refused(lambda: gengraph.Engine(str(tmp_path / "m\udcff")), gengraph.Error,
            r"Engine: model '.*m\\xff': no such model folder")
    refused(lambda: gengraph.Model(str(tmp_path / "m\udcff")), gengraph.Error, r"m\\xff")
    refused(lambda: gengraph.run(str(tmp_path / "e\udcff.yaml")), gengraph.Error, r"e\\xff.yaml")
    refused(lambda: gengraph.Engine("gpt2-tiny\0"), ValueError, r"a path holds no NUL character")


def test_to_frame_names_what_is_not_a_results_document():
    refused(lambda: gengraph.to_frame([1]), TypeError,
            r"to_frame: doc: expected a dict \(a results document, docs/results-schema.md\), "
            r"found list")
    refused(lambda: gengraph.to_frame({"runs": [{"timings": {"total_ms": {"values": 3}}}]}),
            TypeError, r"to_frame: doc\['runs'\]\[0\]\['timings'\]\['total_ms'\]\['values'\]: "
                       r"expected a list .* found int 3")
    refused(lambda: gengraph.to_frame({"points": [{"runs": "x"}]}), TypeError,
            r"doc\['points'\]\[0\]\['runs'\]: expected a list")


# 5. a prompt of the wrong shape says what a prompt must be, and where it went wrong.

@pytest.mark.parametrize("prompt, kind, message", [
    ([[1.5]], TypeError, r"^generate: prompt\[0\]\[0\]: expected an int token id, found float "
                         r"1.5$"),
    ([[1, 2], [3, "4"]], TypeError, r"prompt\[1\]\[1\]: expected an int token id, found str "
                                    r"'4'"),
    ([[1, 2], "text"], TypeError, r"prompt\[1\]: expected a list of int token ids \(as "
                                  r"prompt\[0\] is\), found str 'text'"),
    ([1, 2.0], TypeError, r"prompt\[1\]: expected an int token id, found float 2.0"),
    ([[1, True]], TypeError, r"prompt\[0\]\[1\]: expected an int token id, found bool True"),
    ([1.5], TypeError, r"prompt\[0\]: expected a str, an int token id or a list of int token "
                       r"ids, found float 1.5"),
    ([None], TypeError, r"prompt\[0\]: expected a str, an int token id .* found None"),
    ({"a": 1}, TypeError, r"^generate: prompt: expected a str, a list of str, a list of int "
                          r"token ids, or a list of lists of int token ids \(or a tensor of "
                          r"ids\), found dict$"),
    (None, TypeError, r"prompt: expected a str, a list of str, .* found None$"),
    (7, TypeError, r"prompt: expected a str, .* found int 7$"),
    ((i for i in [1]), TypeError, r"prompt: expected .* found generator"),
    ([], ValueError, r"prompt: no inputs \(an empty list\)"),
    (torch.tensor([[1.0]]), TypeError, r"input_ids: expected an integer tensor, found "
                                       r"torch.float32"),
])
def test_prompts_of_the_wrong_form_name_the_position(engine, prompt, kind, message):
    refused(lambda: engine.generate(prompt, max_new_tokens=2), kind, message)


def test_attention_mask_must_be_a_tensor(engine):
    refused(lambda: engine.generate(torch.tensor([[1, 2]]), attention_mask=[[1, 1]]), TypeError,
            r"attention_mask: expected a tensor \(as input_ids is\), found list")
    refused(lambda: engine.generate([[1, 2]], attention_mask=torch.ones(1, 2)), TypeError,
            r"attention_mask goes with input_ids given as a tensor")


def test_prompts_in_every_accepted_form_still_generate(engine):
    ref = engine.generate([[7, 8, 9]], max_new_tokens=3).tokens
    for prompt in ([7, 8, 9], ([7, 8, 9],), [(7, 8, 9)], [torch.tensor([7, 8, 9])],
                   torch.tensor([7, 8, 9]), [torch.tensor(7), 8, 9]):
        assert engine.generate(prompt, max_new_tokens=3).tokens == ref, prompt


# 7. every ModelOptions key from Python: int8_head.

def test_int8_head_reaches_the_model():
    def tokens(**kw):
        model = gengraph.Model("gpt2-tiny", weights_seed=3, weights="int4", **kw)
        return gengraph.Engine(model).generate([[1, 2, 3]], max_new_tokens=6, output_scores=True)
    plain, head8 = tokens(int8_head=False), tokens(int8_head=True)
    assert plain.token_scores != head8.token_scores
    assert tokens().token_scores == head8.token_scores  # int4's default: the head in int8
    refused(lambda: gengraph.Model("gpt2-tiny", int8_head=True), gengraph.Error,
            r"int8_head: expected false unless weights is int4")
    # Engine takes it too, as every Model keyword.
    e = gengraph.Engine("gpt2-tiny", weights_seed=3, weights="int4", int8_head=True)
    assert e.generate([[1, 2, 3]], max_new_tokens=6, output_scores=True).token_scores == \
        head8.token_scores


def test_python_model_keys_are_the_cpp_model_options():
    import pathlib
    header = (pathlib.Path(__file__).resolve().parents[2] / "include" / "gengraph" /
              "gengraph.h").read_text()
    body = re.search(r"struct ModelOptions \{(.*?)\n\};", header, re.S).group(1)
    fields = re.findall(r"^\s+[\w:<>]+ (\w+)(?: = [^;]*)?;", body, re.M)
    assert set(fields) == set(gengraph._MODEL_KEYS), (fields, gengraph._MODEL_KEYS)
