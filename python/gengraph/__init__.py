"""gengraph from Python: the C++ engine's Engine, Model, Scheduler, experiments and backends.

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

from . import _check, _gengraph
from ._check import ArgumentTypeError, ArgumentValueError
from ._gengraph import Error, Generation, ModelInfo, Sequence, StreamedText, StreamedToken
from .frame import to_frame
from . import backend as _backend
from .backend import Backend
from .serving import Request, RequestResult, Scheduler

__all__ = ["Engine", "Model", "Generation", "Sequence", "StreamedToken", "StreamedText", "Stream",
           "Error", "ArgumentTypeError", "ArgumentValueError", "Backend", "ModelInfo", "run",
           "to_frame", "format_table", "backends", "presets", "models", "register_backend",
           "unregister_backend", "check_backend", "Scheduler", "Request", "RequestResult"]

# Every key of the C++ ModelOptions (include/gengraph/gengraph.h), and what each takes.
_MODEL_KEYS = ("device", "dtype", "fused", "check_weights", "weights", "group_size",
               "quantize_head", "int8_head", "int8_activation_rows", "int8_activation_block",
               "model_config", "weights_seed")
_BOOL_KEYS = ("fused", "check_weights", "quantize_head", "int8_head")
_INT_KEYS = ("group_size", "int8_activation_rows", "int8_activation_block")


def backends():
    """The registered backends: name, description, whether usable here (and why not), and
    whether defined in Python."""
    return _gengraph.backends()


def presets():
    """The built-in model shapes (random weights from a seed): name -> config.json."""
    return _gengraph.presets()


def models():
    """The known real models and whether the set-up has them here."""
    return _gengraph.models()


def _model_option(call, key, value):
    what = f"{call}: {key}"
    if key == "dtype":
        if isinstance(value, _torch.dtype):
            return str(value).replace("torch.", "")
        return _check.text(value, what, "a dtype name ('float32', 'bfloat16', 'float16') or a "
                                        "torch.dtype")
    if key == "device":
        if isinstance(value, _torch.device):
            return str(value)
        return _check.text(value, what, "a device ('cpu', 'cuda', 'cuda:1') or a torch.device")
    if key == "weights":
        return _check.text(value, what, "'float', 'int8', 'int4' or 'bfloat16'")
    if key in _BOOL_KEYS:
        return _check.boolean(value, what)
    if key in _INT_KEYS:
        return _check.integer(value, what)
    if key == "weights_seed":
        return _check.integer(value, what, 0, _check.UINT64_MAX)
    if not isinstance(value, dict):
        raise ArgumentTypeError(f"{what}: expected a dict of config.json keys, found "
                                f"{_check.describe(value)}")
    return _check.json_value(value, what)


def _model_options(kwargs, call):
    opts = {k: _model_option(call, k, kwargs[k]) for k in _MODEL_KEYS
            if k in kwargs and kwargs[k] is not None}
    for k in _MODEL_KEYS:
        kwargs.pop(k, None)
    return opts


def _option_text(key, value, call):
    what = f"{call}: backend option '{key}'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _check.text(value, what)
    if isinstance(value, float):
        return repr(_check.number(value, what))
    if isinstance(value, int):
        return str(value)
    raise ArgumentTypeError(f"{what}: expected a str, int, float or bool, found "
                            f"{_check.describe(value)}")


def _backend_options(options, call):
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise ArgumentTypeError(f"{call}: backend options: expected a dict of option -> value, "
                                f"found {_check.describe(options)}")
    out = {}
    for k, v in options.items():
        key = _check.text(k, f"{call}: a backend option's name")
        out[key] = _option_text(key, v, call)
    return out


def _name(value, what):
    return _check.text(value, what, "a backend name (str)")


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
        opts = _model_options(options, "Model")
        if options:
            raise ArgumentTypeError(f"Model: unknown option(s) {sorted(options)}; known: "
                                    f"{list(_MODEL_KEYS)}")
        self._model = _gengraph._Model(_model_name(model, "Model"), opts)

    source = property(lambda self: self._model.source, doc="'preset:NAME' or the folder")
    vocab_size = property(lambda self: self._model.vocab_size)
    warnings = property(lambda self: list(self._model.warnings))

    def __repr__(self):
        return f"gengraph.Model({self.source!r})"


def _model_name(model, call):
    return _check.path(model, f"{call}: model", "a model folder, a known model's name or a "
                                                "preset's (str or os.PathLike)")


def _prompts(inputs, attention_mask, call):
    """(token-id prompts, texts): exactly one of them is non-empty."""
    if isinstance(inputs, _torch.Tensor):
        if inputs.dtype.is_floating_point or inputs.dtype.is_complex or inputs.dtype == _torch.bool:
            raise ArgumentTypeError(f"{call}: input_ids: expected an integer tensor, found "
                                    f"{inputs.dtype}")
        ids = inputs.unsqueeze(0) if inputs.dim() == 1 else inputs
        if ids.dim() != 2:
            raise ArgumentValueError(f"{call}: input_ids: expected a tensor [batch, length] or "
                                     f"[length], found {list(inputs.shape)}")
        if attention_mask is not None:
            if not isinstance(attention_mask, _torch.Tensor):
                raise ArgumentTypeError(f"{call}: attention_mask: expected a tensor (as "
                                        f"input_ids is), found "
                                        f"{_check.describe(attention_mask)}")
            mask = attention_mask.unsqueeze(0) if attention_mask.dim() == 1 else attention_mask
            if mask.shape != ids.shape:
                raise ArgumentValueError(f"{call}: attention_mask: expected the shape of "
                                         f"input_ids {list(ids.shape)}, found "
                                         f"{list(attention_mask.shape)}")
            return [row[m.bool()].tolist() for row, m in zip(ids.cpu(), mask.cpu())], []
        return ids.cpu().tolist(), []
    if attention_mask is not None:
        raise ArgumentTypeError(f"{call}: attention_mask goes with input_ids given as a tensor, "
                                f"found prompts given as {_check.describe(inputs)}")
    return _check.prompts(inputs, call)


def _settings(settings, call):
    """generate()'s keywords as the JSON settings: None means unset, as in transformers."""
    return {k: _check.json_value(v, f"{call}: {k}") for k, v in settings.items() if v is not None}


def _seed(seed, call):
    return _check.integer(seed, f"{call}: seed", 0, _check.UINT64_MAX, "an int seed")


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
        model_opts = _model_options(options, "Engine")
        opts = _backend_options(backend_options, "Engine")
        opts.update(_backend_options(options, "Engine"))
        target = model._model if isinstance(model, Model) else _model_name(model, "Engine")
        self._engine = _gengraph._Engine(
            target, _name(backend, "Engine: backend"), opts,
            _check.text(whole_step, "Engine: whole_step", "'off', 'auto' or 'on'"),
            _check.boolean(capture, "Engine: capture"),
            _check.integer(sync_every, "Engine: sync_every"), model_opts)

    def generate(self, inputs, *, attention_mask=None, seed=None, chat=False, **settings):
        """Generates from texts, token ids (lists) or input_ids (a tensor, with attention_mask).

        settings: transformers' generate() keywords (max_new_tokens=8, do_sample=True, ...) and
        gengraph's own (processors, strategy, ...; docs/decoding.md). seed: seeds the generator
        first, as the CLI does with run.seed. chat=True: each text is a user message in the
        model's chat template (as chat() takes it). Returns a Generation.
        """
        prompts, texts = _prompts(inputs, attention_mask, "generate")
        if _check.boolean(chat, "generate: chat"):
            return self.chat(self._user_messages(texts, "generate"), seed=seed, **settings)
        s = _settings(settings, "generate")
        if seed is not None:
            self._engine.manual_seed(_seed(seed, "generate"))
        return (self._engine.generate_text(texts, s) if texts
                else self._engine.generate(prompts, s))

    def plan(self, inputs, *, attention_mask=None, **settings):
        """What generate() with these inputs and settings would run, decided and checked without
        running it (gengraph::Engine::plan): a dict of the resolved settings, inputs,
        rows_per_input, prompt_length, max_length, memory_bytes (the estimate checked against the
        device, weights aside), memory_breakdown and ignored_keys. An invalid setting raises
        gengraph.Error naming the key, as generate() would."""
        prompts, texts = _prompts(inputs, attention_mask, "plan")
        if texts:
            prompts = [self._engine.encode(t, True) for t in texts]
        return self._engine.plan(prompts, _settings(settings, "plan"))

    def stream(self, inputs, *, attention_mask=None, seed=None, chat=False, **settings):
        """As generate(), handing over each token as it is chosen: a Stream to iterate.

        Token ids in: gengraph.StreamedToken items; texts in: gengraph.StreamedText pieces.
        Greedy search and sampling stream; beam strategies choose at the end and are refused.
        """
        prompts, texts = _prompts(inputs, attention_mask, "stream")
        if _check.boolean(chat, "stream: chat"):
            return self.chat(self._user_messages(texts, "stream"), seed=seed, stream=True,
                             **settings)
        s = _settings(settings, "stream")
        if seed is not None:
            self._engine.manual_seed(_seed(seed, "stream"))
        return Stream(self._engine.stream(prompts, texts, s))

    def chat(self, messages, *, stream=False, seed=None, **settings):
        """Generates from conversations, as transformers' apply_chat_template(messages,
        add_generation_prompt=True, tokenize=True) then generate() do.

        messages: one conversation (a list of {"role": "system" | "user" | "assistant",
        "content": str}) or a list of them. Each is rendered with the model's own chat template
        (natively; by transformers where the template uses what the native renderer does not
        render, as gengraph generate --chat does), encoded without special tokens and generated;
        the text leaves special tokens out unless skip_special_tokens=False. stream=True: a
        Stream of StreamedText pieces, as stream() gives for texts. Returns a Generation.
        """
        call = "stream" if stream else "chat"
        convs = self._conversations(messages, call)
        s = _settings(settings, call)
        s.setdefault("add_special_tokens", False)
        s.setdefault("skip_special_tokens", True)
        texts = self._engine.chat_texts(convs)
        if seed is not None:
            self._engine.manual_seed(_seed(seed, call))
        if _check.boolean(stream, "chat: stream"):
            return Stream(self._engine.stream([], texts, s))
        return self._engine.generate_text(texts, s)

    def apply_chat_template(self, messages):
        """The prompt text chat() generates from, per conversation (with the generation prompt)."""
        return list(self._engine.chat_texts(self._conversations(messages, "apply_chat_template")))

    @staticmethod
    def _user_messages(texts, call):
        if not texts:
            raise ArgumentTypeError(f"{call}: chat=True takes texts (each a user message), found "
                                    f"token ids")
        return [[{"role": "user", "content": t}] for t in texts]

    @staticmethod
    def _conversations(messages, call):
        """A list of conversations: one conversation (a list of dicts) is made a list of one."""
        items = None if isinstance(messages, (str, bytes, dict)) else _check._sequence(messages)
        if not items:
            raise ArgumentTypeError(f"{call}: messages: expected a conversation (a list of "
                                    f"{{'role', 'content'}} dicts) or a list of them, found "
                                    f"{_check.describe(messages)}")
        if isinstance(items[0], dict):
            items = [items]
        return [list(c) if _check._sequence(c) is not None and not isinstance(c, (str, dict))
                else c for c in items]

    def encode(self, text, add_special_tokens=True):
        return self._engine.encode(_check.text(text, "encode: text"),
                                   _check.boolean(add_special_tokens, "encode: add_special_tokens"))

    def decode(self, ids, skip_special_tokens=False):
        seq = _check._sequence(ids)
        if seq is None or isinstance(ids, (str, bytes, bytearray)):
            raise ArgumentTypeError(f"decode: ids: expected a list (or tensor) of int token ids, "
                                    f"found {_check.describe(ids)}")
        skip = _check.boolean(skip_special_tokens, "decode: skip_special_tokens")
        return self._engine.decode(_check.token_ids(seq, "decode: ids"), skip)

    def manual_seed(self, seed):
        self._engine.manual_seed(_seed(seed, "manual_seed"))

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
    if pad_token_id is not None:
        pad_token_id = _check.token_id(pad_token_id, "Generation.ids: pad_token_id")
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
Generation.top_logprobs = property(
    lambda self: [[s.top_logprobs for s in per] for per in self.outputs],
    doc="per prompt, per sequence, per token: its k most likely (token, logprob) (top_logprobs=k)")
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
        overrides = [f"{_check.text(k, 'run: an override key')}="
                     f"{_override_value(v, f'run: overrides[{k!r}]')}"
                     for k, v in overrides.items()]
    elif overrides is None:
        overrides = []
    elif isinstance(overrides, (list, tuple)):
        overrides = [_check.text(o, f"run: overrides[{i}]", "a 'key=value' str")
                     for i, o in enumerate(overrides)]
    else:
        raise ArgumentTypeError(f"run: overrides: expected a dict of key -> value or a list of "
                                f"'key=value' str, found {_check.describe(overrides)}")
    quiet = _check.boolean(quiet, "run: quiet")
    out = _check.path(output, "run: output") if output is not None else b""
    if isinstance(config, dict):
        doc = _check.json_value(config, "experiment", "YAML/JSON")
        return _gengraph._run(_json.dumps(doc, allow_nan=False), False, overrides, quiet, out)
    return _gengraph._run(_check.path(config, "run: config", "an experiment file's path "
                                                             "(str or os.PathLike) or a dict"),
                          True, overrides, quiet, out)


def _override_value(value, what):
    if isinstance(value, str):
        return _check.text(value, what)
    return _json.dumps(_check.json_value(value, what, "YAML/JSON"), allow_nan=False)


def register_backend(name, factory, *, description="", available=None, replace=False,
                     call_timeout_s=None):
    """Registers a Python backend under `name`: usable by Engine(backend=name) and in experiments.

    factory(model: ModelInfo, options: dict[str, str]) returns an object with prefill() and
    decode() (and optionally prepare, rewind, report): see gengraph.Backend and
    docs/python.md#backends. available(options) returns why it cannot run here, or None.
    call_timeout_s: the most seconds each call of the backend may take (the backend option
    call_timeout_s, an Engine's or an experiment row's, overrides it); past it the generation
    fails naming the backend, the call and the limit (docs/python.md#time-limits).
    """
    name = _name(name, "register_backend: name")
    where = f"register_backend('{name}')"
    if not callable(factory):
        raise ArgumentTypeError(f"{where}: the factory is {_check.describe(factory)}, expected a "
                                f"class or callable taking (model, options)")
    if available is not None and not callable(available):
        raise ArgumentTypeError(f"{where}: available is {_check.describe(available)}, expected "
                                f"a callable taking the options and returning why not (or None)")
    _gengraph.register_backend(
        name, _backend.timed_factory(name, factory, call_timeout_s),
        _check.text(description, f"{where}: description"),
        _backend.without_timeout_option(available), _check.boolean(replace, f"{where}: replace"))
    return factory


def unregister_backend(name):
    """Removes a backend registered from Python."""
    _gengraph.unregister_backend(_name(name, "unregister_backend: name"))


def format_table(doc):
    """The readable table `gengraph run` prints, of a results document."""
    if not isinstance(doc, dict):
        raise ArgumentTypeError(f"format_table: expected a results document (a dict), found "
                                f"{_check.describe(doc)}")
    return _gengraph.format_table(_check.json_value(doc, "format_table: doc"))


def check_backend(name, *, options=None, models=("gpt2-tiny", "llama-tiny"), seed=11,
                  max_new_tokens=12, raise_on_failure=True):
    """Checks a registered backend against the eager backend (<gengraph/conformance.h>):
    every strategy's tokens and scores, prefill and decode logits with a beam reorder, and
    verify/rewind with prompt lookup. Returns the report; raises gengraph.Error listing what
    failed unless raise_on_failure=False."""
    name = _name(name, "check_backend: name")
    opts = _backend_options(options, "check_backend")
    if isinstance(models, (str, bytes)) or _check._sequence(models) is None:
        raise ArgumentTypeError(f"check_backend: models: expected a list of model names or "
                                f"folders, found {_check.describe(models)}")
    models = [_model_name(m, f"check_backend: models[{i}]") for i, m in enumerate(models)]
    report = _gengraph.check_backend(
        name, opts, models, _seed(seed, "check_backend"),
        _check.integer(max_new_tokens, "check_backend: max_new_tokens", 1))
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
