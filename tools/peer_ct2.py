#!/usr/bin/env python3
"""CTranslate2 as a gengraph peer (tools/engine_peer.py runs it): the model folder converted with
CTranslate2's own TransformersConverter (in a child process, so the peer's memory is the engine's
alone), cached, and run with Generator.generate_batch on the prompts (token ids mapped to the
converted vocabulary's strings once, before timing), the whole batch in one call.

    peer_ct2.py convert --model FOLDER --out DIR --quantization Q     (the child process)

The converter reads the vocabulary from the folder's tokenizer. A folder without one (a preset's
random weights) gets a stand-in: token i is "<t{i}>", the special tokens at the model's ids. The
prompts go in as those strings and the ids come out, so no text is involved.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

if __name__ != "__main__":
    import engine_peer as ep

NAME = "CTranslate2"
SUPPORTED = {"do_sample", "num_beams", "num_return_sequences", "temperature", "top_k", "top_p",
             "length_penalty", "early_stopping"}
REASONS = {k: f"a gengraph extension {NAME} does not have" for k in
           ("processors", "stopping_criteria", "strategy", "stop_sequences", "logit_bias",
            "frequency_penalty", "presence_penalty", "top_logprobs")}
REASONS.update({k: f"{NAME} applies it to the generated tokens only, transformers to the prompt's too"
                for k in ("repetition_penalty", "no_repeat_ngram_size")})


def refusal(gen):
    beams = int(gen.get("num_beams") or 1)
    if gen.get("do_sample") and beams > 1:
        return f"generation.do_sample = true with num_beams = {beams}: {NAME} samples without beams only"
    if beams > 1 and gen.get("early_stopping") == "never":
        return (f'generation.early_stopping = "never": {NAME} ends a beam search once num_beams '
                "hypotheses are finished")
    if int(gen.get("num_return_sequences") or 1) > 1 and beams == 1:
        return (f"generation.num_return_sequences = {gen['num_return_sequences']}: the {NAME} peers "
                "return several sequences from beams only")
    return None


def ready(install=False):
    try:
        import ctranslate2
    except ImportError as e:
        raise ep.Refused(f"CTranslate2 is not installed in {sys.prefix} ({e}); scripts/setup.sh installs "
                         "it from tools/requirements.txt") from None
    return f"ctranslate2 {ctranslate2.__version__}"


def compute_type(variant, dtype):
    if variant == "int8":
        return "int8" if dtype == "float32" else "int8_" + dtype
    return dtype


def open_session(req, variant, s):
    ready()
    import ctranslate2
    folder, dtype = req["model"], req["dtype"]
    quant = "int8" if variant == "int8" else dtype
    key = f"ct2-{ctranslate2.__version__}-f{ep.CONVERSION_FORMAT}-{ep.folder_fingerprint(folder)}-{quant}"
    t0 = time.perf_counter()

    def build(tmp):
        stage = ep.stage_model(folder, os.path.join(tmp, "stage"))
        out = os.path.join(tmp, "model")
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "convert", "--model", stage, "--out", out,
                            "--quantization", quant], capture_output=True, text=True)
        if r.returncode != 0:
            raise ep.Refused(f"CTranslate2's converter could not convert '{folder}' ({quant}):\n  "
                             + ep.tail(r.stderr))
        os.rename(out, os.path.join(tmp, "ct2"))
        shutil.rmtree(stage)

    path, hit = ep.cached(key, build)
    return Session(os.path.join(path, "ct2"), req, variant, s,
                   {"cache": path, "cached": hit, "seconds": time.perf_counter() - t0, "quantization": quant})


class Session:
    def __init__(self, path, req, variant, s, conversion):
        import ctranslate2
        self.ct2, self.s, self.conversion = ctranslate2, s, conversion
        device = req["device"]
        index = int(device.split(":")[1]) if ":" in device else 0
        self.compute_type = compute_type(variant, req["dtype"])
        self.device = device.split(":")[0]
        # generate_batch takes tokens as strings: the converted model's vocabulary maps ids to them.
        vocab_file = os.path.join(path, "vocabulary.json")
        if os.path.exists(vocab_file):
            self.vocabulary = json.load(open(vocab_file))
        else:
            self.vocabulary = open(os.path.join(path, "vocabulary.txt"), encoding="utf-8").read().split("\n")
        self.mapped = {}
        self.generator = ctranslate2.Generator(path, device=self.device, device_index=index,
                                               compute_type=self.compute_type, intra_threads=s["threads"],
                                               inter_threads=1)

    def generate(self, prompts):
        s = self.s
        beams = s["num_beams"] > 1
        first = []

        def callback(step):  # called for each token chosen (without beams): the first one's time
            if not first:
                first.append(time.perf_counter())
            return False

        kw = {"max_length": s["max_new"], "min_length": s["min_new"], "include_prompt_in_result": False,
              "return_end_token": True, "end_token": s["eos"], "beam_size": s["num_beams"],
              "num_hypotheses": s["num_return_sequences"] if beams else 1,
              "return_scores": beams, "max_batch_size": 0}
        if beams:
            kw["length_penalty"] = s["length_penalty"]
        elif s["do_sample"]:
            kw.update(sampling_topk=s["top_k"], sampling_topp=s["top_p"], sampling_temperature=s["temperature"],
                      callback=callback)
        else:
            kw.update(sampling_topk=1, callback=callback)
        self.ct2.set_random_seed(s["seed"])
        key = tuple(tuple(p) for p in prompts)
        if key not in self.mapped:  # once: the timed calls pass the same prompts
            self.mapped = {key: [[self.vocabulary[t] for t in p] for p in prompts]}
        results = self.generator.generate_batch(self.mapped[key], **kw)
        seqs = []
        for r in results:
            per = []
            for k, ids in enumerate(r.sequences_ids):
                entry = {"tokens": [int(t) for t in ids]}
                if beams:
                    entry["score"] = float(r.scores[k])
                per.append(entry)
            seqs.append(per)
        return seqs, (first[0] if first else None)

    def peak_device_bytes(self):
        return 0

    def info(self):
        return {"engine": "ctranslate2", "version": self.ct2.__version__, "compute_type": self.compute_type,
                "device": self.device, "conversion": self.conversion,
                "note": "one generate_batch call per generation; time to first token from its callback"}


# --- the child process: CTranslate2's converter -------------------------------------------------
class StandInTokenizer:
    """What CTranslate2's loaders read of a tokenizer, for a folder that has none."""

    def __init__(self, folder):
        cfg = json.load(open(os.path.join(folder, "config.json")))
        text = cfg.get("text_config", cfg)
        self.vocab = {f"<t{i}>": i for i in range(int(text["vocab_size"]))}

        def token(key):
            v = text.get(key, cfg.get(key))
            v = v[0] if isinstance(v, list) and v else v
            return f"<t{v}>" if isinstance(v, int) and 0 <= v < len(self.vocab) else None

        self.eos_token = token("eos_token_id") or "<t0>"
        self.bos_token = token("bos_token_id") or self.eos_token
        self.unk_token = self.eos_token
        self.pad_token = token("pad_token_id") or self.eos_token
        self.chat_template = None

    def get_vocab(self):
        return dict(self.vocab)

    def convert_tokens_to_ids(self, token):
        return self.vocab[token]


def convert(a):
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ctranslate2.converters import TransformersConverter

    class Converter(TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            tokenizer_files = ("tokenizer.json", "tokenizer.model", "vocab.json")
            if any(os.path.exists(os.path.join(model_name_or_path, f)) for f in tokenizer_files):
                return super().load_tokenizer(tokenizer_class, model_name_or_path, **kwargs)
            return StandInTokenizer(model_name_or_path)

    Converter(a.model, low_cpu_mem_usage=True).convert(a.out, quantization=a.quantization, force=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["convert"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quantization", required=True)
    convert(ap.parse_args())
