"""Tool calls: template families, parsing, forced calls on the default model."""
import json

import pytest

from _smollm2 import require_model_path

pytest.importorskip("llguidance")

from pyllamakv.api.tools import ToolError, parse_tool_calls, plan_tools, template_family  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "additionalProperties": False,
                   "required": ["city", "unit"],
                   "properties": {"city": {"type": "string", "maxLength": 20},
                                  "unit": {"type": "string", "enum": ["C", "F"]}}}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"tz": {"type": "string", "maxLength": 10}},
    "required": ["tz"], "additionalProperties": False}}}
QWEN_LIKE = "{% if tools %}<tools>{{ tools }}</tools>{% endif %}<tool_call>"
LLAMA3_LIKE = "{% if tools %}{{ tools }}{% endif %}<|python_tag|>ipython"
MISTRAL_LIKE = "[AVAILABLE_TOOLS]{{ tools }}[/AVAILABLE_TOOLS][TOOL_CALLS]"


@pytest.mark.parametrize("tpl,family", [(QWEN_LIKE, "hermes"), (LLAMA3_LIKE, "llama3"),
                                        (MISTRAL_LIKE, "mistral"), ("{{ messages }}", "hermes")])
def test_families(tpl, family):
    assert template_family(tpl)[0] == family


def test_parse_each_family():
    h = plan_tools(QWEN_LIKE, [WEATHER])
    content, calls = parse_tool_calls(
        'ok <tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}}'
        '\n</tool_call><tool_call>{"name": "get_weather", "arguments": {"city": "Rome", '
        '"unit": "F"}}</tool_call>', h)
    assert [json.loads(c["function"]["arguments"])["city"] for c in calls] == ["Oslo", "Rome"]
    assert content == "ok"
    l3 = plan_tools(LLAMA3_LIKE, [WEATHER])
    _, calls = parse_tool_calls('<|python_tag|>{"name": "get_weather", "parameters": '
                                '{"city": "Lima", "unit": "C"}}', l3)
    assert calls[0]["function"]["name"] == "get_weather"
    m = plan_tools(MISTRAL_LIKE, [WEATHER])
    _, calls = parse_tool_calls('[TOOL_CALLS][{"name": "get_weather", "arguments": '
                                '{"city": "Kyiv", "unit": "C"}}]', m)
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Kyiv", "unit": "C"}
    _, calls = parse_tool_calls('[TOOL_CALLS]get_weather[ARGS]{"city": "Riga", "unit": "F"}', m)
    assert calls[0]["function"]["name"] == "get_weather"
    text = "no call here"
    assert parse_tool_calls(text, h) == (text, [])


def test_plan_errors():
    with pytest.raises(ToolError):
        plan_tools(QWEN_LIKE, [WEATHER], {"type": "function", "function": {"name": "nope"}})
    with pytest.raises(ToolError):
        plan_tools(QWEN_LIKE, [{"type": "function", "function": {}}])
    with pytest.raises(ToolError):
        plan_tools(QWEN_LIKE, None, "required")
    assert plan_tools(QWEN_LIKE, [WEATHER], "none") is None


@pytest.fixture(scope="module")
def llm():
    path = require_model_path()
    from pyllamakv import Llama
    with Llama(path, n_ctx=1024, seed=5) as m:
        yield m


MSGS = [{"role": "user", "content": "What is the weather in Paris, in Celsius?"}]


def test_forced_tool_call_parses(llm):
    r = llm.create_chat_completion(MSGS, tools=[WEATHER, TIME], max_tokens=64,
                                   tool_choice={"type": "function",
                                                "function": {"name": "get_weather"}})
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    args = json.loads(call["function"]["arguments"])
    assert set(args) == {"city", "unit"} and args["unit"] in ("C", "F")


def test_required_tool_call_streamed(llm):
    chunks = list(llm.create_chat_completion(MSGS, tools=[WEATHER, TIME], tool_choice="required",
                                             max_tokens=64, stream=True))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks
             if "tool_calls" in c["choices"][0]["delta"]]
    assert calls and calls[0]["function"]["name"] in ("get_weather", "get_time")
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_legacy_functions(llm):
    r = llm.create_chat_completion(MSGS, functions=[WEATHER["function"]], max_tokens=64,
                                   function_call={"name": "get_weather"})
    msg = r["choices"][0]["message"]
    assert msg["function_call"]["name"] == "get_weather"


def test_tool_results_round_trip(llm):
    msgs = MSGS + [{"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "C"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21 C, sunny"}]
    r = llm.create_chat_completion(msgs, tools=[WEATHER], max_tokens=8)
    assert r["choices"][0]["message"]["role"] == "assistant"
