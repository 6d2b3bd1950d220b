"""Hostile chat templates (issue 20): nothing is evaluated while compiling,
every render ends within its time limit and size budget, and every failure
is a ChatTemplateError that names the template; the process stays usable.

The attacks run in one child process (memory capped, a generous timeout) so
that a regression shows as a failing test instead of a hung or swapping CI
machine; after every attack the child renders a normal template.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import tracemalloc

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

import pyllamakv
from pyllamakv.text.chat import GGUF_SOURCE, FALLBACK_SOURCE, ChatFormatter, ChatTemplateError

USER = [{"role": "user", "content": "hi"}]
FAST = {"time_limit": 0.5}
S = "{% set s = 'a' * 100000 %}"        # a 100 kB string to amplify

# name -> (template, ChatFormatter limits, expected prompt or None, error regex or None)
CASES = {
    # compile time: a branch that never runs must not be evaluated (each hung Llama() before)
    "fold_pow_output": ("{% if false %}{{ 9 ** (9 ** 9) }}{% endif %}ok", {}, "ok", None),
    "fold_pow_set": ("{% if false %}{% set x = 9 ** (9 ** 9) %}{% endif %}ok", {}, "ok", None),
    "fold_pow_autoescape": ("{% if false %}{% autoescape 9 ** (9 ** 9) > 1 %}x{% endautoescape %}"
                            "{% endif %}ok", {}, "ok", None),
    "fold_pow_macro_default": ("{% macro m(x=9 ** (9 ** 9)) %}{% endmacro %}ok", {}, "ok", None),
    "fold_pow_filter": ("{% if false %}{{ (9 ** (9 ** 9))|string }}{% endif %}ok", {}, "ok", None),
    "deep_nesting": ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", {}, None, "RecursionError"),
    # operators that build huge values in one step
    "pow": ("{{ 9 ** (9 ** 9) }}", {}, None, "bits"),
    "squaring": ("{% set ns = namespace(x=3) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}"
                 "{% endfor %}{{ ns.x > 0 }}", {}, None, "bits"),
    "repeat_str": ("{{ ('x' * 10**12)|length }}", {}, None, "repeated sequence"),
    "repeat_list": ("{{ ([1] * 10**10)|length }}", {}, None, "repeated sequence"),
    "float_overflow": ("{{ 9.0 ** 999999 }}", {}, None, "OverflowError"),
    "zero_division": ("{{ 1 // 0 }}", {}, None, "ZeroDivisionError"),
    # doubling strings
    "double_plus": ("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                    "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}", {}, None, "limit"),
    "double_tilde": ("{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}", {}, None, "limit"),
    "double_macro": ("{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% endif %}{% endmacro %}"
                     "{{ d('x', 60) }}", {}, None, "limit"),
    # loops, ranges, recursion
    "nested_loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                     "{% endfor %}", FAST, None, "time limit of 0.5 s"),
    "nested_list_loops": ("{% set l = range(100000)|list %}{% for i in l %}{% for j in l %}"
                          "{% endfor %}{% endfor %}", FAST, None, "time limit"),
    "default_time_limit": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                           "{% endfor %}", {}, None, "time limit of 2 s"),
    "loop_output_in_macro": ("{% macro m() %}{% for i in range(100000) %}{% for j in range(100000) %}"
                             "0123456789{% endfor %}{% endfor %}{% endmacro %}{{ m() }}",
                             {}, None, "created more than"),
    "range_huge": ("{% for i in range(10**9) %}{% endfor %}", {}, None, r"range\(\) of more than"),
    "range_len": ("{{ range(10**100)|length }}", {}, None, r"range\(\)"),
    "recursive_macro": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {}, None, "deep"),
    "recursive_loop": ("{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}", {}, None, "deep"),
    "fanout_macro": ("{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}"
                     "{% endmacro %}{{ f(0) }}", FAST, None, "time limit"),
    "lipsum": ("{{ lipsum(n=10**9) }}", {}, None, "lipsum"),
    # one call that pads, replaces, joins or formats far beyond its inputs
    "center_filter": ("{{ 'x'|center(10**10) }}", {}, None, r"\|center"),
    "center_method": ("{{ 'x'.center(10**10) }}", {}, None, r"str\.center"),
    "format_width": ("{{ '{:>10000000000}'.format(1) }}", {}, None, "format field"),
    "format_nested_width": ("{{ '{:{}}'.format('x', 10**10) }}", {}, None, "format field"),
    "format_markup": ("{{ ('{:>10000000000}'|safe).format(1) }}", {}, None, "format field"),
    "printf": ("{{ '%10000000000d' % 1 }}", {}, None, "formatted"),
    "printf_star": ("{{ '%*d' % (10**10, 1) }}", {}, None, "formatted"),
    "format_filter": ("{{ '%10000000000d'|format(1) }}", {}, None, r"\|format"),
    "replace_method": (S + "{{ s.replace('a', s)|length }}", {}, None, r"str\.replace"),
    "replace_filter": (S + "{{ s|replace('a', s)|length }}", {}, None, r"\|replace"),
    "join_filter": (S + "{{ range(100000)|join(s)|length }}", {}, None, r"\|join"),
    "join_method": (S + "{{ s.join(['1'] * 100000)|length }}", {}, None, r"str\.join"),
    "indent": ("{% set s = '\n' * 100000 %}{{ s|indent(100000)|length }}", {}, None, "indent"),
    "expandtabs": ("{% set s = '\t' * 100000 %}{{ s.expandtabs(100000)|length }}", {}, None, "tabs"),
    "batch_fill": ("{{ [1]|batch(10**10, 'x')|list|length }}", {}, None, r"\|batch"),
    "map_center": ("{{ range(100000)|map('center', 1000000)|list|length }}", {}, None, "created"),
    "shared_items_output": (S + "{{ [" + "s, " * 20 + "] }}", {}, None, "output value"),
    "shared_items_string": (S + "{{ [" + "s, " * 20 + "]|string|length }}", {}, None,
                            r"\|string"),
    "shared_items_tilde": (S + "{{ [" + "s, " * 20 + "] ~ '' }}", {}, None, "~ concatenation"),
    "wordwrap_long_word": ("{{ ('a' * 500000)|wordwrap(1)|length }}", {}, None, "wordwrap"),
    "shared_items_sort": (S + "{{ ([s] * 100000)|sort|length }}", {}, None, "repeated"),
    "shared_items_fromkeys": (S + "{{ {}.fromkeys(range(100000), s)|length }}", {}, None,
                              "dict with its items"),
    "shared_items_batch": (S + "{{ [1]|batch(100000, s)|first|length }}", {}, None, r"\|batch"),
    "tojson_indent": ("{{ [[1]]|tojson(indent=10**9) }}", {}, None, "indent"),
    # issue 38: jinja's |urlize is quadratic in one word (30 s for 20 kB, in one call)
    "urlize_long_word": ("{{ ('.' * 200000 ~ 'a.')|urlize|length }}", {}, "200002", None),
    "urlize_many_words": ("{{ (('.' * 500 ~ 'a. ') * 2000)|urlize|length }}", FAST, None,
                          "time limit"),
    "to_bytes": ("{{ (1).to_bytes(10**10, 'big')|length }}", {}, None, r"int\.to_bytes"),
    "to_bytes_kw": ("{{ (1).to_bytes(length=10**10, byteorder='big')|length }}", {}, None,
                    r"int\.to_bytes"),
    # a MemoryError inside the render (the child's memory is capped at 2 GiB)
    "memory_error": ("{{ ('x' * 3000000000)|length }}", {"max_output": 10**11}, None, "MemoryError"),
}

RUNNER = r"""
import json, sys, time
from pyllamakv.text.chat import ChatFormatter, ChatTemplateError
normal = ChatFormatter("{% for m in messages %}<{{ m.role }}:{{ m.content }}>{% endfor %}")
user = [{"role": "user", "content": "hi"}]
for name, (template, limits) in json.load(sys.stdin).items():
    print(json.dumps({"start": name}), flush=True)
    r, t0 = {"name": name}, time.monotonic()
    try:
        r["prompt"] = ChatFormatter(template, **limits).format(user).prompt[:200]
    except ChatTemplateError as e:
        r.update(error="ChatTemplateError", message=str(e)[:500], source=getattr(e, "source", None))
    except BaseException as e:
        r.update(error=type(e).__name__, message=str(e)[:500])
    r["seconds"] = time.monotonic() - t0
    r["usable"] = normal.format(user).prompt == "<user:hi>"
    print(json.dumps(r), flush=True)
"""


def _cap_memory() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.fixture(scope="module")
def attacked(tmp_path_factory) -> dict:
    """Every case's result from the child; a hung case is marked as such."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(pyllamakv.__file__)))
    todo = {k: [t, limits] for k, (t, limits, _, _) in CASES.items()}
    try:
        out = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(todo), text=True,
                             capture_output=True, timeout=300, env=env,
                             cwd=tmp_path_factory.mktemp("attacks"),
                             preexec_fn=_cap_memory if sys.platform == "linux" else None).stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += "\n" + json.dumps({"hung": True})
    results, running = {}, None
    for line in filter(None, out.splitlines()):
        r = json.loads(line)
        if "start" in r:
            running = r["start"]
        elif "hung" in r and running:
            results[running] = {"error": "hung (the child was killed after 300 s)"}
        else:
            results[r["name"]] = r
    return results


@pytest.mark.parametrize("name", list(CASES))
def test_attack(attacked, name):
    template, limits, prompt, error = CASES[name]
    r = attacked.get(name)
    assert r is not None, f"{name}: not reached (an earlier case crashed or hung)"
    if prompt is not None:
        assert r.get("prompt") == prompt, r
    else:
        assert r.get("error") == "ChatTemplateError", r
        assert re.search(error, r["message"]), r
        assert r["message"].startswith("the chat template "), r      # names the template
    assert r["seconds"] < 30, r                                      # bounded, not a benchmark
    assert r["usable"], r


# ---------------------------------------------------------------- in-process checks

@pytest.mark.parametrize("template", [
    "{% if false %}{{ 'x'|center(50000000) }}{% endif %}ok",
    "{% if false %}{{ 'x' * 50000000 }}{% endif %}ok",
    "{% if false %}{% autoescape ('x'|center(50000000)) == '' %}{% endautoescape %}{% endif %}ok",
])
def test_compile_builds_nothing(template):
    """jinja used to fold filters and operators on literals while compiling
    (a 50 MB string here); nothing that size may be allocated now."""
    tracemalloc.start()
    try:
        f = ChatFormatter(template)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, f"compiling allocated {peak / 2**20:.0f} MiB"
    assert f.format(USER).prompt == "ok"


def test_errors_name_the_template(tok):
    bad = "{{ 1 // 0 }}"
    with pytest.raises(ChatTemplateError) as e:
        ChatFormatter.from_metadata({"tokenizer.chat_template": bad}, tok).format(USER)
    assert e.value.source == GGUF_SOURCE and str(e.value).startswith(GGUF_SOURCE)
    with pytest.raises(ChatTemplateError, match="^chat_format 'x' failed to render"):
        ChatFormatter(bad, source="chat_format 'x'").format(USER)
    with pytest.raises(ChatTemplateError, match="^chat_format 'x' does not parse"):
        ChatFormatter("{% for %}", source="chat_format 'x'")
    assert ChatFormatter(None).source == FALLBACK_SOURCE
    with pytest.raises(ChatTemplateError, match=f"^{GGUF_SOURCE[:20]}.* is 300,000 characters"):
        ChatFormatter.from_metadata({"tokenizer.chat_template": "x" * 300_000}, tok)
    refuse = "{{ raise_exception('no system') }}"
    with pytest.raises(ChatTemplateError, match=f"^{GGUF_SOURCE[:20]}.*refused.*no system"):
        ChatFormatter.from_metadata({"tokenizer.chat_template": refuse}, tok).format(USER)


@pytest.fixture(scope="module")
def tok():
    from pyllamakv.text.tokenizer import Tokenizer
    from _smollm2 import metadata
    return Tokenizer.from_metadata(metadata())


def test_recursion_error_at_stack_limit_becomes_template_error():
    f = ChatFormatter("{% macro m(n) %}{{ m(n - 1) if n else 'end' }}{% endmacro %}{{ m(30) }}")
    assert f.format(USER).prompt == "end"

    def depth() -> int:
        frame, n = sys._getframe(), 0
        while frame is not None:
            frame, n = frame.f_back, n + 1
        return n

    def deep(n):      # all but 40 frames of the stack used: the render hits RecursionError
        return deep(n - 1) if n else f.format(USER)
    with pytest.raises(ChatTemplateError, match="RecursionError"):
        deep(sys.getrecursionlimit() - depth() - 40)
    assert f.format(USER).prompt == "end"


def test_limits_are_per_render_and_per_thread():
    runaway = ChatFormatter("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                            "{% endfor %}", time_limit=1.0)
    normal = ChatFormatter("{% for m in messages %}{{ m.content * 3 }}{% endfor %}"
                           "{% if messages|length > 1 %}{{ 'y' * 1000 }}{% endif %}", max_output=10)
    caught = []

    def run():
        try:
            runaway.format(USER)
        except ChatTemplateError as e:
            caught.append(str(e))
    t = threading.Thread(target=run)
    t.start()
    for _ in range(50):     # the other thread's budget does not leak into these renders
        assert normal.format(USER).prompt == "hihihi"
    t.join(30)
    assert not t.is_alive() and len(caught) == 1 and "time limit" in caught[0]
    with pytest.raises(ChatTemplateError, match="over the limit"):   # 10 + 8 x the messages'
        normal.format(USER * 2)
    assert ChatFormatter("x").time_limit == 2.0
    with pytest.raises(ValueError):
        ChatFormatter("x", time_limit=0)


REAL = {   # shapes of real templates: the bounded sandbox renders them exactly as jinja does
    "llama3": "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}{%- set system = "
              "messages[0]['content']|trim %}{%- set messages = messages[1:] %}{%- else %}{%- set "
              "system = '' %}{%- endif %}{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
              "{%- for t in tools or [] %}{{- t|tojson(indent=4) }}{{- '\\n\\n' }}{%- endfor %}"
              "{{- system }}{{- '<|eot_id|>' }}{%- for message in messages %}{{- '<|start_header_id|>"
              "' + message['role'] + '<|end_header_id|>\\n\\n' + message['content']|trim + "
              "'<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>"
              "assistant<|end_header_id|>\\n\\n' }}{%- endif %}",
    "mistral": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
               "(loop.index0 % 2 == 0) %}{{ raise_exception('roles must alternate') }}{% endif %}"
               "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
               "{% else %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}",
    "features": "{% macro row(m, sep=': ') -%}{{ m.role|upper }}{{ sep }}{{ m.content|truncate(9) }}"
                "{%- endmacro %}{% macro box() %}[{{ caller() }}]{% endmacro %}"
                "{% for m in messages if m.role != 'x' %}{{ loop.index }}/{{ loop.length }}"
                "{{ '!' if loop.last }}{{ loop.cycle('a', 'b') }}{{ row(m) }}{% else %}none{% endfor %}"
                "{% call box() %}{{ messages|map(attribute='role')|join(',') }}{% endcall %}"
                "{% filter upper %}n={{ messages|length }}{% endfilter %}"
                "{% set b %}{{ messages[0].content }}{% endset %}{{ b|replace('e', '3') }}{{ b|center(9) }}"
                "{{ '%s-%05d'|format('x', 42) }}{{ '{}:{:>6}'.format('y', 7) }}{{ '%s=%d' % ('k', 3) }}"
                "{{ (2 ** 10, 7 // 2, -5, 1.5 * 2, 'ab' * 3, [1] + [2], 'a' ~ 1 ~ none) }}"
                "{% for x in [[1, [2, [3]]]] recursive %}<{% if x is iterable %}{{ loop(x) }}"
                "{% else %}{{ x }}{% endif %}>{% endfor %}{{ range(3)|list }}{{ messages[::-1]|first }}"
                "{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}"
                "{% endfor %}{{ ns.n }}{{ [[1], [2]]|sum(start=[]) }}{{ [1, 2]|batch(3, 0)|list }}"
                "{{ {'b': 1, 'a': 2}|dictsort }}{{ 'x'.join(['1', '2']) }}{{ 'a\\nb'|indent(2) }}",
    "urlize": "{% for m in messages %}{{ (m.content ~ ' see (www.a.org), <x@y.com>\\n '"
              " ~ 'http://b.c/d. ' ~ '.' * 600 ~ 'a.')|urlize(20, rel='n') }}{% endfor %}",
}


@pytest.mark.parametrize("name", list(REAL))
def test_renders_like_jinja(name):
    msgs = [{"role": "system", "content": "Be nice. "}, {"role": "user", "content": "Hello there"},
            {"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "Bye"}]
    if name == "mistral":
        msgs = msgs[1:]
    tools = [{"type": "function", "function": {"name": "get", "parameters": {"q": "string"}}}]
    env = ImmutableSandboxedEnvironment(loader=jinja2.BaseLoader(), trim_blocks=True,
                                        lstrip_blocks=True)
    want = env.from_string(REAL[name]).render(messages=msgs, tools=tools, bos_token="<s>",
                                              eos_token="</s>", add_generation_prompt=True)
    got = ChatFormatter(REAL[name], bos_token="<s>", eos_token="</s>").format(msgs, tools=tools)
    assert got.prompt == want
