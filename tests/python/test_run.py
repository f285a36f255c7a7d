"""gengraph.run: experiments from a file or a dict, overrides, results written, data frames."""
import json

import pytest

import gengraph
from conftest import ROOT

CONFIG = {
    "name": "frame",
    "model": {"preset": "gpt2-tiny"},
    "backends": ["eager", {"name": "eager", "label": "static", "options": {"cache": "static"}}],
    "inputs": {"prompts": [[1, 2, 3]]},
    "generation": {"max_new_tokens": 5},
    "run": {"warmup": 0, "repeats": 3},
}


def test_a_dict_runs_and_the_frame_has_a_row_per_repeat():
    doc = gengraph.run(CONFIG)
    assert doc["schema_version"] == 1 and [r["label"] for r in doc["runs"]] == ["eager", "static"]
    frame = gengraph.to_frame(doc)
    assert list(frame.columns) == list(gengraph.frame.COLUMNS)
    assert len(frame) == 2 * 3
    assert sorted(frame["repeat"].unique().tolist()) == [0, 1, 2]
    assert (frame["steps"] == 5).all() and frame["tokens_match_first_row"].all()
    assert (frame["total_ms"] > 0).all() and frame["error"].isna().all()
    eager = doc["runs"][0]["timings"]["total_ms"]["values"]
    assert frame[frame.label == "eager"]["total_ms"].tolist() == eager


def test_a_file_with_overrides(tmp_path):
    out = tmp_path / "r.json"
    doc = gengraph.run(ROOT / "configs" / "quickstart-random.yaml",
                       {"run.repeats": 1, "run.warmup": 0, "generation.max_new_tokens": 3},
                       output=out)
    assert json.loads(out.read_text())["runs"][0]["outputs"] == doc["runs"][0]["outputs"]
    assert doc["config"]["overrides"] == ["run.repeats=1", "run.warmup=0",
                                          "generation.max_new_tokens=3"]
    frame = gengraph.to_frame(doc)
    assert len(frame) == 3 and (frame["steps"] == 3).all()


def test_a_sweep_gives_a_frame_row_per_point():
    doc = gengraph.run(dict(CONFIG, sweep={"generation.max_new_tokens": [3, 4]}))
    frame = gengraph.to_frame(doc)
    assert len(frame) == 2 * 2 * 3 and frame["point"].nunique() == 2
    assert sorted(frame["steps"].unique().tolist()) == [3, 4]


def test_bad_experiments_are_errors_naming_the_key(tmp_path):
    bad = dict(CONFIG, generation={"max_new_tokens": "many"})
    with pytest.raises(gengraph.Error, match="max_new_tokens"):
        gengraph.run(bad)
    with pytest.raises(gengraph.Error, match="backendz"):
        gengraph.run(dict(CONFIG, backendz=["eager"]))
    with pytest.raises(gengraph.Error, match="no-such.yaml"):
        gengraph.run(tmp_path / "no-such.yaml")
    # Nothing half-written: an output path that is a folder is refused before the run.
    with pytest.raises(gengraph.Error, match="results"):
        gengraph.run(CONFIG, output=tmp_path)


def test_to_frame_of_a_load_document_has_a_row_per_system_and_rate():
    doc = {"kind": "load", "runs": [
        {"label": "scheduler", "system": "scheduler", "rate": 2.0, "requests": 4, "completed": 4,
         "output_tokens_per_s": 50.0, "ttft_ms": {"p50": 10.0, "p90": 20.0, "p99": 30.0},
         "tpot_ms": {"p50": 5.0}, "queue_ms": {"p50": 1.0, "p99": 2.0},
         "kv_blocks": {"mean_in_use": 3.5, "peak_in_use": 6}, "prefix_hits": 2},
        {"label": "one_at_a_time", "system": "one_at_a_time", "rate": "all_at_once",
         "requests": 4, "completed": 4, "output_tokens_per_s": 20.0,
         "ttft_ms": {"p50": 40.0, "p90": 50.0, "p99": 60.0}}]}
    frame = gengraph.to_frame(doc)
    assert list(frame.columns) == list(gengraph.frame.LOAD_COLUMNS)
    assert list(frame["system"]) == ["scheduler", "one_at_a_time"]
    assert frame.loc[0, "ttft_ms_p99"] == 30.0 and frame.loc[0, "kv_blocks_peak"] == 6
    assert frame.loc[1, "ttft_ms_p50"] == 40.0
    assert frame.isna().loc[1, "kv_blocks_peak"]
