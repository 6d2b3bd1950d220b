"""Streamed tool calls (tool_stream.py): the chunks of a reply cut into random
pieces carry the calls and the content of the same reply parsed whole, and
text before a call goes out before the call is complete."""
import json
import random

import pytest

pytest.importorskip("llguidance")

from pyllamakv.api.response import Piece  # noqa: E402
from pyllamakv.api.tool_stream import ToolStream, tool_chat_chunks  # noqa: E402
from pyllamakv.api.tool_stream_json import JsonToolStream  # noqa: E402
from pyllamakv.api.tools import parse_tool_calls, plan_tools  # noqa: E402
from test_tools import LLAMA3_LIKE, MISTRAL_LIKE, QWEN_LIKE, TIME, WEATHER  # noqa: E402

H_TWO = ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", '
         '"unit": "C"}}\n</tool_call>\n<tool_call>{"name": "get_time", "arguments": '
         '{"tz": "CET"}}</tool_call>')
REPLIES = [
    (QWEN_LIKE, None, H_TWO),
    (QWEN_LIKE, None, "No call at all, just < and <tool text.\n"),
    (QWEN_LIKE, None, 'Cut: <tool_call>{"name": "get_time", "arguments": {"tz": "UTC"}}'),
    (QWEN_LIKE, None, '<tool_call>not json</tool_call> and text'),
    (QWEN_LIKE, "required", '{"name": "get_time", "arguments": {"tz": "PST"}}\n</tool_call>'),
    (LLAMA3_LIKE, None, '<|python_tag|>{"name": "get_weather", "parameters": '
                        '{"city": "Lima", "unit": "F"}}'),
    (LLAMA3_LIKE, None, 'Plain answer with {braces} later.'),
    (MISTRAL_LIKE, None, '[TOOL_CALLS][{"name": "get_weather", "arguments": '
                         '{"city": "Kyiv", "unit": "C"}}]'),
    (MISTRAL_LIKE, None, 'Just words.'),
    # the JSON families token by token (tool_stream_json.py)
    (LLAMA3_LIKE, None, ' {"name": "get_time", "parameters": {"tz": "UTC"}}  Done.\n'),
    (LLAMA3_LIKE, None, '{"parameters": {"tz": "UTC"}, "name": "get_time"}'),
    (LLAMA3_LIKE, None, '<b>bold</b> and {"name": "x"}'),
    (LLAMA3_LIKE, None, '<|python_tag|>not json'),
    (LLAMA3_LIKE, "required", '{"name": "get_weather", "parameters": {"city": "A\\"b", '
                              '"unit": "C"}}'),
    (MISTRAL_LIKE, None, '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Rome", '
                         '"unit": "C"}}, {"name": "get_time", "arguments": {"tz": "CET"}, '
                         '"id": "abc123def"}]'),
    (MISTRAL_LIKE, None, '[TOOL_CALLS]get_time[ARGS]{"tz": "EST"} then words'),
    (MISTRAL_LIKE, None, '[1, 2] is a list'),
    (MISTRAL_LIKE, "required", '[{"name": "get_time", "arguments": {"tz": "JST"}}]'),
]


def _cut(text, rng):
    out, i = [], 0
    while i < len(text):
        n = rng.randint(1, 7)
        out.append(text[i:i + n])
        i += n
    return out


def _replay(plan, text, rng, reason="stop"):
    parts = _cut(text, rng)
    pieces = [Piece(p) for p in parts[:-1]] + [Piece(parts[-1], finish_reason=reason)]
    chunks = list(tool_chat_chunks(iter(pieces), plan, "m"))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    content = "".join(d.get("content", "") for d in deltas)
    return chunks, content, merge_calls(deltas)


def merge_calls(deltas):
    """The calls a client assembles from tool_calls deltas (OpenAI's: by index, the
    first delta of a call has its id, type and name, arguments are concatenated)."""
    calls = []
    for d in deltas:
        for tc in d.get("tool_calls", []):
            if tc["index"] == len(calls):
                calls.append({"index": tc["index"], "id": tc["id"], "type": tc["type"],
                              "function": {"name": tc["function"]["name"], "arguments": ""}})
            assert tc["index"] == len(calls) - 1, "deltas of an earlier call after a later one"
            calls[-1]["function"]["arguments"] += tc["function"].get("arguments", "")
    return calls


@pytest.mark.parametrize("case", range(len(REPLIES)))
def test_stream_equals_whole(case):
    tpl, forced, text = REPLIES[case]
    tools = [WEATHER, TIME]
    plan = plan_tools(tpl, tools, forced)
    want_content, want_calls = parse_tool_calls(text, plan)
    for seed in range(20):
        chunks, content, calls = _replay(plan, text, random.Random(seed))
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
        assert [c["index"] for c in calls] == list(range(len(calls)))
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
            [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in want_calls], \
            f"seed {seed}: {text!r}"
        assert all(c["id"].startswith("call_") and c["type"] == "function" for c in calls)
        if want_calls:
            assert content.strip() == (want_content or "").strip(), f"seed {seed}: {text!r}"
        elif case != 3:   # an unparsable block streams as the text it was
            assert content == want_content, f"seed {seed}: {text!r}"
        reason = chunks[-1]["choices"][0]["finish_reason"]
        assert reason == ("tool_calls" if want_calls else "stop")


def test_content_and_first_call_go_out_early():
    plan = plan_tools(QWEN_LIKE, [WEATHER, TIME])
    ts = ToolStream(plan)
    end_first = H_TWO.index("</tool_call>") + len("</tool_call>")
    out = ts.feed(H_TWO[:20])
    assert "".join(d.get("content", "") for d in out) == H_TWO[:12]   # "Let me look." before the tag
    out = ts.feed(H_TWO[20:end_first])
    assert [d["tool_calls"][0]["function"]["name"] for d in out
            if "name" in d.get("tool_calls", [{}])[0].get("function", {})] == \
        ["get_weather"]          # the first call before the reply has ended
    out = ts.feed(H_TWO[end_first:]) + ts.finish()
    assert {d["tool_calls"][0]["index"] for d in out if "tool_calls" in d} == {1}


def test_call_streams_token_by_token():
    """The name goes out as soon as it is known, the arguments piece by piece, before
    the block closes; the pieces put together are the whole call's."""
    plan = plan_tools(QWEN_LIKE, [WEATHER])
    args = {"city": random.choice(["Oslo", "Lima", "Kyiv"]), "unit": random.choice("CF")}
    text = '<tool_call>\n{"name": "get_weather", "arguments": %s}\n</tool_call>' % (
        json.dumps(args))
    ts = ToolStream(plan)
    close = text.index("}\n</tool_call>")
    deltas = []
    for ch in text[:close]:
        deltas += ts.feed(ch)
    before_close = merge_calls(deltas)
    assert before_close[0]["function"]["name"] == "get_weather"
    n_arg_deltas = sum(1 for d in deltas if d.get("tool_calls", [{}])[0].get("function", {})
                       .get("arguments"))
    assert n_arg_deltas > 5               # one per character fed, bar the held ones
    for ch in text[close:]:
        deltas += ts.feed(ch)
    deltas += ts.finish()
    (call,) = merge_calls(deltas)
    assert json.loads(call["function"]["arguments"]) == args


def test_cut_block_streams_as_its_text():
    plan = plan_tools(QWEN_LIKE, [WEATHER])
    text = 'x <tool_call>{"name": "get_wea'
    _, content, calls = _replay(plan, text, random.Random(0), reason="length")
    assert calls == [] and content == text


def test_partial_tag_is_held_back():
    plan = plan_tools(QWEN_LIKE, [WEATHER])
    ts = ToolStream(plan)
    assert ts.feed("hello <tool_") == [{"content": "hello"}]   # " <tool_" may open a call
    assert ts.feed("kit>") == [{"content": " <tool_kit>"}]


JSON_CALLS = [
    (LLAMA3_LIKE, '<|python_tag|>{"name": "get_weather", "parameters": %s}'),
    (LLAMA3_LIKE, '{"name": "get_weather", "parameters": %s}'),
    (MISTRAL_LIKE, '[TOOL_CALLS][{"name": "get_weather", "arguments": %s}]'),
    (MISTRAL_LIKE, '[TOOL_CALLS]get_weather[ARGS]%s'),
]


@pytest.mark.parametrize("tpl,shape", JSON_CALLS)
def test_json_family_call_streams_token_by_token(tpl, shape):
    """llama3 and mistral: the name goes out once known, the arguments piece by
    piece before the call's JSON has closed; put together, the whole call's."""
    plan = plan_tools(tpl, [WEATHER, TIME])
    assert plan.family in ("llama3", "mistral")
    args = {"city": random.choice(["Oslo", "Lima", "Kyiv", "Quito"]),
            "unit": random.choice("CF")}
    text = shape % json.dumps(args)
    close = text.rindex(args["unit"])       # before the arguments' last value
    ts = ToolStream(plan) if plan.family == "hermes" else JsonToolStream(plan)
    deltas = []
    for ch in text[:close]:
        deltas += ts.feed(ch)
    (early,) = merge_calls(deltas)
    assert early["function"]["name"] == "get_weather"
    n_arg_deltas = sum(1 for d in deltas if d.get("tool_calls", [{}])[0].get("function", {})
                       .get("arguments"))
    assert n_arg_deltas > 5
    for ch in text[close:]:
        deltas += ts.feed(ch)
    deltas += ts.finish()
    (call,) = merge_calls(deltas)
    assert json.loads(call["function"]["arguments"]) == args
    assert not any("content" in d for d in deltas)


def test_json_family_content_streams_at_once():
    plan = plan_tools(LLAMA3_LIKE, [WEATHER])
    ts = JsonToolStream(plan)
    assert ts.feed("<") == []                    # may be <|python_tag|>
    assert ts.feed("b>Hi ") == [{"content": "<b>Hi"}]
    assert ts.feed("there") == [{"content": " there"}]
