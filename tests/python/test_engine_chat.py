"""Chat in the Python Engine: generate(chat=True), chat(messages) and their streams give what
gengraph generate --chat gives and transformers' apply_chat_template(tokenize=True) tokens, on a
small folder always and on the set-up's SmolLM2 where it is set up; a template the native
renderer does not render goes to transformers, as the CLI's does."""
import json
import shutil

import pytest

import gengraph
from conftest import FIXTURES, cli_outputs, real_model_ready

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>"
          "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
          "{% endif %}")


def chat_folder(tmp_path, template, name="model"):
    """gpt2-b with a character-level BPE (printable ASCII and the newline; <eos> special; the
    model's other ids as tokens no text encodes to) that the native reader and transformers
    both read, and the chat template given."""
    folder = tmp_path / name
    shutil.copytree(FIXTURES / "models" / "gpt2-b", folder)
    vocab = {"<eos>": 0, "<unk>": 1, "\n": 2, **{chr(c): c - 29 for c in range(32, 127)}}
    vocab.update({f"<t{i}>": i for i in range(len(vocab), 160)})  # the model's 160 ids
    (folder / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "normalizer": None, "pre_tokenizer": None, "post_processor": None,
        "decoder": None,
        "added_tokens": [{"id": 0, "content": "<eos>", "special": True, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False}],
        "model": {"type": "BPE", "vocab": vocab, "merges": [], "unk_token": "<unk>"}}))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<eos>",
        "unk_token": "<unk>"}))
    (folder / "chat_template.jinja").write_text(template)
    return folder


def transformers_ids(folder, messages):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    r = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    return list(r["input_ids"] if hasattr(r, "keys") else r)


def test_chat_gives_the_clis_text_and_transformers_tokens(tmp_path):
    folder = chat_folder(tmp_path, CHATML)
    engine = gengraph.Engine(str(folder))
    settings = dict(max_new_tokens=4)
    out = engine.generate(["hi"], chat=True, **settings)
    ids, doc = cli_outputs(tmp_path, "--model", folder, "--chat", "--text", "hi",
                           "--max-new-tokens", 4)
    assert out.tokens == ids
    assert out.texts[0][0] == doc["runs"][0]["outputs"][0]["sequences"][0]["text"]
    assert engine.apply_chat_template([{"role": "user", "content": "hi"}]) == \
        doc["inputs"]["chat_prompts"]
    # Conversations: transformers' chat tokens, generated as from those ids.
    convs = [[{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
             [{"role": "user", "content": "hi"}]]
    got = engine.chat(convs, **settings)
    want = engine.generate([transformers_ids(folder, c) for c in convs], **settings)
    assert got.tokens == want.tokens
    assert got.texts == [[engine.decode(s.tokens, skip_special_tokens=True) for s in per]
                         for per in got.outputs]
    assert engine.chat(convs[1], **settings).tokens == [want.tokens[1]]  # one conversation
    # The EOS left out of the text unless asked for.
    eos = dict(max_new_tokens=2, logit_bias={0: 100})
    assert engine.chat(convs[1], **eos).texts[0][0] == ""
    assert "<eos>" in engine.chat(convs[1], skip_special_tokens=False, **eos).texts[0][0]
    # Streams add up to the texts.
    assert "".join(p.text for p in engine.stream(["hi"], chat=True, **settings)) == \
        out.texts[0][0]
    pieces = list(engine.chat(convs, stream=True, **settings))
    assert "".join(p.text for p in pieces if p.input == 0) == got.texts[0][0]


def test_what_cannot_be_chatted_with_is_named(tmp_path):
    engine = gengraph.Engine(str(chat_folder(tmp_path, CHATML)))
    with pytest.raises(gengraph.ArgumentTypeError, match="chat=True takes texts"):
        engine.generate([[5, 6]], chat=True)
    with pytest.raises(gengraph.ArgumentTypeError, match="messages: expected a conversation"):
        engine.chat("hi")
    with pytest.raises(gengraph.Error, match=r"messages\[1\]\[0\]: key 'role'"):
        engine.chat([[{"role": "user", "content": "a"}], [{"role": "tool", "content": "b"}]])
    with pytest.raises(gengraph.Error, match="no chat template"):
        gengraph.Engine("gpt2-tiny").chat([{"role": "user", "content": "a"}])


def test_a_template_not_rendered_natively_goes_to_transformers(tmp_path, capfd):
    folder = chat_folder(tmp_path, "{{ messages[0]['content'] | wordwrap(3) }}\n" + CHATML)
    engine = gengraph.Engine(str(folder))
    conv = [{"role": "user", "content": "ab cd ef"}]
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    assert engine.apply_chat_template(conv) == [
        tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)]
    assert "rendered by transformers" in capfd.readouterr().err


@pytest.mark.skipif(not real_model_ready(), reason="the real model smollm2-135m is not set up here")
def test_the_real_model_chats_as_the_cli_and_transformers(tmp_path):
    engine = gengraph.Engine("smollm2-135m")
    out = engine.generate(["What is 2+2?"], chat=True, max_new_tokens=8)
    ids, doc = cli_outputs(tmp_path, "--model", "smollm2-135m", "--chat", "--text",
                           "What is 2+2?", "--max-new-tokens", 8)
    assert out.tokens == ids
    assert out.texts[0][0] == doc["runs"][0]["outputs"][0]["sequences"][0]["text"]
    conv = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi!"}]
    want = engine.generate([transformers_ids(engine.model_source, conv)], max_new_tokens=8)
    assert engine.chat(conv, max_new_tokens=8).tokens == want.tokens
