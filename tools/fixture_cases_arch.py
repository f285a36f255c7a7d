"""Parity models and cases for architectures beyond GPT-2 (same format as fixture_cases.py:
a model entry may name "model_type", default "gpt2").

Each model is small and random (initializer_range 0.1 to 0.25, so outputs vary and logits are far
from ties) and picks the config variants its architecture file must honour; each variant was
checked to change the generated tokens (e.g. rotary_dim 8 -> 4, llama3 -> default rope, no window):

  gptj-a     rotary on the first 8 of 12 head dims (interleaved pairs), parallel attention + MLP
  llama-a    grouped-query attention (4 heads over 2), explicit head_dim != hidden/heads, llama3 rope
             scaling with every frequency band in use, untied head, mlp_bias; stored in bfloat16
  llama-b    linear rope scaling, tied embeddings, attention_bias, one key/value head; sharded
  mistral-a  sliding window of 5 (prompts and generations run past it), rope_theta 1e6
  qwen2-a    q/k/v bias without o_proj bias, tied embeddings, sliding window on layer 1 only
             (use_sliding_window + max_window_layers)
  gemma3-a   Gemma 3 text: local layers 0 and 1 with a window of 5 and rope base 1e4, global
             layer 2 with linear rope scaling over base 1e6 (sliding_window_pattern 3), head_dim
             16 != hidden/heads, query_pre_attn_scalar 24 != head_dim, attention_bias, final
             logit soft cap 3, an untied head (tied, the scaled embeddings make these random
             models repeat their last token); its norms' weights drawn at random (transformers
             starts them at zero)
"""

MODELS = [
    # GPT-J has no sdpa attention in transformers 5.17: its oracle uses eager attention.
    {"name": "gptj-a", "model_type": "gptj", "seed": 20, "attn_implementation": "eager",
     "config": dict(vocab_size=112, n_positions=64, n_embd=48, n_layer=2, n_head=4, rotary_dim=8,
                    initializer_range=0.2, bos_token_id=1, eos_token_id=2)},
    {"name": "llama-a", "model_type": "llama", "seed": 11,
     "config": dict(vocab_size=128, max_position_embeddings=128, hidden_size=48, intermediate_size=80,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                                         low_freq_factor=1.0, high_freq_factor=4.0,
                                         original_max_position_embeddings=64),
                    tie_word_embeddings=False, mlp_bias=True, rms_norm_eps=1e-5,
                    initializer_range=0.1, bos_token_id=1, eos_token_id=2, dtype="bfloat16")},
    {"name": "llama-b", "model_type": "llama", "seed": 12, "max_shard_size": "30KB",
     "config": dict(vocab_size=96, max_position_embeddings=64, hidden_size=32, intermediate_size=56,
                    num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
                    rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=2.0),
                    tie_word_embeddings=True, attention_bias=True,
                    initializer_range=0.25, bos_token_id=0, eos_token_id=1, pad_token_id=3)},
    {"name": "mistral-a", "model_type": "mistral", "seed": 13,
     "config": dict(vocab_size=100, max_position_embeddings=64, hidden_size=32, intermediate_size=64,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    sliding_window=5, rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
                    initializer_range=0.1, bos_token_id=1, eos_token_id=2)},
    {"name": "qwen2-a", "model_type": "qwen2", "seed": 14,
     "config": dict(vocab_size=120, max_position_embeddings=64, hidden_size=32, intermediate_size=48,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    use_sliding_window=True, sliding_window=6, max_window_layers=1,
                    tie_word_embeddings=True, initializer_range=0.25,
                    bos_token_id=5, eos_token_id=6)},
    {"name": "gemma3-a", "model_type": "gemma3_text", "seed": 15, "random_norms": 0.3,
     "config": dict(vocab_size=128, max_position_embeddings=64, hidden_size=32, intermediate_size=64,
                    num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    sliding_window=5, sliding_window_pattern=3, query_pre_attn_scalar=24,
                    rope_parameters=dict(full_attention=dict(rope_type="linear", factor=2.0,
                                                             rope_theta=1000000.0),
                                         sliding_attention=dict(rope_type="default",
                                                                rope_theta=10000.0)),
                    attention_bias=True, final_logit_softcapping=3.0, tie_word_embeddings=False,
                    initializer_range=0.15,
                    bos_token_id=2, eos_token_id=1, pad_token_id=0)},
]

RAGGED = [[3, 14, 15, 92, 65, 35, 89, 79], [35, 89], [79, 32, 38, 46]]


def _pair(model, max_new, eos):
    """A ragged greedy case and one where EOS fires mid-sequence, for `model`."""
    return [
        {"name": f"{model}_greedy_left_padding", "model": model, "prompts": RAGGED,
         "generation": {"max_new_tokens": max_new}},
        {"name": f"{model}_greedy_eos_mid_sequence", "model": model, "prompts": RAGGED,
         "generation": {"max_new_tokens": max_new, "eos_token_id": eos}},
    ]


def _search(model, seed):
    """Seeded sampling and beam search (with EOS firing) on `model`."""
    return [
        {"name": f"{model}_sample_top_p", "model": model, "prompts": RAGGED, "seed": seed,
         "generation": {"max_new_tokens": 10, "do_sample": True, "top_p": 0.9, "temperature": 0.9}},
        {"name": f"{model}_beam3", "model": model, "prompts": RAGGED,
         "generation": {"max_new_tokens": 10, "num_beams": 3, "num_return_sequences": 2,
                        "eos_token_id": "auto:0,3"}},
    ]


# One prompt that repeats itself (past gemma3-a's window), so that prompt lookup finds candidates.
REPEATING = [[5, 9, 13, 5, 9, 13, 5, 9, 7, 21, 5, 9]]


def _gemma3_more():
    """Processors and prompt lookup on gemma3-a. No early exit (assistant_early_exit): like
    Qwen2's, transformers 5.17's Gemma 3 raises a TypeError cropping the draft's cache (a layer of
    the full model's DynamicCache that the truncated draft never filled)."""
    return [
        {"name": "gemma3-a_processors", "model": "gemma3-a", "prompts": RAGGED,
         "generation": {"max_new_tokens": 12, "repetition_penalty": 1.3, "no_repeat_ngram_size": 3,
                        "min_new_tokens": 4, "eos_token_id": "auto:0,2"}},
        {"name": "gemma3-a_lookup_greedy", "model": "gemma3-a", "prompts": REPEATING,
         "generation": {"max_new_tokens": 16, "prompt_lookup_num_tokens": 4}},
    ]


def cases():
    return (_search("gptj-a", 31) + _search("llama-a", 32) + _search("llama-b", 33)
            + _search("mistral-a", 34) + _search("qwen2-a", 35)
            + _pair("gptj-a", 12, "auto:1,4")
            + _pair("llama-a", 14, "auto:0,5")
            + _pair("llama-b", 12, ["auto:2,3", "auto:1,7"])
            + _pair("mistral-a", 14, "auto:1,6")
            + _pair("qwen2-a", 14, "auto:2,4")
            + _search("gemma3-a", 36) + _pair("gemma3-a", 14, "auto:1,6")
            + [{"name": "gemma3-a_greedy_single_long", "model": "gemma3-a",
                "prompts": [list(range(4, 44))], "generation": {"max_new_tokens": 16}}]
            + _gemma3_more()
            + [{"name": "llama-a_greedy_single_long", "model": "llama-a",
                "prompts": [list(range(4, 44))], "generation": {"max_new_tokens": 24}}])
