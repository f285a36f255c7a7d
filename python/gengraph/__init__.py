"""gengraph from Python: the C++ engine's Engine, Model, experiments and backends.

    import gengraph
    engine = gengraph.Engine("smollm2-135m")                 # or a folder, or a preset
    out = engine.generate(["The capital of France is"], max_new_tokens=8)
    print(out.texts[0][0])

Settings are transformers' generate() keyword names (max_new_tokens, do_sample, num_beams, ...),
resolved as the CLI resolves them: transformers' defaults, the model's generation_config.json,
then yours. docs/python.md walks through all of it.
"""
import atexit as _atexit
import json as _json
import os as _os

import sys as _sys

import torch as _torch  # LibTorch's Python bindings first: gengraph's module passes torch.Tensors

# gengraph's Python tools (peers, the Python tokenizer, aoti exports, plots) run in this
# interpreter unless GENGRAPH_PYTHON names another (`gengraph paths` says which).
_os.environ.setdefault("GENGRAPH_PYTHON", _sys.executable)

from . import _gengraph
from ._gengraph import (Error, Generation, ModelInfo, Sequence, StreamedText, StreamedToken,
                        backends, check_backend as _check_backend, format_table, models, presets,
                        register_backend as _register_backend, unregister_backend)
from .frame import to_frame
from .backend import Backend

__all__ = ["Engine", "Model", "Generation", "Sequence", "StreamedToken", "StreamedText", "Stream",
           "Error", "Backend", "ModelInfo", "run", "to_frame", "format_table", "backends",
           "presets", "models", "register_backend", "unregister_backend", "check_backend"]

_MODEL_KEYS = ("device", "dtype", "fused", "check_weights", "weights", "group_size",
               "quantize_head", "int8_activation_rows", "int8_activation_block", "model_config",
               "weights_seed")


def _dtype_name(dtype):
    if isinstance(dtype, _torch.dtype):
        return str(dtype).replace("torch.", "")
    return str(dtype)


def _model_options(kwargs):
    opts = {k: kwargs.pop(k) for k in _MODEL_KEYS if k in kwargs and kwargs[k] is not None}
    for k in _MODEL_KEYS:
        kwargs.pop(k, None)
    if "dtype" in opts:
        opts["dtype"] = _dtype_name(opts["dtype"])
    if "device" in opts:
        opts["device"] = str(opts["device"])
    return opts


def _option_text(key, value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise Error(f"backend option '{key}': expected a str, int, float or bool, found "
                f"{type(value).__name__}")


class Model:
    """A loaded model, shared by several Engines (gengraph::Model): its weights in memory once.

    model: a model folder (config.json + safetensors), a known real model ("smollm2-135m") or a
    preset ("gpt2-tiny"; "preset:NAME" always a preset). Keywords: device ("cpu", "cuda:0"),
    dtype ("float32", "bfloat16", "float16" or a torch.dtype), fused, check_weights, weights
    ("float", "int8", "int4", "bfloat16"), group_size, quantize_head, int8_activation_rows
    (int8: products of this many rows quantize their activations too), int8_activation_block
    (their activation scales per block of this many channels; 0: per row), model_config and
    weights_seed (presets).
    """

    def __init__(self, model, **options):
        opts = _model_options(options)
        if options:
            raise Error(f"Model: unknown option(s) {sorted(options)}; known: {list(_MODEL_KEYS)}")
        self._model = _gengraph._Model(_os.fspath(model), opts)

    source = property(lambda self: self._model.source, doc="'preset:NAME' or the folder")
    vocab_size = property(lambda self: self._model.vocab_size)
    warnings = property(lambda self: list(self._model.warnings))

    def __repr__(self):
        return f"gengraph.Model({self.source!r})"


def _prompts(inputs, attention_mask=None):
    """(token-id prompts, texts): exactly one of them is non-empty."""
    if isinstance(inputs, str):
        return [], [inputs]
    if isinstance(inputs, _torch.Tensor):
        if inputs.dtype.is_floating_point or inputs.dtype == _torch.bool:
            raise Error(f"generate: input_ids: expected an integer tensor, found {inputs.dtype}")
        ids = inputs.unsqueeze(0) if inputs.dim() == 1 else inputs
        if ids.dim() != 2:
            raise Error(f"generate: input_ids: expected a tensor [batch, length] or [length], "
                        f"found {list(inputs.shape)}")
        if attention_mask is not None:
            mask = attention_mask.unsqueeze(0) if attention_mask.dim() == 1 else attention_mask
            if mask.shape != ids.shape:
                raise Error(f"generate: attention_mask: expected the shape of input_ids "
                            f"{list(ids.shape)}, found {list(attention_mask.shape)}")
            return [row[m.bool()].tolist() for row, m in zip(ids.cpu(), mask.cpu())], []
        return ids.cpu().tolist(), []
    if attention_mask is not None:
        raise Error("generate: attention_mask goes with input_ids given as a tensor")
    items = list(inputs)
    if not items:
        raise Error("generate: no inputs: expected texts, token ids or a tensor of them")
    if all(isinstance(x, str) for x in items):
        return [], items
    if all(isinstance(x, int) for x in items):
        return [items], []
    prompts = []
    for i, row in enumerate(items):
        if isinstance(row, _torch.Tensor):
            row = row.tolist()
        if isinstance(row, str) or not all(isinstance(t, int) for t in row):
            raise Error(f"generate: input {i}: expected a list of token ids (int), found "
                        f"{type(row).__name__}")
        prompts.append(list(row))
    return prompts, []


def _settings(settings):
    """generate()'s keywords as the JSON settings: None means unset, as in transformers."""
    out = {}
    for k, v in settings.items():
        if v is None:
            continue
        if isinstance(v, _torch.Tensor):
            v = v.tolist()
        out[k] = v
    return out


class Stream:
    """Tokens (or text pieces, for texts) as they are chosen; iterate it, `break` to stop.

    The generation runs on a thread of its own at most one token ahead of the loop that reads
    it: leaving the loop (break, an exception) stops it after that token's step. `result` is
    the Generation as far as it got, once the stream has ended or close() has returned.
    """

    def __init__(self, run):
        self._run = run

    def __iter__(self):
        try:
            while True:
                try:
                    yield self._run.next()
                except StopIteration:
                    return
        finally:
            self._run.close()

    def close(self):
        """Stops the generation after the step of the last token read, and waits for it."""
        self._run.close()

    @property
    def result(self):
        return self._run.result

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Engine:
    """A model on a backend, generating (gengraph::Engine).

    model: as for Model, or a gengraph.Model to share its weights. backend: a registered name
    (gengraph.backends()); backend options as keywords (cache="static") or backend_options={...};
    whole_step ("off", "auto", "on"), capture, sync_every: the loop; the Model keywords (device,
    dtype, weights, ...) when the model is not a loaded Model.
    """

    def __init__(self, model, backend="eager", *, backend_options=None, whole_step="off",
                 capture=True, sync_every=4, **options):
        model_opts = _model_options(options)
        opts = dict(backend_options or {})
        opts.update(options)
        opts = {k: _option_text(k, v) for k, v in opts.items()}
        target = model._model if isinstance(model, Model) else _os.fspath(model)
        self._engine = _gengraph._Engine(target, backend, opts, whole_step, capture, sync_every,
                                         model_opts)

    def generate(self, inputs, *, attention_mask=None, seed=None, **settings):
        """Generates from texts, token ids (lists) or input_ids (a tensor, with attention_mask).

        settings: transformers' generate() keywords (max_new_tokens=8, do_sample=True, ...) and
        gengraph's own (processors, strategy, ...; docs/decoding.md). seed: seeds the generator
        first, as the CLI does with run.seed. Returns a Generation.
        """
        prompts, texts = _prompts(inputs, attention_mask)
        if seed is not None:
            self._engine.manual_seed(seed)
        s = _settings(settings)
        return (self._engine.generate_text(texts, s) if texts
                else self._engine.generate(prompts, s))

    def stream(self, inputs, *, attention_mask=None, seed=None, **settings):
        """As generate(), handing over each token as it is chosen: a Stream to iterate.

        Token ids in: gengraph.StreamedToken items; texts in: gengraph.StreamedText pieces.
        Greedy search and sampling stream; beam strategies choose at the end and are refused.
        """
        prompts, texts = _prompts(inputs, attention_mask)
        if seed is not None:
            self._engine.manual_seed(seed)
        return Stream(self._engine.stream(prompts, texts, _settings(settings)))

    def encode(self, text, add_special_tokens=True):
        return self._engine.encode(text, add_special_tokens)

    def decode(self, ids, skip_special_tokens=False):
        if isinstance(ids, _torch.Tensor):
            ids = ids.tolist()
        return self._engine.decode(list(ids), skip_special_tokens)

    def manual_seed(self, seed):
        self._engine.manual_seed(seed)

    def default_settings(self):
        return self._engine.default_settings()

    @property
    def model(self):
        m = Model.__new__(Model)
        m._model = self._engine.model()
        return m

    backend = property(lambda self: self._engine.backend())
    model_source = property(lambda self: self._engine.model_source())
    vocab_size = property(lambda self: self._engine.vocab_size())
    warnings = property(lambda self: list(self._engine.warnings()))

    def backend_report(self):
        return self._engine.backend_report()

    def __repr__(self):
        return f"gengraph.Engine({self.model_source!r}, backend={self.backend!r})"


def _generation_tokens(self):
    return [[list(s.tokens) for s in per] for per in self.outputs]


def _generation_ids(self, pad_token_id=None):
    """The generated tokens as one tensor [prompts x sequences, longest], right-padded."""
    rows = [s.tokens for per in self.outputs for s in per]
    if pad_token_id is None:
        pad_token_id = self.settings.get("pad_token_id")
    if pad_token_id is None:
        eos = self.settings.get("eos_token_id")
        pad_token_id = (eos[0] if isinstance(eos, list) and eos else eos) or 0
    width = max((len(r) for r in rows), default=0)
    out = _torch.full((len(rows), width), int(pad_token_id), dtype=_torch.long)
    for i, r in enumerate(rows):
        out[i, :len(r)] = _torch.tensor(r, dtype=_torch.long)
    return out


Generation.tokens = property(_generation_tokens, doc="per prompt, per sequence: the token ids")
Generation.texts = property(lambda self: [[s.text for s in per] for per in self.outputs],
                            doc="per prompt, per sequence: the decoded text (texts in)")
Generation.scores = property(lambda self: [[s.score for s in per] for per in self.outputs],
                             doc="per prompt, per sequence: the score (None where none)")
Generation.token_scores = property(
    lambda self: [[list(s.token_scores) for s in per] for per in self.outputs],
    doc="per prompt, per sequence: each token's log-probability (output_scores=True)")
Generation.ids = _generation_ids
Generation.__repr__ = lambda self: (f"gengraph.Generation({len(self.outputs)} input(s), "
                                    f"{self.steps} step(s), {self.seconds:.4f} s)")


def run(config, overrides=None, *, output=None, quiet=True):
    """Runs an experiment and returns its results document (docs/results-schema.md).

    config: a YAML file's path, or the experiment as a dict (the YAML's structure). overrides:
    "key=value" strings as `gengraph run --set` takes them, or a dict of them. output: also
    write the results JSON there (and the plot the experiment names). quiet=False logs progress
    to stderr. gengraph.to_frame(doc) makes a pandas DataFrame of it.
    """
    if isinstance(overrides, dict):
        overrides = [f"{k}={_json.dumps(v) if not isinstance(v, str) else v}"
                     for k, v in overrides.items()]
    overrides = list(overrides or [])
    if isinstance(config, dict):
        return _gengraph._run(_json.dumps(config), False, overrides, quiet,
                              _os.fspath(output) if output else "")
    return _gengraph._run(_os.fspath(config), True, overrides, quiet,
                          _os.fspath(output) if output else "")


def register_backend(name, factory, *, description="", available=None, replace=False):
    """Registers a Python backend under `name`: usable by Engine(backend=name) and in experiments.

    factory(model: ModelInfo, options: dict[str, str]) returns an object with prefill() and
    decode() (and optionally prepare, rewind, report): see gengraph.Backend and
    docs/python.md#backends. available(options) returns why it cannot run here, or None.
    """
    _register_backend(name, factory, description, available, replace)
    return factory


def check_backend(name, *, options=None, models=("gpt2-tiny", "llama-tiny"), seed=11,
                  max_new_tokens=12, raise_on_failure=True):
    """Checks a registered backend against the eager backend (<gengraph/conformance.h>):
    every strategy's tokens and scores, prefill and decode logits with a beam reorder, and
    verify/rewind with prompt lookup. Returns the report; raises gengraph.Error listing what
    failed unless raise_on_failure=False."""
    opts = {k: _option_text(k, v) for k, v in (options or {}).items()}
    report = _check_backend(name, opts, list(models), seed, max_new_tokens)
    if raise_on_failure and not report["passed"]:
        failed = [f"{c['model']} {c['check']}: {c['detail']}" for c in report["checks"]
                  if not c["passed"]]
        raise Error(f"backend '{name}' does not conform: " + "; ".join(failed))
    return report


def _unregister_python_backends():
    # Before the interpreter goes: the registry holds Python objects.
    for name in _gengraph._python_backends():
        unregister_backend(name)


_atexit.register(_unregister_python_backends)
