"""The parity matrix: which random models the oracle builds and which generate() calls it records.

A generation value "auto:ROW,STEP" for eos_token_id means: the token that greedy search (without
EOS) produces for that row at that step, so EOS really fires mid-sequence.
"""

MODELS = [
    {"name": "gpt2-a", "seed": 0,
     "config": dict(vocab_size=96, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                    initializer_range=0.1, bos_token_id=1, eos_token_id=2)},
    # Sharded checkpoint, untied head, exact GELU, a narrower MLP, inverse-layer attention scaling.
    {"name": "gpt2-b", "seed": 1, "max_shard_size": "40KB",
     "config": dict(vocab_size=160, n_positions=96, n_embd=48, n_layer=3, n_head=3, n_inner=80,
                    activation_function="gelu", scale_attn_by_inverse_layer_idx=True,
                    tie_word_embeddings=False, initializer_range=0.1,
                    bos_token_id=0, eos_token_id=1, pad_token_id=3)},
    # Weights stored in float16, loaded as float32 on both sides.
    {"name": "gpt2-c", "seed": 2, "storage_dtype": "float16",
     "config": dict(vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=8,
                    initializer_range=0.1, bos_token_id=4, eos_token_id=5)},
]

RAGGED = [[3, 14, 15, 92, 65], [35, 89], [79, 32, 38, 46]]


def cases():
    return [
        {"name": "greedy_single", "model": "gpt2-a", "prompts": [[3, 14, 15, 92, 65]],
         "generation": {"max_new_tokens": 10}},
        {"name": "greedy_left_padding", "model": "gpt2-a", "prompts": RAGGED,
         "generation": {"max_new_tokens": 12}},
        {"name": "greedy_eos_mid_sequence", "model": "gpt2-a", "prompts": RAGGED,
         "generation": {"max_new_tokens": 12, "eos_token_id": "auto:1,4"}},
        {"name": "greedy_long_prompt", "model": "gpt2-a",
         "prompts": [list(range(5, 45)), list(range(50, 60))],
         "generation": {"max_new_tokens": 20}},
        {"name": "greedy_sharded_untied", "model": "gpt2-b",
         "prompts": [[7, 8, 9, 10, 11, 12], [100], [42, 43, 44]],
         "generation": {"max_new_tokens": 15}},
        {"name": "greedy_two_eos_ids", "model": "gpt2-b",
         "prompts": [[7, 8, 9, 10, 11, 12], [100], [42, 43, 44]],
         "generation": {"max_new_tokens": 15, "eos_token_id": ["auto:0,3", "auto:2,6"],
                        "pad_token_id": 3}},
        {"name": "greedy_default_length", "model": "gpt2-c", "prompts": [[9, 10, 11], [12]],
         "generation": {}},
        {"name": "greedy_max_length", "model": "gpt2-c", "prompts": [[9, 10, 11, 12, 13, 14], [60, 61]],
         "generation": {"max_length": 14}},
    ]
