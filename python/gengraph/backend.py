"""The contract of a backend defined in Python (docs/python.md#backends).

A backend runs the model forward for gengraph's decoding loop; it never sees decoding settings.
Subclassing Backend is optional: any object with prefill() and decode() will do.
"""


class Backend:
    """Base class of a Python backend. gengraph creates one per Engine (and per experiment row)
    as factory(model, options), then for every generation calls prepare(), prefill() once and
    decode() once per new token.

    model: a gengraph.ModelInfo (source, config, vocab_size, dtype, device, weights()).
    options: the row's backend options as strings (YAML `backends: [{name: ..., options: {...}}]`
    or Engine keywords); every option is the backend's to read or refuse.
    """

    def __init__(self, model, options):
        self.model = model
        self.options = options

    def prepare(self, rows, max_length):
        """Before every generation: `rows` sequences (batch x beams) of at most `max_length`
        tokens, prompt padding included. Drop the last generation's cache here."""

    def prefill(self, input_ids, positions, token_valid):
        """The prompt. input_ids, positions: int64 [rows, T]; token_valid: bool [rows, T], False
        for left padding. Returns the last position's logits, a floating tensor [rows, vocab] on
        the model's device."""
        raise NotImplementedError

    def decode(self, input_ids, positions, token_valid, parent_rows):
        """One new token per row (T = 1). parent_rows: None, or int64 [rows]: row r continues
        row parent_rows[r]'s history (beam search), so reorder the cache by it first. Returns
        [rows, vocab] logits."""
        raise NotImplementedError

    # Optional: rewind(length) keeps the first `length` positions of the cache (speculative
    # decoding drops the candidates it did not keep); report() returns a dict of str -> float
    # for the results' report block.
