"""Tool calling for create_chat_completion: OpenAI ``tools`` in, ``tool_calls`` out.

The tools reach the model through its own chat template (the ``tools``
variable that tool-aware templates render). A template that knows no tools
gets them as a system message in the Hermes format. The model's reply is then
parsed by the family its template belongs to:

- ``hermes`` (Qwen 2.5 / 3, Hermes, and the fallback): ``<tool_call>{"name": ...,
  "arguments": {...}}</tool_call>``, one block per call;
- ``llama3`` (Llama 3.1-3.3): a JSON object ``{"name": ..., "parameters": {...}}``,
  after an optional ``<|python_tag|>``;
- ``mistral``: ``[TOOL_CALLS]`` then a JSON list of ``{"name", "arguments"}``
  (or the newer ``name[ARGS]{...}``).

``tool_choice`` "auto" (the default when tools are given) lets the model choose;
"none" hides the tools; "required" or ``{"type": "function", "function":
{"name": ...}}`` force a call: the prompt then ends with the family's call
opening and a JSON-schema grammar holds the output to a call of the named (or
any) tool with arguments that validate against its ``parameters``. The legacy
``functions`` / ``function_call`` arguments map onto the same.
"""
from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from .grammar import GrammarError, LlamaGrammar

FAMILIES = ("hermes", "llama3", "mistral")
_ARGS_KEY = {"hermes": "arguments", "llama3": "parameters", "mistral": "arguments"}
_FORCED_PREFIX = {"hermes": "<tool_call>\n", "llama3": "", "mistral": "[TOOL_CALLS]"}


class ToolError(GrammarError):
    """tools / tool_choice that are malformed, or name a function that is not given."""


def template_family(template: str) -> tuple[str, bool]:
    """(family, renders_tools) for a chat template's source."""
    renders = "tools" in template
    if "[TOOL_CALLS]" in template or "[AVAILABLE_TOOLS]" in template:
        return "mistral", renders
    if "<|python_tag|>" in template or "ipython" in template:
        return "llama3", renders
    return "hermes", renders and "<tool_call>" in template


@dataclass(slots=True)
class ToolPlan:
    family: str
    tools: list[dict]
    forced: str | None = None           # a function name, "required", or None (auto)
    legacy: bool = False                # called with functions=: also fill function_call
    template_vars: dict = field(default_factory=dict)
    system: str | None = None           # a system message for templates without tools
    prompt_suffix: str = ""             # the forced call's opening, after the generation prompt
    grammar: LlamaGrammar | None = None


def _check_tools(tools: Any) -> list[dict]:
    if not isinstance(tools, list) or not tools:
        raise ToolError("tools must be a non-empty list of {'type': 'function', 'function': {...}}")
    out = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ToolError(f"tools[{i}] must be {{'type': 'function', 'function': "
                            "{'name': str, 'parameters': {...}}}")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise ToolError(f"tools[{i}].function.parameters must be a JSON schema object")
        out.append({"type": "function", "function": {**fn, "parameters": params}})
    return out


def plan_tools(template: str, tools=None, tool_choice=None, functions=None,
               function_call=None) -> ToolPlan | None:
    """What a chat completion with these arguments does; None: no tools."""
    legacy = functions is not None
    if legacy:
        if tools is not None:
            raise ToolError("give tools or functions, not both")
        tools = [{"type": "function", "function": f} for f in (functions or [])]
        tool_choice = ({"type": "function", "function": function_call}
                       if isinstance(function_call, dict) else function_call)
    if tools is None:
        if tool_choice not in (None, "none", "auto"):
            raise ToolError("tool_choice needs tools")
        return None
    tools = _check_tools(tools)
    names = [t["function"]["name"] for t in tools]
    if tool_choice in (None, "auto"):
        forced = None
    elif tool_choice == "none":
        return None
    elif tool_choice == "required":
        forced = "required"
    elif isinstance(tool_choice, dict) and isinstance(tool_choice.get("function"), dict):
        forced = tool_choice["function"].get("name")
        if forced not in names:
            raise ToolError(f"tool_choice names {forced!r}, which is not among the tools {names}")
    else:
        raise ToolError("tool_choice must be 'auto', 'none', 'required' or "
                        "{'type': 'function', 'function': {'name': ...}}")
    family, renders = template_family(template)
    plan = ToolPlan(family, tools, forced, legacy)
    if renders:
        plan.template_vars = {"tools": tools}
    else:
        plan.family = "hermes"
        plan.system = hermes_system_text(tools)
    if forced is not None:
        plan.prompt_suffix = _FORCED_PREFIX[plan.family]
        plan.grammar = LlamaGrammar.from_json_schema(_call_schema(plan))
    return plan


def hermes_system_text(tools: list[dict]) -> str:
    sigs = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return ("You may call one or more functions to answer. The functions are:\n<tools>\n"
            f"{sigs}\n</tools>\nTo call a function, reply with a JSON object of its name and "
            "arguments inside <tool_call></tool_call> tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def _call_schema(plan: ToolPlan) -> dict:
    key = _ARGS_KEY[plan.family]
    chosen = [t for t in plan.tools
              if plan.forced == "required" or t["function"]["name"] == plan.forced]
    calls = [{"type": "object", "additionalProperties": False, "required": ["name", key],
              "properties": {"name": {"const": t["function"]["name"]},
                             key: t["function"]["parameters"]}} for t in chosen]
    one = calls[0] if len(calls) == 1 else {"anyOf": calls}
    if plan.family == "mistral":
        return {"type": "array", "items": one, "minItems": 1, "maxItems": 1}
    return one


def normalize_messages(messages: list[dict], plan: ToolPlan | None) -> list[dict]:
    """Messages as templates take them: text parts joined, a None content of an
    assistant turn with tool_calls as "", the tools' system message first."""
    out = []
    for m in messages:
        if isinstance(m, dict):
            c = m.get("content")
            if isinstance(c, list):
                m = {**m, "content": "".join(p.get("text", "") for p in c
                                             if isinstance(p, dict))}
            elif c is None and ("tool_calls" in m or "function_call" in m):
                m = {**m, "content": ""}
        out.append(m)
    if plan is not None and plan.system:
        if out and isinstance(out[0], dict) and out[0].get("role") == "system":
            out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + plan.system}
        else:
            out.insert(0, {"role": "system", "content": plan.system})
    return out


# --- parsing the reply -------------------------------------------------------------

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)


def _call(obj: Any, key: str) -> dict | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get(key, obj.get("arguments", obj.get("parameters", {})))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": obj["name"], "arguments": json.dumps(args, ensure_ascii=False)}}


def _json_prefix(text: str) -> tuple[Any, str] | None:
    try:
        obj, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError:
        return None
    return obj, text[end:]


def parse_tool_calls(text: str, plan: ToolPlan) -> tuple[str | None, list[dict]]:
    """(content, tool_calls) of a reply; text is what followed plan.prompt_suffix."""
    key = _ARGS_KEY[plan.family]
    calls: list[dict] = []
    if plan.family == "hermes":
        body = (plan.prompt_suffix + text) if plan.forced else text
        for m in _HERMES.finditer(body):
            got = _json_prefix(m.group(1))
            c = _call(got[0], key) if got else None
            if c:
                calls.append(c)
        content = _HERMES.sub("", body).strip() if calls else text
    else:
        s = text.strip()
        for tag in ("<|python_tag|>", "[TOOL_CALLS]"):
            s = s[len(tag):].lstrip() if s.startswith(tag) else s
        got = _json_prefix(s)
        if got is None and plan.family == "mistral" and "[ARGS]" in s:
            name, _, rest = s.partition("[ARGS]")
            got = _json_prefix(rest)
            got = ({"name": name.strip(), "arguments": got[0]}, got[1]) if got else None
        if got is not None:
            objs = got[0] if isinstance(got[0], list) else [got[0]]
            calls = [c for c in (_call(o, key) for o in objs) if c]
        content = got[1].strip() if calls and got else text
    return (content or None) if calls else text, calls
