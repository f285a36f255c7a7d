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


RAGGED_B = [[7, 8, 9, 10, 11, 12], [100], [42, 43, 44]]
RAGGED_C = [[9, 10, 11], [12], [60, 61, 62, 63, 64]]


def case(name, model, prompts, generation, seed=0):
    return {"name": name, "model": model, "prompts": prompts, "generation": generation, "seed": seed}


def greedy_cases():
    return [
        case("greedy_single", "gpt2-a", [[3, 14, 15, 92, 65]], {"max_new_tokens": 10}),
        case("greedy_left_padding", "gpt2-a", RAGGED, {"max_new_tokens": 12}),
        case("greedy_eos_mid_sequence", "gpt2-a", RAGGED, {"max_new_tokens": 12, "eos_token_id": "auto:1,4"}),
        case("greedy_long_prompt", "gpt2-a", [list(range(5, 45)), list(range(50, 60))], {"max_new_tokens": 20}),
        case("greedy_sharded_untied", "gpt2-b", RAGGED_B, {"max_new_tokens": 15}),
        case("greedy_two_eos_ids", "gpt2-b", RAGGED_B,
             {"max_new_tokens": 15, "eos_token_id": ["auto:0,3", "auto:2,6"], "pad_token_id": 3}),
        case("greedy_default_length", "gpt2-c", [[9, 10, 11], [12]], {}),
        case("greedy_max_length", "gpt2-c", [[9, 10, 11, 12, 13, 14], [60, 61]], {"max_length": 14}),
    ]


def processor_cases():
    """Greedy search through each logits processor (warpers need sampling: see sampling_cases)."""
    return [
        case("proc_repetition_ngram", "gpt2-a", RAGGED,
             {"max_new_tokens": 14, "repetition_penalty": 1.5, "no_repeat_ngram_size": 2}),
        case("proc_repetition_below_one", "gpt2-c", RAGGED_C, {"max_new_tokens": 10, "repetition_penalty": 0.7}),
        case("proc_bad_words_sequence_bias", "gpt2-a", RAGGED,
             {"max_new_tokens": 12, "bad_words_ids": [[73], [36, 36], [2]],
              "sequence_bias": [[[55], -4.0], [[46, 36], 5.0], [[65, 65, 43], -2.5]]}),
        case("proc_min_length", "gpt2-a", RAGGED, {"max_new_tokens": 12, "eos_token_id": "auto:1,1", "min_length": 9}),
        case("proc_min_new_tokens", "gpt2-b", RAGGED_B,
             {"max_new_tokens": 12, "eos_token_id": "auto:2,1", "min_new_tokens": 5}),
        case("proc_suppress_tokens", "gpt2-b", RAGGED_B,
             {"max_new_tokens": 10, "suppress_tokens": [146, 12], "begin_suppress_tokens": [11, 118]}),
        case("proc_forced_bos_eos", "gpt2-c", [[9], [12]],
             {"max_new_tokens": 8, "forced_bos_token_id": 40, "forced_eos_token_id": [41, 42]}),
        case("proc_exponential_decay", "gpt2-b", RAGGED_B,
             {"max_new_tokens": 15, "eos_token_id": "auto:1,9", "exponential_decay_length_penalty": [2, 1.8]}),
        case("proc_invalid_values_renormalize", "gpt2-c", RAGGED_C,
             {"max_new_tokens": 8, "remove_invalid_values": True, "renormalize_logits": True,
              "repetition_penalty": 1.2}),
    ]


def sampling_cases():
    return [
        case("sample_default_top_k", "gpt2-a", RAGGED, {"max_new_tokens": 12, "do_sample": True}, seed=1),
        case("sample_temperature", "gpt2-b", RAGGED_B,
             {"max_new_tokens": 12, "do_sample": True, "temperature": 0.7}, seed=2),
        case("sample_top_p", "gpt2-c", RAGGED_C,
             {"max_new_tokens": 12, "do_sample": True, "top_k": 0, "top_p": 0.8}, seed=3),
        case("sample_min_p", "gpt2-a", RAGGED, {"max_new_tokens": 12, "do_sample": True, "min_p": 0.1}, seed=4),
        case("sample_typical", "gpt2-b", RAGGED_B,
             {"max_new_tokens": 12, "do_sample": True, "typical_p": 0.9, "top_k": 0}, seed=5),
        case("sample_epsilon", "gpt2-c", RAGGED_C,
             {"max_new_tokens": 12, "do_sample": True, "epsilon_cutoff": 0.02}, seed=6),
        case("sample_eta", "gpt2-a", RAGGED, {"max_new_tokens": 12, "do_sample": True, "eta_cutoff": 0.01}, seed=7),
        case("sample_return_sequences", "gpt2-b", RAGGED_B,
             {"max_new_tokens": 10, "do_sample": True, "num_return_sequences": 3, "eos_token_id": "auto:0,2"},
             seed=8),
        case("sample_combined", "gpt2-c", RAGGED_C,
             {"max_new_tokens": 14, "do_sample": True, "temperature": 1.3, "top_k": 20, "top_p": 0.9,
              "repetition_penalty": 1.2, "no_repeat_ngram_size": 3}, seed=9),
    ]


def beam_cases():
    return [
        case("beam4_defaults", "gpt2-a", RAGGED, {"max_new_tokens": 10, "num_beams": 4}),
        case("beam3_return3_early_true", "gpt2-b", RAGGED_B,
             {"max_new_tokens": 12, "num_beams": 3, "num_return_sequences": 3, "early_stopping": True,
              "length_penalty": 0.5, "eos_token_id": "auto:1,2"}),
        case("beam4_never_lp2", "gpt2-c", RAGGED_C,
             {"max_new_tokens": 10, "num_beams": 4, "early_stopping": "never", "length_penalty": 2.0,
              "eos_token_id": "auto:0,3"}),
        case("beam2_two_eos", "gpt2-a", RAGGED,
             {"max_new_tokens": 12, "num_beams": 2, "num_return_sequences": 2,
              "eos_token_id": ["auto:0,2", "auto:2,4"]}),
        case("beam4_false_negative_lp", "gpt2-b", RAGGED_B,
             {"max_new_tokens": 12, "num_beams": 4, "length_penalty": -0.5, "no_repeat_ngram_size": 2,
              "eos_token_id": "auto:2,3"}),
        case("beam_sample3", "gpt2-c", RAGGED_C,
             {"max_new_tokens": 10, "num_beams": 3, "do_sample": True, "num_return_sequences": 2,
              "eos_token_id": "auto:1,2"}, seed=11),
        case("beam_sample_top_k", "gpt2-a", RAGGED,
             {"max_new_tokens": 10, "num_beams": 2, "do_sample": True, "top_k": 5, "temperature": 0.8}, seed=12),
    ]


def group_beam_cases():
    """Diverse beam search, recorded with transformers 4.55.4 (it left the core in 5.x)."""
    return [
        case("group_beam4x2_diversity", "gpt2-a", RAGGED,
             {"max_new_tokens": 10, "num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 1.5,
              "num_return_sequences": 4}),
        case("group_beam6x3_eos", "gpt2-b", RAGGED_B,
             {"max_new_tokens": 12, "num_beams": 6, "num_beam_groups": 3, "diversity_penalty": 0.8,
              "num_return_sequences": 3, "eos_token_id": "auto:1,2", "length_penalty": 0.7}),
        case("group_beam4x4_early_true", "gpt2-c", RAGGED_C,
             {"max_new_tokens": 10, "num_beams": 4, "num_beam_groups": 4, "diversity_penalty": 2.0,
              "early_stopping": True, "eos_token_id": "auto:0,3", "repetition_penalty": 1.3}),
        case("group_beam4x2_never", "gpt2-a", RAGGED,
             {"max_new_tokens": 8, "num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 0.5,
              "early_stopping": "never", "eos_token_id": "auto:2,1", "num_return_sequences": 2}),
    ]


# One prompt that repeats itself, so that prompt lookup finds candidates from the first step on.
REPEATING = [[5, 9, 13, 5, 9, 13, 5, 9, 7, 21, 5, 9]]


def speculative_cases():
    """Prompt lookup (transformers' assisted generation with prompt_lookup_num_tokens) and early
    exit (assistant_early_exit), one prompt: greedy tokens that equal plain greedy search's, with
    EOS, processors and output_scores."""
    return [
        case("lookup_greedy", "gpt2-a", REPEATING, {"max_new_tokens": 24, "prompt_lookup_num_tokens": 4}),
        case("lookup_ngram3_eos", "gpt2-b", REPEATING,
             {"max_new_tokens": 20, "prompt_lookup_num_tokens": 10, "max_matching_ngram_size": 3,
              "eos_token_id": "auto:0,9"}),
        case("lookup_processors", "gpt2-c", REPEATING,
             {"max_new_tokens": 16, "prompt_lookup_num_tokens": 3, "repetition_penalty": 1.3,
              "no_repeat_ngram_size": 3, "min_new_tokens": 5}),
        # Early exit (transformers' assistant_early_exit): the model's first layer drafts. In
        # transformers only the LLaMA family's forward honours it (layers[:num_hidden_layers]);
        # on qwen2-a 5.17 raises a TypeError cropping the draft's cache, so no Qwen2 case.
        case("early_exit_llama", "llama-a", REPEATING, {"max_new_tokens": 16, "assistant_early_exit": 1}),
        case("early_exit_mistral_eos", "mistral-a", REPEATING,
             {"max_new_tokens": 16, "assistant_early_exit": 1, "eos_token_id": "auto:0,6"}),
    ]


def cases():
    return (greedy_cases() + processor_cases() + sampling_cases() + beam_cases() + group_beam_cases()
            + speculative_cases())
