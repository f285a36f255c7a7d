"""NaN or inf logits from a Python backend's decode() (issue 49): refused naming the backend and
the decode step, for greedy search, sampling and beam search; before, greedy picked token 0 and
the generation ended with exit 0."""
import pytest
import torch

import gengraph


class NaNAtStep:
    """Zeros with token 7 ahead, except decode step `step` (option), which holds `value` at
    [row 0, token 11]."""

    def __init__(self, model, options):
        self.vocab = model.vocab_size
        self.step = int(options.get("step", "3"))
        self.value = float(options.get("value", "nan"))
        self.decodes = 0

    def _logits(self, rows):
        logits = torch.zeros(rows, self.vocab)
        logits[:, 7] = 1.0
        return logits

    def prefill(self, input_ids, positions, token_valid):
        self.decodes = 0
        return self._logits(input_ids.shape[0])

    def decode(self, input_ids, positions, token_valid, parent_rows):
        self.decodes += 1
        logits = self._logits(input_ids.shape[0])
        if self.decodes == self.step:
            logits[0, 11] = self.value
        return logits


@pytest.fixture(scope="module", autouse=True)
def registered():
    gengraph.register_backend("nan_at_step", NaNAtStep)
    yield
    gengraph.unregister_backend("nan_at_step")


@pytest.mark.parametrize("settings", [{}, {"do_sample": True}, {"num_beams": 2}],
                         ids=["greedy", "sampling", "beams"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_decode_logits_are_refused_naming_the_backend_and_step(settings, value):
    engine = gengraph.Engine("gpt2-tiny", backend="nan_at_step", step="4", value=value)
    shown = {"nan": "NaN", "inf": "inf", "-inf": "-inf"}[value]
    with pytest.raises(gengraph.Error,
                       match=rf"backend 'nan_at_step' gave non-finite logits at decode step 4 "
                             rf"\(row 0: {shown} at token 11\)"):
        engine.generate([[1, 2, 3]], max_new_tokens=8, **settings)


def test_finite_logits_still_generate():
    engine = gengraph.Engine("gpt2-tiny", backend="nan_at_step", step="1000")
    out = engine.generate([[1, 2, 3]], max_new_tokens=5)
    assert out.tokens == [[[7] * 5]]
