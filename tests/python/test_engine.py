"""gengraph.Engine from Python: the same tokens as the CLI and as transformers, inputs in every
form, streaming, errors as exceptions, the GIL released while generating."""
import math
import threading
import time

import pytest
import torch

import gengraph
from conftest import FIXTURES, cli_outputs, real_model_ready


def test_tokens_equal_transformers_on_every_parity_case(parity_cases):
    engines = {}
    for case in parity_cases["cases"]:
        model = case["model"]
        if model not in engines:
            engines[model] = gengraph.Engine(FIXTURES / "models" / model)
        expected = case["expected"]
        scored = "token_scores" in expected[0][0]
        out = engines[model].generate(case["prompts"], seed=case["seed"], output_scores=scored,
                                      **case["generation"])
        assert out.tokens == [[s["tokens"] for s in per] for per in expected], case["name"]
        for got, want in zip(out.outputs, expected):
            for g, w in zip(got, want):
                if w.get("score") is not None:
                    assert g.score == pytest.approx(w["score"], rel=1e-5, abs=1e-5), case["name"]
                if scored and w.get("token_scores") is not None:
                    assert g.token_scores == pytest.approx(w["token_scores"], rel=1e-5, abs=1e-5)
    assert len(engines) >= 5


def test_a_gguf_file_is_a_model_as_in_the_cli(tmp_path):
    """Engine takes a GGUF file as the CLI's --model does (docs/gguf.md); a file that is not one is
    refused by name."""
    file = FIXTURES / "gguf" / "models" / "llama-q4_1.gguf"
    want, _ = cli_outputs(tmp_path, "--model", file, "--prompt", "1,5,9", "--max-new-tokens", 6)
    engine = gengraph.Engine(str(file), weights="int4")
    assert gengraph.Engine(str(file)).generate([[1, 5, 9]], max_new_tokens=6).tokens == want
    assert len(engine.generate([[1, 5, 9]], max_new_tokens=6, min_new_tokens=6).tokens[0][0]) == 6
    bad = tmp_path / "not.gguf"
    bad.write_bytes(b"GGUX" + bytes(60))
    with pytest.raises(gengraph.Error, match="not a GGUF file"):
        gengraph.Engine(str(bad))


def test_tokens_equal_the_cli(tmp_path):
    want, _ = cli_outputs(tmp_path, "--model", "gpt2-tiny", "--prompt", "1,2,3", "--prompt",
                          "4,5", "--max-new-tokens", 9)
    engine = gengraph.Engine("gpt2-tiny")
    assert engine.generate([[1, 2, 3], [4, 5]], max_new_tokens=9).tokens == want
    # Sampling: the CLI seeds with run.seed (0) before generating; seed=0 does the same.
    want, _ = cli_outputs(tmp_path, "--model", "gpt2-tiny", "--prompt", "1,2,3", "--max-new-tokens",
                          9, "--set", "generation.do_sample=true")
    assert engine.generate([[1, 2, 3]], max_new_tokens=9, do_sample=True, seed=0).tokens == want


def test_inputs_as_lists_tensors_and_masks():
    engine = gengraph.Engine("gpt2-tiny", backend="eager", cache="static")
    ref = engine.generate([[7, 8, 9], [4, 5]], max_new_tokens=5)
    assert engine.generate(torch.tensor([7, 8, 9]), max_new_tokens=5).tokens == ref.tokens[:1]
    assert engine.generate([7, 8, 9], max_new_tokens=5).tokens == ref.tokens[:1]
    # Left padding given as transformers gives it: input_ids with an attention_mask.
    ids = torch.tensor([[7, 8, 9], [0, 4, 5]])
    mask = torch.tensor([[1, 1, 1], [0, 1, 1]])
    out = engine.generate(ids, attention_mask=mask, max_new_tokens=5)
    assert out.tokens == ref.tokens
    t = out.ids(pad_token_id=-1)
    assert t.dtype == torch.long and t.shape == (2, 5)
    assert t.tolist() == [s[0] for s in ref.tokens]
    assert out.steps == 5 and out.rows == 2 and out.prompt_length == 3 and out.seconds > 0
    assert out.settings["max_new_tokens"] == 5
    assert engine.backend == "eager" and engine.vocab_size == 1024


def test_scores_and_beams():
    engine = gengraph.Engine("gpt2-tiny")
    out = engine.generate([[1, 2, 3]], max_new_tokens=6, output_scores=True)
    seq = out.outputs[0][0]
    assert len(seq.token_scores) == 6 and all(s <= 0 for s in seq.token_scores)
    assert seq.score == pytest.approx(sum(seq.token_scores))
    beams = engine.generate([[1, 2, 3]], max_new_tokens=6, num_beams=3, num_return_sequences=2)
    assert len(beams.tokens[0]) == 2 and all(s is not None for s in beams.scores[0])
    assert beams.scores[0][0] >= beams.scores[0][1]


def test_top_logprobs_give_each_tokens_alternatives():
    engine = gengraph.Engine("gpt2-tiny")
    out = engine.generate([[1, 2, 3]], max_new_tokens=5, top_logprobs=3)
    seq = out.outputs[0][0]
    assert len(seq.top_logprobs) == 5 and out.top_logprobs == [[seq.top_logprobs]]
    for token, score, top in zip(seq.tokens, seq.token_scores, seq.top_logprobs):
        assert len(top) == 3 and top[0] == (token, score)  # greedy: the chosen token first
        assert [lp for _, lp in top] == sorted((lp for _, lp in top), reverse=True)
    streamed = list(engine.stream([[1, 2, 3]], max_new_tokens=5, top_logprobs=3))
    assert [t.top for t in streamed] == seq.top_logprobs
    assert [t.logprob for t in streamed] == seq.token_scores
    plain = engine.generate([[1, 2, 3]], max_new_tokens=2)
    assert plain.outputs[0][0].top_logprobs == [] and plain.token_scores == [[[]]]
    out_of_range = r"'top_logprobs': expected an integer in \[0, 20\], found 21"
    with pytest.raises(gengraph.Error, match=out_of_range):
        engine.generate([[1, 2, 3]], top_logprobs=21)
    with pytest.raises(gengraph.Error, match=r"'top_logprobs' \(2\) needs greedy search"):
        engine.generate([[1, 2, 3]], num_beams=2, top_logprobs=2)


def test_a_shared_model_serves_two_backends():
    model = gengraph.Model("gpt2-tiny", weights_seed=3)
    a = gengraph.Engine(model)
    b = gengraph.Engine(model, backend="trace")
    assert a.model.source == b.model.source == "preset:gpt2-tiny"
    assert a.generate([[1, 2]], max_new_tokens=6).tokens == b.generate([[1, 2]],
                                                                       max_new_tokens=6).tokens
    with pytest.raises(gengraph.Error, match="give .*dtype.* to gengraph.Model"):
        gengraph.Engine(model, dtype="bfloat16")


def test_stream_gives_the_generated_tokens_in_order():
    engine = gengraph.Engine("gpt2-tiny")
    want = engine.generate([[1, 2, 3], [4]], max_new_tokens=7, output_scores=True)
    s = engine.stream([[1, 2, 3], [4]], max_new_tokens=7, output_scores=True)
    got = {0: [], 1: []}
    last = []
    for tok in s:
        assert isinstance(tok, gengraph.StreamedToken)
        got[tok.input].append(tok.token)
        assert not math.isnan(tok.logprob)
        if tok.last:
            last.append(tok.input)
    assert [[got[0]], [got[1]]] == want.tokens
    assert sorted(last) == [0, 1]
    assert s.result.tokens == want.tokens


def test_break_stops_the_generation():
    engine = gengraph.Engine("gpt2-tiny")
    stream = engine.stream([[1, 2, 3]], max_new_tokens=200, min_new_tokens=200)
    taken = []
    for tok in stream:
        taken.append(tok.token)
        if len(taken) == 3:
            break
    # Stopped after the step of the third token, or the one after it (it runs one token ahead).
    result = stream.result
    assert 3 <= result.steps <= 4
    assert result.tokens[0][0][:3] == taken
    # The Engine is free again.
    assert engine.generate([[1, 2, 3]], max_new_tokens=4).steps == 4


def test_a_call_during_an_unfinished_stream_is_refused():
    engine = gengraph.Engine("gpt2-tiny")
    stream = engine.stream([[1, 2, 3]], max_new_tokens=50)
    it = iter(stream)
    next(it)
    with pytest.raises(gengraph.Error, match="a stream of this Engine is still running"):
        engine.generate([[1]], max_new_tokens=2)
    with pytest.raises(gengraph.Error, match="still running"):
        stream.result
    stream.close()
    assert stream.result.steps < 50
    assert engine.generate([[1]], max_new_tokens=2).steps == 2


def test_streaming_beams_is_an_error_raised_by_the_iterator():
    engine = gengraph.Engine("gpt2-tiny")
    with pytest.raises(gengraph.Error, match="stream"):
        for _ in engine.stream([[1, 2]], max_new_tokens=4, num_beams=2):
            pass


def test_int8_activations_per_block_from_python():
    # The keyword reaches the model: blocks of 32 are not per-row scales, and both run trace too.
    def tokens(backend, **kw):
        model = gengraph.Model("gpt2-tiny", weights_seed=3, weights="int8",
                               int8_activation_rows=1, **kw)
        return gengraph.Engine(model, backend=backend).generate(
            [[1, 2, 3]], max_new_tokens=8, output_scores=True)
    per_row, blocks = tokens("eager"), tokens("eager", int8_activation_block=32)
    assert blocks.tokens == tokens("trace", int8_activation_block=32).tokens
    assert per_row.token_scores != blocks.token_scores
    with pytest.raises(gengraph.Error, match="int8_activation_block: expected 0 .* found 40"):
        gengraph.Model("gpt2-tiny", weights="int8", int8_activation_rows=1,
                       int8_activation_block=40)


def test_errors_are_gengraph_errors_naming_the_input():
    engine = gengraph.Engine("gpt2-tiny")
    with pytest.raises(gengraph.Error, match="max_new_tokens"):
        engine.generate([[1, 2]], max_new_tokens=-1)
    with pytest.raises(gengraph.Error, match="top_kk"):
        engine.generate([[1, 2]], top_kk=3)
    with pytest.raises(gengraph.Error, match="outside|vocab"):
        engine.generate([[1, 5000]], max_new_tokens=2)
    with pytest.raises(gengraph.Error, match=r"prompt\[1\]: expected a list of int token ids"):
        engine.generate([[1, 2], "text"], max_new_tokens=2)
    with pytest.raises(gengraph.Error, match="integer tensor"):
        engine.generate(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(gengraph.Error, match="no tokenizer"):
        engine.generate(["a text"], max_new_tokens=2)
    with pytest.raises(gengraph.Error, match="unknown backend 'eagre'.*did you mean 'eager'"):
        gengraph.Engine("gpt2-tiny", backend="eagre")
    with pytest.raises(gengraph.Error, match="cache"):
        gengraph.Engine("gpt2-tiny", cache="sometimes")
    with pytest.raises(gengraph.Error, match="no such model folder"):
        gengraph.Engine("./no/such/folder")
    with pytest.raises(gengraph.Error, match="dtype: expected float32, bfloat16 or float16"):
        gengraph.Engine("gpt2-tiny", dtype="float8")
    with pytest.raises(gengraph.Error, match="JSON value"):
        engine.generate([[1, 2]], max_new_tokens=object())
    assert issubclass(gengraph.Error, RuntimeError)


def test_generate_releases_the_gil():
    engine = gengraph.Engine("gpt2-tiny",
                             model_config={"n_layer": 4, "n_embd": 128, "n_positions": 1024})
    window = {}

    def work():
        window["start"] = time.perf_counter()
        engine.generate([[1, 2, 3]] * 2, max_new_tokens=600, min_new_tokens=600)
        window["end"] = time.perf_counter()

    t = threading.Thread(target=work)
    stamps = []
    t.start()
    while t.is_alive():
        stamps.append(time.perf_counter())
        time.sleep(0.005)
    t.join()
    assert window["end"] - window["start"] > 0.2, "the generation was too short to tell"
    # This thread ran while the other was inside generate(): impossible had it held the GIL.
    inside = [s for s in stamps if window["start"] + 0.05 < s < window["end"] - 0.05]
    assert len(inside) > 5


def test_listings():
    names = {b["name"]: b for b in gengraph.backends()}
    assert {"eager", "trace", "cuda_graph", "aoti"} <= set(names)
    assert names["eager"]["available"] and not names["eager"]["python"]
    assert gengraph.presets()["gpt2-tiny"]["model_type"] == "gpt2"
    assert any(m["name"] == "smollm2-135m" for m in gengraph.models())


@pytest.mark.skipif(not real_model_ready(), reason="the real model smollm2-135m is not set up here")
def test_the_real_model_gives_the_clis_text(tmp_path):
    engine = gengraph.Engine("smollm2-135m")
    out = engine.generate(["The capital of France is"], max_new_tokens=8)
    _, doc = cli_outputs(tmp_path, "--model", "smollm2-135m", "--text", "The capital of France is",
                         "--max-new-tokens", 8)
    assert out.texts[0][0] == doc["runs"][0]["outputs"][0]["sequences"][0]["text"]
    assert len(out.texts[0][0]) > 0
    pieces = "".join(p.text for p in engine.stream("The capital of France is", max_new_tokens=8))
    assert pieces == out.texts[0][0]
    # Each piece carries the tokens behind it and their log-probabilities, as the streamed ids
    # have them; skip_special_tokens leaves the EOS out of the text.
    scored = list(engine.stream(["What is 2+2?"], max_new_tokens=8, output_scores=True,
                                skip_special_tokens=True, logit_bias={2: 100}))
    assert [t for p in scored for t in p.tokens] == [2]
    assert "".join(p.text for p in scored) == ""
    assert all(len(p.logprobs) == len(p.tokens) for p in scored)
    assert -1e-3 < scored[0].logprobs[0] <= 0  # biased to certainty, not nan


def test_plan_decides_what_generate_runs_without_running_it():
    e = gengraph.Engine("gpt2-tiny")
    p = e.plan([[1, 2, 3], [4, 5]], max_new_tokens=4, num_beams=2)
    assert p["settings"]["num_beams"] == 2 and p["settings"]["max_new_tokens"] == 4
    assert (p["inputs"], p["rows_per_input"], p["prompt_length"], p["max_length"]) == (2, 2, 3, 7)
    assert p["memory_bytes"] > 0 and "KV cache" in p["memory_breakdown"]
    # What generate reports it ran with is what the plan decided.
    assert e.generate([[1, 2, 3], [4, 5]], max_new_tokens=4, num_beams=2).settings == p["settings"]
    with pytest.raises(gengraph.Error, match="num_beams"):
        e.plan([[1, 2, 3]], num_beams=0)
