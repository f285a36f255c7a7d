#!/usr/bin/env python3
"""Chat template fixtures: what transformers renders for a set of templates and contexts, which the
native renderer (framework/text/jinja.h) must render the same (tests/framework/text/test_jinja.cpp).

The templates are gengraph's own, written to use what chat templates use: the turn formats of
the common families (a ChatML-like one with a default system prompt, a turn format that folds
the system prompt into the first user turn and checks that roles alternate, a header format, a
tool-calling one with namespaces and a reversed loop), Python values printed, filters, tests,
loop controls, and 400 random mixes of text, tags and whitespace control (jinja2's trim_blocks /
lstrip_blocks rules, as transformers sets them). Each is rendered by transformers' own
compiled-template path (the jinja2 environment apply_chat_template uses); a case whose rendering
raises records the error's type instead of a text.

    .venv/bin/python tools/make_chat_fixtures.py          # rewrite tests/fixtures/chat/cases.json
    .venv/bin/python tools/make_chat_fixtures.py --check  # regenerate and compare

Never edit the output by hand.
"""
import argparse
import json
import os
import random
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "chat", "cases.json")

CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi  there \n"},
     {"role": "assistant", "content": " Hello! "},
     {"role": "user", "content": "caf\u00e9 \u2713 \U0001F600 \"q\" 'a' \\ {{ x }} {% if %}"}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": "x"}],
]

TEMPLATES = {
    "chatml_default_system": (
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|turn|>system\nYou are a test assistant.<|end|>\n' }}{% endif %}"
        "{{'<|turn|>' + message['role'] + '\n' + message['content'] + '<|end|>' + '\n'}}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|turn|>assistant\n' }}{% endif %}"),
    "folded_system_alternating": """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- set turns = messages[1:] -%}
{%- else -%}
    {%- set prefix = "" -%}
    {%- set turns = messages -%}
{%- endif -%}
{%- for m in turns -%}
    {%- if (m['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("turns must alternate between user and assistant") }}
    {%- endif -%}
    {%- set who = "bot" if m['role'] == 'assistant' else m['role'] -%}
    {{ '<turn>' + who + '\\n' + (prefix if loop.first else "") }}
    {{ m['content'] | trim }}
    {{ '</turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<turn>bot\\n'}}
{%- endif -%}
""",
    "headers": """{{- bos_token }}
{%- if messages[0].role == "system" %}
    {%- set system = messages[0].content | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system = "" %}
{%- endif %}
{{- "[head]system[/head]\\n" }}
{{- system }}
{{- "[eot]" }}
{%- for message in messages %}
    {{- '[head]' + message['role'] + '[/head]\\n'+ message['content'] | trim + '[eot]' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '[head]assistant[/head]\\n' }}
{%- endif %}
""",
    "tool_calls": """{%- if tools %}
    {{- '<s>system\\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
    {{- "Functions:" }}
    {%- for t in tools %}{{- "\\n" }}{{- t | tojson }}{%- endfor %}
    {{- "\\n</s>\\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<s>system\\n' + messages[0].content + '</s>\\n' }}
{%- endif %}
{%- set state = namespace(searching=true, last_question=messages|length - 1) %}
{%- for m in messages[::-1] %}
    {%- set at = (messages|length - 1) - loop.index0 %}
    {%- if state.searching and m.role == "user" and m.content is string and not m.content.startswith('<result>') %}
        {%- set state.searching = false %}
        {%- set state.last_question = at %}
    {%- endif %}
{%- endfor %}
{%- for m in messages %}
    {%- set text = m.content if m.content is string else '' %}
    {%- if m.role == "user" or (m.role == "system" and not loop.first) %}
        {{- '<s>' + m.role + '\\n' + text + '</s>\\n' }}
    {%- elif m.role == "assistant" %}
        {{- '<s>' + m.role + '\\n' + (text.strip('\\n') if loop.index0 > state.last_question else text) }}
        {%- for call in m.get('calls', []) %}
            {{- '\\n<call>' + call.name + ' ' }}{{- call.arguments | tojson }}{{- '</call>' }}
        {%- endfor %}
        {{- '</s>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<s>assistant\\n' }}{%- if thinking is defined and thinking is false %}{{- '<quiet/>' }}{%- endif %}{%- endif %}""",
    "values": """{{ 1 }} {{ 1.0 }} {{ 2.5e-7 }} {{ 1e20 }} {{ 10/4 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 2**10 }} {{ none }} {{ true }} {{ [1, 'a', none, 1.5] }} {{ {'a': 1, 'b': [true]} }} {{ 'x' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 123456789.0 * 1000000000 }}
{{ messages|tojson }}
{{ messages[0]|tojson(indent=2) }} {{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}
{{ messages|map(attribute='role')|join(', ') }} {{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('content')|list|length }}
{{ (messages|first).role }} {{ (messages|last)['role'] }} {{ 'a,b,,c'.split(',') }} {{ '  x y  '.split() }} {{ 'Hello'.startswith('He') }} {{ 'Hello'[1:3] }} {{ 'Hello'[-1] }} {{ 'Hello'[::-2] }}
{{ undefined_thing }}|{{ undefined_thing is defined }}|{{ undefined_thing|default('dflt') }}|{{ ''|default('e', true) }}|{{ undefined_thing|length }}
{% for k, v in {'z': 1, 'a': 2}.items() %}{{ k }}={{ v }};{% endfor %}
{% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}|{% for i in range(10) %}{% if i > 2 %}{% break %}{% endif %}{{ i }}{% endfor %}|{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}
{% for m in messages if m.role == 'user' %}{{ loop.index }}:{{ m.content|length }}{{ ',' if not loop.last }}{% else %}none{% endfor %}
{% for m in messages %}{{ loop.revindex }}{{ loop.previtem.role if loop.previtem is defined else '-' }}{% endfor %}
{{ 'yes' if messages|length > 1 else 'no' }} {{ 3 in [1,2,3] }} {{ 'b' not in 'abc' }} {{ not messages }} {{ messages and 'm' }} {{ none or 'o' }} {{ 2 < 3 <= 3 }}
{{ "  pad\\t"|trim }}|{{ "xxhixx".strip('x') }}|{{ "a-b".replace('-', '+') }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}|{{ 'AbC'|lower }}{{ 'AbC'.upper() }}
{{ 10 is divisibleby 5 }} {{ messages|length is even }} {{ 'abc' is lower }} {{ none is none }} {{ 1 is number }} {{ messages is sequence }} {{ {} is mapping }}
{{ messages[0].get('role') }} {{ messages[0].get('x', 'dx') }} {{ messages[0].keys()|list }} {{ '%s'|length }}
""",
    "whitespace": """A
  {% if true %}
    inner
  {% endif %}
B {# comment #}
  {#- stripped comment -#}
C
{%+ if true %}kept{% endif +%}
D {{- ' tight ' -}} E
{% for m in messages %}
    - {{ m.role }}
{% endfor %}
end
""",
    "refuses_a_last_assistant": "{% if messages[-1]['role'] == 'assistant' %}{{ raise_exception('the last message must not be the assistant') }}{% endif %}ok",
}

ERRORS = ["{{ messages[5].role }}", "{{ nothing.attr }}", "{{ 1 + 'a' }}", "{% for x in none %}{% endfor %}",
          "{{ raise_exception('boom') }}", "{{ messages[0]['role']['x']['y'] }}", "{{ 1/0 }}",
          "{{ 'a' ~ nothing ~ 'b' }}", "{{ nothing }}", "{% for a in nothing %}x{% else %}empty{% endfor %}",
          "{% for i in range(100001) %}{% endfor %}", "{{ range(3, 100003)|length }}", "{{ [1, 2] * 2 }}{{ 2 * 'ab' }}"]


def contexts():
    out = []
    for c in CONVERSATIONS:
        for g in (True, False):
            out.append({"messages": c, "tools": None, "documents": None, "add_generation_prompt": g,
                        "bos_token": "<s>", "eos_token": "</s>"})
    tools = [{"type": "function", "function": {"name": "weather", "description": "Weather \u2713",
                                                "parameters": {"type": "object", "properties": {
                                                    "city": {"type": "string"}, "n": {"type": "number", "default": 1.5}},
                                                    "required": ["city"]}}}]
    calls = [{"role": "system", "content": "Sys"}, {"role": "user", "content": "W?"},
             {"role": "assistant", "content": "", "calls": [{"name": "weather", "arguments": {"city": "Paris", "z": [1, 2.0, None]}}]},
             {"role": "user", "content": "<result>x</result>"}, {"role": "assistant", "content": "\nDone\n"}]
    for g in (True, False):
        out.append({"messages": calls, "tools": tools, "documents": None, "add_generation_prompt": g, "thinking": False})
    return out


def random_templates(n):
    rng = random.Random(7)
    texts = ["", " ", "  ", "\n", " \n", "\n  ", "\t", "A", " B ", "\n\nC\n", "  D\n  "]
    opens, closes = ["{%", "{%-", "{%+"], ["%}", "-%}", "+%}"]

    def block(depth):
        r, t = rng.random(), rng.choice(texts)
        if depth > 2 or r < 0.3:
            return t + rng.choice(["{{", "{{-"]) + " x " + rng.choice(["}}", "-}}"]) + rng.choice(texts)
        if r < 0.45:
            return t + rng.choice(["{#", "{#-"]) + " c " + rng.choice(["#}", "-#}"]) + rng.choice(texts)
        inner = "".join(block(depth + 1) for _ in range(rng.randint(0, 2)))
        if r < 0.75:
            return (t + rng.choice(opens) + " if x " + rng.choice(closes) + inner + rng.choice(texts)
                    + rng.choice(opens) + " else " + rng.choice(closes) + rng.choice(texts)
                    + rng.choice(opens) + " endif " + rng.choice(closes) + rng.choice(texts))
        return (t + rng.choice(opens) + " for m in messages " + rng.choice(closes) + inner + "{{ m.role }}"
                + rng.choice(texts) + rng.choice(opens) + " endfor " + rng.choice(closes) + rng.choice(texts))

    return ["".join(block(0) for _ in range(rng.randint(1, 4))) + rng.choice(["", "\n", "\n\n", "\r\n"])
            for _ in range(n)]


def render_all():
    from transformers.utils.chat_template_utils import _compile_jinja_template
    ctxs = contexts()
    small = {"messages": CONVERSATIONS[1], "add_generation_prompt": True, "x": 1, "bos_token": "<s>"}
    cases = [(name, t, ctxs) for name, t in TEMPLATES.items()]
    cases += [(f"error_{i}", t, [small]) for i, t in enumerate(ERRORS)]
    cases += [(f"whitespace_{i}", t, [small]) for i, t in enumerate(random_templates(400))]
    out = []
    for name, template, cs in cases:
        for k, ctx in enumerate(cs):
            row = {"name": f"{name}/{k}", "template": template, "context": ctx}
            try:
                row["text"] = _compile_jinja_template(template).render(**ctx)
            except Exception as e:  # the oracle's refusal: gengraph must refuse too
                row["error"] = type(e).__name__
            out.append(row)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    a = ap.parse_args()
    import transformers
    text = json.dumps({"transformers": transformers.__version__, "cases": render_all()}, indent=1,
                      ensure_ascii=False) + "\n"
    if a.check:
        with open(OUT, encoding="utf-8") as f:
            if f.read() != text:
                print(f"make_chat_fixtures --check: {OUT} differs from what the pinned transformers renders",
                      file=sys.stderr)
                return 1
        print(f"make_chat_fixtures --check: {OUT} is reproduced exactly")
        return 0
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    tmp = OUT + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, OUT)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
