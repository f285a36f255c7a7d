"""A model's chat template rendered within limits, for tools/hf_tokenizer.py: its "chat" request
(each text as one user message) and its "messages" request (whole conversations).

Limits: {"seconds": S, "characters": C, "characters_per_character": K} (defaults 30, 1000000, 4).
Each rendering may run S seconds and make C + K x (the characters of its messages' contents)
characters, and may use 1 GiB of memory more than the process had before it (RLIMIT_AS). Past a
limit the template is refused by name ("the chat template of '<folder>' ran past 30 s on text 0").
The sandbox is transformers' own (jinja2's ImmutableSandboxedEnvironment), with '*', '**' and '+'
checked before they build a value past the characters allowed.
"""
import resource
import signal

DEFAULT_LIMITS = {"seconds": 30, "characters": 1000000, "characters_per_character": 4}
ROLES = ("system", "user", "assistant")


class ToolError(Exception):
    """A refusal, with the message the tool reports (on stderr, or as {"error": ...} when serving)."""


def fail(message):
    raise ToolError(message)


class TemplateLimit(BaseException):
    """A limit of the rendering reached (a BaseException, so that no `except Exception` inside
    transformers or jinja2 holds it)."""


LIMITS = {"characters": 0}
MEMORY_BUDGET = 1 << 30


def install_limited_environment():
    """transformers compiles chat templates in jinja2's ImmutableSandboxedEnvironment, named in its
    chat_template_utils module: put in its place a subclass that checks the size of what '*', '**',
    '+' and the rendering itself make (jinja2's sandbox already caps range() at 100,000)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from transformers.utils import chat_template_utils

    def too_big(what):
        raise TemplateLimit(f"rendered more than {LIMITS['characters']} characters ({what})")

    def size(x):
        return len(x) if isinstance(x, (str, bytes, list, tuple)) else None

    class LimitedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**", "+"])

        def call_binop(self, context, operator, left, right):
            limit = LIMITS["characters"]
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    if size(seq) is not None and isinstance(n, int) and size(seq) * n > limit:
                        too_big(f"a value of {size(seq)} x {n}")
            elif operator == "**":
                if (isinstance(left, int) and isinstance(right, int) and abs(left) > 1
                        and right * max(abs(left).bit_length(), 1) > 64 * limit):
                    too_big(f"{left} ** {right}")
            elif operator == "+":
                if size(left) is not None and size(right) is not None and size(left) + size(right) > limit:
                    too_big(f"a value of {size(left)} + {size(right)}")
            return super().call_binop(context, operator, left, right)

        def concat(self, parts):
            out, total = [], 0
            for part in parts:
                total += len(part)
                if total > LIMITS["characters"]:
                    too_big("the template's output")
                out.append(part)
            return "".join(out)

    if getattr(chat_template_utils, "ImmutableSandboxedEnvironment", None) is ImmutableSandboxedEnvironment:
        chat_template_utils.ImmutableSandboxedEnvironment = LimitedEnvironment
        chat_template_utils._compile_jinja_template.cache_clear()


def virtual_memory_bytes():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def json_kind(value):
    """What a JSON value is, for messages: "a string", "a number", ..."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {str: "a string", list: "an array", dict: "an object", type(None): "null"}.get(type(value), "a value")


def check_messages(conversations):
    """A "messages" request's conversations, each a non-empty list of {"role": "system" | "user" |
    "assistant", "content": string}; refused naming the conversation, the message and the key
    ("messages[0][2]: key 'role': expected 'system', 'user' or 'assistant', found \"tool\"")."""
    if not isinstance(conversations, list):
        fail(f"messages: expected an array of conversations, found {json_kind(conversations)}")
    for i, conversation in enumerate(conversations):
        where = f"messages[{i}]"
        if not isinstance(conversation, list):
            fail(f"{where}: expected an array of messages, found {json_kind(conversation)}")
        if not conversation:
            fail(f"{where}: expected at least one message, found none")
        for j, message in enumerate(conversation):
            at = f"{where}[{j}]"
            if not isinstance(message, dict):
                fail(f"{at}: expected an object with 'role' and 'content', found {json_kind(message)}")
            for key in message:
                if key not in ("role", "content"):
                    fail(f"{at}: key '{key}' is not accepted (a message has 'role' and 'content')")
            for key in ("role", "content"):
                if key not in message:
                    fail(f"{at}: key '{key}' is missing")
            role = message["role"]
            if role not in ROLES:
                found = f'"{role}"' if isinstance(role, str) else json_kind(role)
                fail(f"{at}: key 'role': expected 'system', 'user' or 'assistant', found {found}")
            if not isinstance(message["content"], str):
                fail(f"{at}: key 'content': expected a string, found {json_kind(message['content'])}")
    return conversations


def render_chat(tok, messages, limits, name, where, add_generation_prompt=True):
    """One conversation through the chat template (apply_chat_template, not tokenized), within
    `limits` (see the module's text); `name` is the template's and `where` the conversation's, for
    messages."""
    limits = {**DEFAULT_LIMITS, **(limits or {})}
    seconds = float(limits["seconds"])
    contents = sum(len(m["content"]) for m in messages)
    LIMITS["characters"] = int(limits["characters"]) + int(limits["characters_per_character"]) * contents
    install_limited_environment()

    def on_alarm(signum, frame):
        raise TemplateLimit(f"ran past {limits['seconds']} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    used = virtual_memory_bytes()
    if used is not None:
        cap = used + MEMORY_BUDGET
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        if soft == resource.RLIM_INFINITY or cap < soft:
            resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    except TemplateLimit as e:
        fail(f"{name} {e} on {where}")
    except MemoryError:
        fail(f"{name} needed more than {MEMORY_BUDGET >> 30} GiB of memory on {where}")
    except RecursionError:
        fail(f"{name} recursed too deeply on {where}")
    except Exception as e:  # jinja errors of many kinds
        fail(f"{name} failed on {where}: {type(e).__name__}: {e}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    if not isinstance(prompt, str):
        fail(f"{name} gave no text on {where}")
    if len(prompt) > LIMITS["characters"]:
        fail(f"{name} rendered more than {LIMITS['characters']} characters on {where}")
    return prompt
