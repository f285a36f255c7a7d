"""tools/hf_tokenizer.py's "messages" request and its --serve mode (one JSON request a line in, one
answer a line out, the tokenizer loaded once), on a word-level test tokenizer with a chat template.
Needs transformers, not the built package."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "hf_tokenizer.py"
TEMPLATE = ("{% if messages[0]['content'] == 'spin' %}{% for i in range(100000) %}{% for j in range(100000) %}"
            "{% endfor %}{% endfor %}{% endif %}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n"
            "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}")
CONVERSATION = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "w5 caf\u00e9 \U0001f600"},
                {"role": "assistant", "content": "w7"}, {"role": "user", "content": "w8"}]

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("chat") / "model"
    shutil.copytree(ROOT / "tests" / "fixtures" / "models" / "gpt2-a", path)
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_test_tokenizer.py"), str(path), "96"], check=True)
    (path / "chat_template.jinja").write_text(TEMPLATE)
    return path


def expected(folder, messages, add_generation_prompt=True):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def serve(args, lines):
    """Runs --serve with `lines` (objects are sent as JSON, strings as they are); returns the answers
    and the finished process."""
    text = "".join((json.dumps(x) if not isinstance(x, str) else x) + "\n" for x in lines)
    p = subprocess.run([sys.executable, str(TOOL), "--serve", *map(str, args)], input=text.encode(),
                       capture_output=True, timeout=300)
    return [json.loads(line) for line in p.stdout.decode().splitlines()], p


def test_serve_answers_each_request_and_goes_on_after_a_refusal(folder):
    answers, p = serve(["--model", folder], [
        {"id": 1, "load": True},
        {"id": 2, "messages": [CONVERSATION, CONVERSATION[:2]], "add_generation_prompt": True},
        {"id": 3, "messages": [[{"role": "user", "content": "a"}], [dict(CONVERSATION[0], role="tool")]]},
        "not json",
        "[1]",
        {"id": 4, "messages": [CONVERSATION], "add_generation_prompt": False},
        {"id": 5, "messages": [[{"role": "user", "content": "a", "name": "x"}]]},
        {"id": 6, "messages": [[]]},
        {"id": 7, "messages": [CONVERSATION], "add_generation_prompt": "yes"},
        {"id": 8, "chat": ["w5"]},
        {"id": 9, "encode": ["w5 w6"], "add_special_tokens": False},
        {"id": 10, "decode": [[5, 6]]},
        {"id": 11, "model": str(folder / "missing"), "encode": ["w5"]},
        {"id": 12, "encode": ["w5"]},
    ])
    assert p.returncode == 0, p.stderr.decode()
    assert [a.get("id") for a in answers] == [1, 2, 3, None, None, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert answers[0] == {"id": 1, "tokenizer": answers[0]["tokenizer"]}
    assert answers[1]["texts"] == [expected(folder, CONVERSATION), expected(folder, CONVERSATION[:2])]
    assert answers[1]["texts"][0] == ("<|system|>be brief\n<|user|>w5 caf\u00e9 \U0001f600\n<|assistant|>w7\n"
                                      "<|user|>w8\n<|assistant|>")
    assert answers[2]["error"] == "messages[1][0]: key 'role': expected 'system', 'user' or 'assistant', found \"tool\""
    assert answers[3]["error"].startswith("the request is not JSON: ")
    assert answers[4]["error"] == "the request is not a JSON object"
    assert answers[5]["texts"] == [expected(folder, CONVERSATION, False)]
    assert answers[6]["error"] == "messages[0][0]: key 'name' is not accepted (a message has 'role' and 'content')"
    assert answers[7]["error"] == "messages[0]: expected at least one message, found none"
    assert answers[8]["error"] == 'add_generation_prompt: expected true or false, found "yes"'
    assert answers[9]["texts"] == ["<|user|>w5\n<|assistant|>"]
    assert answers[10]["ids"] == [[5, 6]]
    assert answers[11]["texts"] == ["w5 w6"]
    assert answers[12]["error"] == f"model folder '{folder / 'missing'}' does not exist"
    assert answers[13]["ids"] == [[5]]


def test_serve_stops_a_runaway_template_and_keeps_serving(folder):
    spin = [{"role": "user", "content": "spin"}]
    answers, p = serve(["--model", folder], [
        {"id": 1, "messages": [spin], "limits": {"seconds": 1}, "template_source": "'the file'"},
        {"id": 2, "messages": [CONVERSATION]},
    ])
    assert p.returncode == 0, p.stderr.decode()
    assert answers[0] == {"id": 1, "error": f"the chat template of '{folder}' ('the file') ran past 1 s on conversation 0"}
    assert answers[1]["texts"] == [expected(folder, CONVERSATION)]


def test_serve_takes_the_folder_from_the_first_request_and_refuses_none(folder):
    answers, p = serve([], [{"id": 1, "encode": ["w5"]}, {"id": 2, "model": str(folder), "encode": ["w5"]},
                            {"id": 3, "decode": [[6]]}])
    assert p.returncode == 0
    assert answers[0]["error"].startswith("the request names no model folder")
    assert answers[1]["ids"] == [[5]] and answers[2]["texts"] == ["w6"]


def test_the_request_form_takes_messages_and_refuses_by_key(folder, tmp_path):
    def run(request):
        (tmp_path / "req.json").write_text(json.dumps(dict(request, model=str(folder))))
        out = tmp_path / "out.json"
        if out.exists():
            out.unlink()
        p = subprocess.run([sys.executable, str(TOOL), "--request", str(tmp_path / "req.json"), "--out", str(out)],
                           capture_output=True, text=True, env=dict(os.environ))
        return p, (json.loads(out.read_text()) if out.exists() else None)

    p, out = run({"messages": [CONVERSATION]})
    assert p.returncode == 0, p.stderr
    assert out["texts"] == [expected(folder, CONVERSATION)]
    p, out = run({"messages": [[{"role": "user"}]]})
    assert p.returncode == 1 and out is None
    assert "hf_tokenizer.py: messages[0][0]: key 'content' is missing" in p.stderr
