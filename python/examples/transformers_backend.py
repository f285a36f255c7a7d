"""A gengraph backend written in Python: a transformers model over gengraph's loaded weights,
optionally torch.compile'd, registered by name and compared with gengraph's own backends in one
experiment table (docs/python.md#backends).

    .venv/bin/python python/examples/transformers_backend.py              # gpt2-tiny, CPU
    .venv/bin/python python/examples/transformers_backend.py --model smollm2-135m --compile

The backend is also what tests/python/test_backends.py checks against the backend contract.
"""
import argparse

import torch

import gengraph


class TransformersBackend(gengraph.Backend):
    """transformers' model class for the config, holding gengraph's weight tensors, with a
    DynamicCache. Options: compile (true|false; torch.compile of the forward), dynamic
    (true|false; torch.compile's dynamic shapes, default true)."""

    def __init__(self, model, options):
        super().__init__(model, options)
        from transformers import AutoConfig, AutoModelForCausalLM

        unknown = set(options) - {"compile", "dynamic"}
        if unknown:
            raise ValueError(f"unknown option(s) {sorted(unknown)}; known: compile, dynamic")
        config = dict(model.config)
        config_obj = AutoConfig.for_model(config.pop("model_type"), **config)
        self.hf = AutoModelForCausalLM.from_config(config_obj, dtype=model.dtype)
        # The very tensors gengraph loaded (views of its fused projections), copied into the
        # module's parameters once.
        missing, unexpected = self.hf.load_state_dict(model.weights(), strict=False)
        if unexpected or set(missing) - {"lm_head.weight"}:
            raise ValueError(f"weights do not fit {type(self.hf).__name__}: missing {missing}, "
                             f"unexpected {unexpected}")
        if missing:
            self.hf.tie_weights()
        self.hf.to(model.device).eval()
        self.forward = self.hf.forward
        if options.get("compile", "false") == "true":
            # torch 2.11's CPU Inductor can emit a bounds check before the index it checks when
            # the attention mask's length is dynamic ("'tmp2' was not declared in this scope";
            # pytorch/pytorch#178244, fixed by #180212 after 2.11). Without the check the kernel
            # compiles and gives eager's tokens (tests/python: check_backend on the eager form).
            import torch._inductor.config as inductor_config

            inductor_config.assert_indirect_indexing = False
            self.forward = torch.compile(self.hf.forward,
                                         dynamic=options.get("dynamic", "true") == "true")
        self.cache = None
        self.mask = None
        self.calls = 0

    def _run(self, input_ids, positions, mask):
        self.calls += 1
        with torch.inference_mode():
            out = self.forward(input_ids=input_ids, position_ids=positions, attention_mask=mask,
                               past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :]

    def prefill(self, input_ids, positions, token_valid):
        from transformers import DynamicCache

        self.cache = DynamicCache(config=self.hf.config)
        self.mask = token_valid.long()
        return self._run(input_ids, positions, self.mask)

    def decode(self, input_ids, positions, token_valid, parent_rows):
        if parent_rows is not None:
            self.cache.reorder_cache(parent_rows)
            self.mask = self.mask.index_select(0, parent_rows)
        self.mask = torch.cat([self.mask, token_valid.long()], dim=1)
        return self._run(input_ids, positions, self.mask)

    def rewind(self, length):
        self.cache.crop(length)
        self.mask = self.mask[:, :length]

    def report(self):
        return {"python_calls": float(self.calls)}


def register():
    gengraph.register_backend("transformers", TransformersBackend,
                              description="a transformers model over gengraph's weights",
                              replace=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2-tiny", help="a preset, folder or known model")
    ap.add_argument("--compile", action="store_true", help="add a torch.compile'd row")
    ap.add_argument("--aoti", action="store_true", help="add gengraph's aoti row")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--output", help="write the results JSON here too")
    args = ap.parse_args()
    register()
    model = ({"preset": args.model[7:] if args.model.startswith("preset:") else args.model}
             if args.model in gengraph.presets() or args.model.startswith("preset:")
             else {"name": args.model} if any(m["name"] == args.model for m in gengraph.models())
             else {"path": args.model})
    rows = ["eager", "trace"] + (["aoti"] if args.aoti else []) + [
        {"name": "transformers", "label": "hf-python"}]
    if args.compile:
        rows.append({"name": "transformers", "label": "hf-python-compiled",
                     "options": {"compile": "true"}})
    doc = gengraph.run({
        "name": "python_backend",
        "model": model,
        "backends": rows,
        "inputs": {"prompts": [[11, 42, 7, 300, 19], [5, 6]]},
        "generation": {"max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens},
        "run": {"warmup": 1, "repeats": args.repeats},
    }, output=args.output, quiet=False)
    print(gengraph.format_table(doc))


if __name__ == "__main__":
    main()
