"""Backends defined in Python: the contract checked against eager (gengraph.check_backend), used
from the Engine and from experiments beside the built-ins, and refused clearly when broken."""
import pytest
import torch

import gengraph
from conftest import FIXTURES
from transformers_backend import TransformersBackend

MODELS = [str(FIXTURES / "models" / m) for m in ("gpt2-a", "llama-a", "gptj-a")]


@pytest.fixture(scope="module", autouse=True)
def registered():
    gengraph.register_backend("transformers", TransformersBackend, replace=True,
                              description="the example's transformers backend")
    yield
    gengraph.unregister_backend("transformers")


def test_the_example_backend_conforms():
    report = gengraph.check_backend("transformers", models=MODELS + ["llama-tiny"])
    assert report["passed"], report
    checks = {(c["model"], c["check"]) for c in report["checks"]}
    assert len(checks) == 4 * 3
    # It rewinds (DynamicCache.crop), so the speculative check ran rather than skipped.
    assert not any(c["skipped"] for c in report["checks"])


class ForgetsBeams(TransformersBackend):
    """Ignores parent_rows: beam search must notice."""

    def decode(self, input_ids, positions, token_valid, parent_rows):
        return super().decode(input_ids, positions, token_valid, None)


class NoRewind:
    """Wraps the example without rewind(): speculative decoding is refused, the rest conforms."""

    def __init__(self, model, options):
        self.inner = TransformersBackend(model, options)
        self.prefill = self.inner.prefill
        self.decode = self.inner.decode


def test_the_check_finds_a_broken_backend():
    gengraph.register_backend("forgets_beams", ForgetsBeams)
    try:
        report = gengraph.check_backend("forgets_beams", models=MODELS[:1],
                                        raise_on_failure=False)
        failed = {c["check"] for c in report["checks"] if not c["passed"]}
        assert not report["passed"] and {"tokens", "logits"} <= failed, report
        with pytest.raises(gengraph.Error, match="does not conform.*logits: decode after a beam"):
            gengraph.check_backend("forgets_beams", models=MODELS[:1])
    finally:
        gengraph.unregister_backend("forgets_beams")
    gengraph.register_backend("no_rewind", NoRewind)
    try:
        report = gengraph.check_backend("no_rewind", models=MODELS[:1])
        skipped = [c for c in report["checks"] if c["skipped"]]
        assert [c["check"] for c in skipped] == ["speculative"]
        assert "rewind" in skipped[0]["detail"]
    finally:
        gengraph.unregister_backend("no_rewind")


def test_engine_and_experiment_rows_beside_the_built_ins():
    model = gengraph.Model(FIXTURES / "models" / "llama-a")
    py = gengraph.Engine(model, backend="transformers")
    eager = gengraph.Engine(model)
    for settings in ({"max_new_tokens": 8}, {"max_new_tokens": 8, "num_beams": 3},
                     {"max_new_tokens": 8, "prompt_lookup_num_tokens": 3}):
        assert (py.generate([[3, 4, 5, 3, 4]], **settings).tokens ==
                eager.generate([[3, 4, 5, 3, 4]], **settings).tokens), settings
    assert py.backend_report()["python_calls"] > 0
    assert {b["name"]: b for b in gengraph.backends()}["transformers"]["python"]
    doc = gengraph.run({
        "name": "python_rows",
        "model": {"preset": "gpt2-tiny"},
        "backends": ["eager", {"name": "transformers", "label": "hf_py"}, "trace"],
        "inputs": {"prompts": [[1, 2, 3], [4, 5]]},
        "generation": {"max_new_tokens": 6},
        "run": {"warmup": 0, "repeats": 2},
    })
    runs = {r["label"]: r for r in doc["runs"]}
    assert runs["hf_py"]["tokens_match_first_row"] and runs["trace"]["tokens_match_first_row"]
    assert runs["hf_py"]["report"]["python_calls"] > 0
    assert "hf_py" in gengraph.format_table(doc)


class Broken:
    def __init__(self, model, options):
        self.vocab = model.vocab_size
        self.mode = options.get("mode", "raise")

    def prefill(self, input_ids, positions, token_valid):
        rows = input_ids.shape[0]
        if self.mode == "raise":
            raise ValueError("no logits today")
        if self.mode == "shape":
            return torch.zeros(rows, self.vocab + 1)
        if self.mode == "type":
            return [0.0] * self.vocab
        return torch.zeros(rows, self.vocab, dtype=torch.long)

    def decode(self, input_ids, positions, token_valid, parent_rows):
        return self.prefill(input_ids, positions, token_valid)


def test_broken_backends_are_refused_naming_them():
    gengraph.register_backend("broken", Broken)
    try:
        cases = {"raise": r"backend 'broken': prefill\(\) raised ValueError: no logits today",
                 "shape": r"prefill\(\) returned a tensor Float \[2, 1025\].*expected a "
                          r"floating-point torch.Tensor \[rows, vocab\] = \[2, 1024\]",
                 "type": r"prefill\(\) returned list, expected",
                 "long": r"returned a tensor Long"}
        for mode, message in cases.items():
            engine = gengraph.Engine("gpt2-tiny", backend="broken", mode=mode)
            with pytest.raises(gengraph.Error, match=message):
                engine.generate([[1, 2], [3, 4]], max_new_tokens=2)
        with pytest.raises(gengraph.Error, match="already registered from Python"):
            gengraph.register_backend("broken", Broken)
    finally:
        gengraph.unregister_backend("broken")
    with pytest.raises(gengraph.Error, match="'eager' is a backend gengraph or a plug-in"):
        gengraph.register_backend("eager", Broken)
    with pytest.raises(gengraph.Error, match="expected letters, digits"):
        gengraph.register_backend("a b", Broken)
    with pytest.raises(gengraph.Error, match="expected a class or callable"):
        gengraph.register_backend("x", 3)
    gengraph.register_backend("no_decode", lambda model, options: object())
    try:
        with pytest.raises(gengraph.Error, match="has no prefill\\(\\)"):
            gengraph.Engine("gpt2-tiny", backend="no_decode")
    finally:
        gengraph.unregister_backend("no_decode")
    with pytest.raises(gengraph.Error, match="unknown option"):
        gengraph.Engine("gpt2-tiny", backend="transformers", colour="red")
    with pytest.raises(gengraph.Error, match="was not registered from Python"):
        gengraph.unregister_backend("eager")


def test_availability_is_the_backends_to_say():
    gengraph.register_backend("never", Broken, available=lambda options: "needs a quantum device")
    try:
        listed = {b["name"]: b for b in gengraph.backends()}["never"]
        assert not listed["available"] and listed["unavailable_reason"] == "needs a quantum device"
        with pytest.raises(gengraph.Error, match="unavailable here: needs a quantum device"):
            gengraph.Engine("gpt2-tiny", backend="never")
    finally:
        gengraph.unregister_backend("never")


def test_model_info_holds_the_loaded_weights():
    seen = {}

    class Peek(Broken):
        def __init__(self, model, options):
            super().__init__(model, options)
            seen["info"] = (model.source, model.model_type, model.vocab_size, model.dtype,
                            str(model.device), model.config["n_layer"])
            seen["wte"] = model.weights()["transformer.wte.weight"]

    gengraph.register_backend("peek", Peek)
    try:
        gengraph.Engine("gpt2-tiny", backend="peek", weights_seed=5)
    finally:
        gengraph.unregister_backend("peek")
    assert seen["info"] == ("preset:gpt2-tiny", "gpt2", 1024, torch.float32, "cpu", 2)
    assert seen["wte"].shape == (1024, 64)
