#!/usr/bin/env python3
"""llama.cpp as a gengraph peer (tools/engine_peer.py runs it), through llama-cpp-python's
low-level bindings.

Installation: llama-cpp-python builds from source (minutes), so it is not in
tools/requirements.txt. On first use it is built into the peers cache
(<cache>/peers/llama-cpp-python-VERSION-HOST/site, keyed by Python, machine and CPU features: the
build is native) with pip, beside the sdist's own llama.cpp converter (convert_hf_to_gguf.py,
conversion/, gguf-py/). When that fails, the reason is kept in <that folder>.unavailable and every
llama_cpp row fails with it until the file is removed. GENGRAPH_PEER_INSTALL=0 forbids building.

Conversion (in a child process): the engine's own convert_hf_to_gguf.py writes the GGUF in
model.dtype (f32, f16 or bf16); llama.cpp's own llama_model_quantize makes Q8_0 / Q4_0 from it. A
folder without a tokenizer (a preset's random weights) is converted with the converter's
vocabulary-less form (tokenizer model "none"): ids go in and come out, so no text is needed.

Batches: every prompt is its own llama.cpp sequence in one llama_batch (prefill), and each decode
step is one llama_decode of one token per unfinished sequence: the rows run together, as
llama.cpp's batched example runs them. Tokens are chosen by llama.cpp's sampler chain (greedy, or
temperature / top-k / top-p / min-p / seeded draw), with EOS banned by a logit bias until
min_new_tokens. No beams: the bindings have no beam search (refused before anything runs). The
KV cache is kept in model.dtype; for float32 without flash attention (llama.cpp's CPU kernel
computes it in f16, and the tokens then part from the float32 model's).

    peer_llama_cpp.py convert --llama-dir D --model FOLDER --out F.gguf --outtype f32 [--no-vocab]
    peer_llama_cpp.py quantize --site SITE --source F.gguf --out Q.gguf --type q8_0 [--threads N]
                                                                    (the child processes)
"""
import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

from heartbeat import heartbeat  # noqa: E402

if __name__ != "__main__":
    import engine_peer as ep

NAME = "llama.cpp"
READS_GGUF = True  # a GGUF model file runs as it is (gguf())
VERSION = "0.3.36"  # llama-cpp-python; its llama.cpp and converter are vendored in the sdist
DISKCACHE = "5.6.3"  # llama_cpp imports it
SUPPORTED = {"do_sample", "temperature", "top_k", "top_p", "min_p"}
REASONS = {"num_beams": "llama.cpp (llama-cpp-python) has no beam search; drop the peer or the beams",
           "num_return_sequences": "llama.cpp peers here return one sequence per prompt"}
REASONS.update({k: f"a gengraph extension {NAME} does not have" for k in
                ("processors", "stopping_criteria", "strategy", "stop_sequences", "logit_bias",
                 "frequency_penalty", "presence_penalty", "top_logprobs")})
OUTTYPE = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}
CONVERTER = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")  # under vendor/llama.cpp/


def refusal(gen):
    return None


def install_dir():
    return os.path.join(ep.cache_root(), f"llama-cpp-python-{VERSION}-{ep.host_key()}")


def ready(install=False):
    """The installation folder, built first when `install` (or GENGRAPH_PEER_INSTALL allows it)."""
    return installed(install_dir(), f"llama-cpp-python {VERSION}", build, install,
                     "tools/engine_peer.py --install llama_cpp builds it; a llama_cpp peer does on first use")


def installed(d, what, build_into, install, how):
    """The folder `d` holding a finished build of `what` (its .complete file), made by
    build_into(tmp, log_path) into a temporary folder renamed into place when `install` allows it;
    a failure is recorded in d.unavailable, and refused with that reason until the file is removed.
    Shared by llama-cpp-python's build and llama-server's (tools/llama_server.py)."""
    if os.path.isfile(os.path.join(d, ".complete")):
        return d
    if os.path.exists(d + ".unavailable"):
        raise ep.Refused(f"{what} could not be installed: {open(d + '.unavailable').read().strip()}"
                         f"\n  (remove '{d}.unavailable' to try again)")
    if not install:
        raise ep.Refused(f"{what} is not installed in '{d}' ({how})")
    if os.environ.get("GENGRAPH_PEER_INSTALL") == "0":
        raise ep.Refused(f"{what} is not installed in '{d}' and GENGRAPH_PEER_INSTALL=0 forbids building it")
    with ep.locked(d + ".lock"):
        if os.path.isfile(os.path.join(d, ".complete")):
            return d
        tmp = tempfile.mkdtemp(prefix=f".tmp-{os.path.basename(d)}-", dir=os.path.dirname(d))
        log_path = d + ".build.log"
        print(f"engine_peer: building {what} from source into '{d}' (first use only; minutes; log: "
              f"{log_path})", file=sys.stderr, flush=True)
        try:
            with open(log_path, "w") as log, heartbeat(f"building {what}", prefix="engine_peer: "):
                build_into(tmp, log)
            open(os.path.join(tmp, ".complete"), "w").write(f"{what}\n")
            shutil.rmtree(d, ignore_errors=True)
            os.rename(tmp, d)
        except Exception as e:  # noqa: BLE001 (any failure is the reason recorded)
            open(d + ".unavailable", "w").write(f"{e}\n")
            raise ep.Refused(f"{what} could not be installed: {e}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return d


def step(argv, what, log, **kw):
    """Runs one build step with its output in the log; a failure raises with the log's tail."""
    log.write("$ " + " ".join(argv) + "\n")
    log.flush()
    r = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, **kw)
    if r.returncode != 0:
        log.flush()
        raise RuntimeError(f"{what} failed (exit {r.returncode}):\n  " + ep.tail(open(log.name).read()))


def sdist():
    """The sdist's .tar.gz, downloaded once into the peers cache (any host's): the package and
    llama-server (tools/llama_server.py) are both built from it."""
    def download(tmp):
        with open(os.path.join(tmp, "download.log"), "w") as log:
            step([sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--no-deps",
                  "--no-binary", ":all:", f"llama-cpp-python=={VERSION}", "-d", tmp], "downloading the sdist", log)
    folder, _ = ep.cached(f"llama-cpp-python-{VERSION}-sdist", download)
    return os.path.join(folder, f"llama_cpp_python-{VERSION}.tar.gz")


def extract_vendored(into, parts=None):
    """The sdist's vendor/llama.cpp (only the paths starting with one of `parts`, when given)
    extracted into `into`."""
    with tarfile.open(sdist()) as tar:
        prefix = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/"
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())
                   and (parts is None or m.name[len(prefix):].startswith(parts))]
        for m in members:
            m.name = m.name[len(prefix):]
        tar.extractall(into, members=members, filter="data")


def build(tmp, log):
    """pip-builds the sdist into tmp/site, and keeps its converter in tmp/llama.cpp."""
    env = dict(os.environ, CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF",
               CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    step([sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "--no-deps", "--target",
          os.path.join(tmp, "site"), sdist(), f"diskcache=={DISKCACHE}"], "building it", log, env=env)
    extract_vendored(os.path.join(tmp, "llama.cpp"), CONVERTER)
    check = subprocess.run([sys.executable, "-c", "import sys; sys.path.append(sys.argv[1]); import llama_cpp; "
                            "print(llama_cpp.__version__)", os.path.join(tmp, "site")],
                           capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError("the built package does not import:\n  " + ep.tail(check.stderr))


def load_bindings(d):
    site = os.path.join(d, "site")
    if site not in sys.path:
        sys.path.append(site)  # after the venv's own packages (numpy, jinja2)
    import llama_cpp
    import llama_cpp._logger
    llama_cpp._logger.set_verbose(False)  # llama.cpp's load messages: errors only
    return llama_cpp


def open_session(req, variant, s):
    if req["device"] != "cpu":
        raise ep.Refused(f"model.device = {req['device']}: the {NAME} peers run on the CPU only")
    d = ready(install=True)
    path, conversion = gguf(d, req["model"], req["dtype"], variant, s["threads"])
    return Session(load_bindings(d), path, s, req["dtype"], conversion)


def gguf(d, folder, dtype, variant, threads):
    """The model folder as a GGUF file (cached): in `dtype` by llama.cpp's converter, then
    quantized to `variant` (q8_0, q4_0; "float" leaves it) by llama.cpp's quantizer, with the
    llama-cpp-python installation `d`. Returns its path and what the conversion was."""
    if os.path.isfile(folder):  # a GGUF file is the model: llama.cpp runs it as it is
        if variant != "float":
            raise ep.Refused(f"'{folder}' is a GGUF file, run as it is: the {NAME} peer takes it in "
                             f"its own formats, not requantized to {variant} (use the peer 'llama_cpp')")
        return folder, {"cache": None, "cached": True, "seconds": 0.0, "format": "the file's own"}
    outtype = OUTTYPE[dtype]
    base = f"gguf-{VERSION}-f{ep.CONVERSION_FORMAT}-{ep.folder_fingerprint(folder)}-"
    t0 = time.perf_counter()

    def child(argv, what):
        r = subprocess.run([sys.executable, os.path.abspath(__file__)] + argv, capture_output=True, text=True)
        if r.returncode != 0:
            raise ep.Refused(f"{what}:\n  " + ep.tail(r.stderr))

    def build_gguf(tmp):
        stage = ep.stage_model(folder, os.path.join(tmp, "stage"))
        vocab = [] if ep.has_tokenizer(folder) else ["--no-vocab"]
        child(["convert", "--llama-dir", os.path.join(d, "llama.cpp"), "--model", stage, "--out",
               os.path.join(tmp, "model.gguf"), "--outtype", outtype] + vocab,
              f"llama.cpp's converter could not convert '{folder}' ({outtype})")
        shutil.rmtree(stage)

    def build_quantized(tmp):
        child(["quantize", "--site", os.path.join(d, "site"), "--source", source, "--out",
               os.path.join(tmp, "model.gguf"), "--type", variant, "--threads", str(threads)],
              f"llama.cpp's quantizer could not make {variant} of '{source}'")

    path, hit = ep.cached(base + outtype, build_gguf)
    if variant != "float":  # quantized from the GGUF in model.dtype, by llama.cpp's quantizer
        source = os.path.join(path, "model.gguf")
        path, hit = ep.cached(f"{base}{outtype}-{variant}", build_quantized)
    fmt = outtype if variant == "float" else variant
    return os.path.join(path, "model.gguf"), {"cache": path, "cached": hit,
                                              "seconds": time.perf_counter() - t0, "format": fmt}


def cpu_has_amx_int8():
    """Whether this x86 CPU reports AMX-INT8 (Linux's /proc/cpuinfo flags)."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " amx_int8" in line for line in f)
    except OSError:
        return False


class Session:
    def __init__(self, L, path, s, dtype, conversion):
        self.L, self.s, self.conversion, self.path = L, s, conversion, path
        self.kv_name = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype]
        self.kv_type = {"f32": 0, "f16": 1, "bf16": 30}[self.kv_name]  # ggml's enum ggml_type
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        # llama.cpp's AMX-INT8 weight buffers (an "extra buffer type") crash this version with a
        # segmentation fault at the first evaluation of a Q8_0 or Q4_0 model on a CPU with AMX-INT8
        # (its float32 model runs; docs/results/measurements-from-comments.md). There the weights
        # stay in the plain CPU buffers (its AVX-512 / VNNI kernels), and info() says so.
        self.extra_buffer_types = not cpu_has_amx_int8()
        mp.use_extra_bufts = self.extra_buffer_types
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        if not self.model:
            raise ep.Refused(f"llama.cpp could not load '{path}'")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.ctx, self.rows = None, 0

    def context(self, prompts):
        """A context for this many sequences, each with room for its prompt and new tokens."""
        L = self.L
        if self.ctx is not None and self.rows == len(prompts):
            return self.ctx
        if self.ctx is not None:
            L.llama_free(self.ctx)
        longest = max(len(p) for p in prompts) + self.s["max_new"]
        per_seq = -(-longest // 256) * 256
        cp = L.llama_context_default_params()
        cp.n_seq_max = len(prompts)
        cp.n_ctx = per_seq * len(prompts)
        cp.n_batch = max(sum(len(p) for p in prompts), len(prompts))
        cp.n_ubatch = min(cp.n_batch, 512)
        cp.n_threads = cp.n_threads_batch = self.s["threads"]
        # The KV cache in model.dtype, as every other row holds it (llama.cpp's default is f16), and
        # for float32 no flash attention: llama.cpp's CPU kernel for it computes in f16, and the
        # tokens of a float32 model then part from every float32 system's after a few dozen steps.
        cp.type_k = cp.type_v = self.kv_type
        if self.kv_name == "f32":
            cp.flash_attn_type = 0  # LLAMA_FLASH_ATTN_TYPE_DISABLED
        cp.no_perf = True
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise ep.Refused(f"llama.cpp could not make a context for {len(prompts)} sequence(s) of {per_seq}")
        self.rows, self.flash_attn = len(prompts), int(cp.flash_attn_type)
        self.batch = L.llama_batch_init(cp.n_batch, 0, 1)
        return self.ctx

    def sampler(self, row, ban_eos):
        L, s = self.L, self.s
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        if ban_eos and s["eos"]:
            bias = (L.llama_logit_bias * len(s["eos"]))(*[L.llama_logit_bias(t, float("-inf")) for t in s["eos"]])
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_logit_bias(self.n_vocab, len(s["eos"]), bias))
        if s["do_sample"]:  # transformers' order: temperature, top-k, top-p, min-p
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_temp(s["temperature"]))
            if s["top_k"] > 0:
                L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_k(s["top_k"]))
            if s["top_p"] < 1.0:
                L.llama_sampler_chain_add(chain, L.llama_sampler_init_top_p(s["top_p"], 1))
            if s["min_p"] is not None:
                L.llama_sampler_chain_add(chain, L.llama_sampler_init_min_p(float(s["min_p"]), 1))
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_dist((s["seed"] + row) & 0xFFFFFFFF))
        else:
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_greedy())
        return chain

    def decode(self, entries):
        """One llama_decode of (token, position, sequence, wants logits) entries; returns each
        entry's index in the batch."""
        b = self.batch
        for k, (tok, pos, seq, out) in enumerate(entries):
            b.token[k], b.pos[k], b.n_seq_id[k], b.logits[k] = tok, pos, 1, int(out)
            b.seq_id[k][0] = seq
        b.n_tokens = len(entries)
        rc = self.L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def generate(self, prompts):
        L, s = self.L, self.s
        ctx = self.context(prompts)
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        n = len(prompts)
        early = [self.sampler(i, True) for i in range(n)] if s["min_new"] > 0 else None
        late = [self.sampler(i, False) for i in range(n)]
        tokens = [[] for _ in range(n)]
        entries, index = [], {}
        for i, p in enumerate(prompts):
            for j, t in enumerate(p):
                entries.append((t, j, i, j == len(p) - 1))
            index[i] = len(entries) - 1
        first = None
        try:
            self.decode(entries)
            active = list(range(n))
            for step in range(s["max_new"]):
                chains = early if step < s["min_new"] else late
                for i in active:
                    tokens[i].append(int(L.llama_sampler_sample(chains[i], ctx, index[i])))
                if first is None:
                    first = time.perf_counter()
                active = [i for i in active if tokens[i][-1] not in s["eos"]]
                if not active or step + 1 == s["max_new"]:
                    break
                entries = [(tokens[i][-1], len(prompts[i]) + step, i, True) for i in active]
                index = {i: k for k, i in enumerate(active)}
                self.decode(entries)
        finally:
            for c in (early or []) + late:
                L.llama_sampler_free(c)
        return [[{"tokens": t}] for t in tokens], first

    def peak_device_bytes(self):
        return 0

    def info(self):
        return {"engine": "llama.cpp", "version": f"llama-cpp-python {VERSION}", "gguf": self.path,
                "kv_cache_type": self.kv_name,
                "extra_buffer_types": self.extra_buffer_types,
                "flash_attention": {-1: "auto", 0: "off", 1: "on"}.get(getattr(self, "flash_attn", None)),
                "conversion": self.conversion,
                "note": "all prompts as sequences of one llama_batch; time to first token after the "
                        "first tokens of every row are chosen"}


# --- the child processes: llama.cpp's converter and quantizer -----------------------------------
def convert(a):
    sys.path.insert(0, os.path.join(a.llama_dir, "gguf-py"))
    sys.path.insert(0, a.llama_dir)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import convert_hf_to_gguf as conv
    if a.no_vocab:
        from conversion import ModelBase, ModelType, get_model_architecture, get_model_class
        hparams = ModelBase.load_hparams(__import__("pathlib").Path(a.model), False)
        cls = get_model_class(get_model_architecture(hparams, ModelType.TEXT), mmproj=False)

        def no_vocab(self):  # the converter's own vocabulary-less form, with the vocabulary's size
            self._set_vocab_none()
            self.gguf_writer.add_vocab_size(self.hparams["vocab_size"])

        cls.set_vocab = no_vocab
    sys.argv = ["convert_hf_to_gguf.py", a.model, "--outfile", a.out, "--outtype", a.outtype]
    conv.main()


def quantize(a):
    sys.path.append(a.site)
    import llama_cpp as L
    p = L.llama_model_quantize_default_params()
    p.ftype = {"q8_0": L.LLAMA_FTYPE_MOSTLY_Q8_0, "q4_0": L.LLAMA_FTYPE_MOSTLY_Q4_0}[a.type]
    p.nthread = a.threads
    rc = L.llama_model_quantize(a.source.encode(), a.out.encode(), ctypes.byref(p))
    if rc != 0:
        sys.exit(f"llama_model_quantize ({a.type}) failed with {rc}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("convert")
    c.add_argument("--llama-dir", required=True)
    c.add_argument("--model", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--outtype", required=True)
    c.add_argument("--no-vocab", action="store_true")
    q = sub.add_parser("quantize")
    q.add_argument("--site", required=True)
    q.add_argument("--source", required=True)
    q.add_argument("--out", required=True)
    q.add_argument("--type", choices=["q8_0", "q4_0"], required=True)
    q.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    convert(a) if a.command == "convert" else quantize(a)
