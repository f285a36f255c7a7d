"""The ragged form of an aoti package (tools/export_aoti.py --ragged; docs/aoti.md#the-ragged-form):
one forward over the tokens of many sequences, each at its own position, their keys and values in
a paged cache, for continuous batching (docs/serving.md):

    (input_ids int64 [1, N], positions int64 [1, N], write_slots int64 [N],
     block_tables int64 [S, W], seq int64 [N], first int64 [N], last int64 [N],
     logit_rows int64 [K],
     keys_0, values_0, ..., keys_L-1, values_L-1  dtype [blocks, block_size, kv_heads, head_dim])
    -> logits of the tokens logit_rows, [K, vocab]

Each layer's pool (a view of gengraph's PagedCache pool, [blocks * block_size, kv_heads,
head_dim]) is an input of its own, written in place at write_slots; attention is gengraph's
operator gengraph::paged_attention (framework/kernels/paged_attention.cpp), which the loading
process registers. N, S, W, K, the blocks and the block size are dynamic: the block size is read
from the pools' shape, and the block tables are widened in the program to one entry per position
(block size 1 for the operator, whose sums do not depend on how positions are split into blocks),
since the operator takes its block size as a constant.

With --invariant every projection (the output head included) is gengraph::linear_f32, whose
per-element sums do not depend on the rows it is given while gengraph's kernels::BatchInvariant
guard is set (the scheduler sets it): with the paged attention kernel, a token's logits do not
depend on what shares its step. A LLaMA-like model also takes gengraph's norm, rotary and SwiGLU
kernels in eager's order (use_eager_kernels), so that its floats are eager's. Float32 on CPU only.
"""
import torch

# What the package's metadata (gengraph.form) calls this form; the step form is "step".
FORM = "ragged"
NAME = "gengraph_paged"


class _Current:
    """The step being traced: what the attention function reads besides its query (set by
    RaggedStep.forward, read while the model runs)."""

    step = None


class PagedStep:
    def __init__(self, positions, slot_tables, seq, first, last):
        self.positions, self.slot_tables, self.seq, self.first, self.last = positions, slot_tables, seq, first, last


def register_fakes():
    """Shape functions for gengraph's operators that have no Meta kernel, so that torch.export
    can trace them (the loading process runs their CPU kernels)."""
    def missing(op):
        return not torch._C._dispatch_has_kernel_for_dispatch_key("gengraph::" + op, "Meta")

    if missing("paged_attention"):
        @torch.library.register_fake("gengraph::paged_attention")
        def _(q, k_pool, v_pool, block_tables, seq, first, last, block_size, scale):
            return q.new_empty(q.shape[0], q.shape[1] * q.shape[2])

    if missing("rotary_qkv"):
        @torch.library.register_fake("gengraph::rotary_qkv")
        def _(y, cos, sin, heads, kv_heads, neighbours):
            rows, t, hd = y.shape[0], y.shape[1], cos.shape[-1]
            return (y.new_empty(rows, heads, t, hd), y.new_empty(rows, kv_heads, t, hd),
                    y.new_empty(rows, kv_heads, t, hd))

    if missing("silu_mul"):
        @torch.library.register_fake("gengraph::silu_mul")
        def _(gate_up):
            return gate_up.new_empty(*gate_up.shape[:-1], gate_up.shape[-1] // 2)

    if missing("linear_f32"):
        @torch.library.register_fake("gengraph::linear_f32")
        def _(x, w):
            return x.new_empty(x.shape[0], w.shape[0])


def paged_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """A transformers attention function: query [1, heads, N, hd] over the layer's pools (what
    PagedPools.update returned), each token reading its own sequence's positions first .. last
    (first raised to last - window + 1 for a sliding-window layer)."""
    step = _Current.step
    n, heads, hd = query.shape[2], query.shape[1], query.shape[3]
    q = query[0].transpose(0, 1).contiguous()  # [N, heads, hd], token-major as the pool
    first = step.first
    # Models pass a layer's window as an argument (Mistral) or keep it on the module (Qwen2).
    window = kwargs.get("sliding_window") or getattr(module, "sliding_window", None)
    if window:
        first = torch.maximum(first, step.last - (window - 1))
    if scaling is None:
        scaling = hd ** -0.5
    out = torch.ops.gengraph.paged_attention(q, key.flatten(0, 1), value.flatten(0, 1), step.slot_tables,
                                             step.seq, first, step.last, 1, float(scaling))
    return out.view(1, n, heads, hd), None


def _cache_base():
    from transformers.cache_utils import Cache
    return Cache


class PagedPools(_cache_base()):
    """The layers' pools as a transformers Cache: update() writes the step's keys and values at
    write_slots and returns the layer's pools for paged_attention to read."""

    def __init__(self, keys, values, write_slots):  # noqa: D107 (no super().__init__: no layers)
        self.keys, self.values = keys, values
        block_size = keys[0].shape[1]
        self.block, self.offset = write_slots // block_size, write_slots % block_size

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        k, v = self.keys[layer_idx], self.values[layer_idx]
        # [1, kv, N, hd] -> [N, kv, hd]; an index_put_ into the input itself is compiled into an
        # in-place scatter of the new slots (a write through a view would copy the whole pool).
        k.index_put_((self.block, self.offset), key_states[0].transpose(0, 1).to(k.dtype))
        v.index_put_((self.block, self.offset), value_states[0].transpose(0, 1).to(v.dtype))
        return k, v

    def get_seq_length(self, layer_idx=0):
        return 0

    @property
    def is_compileable(self):
        return True

    @property
    def is_sliding(self):
        return [False] * len(self.keys)

    def __len__(self):
        return len(self.keys)


class RaggedStep(torch.nn.Module):
    """(input_ids, positions, write_slots, block_tables, seq, first, last, logit_rows, keys_0,
    values_0, ...) -> logits [K, vocab]."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, positions, write_slots, block_tables, seq, first, last, logit_rows, *pools):
        keys, values = list(pools[0::2]), list(pools[1::2])
        block_size = keys[0].shape[1]
        # One table entry per position: slot = block * block_size + offset.
        offsets = torch.arange(block_size, device=block_tables.device, dtype=block_tables.dtype)
        slot_tables = (block_tables.unsqueeze(2) * block_size + offsets).flatten(1)
        _Current.step = PagedStep(positions, slot_tables, seq, first, last)
        try:
            out = self.model(input_ids=input_ids, position_ids=positions,
                             past_key_values=PagedPools(keys, values, write_slots), use_cache=True,
                             logits_to_keep=logit_rows)
        finally:
            _Current.step = None
        return out.logits[0]


class F32Linear(torch.nn.Module):
    """x W^T + b through gengraph::linear_f32 (row-invariant under kernels::BatchInvariant)."""

    def __init__(self, w, bias):
        super().__init__()
        self.register_buffer("w", w.detach().to(torch.float32).contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    def forward(self, x):
        y = torch.ops.gengraph.linear_f32(x.reshape(-1, x.shape[-1]).contiguous(), self.w)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], y.shape[-1])


def make_invariant(model, weight_of):
    """Gives a LLaMA-like model eager's kernels (use_eager_kernels), then replaces every float
    linear layer left (the output head included) by F32Linear; returns how many."""
    from transformers.pytorch_utils import Conv1D

    use_eager_kernels(model, weight_of)
    targets = [(n, m) for n, m in model.named_modules() if isinstance(m, (torch.nn.Linear, Conv1D))]
    for name, module in targets:
        parent, _, attr = name.rpartition(".")
        bias = module.bias if getattr(module, "bias", None) is not None else None
        setattr(model.get_submodule(parent) if parent else model, attr, F32Linear(weight_of(module), bias))
    return len(targets)


# ---- The invariant form of LLaMA-like models: eager's own kernels, in eager's order ----
# gengraph's LLaMA (framework/model/architectures/llama.cpp, forward_fused) on CPU in float32 runs
# gengraph::rms_norm, one q/k/v product, gengraph::rotary_qkv over cos and signed sin tables,
# paged attention, the o product added to the residual, one gate/up product, gengraph::silu_mul,
# the down product added to the residual. The same operators here, so that the package's floats
# are eager's (Inductor's own norms, rotary and activations round differently).


class GgRMSNorm(torch.nn.Module):
    def __init__(self, norm):
        super().__init__()
        self.register_buffer("w", norm.weight.detach().to(torch.float32).contiguous())
        self.eps = float(norm.variance_epsilon)

    def forward(self, x):
        return torch.ops.gengraph.rms_norm(x.contiguous(), self.w, self.eps)


def _joined(modules, weight_of):
    """The weights of `modules` as one [sum of out, in] product, and their biases joined (None when
    they have none), as eager fuses them."""
    w = torch.cat([weight_of(m) for m in modules]).contiguous()
    biases = [m.bias for m in modules]
    return w, None if biases[0] is None else torch.cat([b.detach() for b in biases]).contiguous()


def _product(x, w, b):
    """Projection's streamed product: linear_f32, then the bias added (y + b)."""
    y = torch.ops.gengraph.linear_f32(x, w)
    return y if b is None else y + b


class GgSwiGLU(torch.nn.Module):
    def __init__(self, mlp, weight_of):
        super().__init__()
        gate_up, gate_up_bias = _joined([mlp.gate_proj, mlp.up_proj], weight_of)
        down, down_bias = _joined([mlp.down_proj], weight_of)
        for name, t in (("gate_up", gate_up), ("gate_up_bias", gate_up_bias), ("down", down),
                        ("down_bias", down_bias)):
            self.register_buffer(name, t)

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        gu = _product(rows, self.gate_up, self.gate_up_bias)
        y = _product(torch.ops.gengraph.silu_mul(gu), self.down, self.down_bias)
        return y.reshape(*x.shape[:-1], y.shape[-1])


class GgAttention(torch.nn.Module):
    def __init__(self, attn, weight_of, heads, kv, cos, sin_signed):
        super().__init__()
        self.layer_idx, self.heads, self.kv = attn.layer_idx, heads, kv
        # A layer's window: on the module (Qwen2), else the model's for every layer (Mistral).
        self.scaling = attn.scaling
        self.sliding_window = (attn.sliding_window if hasattr(attn, "sliding_window")
                               else getattr(attn.config, "sliding_window", None))
        qkv, qkv_bias = _joined([attn.q_proj, attn.k_proj, attn.v_proj], weight_of)
        o, o_bias = _joined([attn.o_proj], weight_of)
        for name, t in (("qkv", qkv), ("qkv_bias", qkv_bias), ("o", o), ("o_bias", o_bias)):
            self.register_buffer(name, t)
        self.cos, self.sin_signed = cos, sin_signed  # shared tables [context, hd]

    def forward(self, hidden_states, past_key_values=None, **kwargs):
        n = hidden_states.shape[1]
        y = _product(hidden_states.reshape(n, -1).contiguous(), self.qkv, self.qkv_bias).view(1, n, -1)
        pos = _Current.step.positions
        cos, sin = self.cos.weight[pos], self.sin_signed.weight[pos]  # [1, N, hd]
        q, k, v = torch.ops.gengraph.rotary_qkv(y, cos, sin, self.heads, self.kv, False)
        keys, values = past_key_values.update(k, v, self.layer_idx)
        window = kwargs.get("sliding_window") or self.sliding_window
        o, _ = paged_attention(self, q, keys, values, None, scaling=self.scaling, sliding_window=window)
        return _product(o.reshape(n, -1), self.o, self.o_bias).view(1, n, -1), None


class _Table(torch.nn.Module):
    def __init__(self, t):
        super().__init__()
        self.register_buffer("weight", t.contiguous())


def use_eager_kernels(model, weight_of):
    """Gives a LLaMA-like model (RMSNorm, rotary on halves with the default, linear or llama3
    frequencies, SwiGLU with SiLU; biases on all of q, k, v or none, on both of gate and up or
    neither) gengraph's kernels as eager runs them; returns whether it applied."""
    cfg = model.config.get_text_config()
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    rope = (getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {})
    if (layers is None or cfg.model_type not in ("llama", "mistral", "qwen2")
            or getattr(cfg, "hidden_act", "") != "silu"
            or rope.get("rope_type", rope.get("type", "default")) not in ("default", "linear", "llama3")
            or getattr(inner.rotary_emb, "attention_scaling", 1.0) != 1.0):
        return False
    for layer in layers:  # eager fuses these products, their biases all present or none
        for group in ((layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj),
                      (layer.mlp.gate_proj, layer.mlp.up_proj)):
            if len({m.bias is None for m in group}) > 1:
                return False
    heads, kv = cfg.num_attention_heads, getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    context = getattr(cfg, "max_position_embeddings", 4096)
    # rope_cos_sin_halves (framework/model/architectures/rope.cpp) over every position, and the
    # signs of rotate_half on the sine (-sin on the first half).
    inv_freq = inner.rotary_emb.inv_freq.to(torch.float32)
    angles = torch.arange(context, dtype=torch.long).to(torch.float32).unsqueeze(-1) * inv_freq
    emb = torch.cat([angles, angles], -1)
    sign = torch.ones(emb.shape[-1])
    sign[: emb.shape[-1] // 2] = -1.0
    cos, sin_signed = _Table(emb.cos()), _Table(emb.sin() * sign)
    inner.gg_cos, inner.gg_sin = cos, sin_signed
    for layer in layers:
        layer.self_attn = GgAttention(layer.self_attn, weight_of, heads, kv, cos, sin_signed)
        layer.mlp = GgSwiGLU(layer.mlp, weight_of)
        layer.input_layernorm = GgRMSNorm(layer.input_layernorm)
        layer.post_attention_layernorm = GgRMSNorm(layer.post_attention_layernorm)
    inner.norm = GgRMSNorm(inner.norm)
    return True


def prepare(model, max_rows, context, layers, kv, hd, dtype, device):
    """The module to export, its example inputs and their dynamic shapes."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, paged_attention)
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(NAME)
    else:
        model.config._attn_implementation = NAME
    step = RaggedStep(model).eval()
    # Example sizes away from 0 and 1 (export specialises on those), ranges from 1 upwards.
    n, s, w, k, blocks, bs = 7, 3, 4, 3, 12, 4
    long = dict(dtype=torch.long, device=device)
    tables = torch.arange(s * w, **long).view(s, w)
    seq = torch.tensor([0, 0, 0, 1, 1, 2, 2], **long)
    last = torch.tensor([0, 1, 2, 5, 6, 0, 1], **long)
    slots = torch.stack([tables[q, p // bs] * bs + p % bs for q, p in zip(seq.tolist(), last.tolist())])
    args = (torch.zeros(1, n, **long), last.view(1, n).clone(), slots, tables, seq,
            torch.zeros(n, **long), last, torch.tensor([2, 4, 6], **long))
    args += tuple(torch.zeros(blocks, bs, kv, hd, dtype=dtype, device=device) for _ in range(2 * layers))
    tokens = torch.export.Dim("tokens", min=1, max=1 << 16)
    seqs = torch.export.Dim("sequences", min=1, max=max_rows)
    width = torch.export.Dim("table_width", min=1, max=context)
    keep = torch.export.Dim("logit_rows", min=1, max=1 << 16)
    pool_blocks = torch.export.Dim("blocks", min=1, max=1 << 24)
    block = torch.export.Dim("block_size", min=1, max=context)
    shapes = ({1: tokens}, {1: tokens}, {0: tokens}, {0: seqs, 1: width}, {0: tokens}, {0: tokens}, {0: tokens},
              {0: keep}, tuple({0: pool_blocks, 1: block} for _ in range(2 * layers)))
    return step, args, shapes
