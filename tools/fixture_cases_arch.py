"""Parity models and cases for architectures beyond GPT-2 (same format as fixture_cases.py:
a model entry may name "model_type", default "gpt2")."""

MODELS = []


def cases():
    return []
