"""Left padding as gengraph and transformers' generate() expect it (shared by the Python tools)."""
import torch


def left_pad(prompts, pad):
    """Token-id lists -> (input_ids, attention_mask), both [batch, longest], padded on the left."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids, mask
