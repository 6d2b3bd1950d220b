"""Every OpenAI feature of the server through the official openai client, default model.

Tools (forced and streamed as tool-call deltas), response_format json_object /
json_schema, llama-server's grammar and json_schema fields, chat and text
logprobs, max_completion_tokens, stream_options.include_usage, n,
embeddings, cached_tokens, system_fingerprint, the first streamed chunk; then
llama-server's paths (un-prefixed, /completion, /tokenize, /detokenize,
/apply-template, /props, /slots, /infill), X-Api-Key, CORS, the request log
and the histograms of /metrics. The reference is the library: a Llama over the
same model called with the same arguments.
"""
import json
import logging
import math
import random
import re
import string
import time

import pytest

from _server import InProcess, need_server_deps, openai_client
from _smollm2 import require_model_path

need_server_deps()
openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("llguidance")
import httpx  # noqa: E402

WORDS = ["river", "apple", "stone", "cloud", "music", "garden", "lamp", "ocean", "paper",
         "window", "horse", "bread", "silver", "forest", "candle", "train"]
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "the weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                   "required": ["city"]}}}


def words(k: int) -> str:
    return " ".join(random.choice(WORDS) for _ in range(k))


@pytest.fixture(scope="module")
def served():
    path = require_model_path()
    from pyllamakv.server import ServerSettings, create_app
    from pyllamakv.server.engines import load_engines
    from pyllamakv.server.slots import SlotPool
    settings = ServerSettings(path, parallel=2, n_ctx=1024, queue_size=16, n_threads=1,
                              slots_endpoint=True, api_key="k1", api_keys=("k2",))
    pool = SlotPool(load_engines(settings), settings.queue_size)
    server = InProcess(create_app(settings, pool))
    yield server, pool
    server.stop()
    pool.close()


@pytest.fixture(scope="module")
def client(served):
    import openai as o
    return o.OpenAI(base_url=served[0].url + "/v1", api_key="k1", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def ref(served):
    from pyllamakv import Llama
    engine = served[1].slots[0].engine
    return Llama(engine.model_path, n_ctx=1024, n_threads=1, _model=engine.model,
                 logits_all=True)


def H(key="k1"):
    return {"Authorization": f"Bearer {key}"}


# ---------------------------------------------------------------- tools

def test_tools_forced_call(client):
    city = random.choice(["Paris", "Oslo", "Lima", "Cairo", "Quito"])
    r = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": f"What is the weather in {city}?"}],
        tools=[TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0, max_tokens=60)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    call = c.message.tool_calls[0]
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), TOOL["function"]["parameters"])


def test_tools_streamed_deltas_equal_whole(client):
    kw = dict(model="m", messages=[{"role": "user", "content": f"Weather? {words(3)}"}],
              tools=[TOOL], tool_choice="required", temperature=0, max_tokens=60)
    whole = client.chat.completions.create(**kw).choices[0].message.tool_calls[0]
    name, args, reasons = "", "", []
    for ch in client.chat.completions.create(**kw, stream=True):
        for d in ch.choices:
            for tc in d.delta.tool_calls or []:
                name += tc.function.name or ""
                args += tc.function.arguments or ""
            reasons.append(d.finish_reason)
    assert name == whole.function.name == "get_weather"
    assert json.loads(args) == json.loads(whole.function.arguments)
    assert reasons[-1] == "tool_calls"


def test_bad_tools_get_400(served):
    url = served[0].url + "/v1/chat/completions"
    msgs = [{"role": "user", "content": "hi"}]
    for body, param in (({"tools": [TOOL], "tool_choice": {"type": "function", "function":
                                                           {"name": "nope"}}}, None),
                        ({"tools": [TOOL], "parallel_tool_calls": False}, "parallel_tool_calls"),
                        ({"tools": [TOOL], "response_format": {"type": "json_object"}},
                         "response_format")):
        r = httpx.post(url, json={"messages": msgs, **body}, headers=H(), timeout=60)
        assert r.status_code == 400, (body, r.text)
        if param:
            assert r.json()["error"]["param"] == param


# ---------------------------------------------------------------- structured output

def test_response_format_json_object_and_schema(client):
    schema = {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"], "additionalProperties": False}
    msgs = [{"role": "user", "content": f"Describe a person named {words(1)} as JSON."}]
    r = client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=80,
                                       response_format={"type": "json_object"})
    content = r.choices[0].message.content
    if r.choices[0].finish_reason == "stop":     # else cut by max_tokens: an object's start
        assert isinstance(json.loads(content), dict)
    else:
        assert content.lstrip().startswith("{")
    r = client.chat.completions.create(
        model="m", messages=msgs, temperature=0, max_tokens=80,
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_llama_server_grammar_and_json_schema_fields(client):
    pick = random.sample(WORDS, 3)
    grammar = "root ::= " + " | ".join(f'"{w}"' for w in pick)
    r = client.completions.create(model="m", prompt=f"One word: {words(2)}", max_tokens=8,
                                  temperature=1.0, extra_body={"grammar": grammar})
    assert r.choices[0].text in pick
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3}
    r = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Some numbers"}], max_tokens=40,
        temperature=0, extra_body={"json_schema": schema})
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_bad_grammar_and_schema_named(served):
    url = served[0].url + "/v1/chat/completions"
    msgs = [{"role": "user", "content": "hi"}]
    for body, param in (({"grammar": "root ::= ("}, "grammar"),
                        ({"response_format": {"type": "json_schema"}}, "response_format"),
                        ({"response_format": {"type": "xml"}}, "response_format"),
                        ({"grammar": 'root ::= "a"', "json_schema": {}}, "json_schema")):
        r = httpx.post(url, json={"messages": msgs, **body}, headers=H(), timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, (body, r.text)


# ---------------------------------------------------------------- logprobs

def test_chat_logprobs_are_openai_content(client, ref):
    msgs = [{"role": "user", "content": f"Say {words(2)}"}]
    r = client.chat.completions.create(model="m", messages=msgs, temperature=0, max_tokens=6,
                                       logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    want = ref.create_chat_completion(msgs, temperature=0, max_tokens=6, logprobs=True,
                                      top_logprobs=3)["choices"][0]["logprobs"]
    lps = want.get("token_logprobs") or [e["logprob"] for e in want["content"]]
    for got, lp in zip(content, lps):
        assert len(got.top_logprobs) == 3
        assert got.top_logprobs[0].logprob >= got.top_logprobs[-1].logprob
        assert math.isclose(got.logprob, lp, rel_tol=1e-4, abs_tol=1e-4)
        assert got.logprob == got.top_logprobs[0].logprob      # greedy: the best token
        assert bytes(got.bytes).decode() == got.token


def test_completion_logprobs(client):
    r = client.completions.create(model="m", prompt=words(4), max_tokens=5, temperature=0,
                                  logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == 5
    assert all(v <= 0 for v in lp.token_logprobs)
    assert "".join(lp.tokens) == r.choices[0].text


# ---------------------------------------------------------------- limits, usage, n

def test_max_completion_tokens_and_include_usage(client):
    k = random.randint(2, 7)
    msgs = [{"role": "user", "content": f"Write a long story about {words(2)}"}]
    r = client.chat.completions.create(model="m", messages=msgs, max_completion_tokens=k,
                                       temperature=0)
    assert r.usage.completion_tokens == k and r.choices[0].finish_reason == "length"
    chunks = list(client.chat.completions.create(model="m", messages=msgs, temperature=0,
                                                 max_completion_tokens=k, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    first = chunks[0].choices[0].delta       # the key is there, null (llama-server's)
    assert "content" in first.model_fields_set and first.content is None
    assert all(c.usage is None for c in chunks[:-1])
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == k
    assert last.usage.prompt_tokens == r.usage.prompt_tokens
    text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
    assert text == r.choices[0].message.content
    assert {c.system_fingerprint for c in chunks} == {r.system_fingerprint}
    assert r.system_fingerprint.startswith("b")


def test_n_choices_usage_streamed(client):
    msgs = [{"role": "user", "content": words(3)}]
    chunks = list(client.chat.completions.create(model="m", messages=msgs, n=2, seed=7,
                                                 max_tokens=4, stream=True,
                                                 stream_options={"include_usage": True}))
    assert {c.choices[0].index for c in chunks if c.choices} == {0, 1}
    assert chunks[-1].usage.completion_tokens <= 8


def test_cached_tokens(client):
    msgs = [{"role": "system", "content": words(40)}, {"role": "user", "content": "hi"}]
    r1 = client.chat.completions.create(model="m", messages=msgs, max_tokens=2, temperature=0)
    r2 = client.chat.completions.create(model="m", messages=msgs, max_tokens=2, temperature=0)
    # two slots: the second request lands on either; at least one of them reuses
    # nothing the first time, and a prompt's cached part is never all of it
    assert r1.usage.prompt_tokens_details.cached_tokens < r1.usage.prompt_tokens
    r3 = client.chat.completions.create(model="m", messages=msgs, max_tokens=2, temperature=0)
    cached = [r.usage.prompt_tokens_details.cached_tokens for r in (r2, r3)]
    assert max(cached) >= r1.usage.prompt_tokens - 8


def test_unsupported_fields_get_400(served):
    url = served[0].url
    for path, body, param in (
            ("/v1/chat/completions", {"audio": {"voice": "x"}}, "audio"),
            ("/v1/chat/completions", {"store": True}, "store"),
            ("/v1/chat/completions", {"stream_options": {"foo": 1}}, "stream_options.foo"),
            ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
            ("/v1/completions", {"suffix": "x"}, "suffix"),
            ("/v1/completions", {"best_of": 3}, "best_of")):
        body = {**body, "messages": [{"role": "user", "content": "hi"}], "prompt": "hi"}
        r = httpx.post(url + path, json=body, headers=H(), timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, (body, r.text)


# ---------------------------------------------------------------- embeddings

def test_embeddings_server():
    path = require_model_path()
    from pyllamakv import Llama
    from pyllamakv.server import ServerSettings, create_app
    settings = ServerSettings(path, parallel=1, n_ctx=256, n_threads=1, embedding=True)
    server = InProcess(create_app(settings))
    try:
        c = openai_client(server.url)
        texts = [words(3), words(5)]
        r = c.embeddings.create(model="m", input=texts)          # base64 on the wire
        ref = Llama(path, n_ctx=256, n_threads=1, embedding=True, pooling_type="mean")
        want = ref.embed(texts)
        assert [d.index for d in r.data] == [0, 1]
        for d, w in zip(r.data, want):
            assert len(d.embedding) == len(w)
            assert max(abs(a - b) for a, b in zip(d.embedding, w)) < 1e-5
        assert r.usage.prompt_tokens > 0
        f = httpx.post(server.url + "/embeddings", json={"input": texts[0]}).json()
        assert max(abs(a - b) for a, b in zip(f["data"][0]["embedding"], want[0])) < 1e-5
        r = httpx.post(server.url + "/v1/chat/completions",
                       json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 501
        r = httpx.post(server.url + "/v1/embeddings", json={"input": "x", "dimensions": 8})
        assert r.status_code == 400 and r.json()["error"]["param"] == "dimensions"
        ref.close()
    finally:
        server.stop()


def test_embeddings_need_the_flag(served):
    r = httpx.post(served[0].url + "/v1/embeddings", json={"input": "x"}, headers=H())
    assert r.status_code == 501 and "--embedding" in r.json()["error"]["message"]


# ---------------------------------------------------------------- llama-server's paths

def test_unprefixed_paths(served, ref):
    url = served[0].url
    prompt = words(4)
    a = httpx.post(url + "/completions", json={"prompt": prompt, "max_tokens": 4,
                                               "temperature": 0}, headers=H(), timeout=60)
    want = ref(prompt, max_tokens=4, temperature=0)["choices"][0]["text"]
    assert a.json()["content"] == want        # llama-server's: its native completion
    m = httpx.get(url + "/models", headers=H()).json()
    assert m["data"][0]["id"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    c = httpx.post(url + "/chat/completions", json={
        "messages": [{"role": "user", "content": prompt}], "max_tokens": 3}, headers=H(),
        timeout=60)
    assert c.json()["object"] == "chat.completion"


def test_native_completion(served, ref):
    url = served[0].url
    prompt, k = words(5), random.randint(3, 8)
    want = ref(prompt, max_tokens=k, temperature=0)["choices"][0]["text"]
    r = httpx.post(url + "/completion", json={"prompt": prompt, "n_predict": k,
                                              "temperature": 0}, headers=H(), timeout=60).json()
    assert r["content"] == want and r["stop"] is True and r["stop_type"] == "limit"
    assert r["tokens_predicted"] == k and r["tokens_evaluated"] > 0
    assert set(r["timings"]) >= {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms"}
    with httpx.stream("POST", url + "/completion", json={
            "prompt": prompt, "n_predict": k, "temperature": 0, "stream": True},
            headers=H(), timeout=60) as s:
        events = [json.loads(ln[6:]) for ln in s.iter_lines() if ln.startswith("data: ")]
    assert "".join(e["content"] for e in events) == want
    assert [e["stop"] for e in events][-1] is True and not any(e["stop"] for e in events[:-1])
    r = httpx.post(url + "/completion", json={"prompt": prompt, "ignore_eos": True},
                   headers=H())
    assert r.status_code == 400 and r.json()["error"]["param"] == "ignore_eos"


def test_tokenize_detokenize_template_props_slots_infill(served, ref):
    url = served[0].url
    text = words(6) + " " + "".join(random.choices(string.ascii_letters, k=5))
    t = httpx.post(url + "/tokenize", json={"content": text}, headers=H()).json()["tokens"]
    assert t == ref.tokenize(text.encode(), add_bos=False, special=True)
    d = httpx.post(url + "/detokenize", json={"tokens": t}, headers=H()).json()
    assert d["content"] == text
    p = httpx.post(url + "/tokenize", json={"content": text, "with_pieces": True},
                   headers=H()).json()["tokens"]
    assert "".join(x["piece"] for x in p) == text and [x["id"] for x in p] == t
    msgs = [{"role": "user", "content": text}]
    a = httpx.post(url + "/apply-template", json={"messages": msgs}, headers=H()).json()
    assert text in a["prompt"] and a["prompt"].endswith("<|im_start|>assistant\n")
    props = httpx.get(url + "/props", headers=H()).json()
    assert props["total_slots"] == 2 and props["default_generation_settings"]["n_ctx"] == 1024
    slots = httpx.get(url + "/slots", headers=H()).json()
    assert [s["id"] for s in slots] == [0, 1]
    r = httpx.post(url + "/infill", json={"input_prefix": "def f(", "input_suffix": ")"},
                   headers=H())
    assert r.status_code == 501 and "fill-in-the-middle" in r.json()["error"]["message"]
    r = httpx.post(url + "/detokenize", json={"tokens": [10 ** 9]}, headers=H())
    assert r.status_code == 400


def test_keys_x_api_key_and_cors_off(served):
    url = served[0].url
    assert httpx.get(url + "/v1/models", headers={"X-Api-Key": "k2"}).status_code == 200
    assert httpx.get(url + "/v1/models", headers=H("k2")).status_code == 200
    assert httpx.get(url + "/v1/models", headers={"X-Api-Key": "k3"}).status_code == 401
    r = httpx.options(url + "/v1/models", headers={
        "Origin": "http://evil.example", "Access-Control-Request-Method": "GET"})
    assert "access-control-allow-origin" not in r.headers


def test_cors_origins_and_request_log(served, caplog):
    from pyllamakv.server import ServerSettings, create_app
    _, pool = served
    on_done = pool.on_done
    settings = ServerSettings(pool.slots[0].engine.model_path, parallel=2, n_ctx=1024,
                              cors_origins=("http://ok.example", "localhost"))
    server = InProcess(create_app(settings, pool))
    try:
        pre = {"Access-Control-Request-Method": "POST"}
        ok = httpx.options(server.url + "/v1/chat/completions",
                           headers={"Origin": "http://ok.example", **pre})
        assert ok.headers.get("access-control-allow-origin") == "http://ok.example"
        bad = httpx.options(server.url + "/v1/chat/completions",
                            headers={"Origin": "http://evil.example", **pre})
        assert "access-control-allow-origin" not in bad.headers and bad.status_code == 200
        port = random.randint(1024, 65535)
        for origin, allowed in ((f"http://127.0.0.1:{port}", True), ("http://[::1]", True),
                                ("http://localhost.evil.example", False)):
            r = httpx.options(server.url + "/v1/models", headers={"Origin": origin, **pre})
            assert (r.headers.get("access-control-allow-origin") == origin) == allowed, origin
        with caplog.at_level(logging.INFO, logger="pyllamakv.server"):
            httpx.post(server.url + "/v1/completions", json={"prompt": words(3),
                                                             "max_tokens": 3}, timeout=60)
        line = [r.getMessage() for r in caplog.records
                if r.getMessage().startswith("POST /v1/completions")][-1]
        assert " 200 " in line and "out=" in line and "ttft=" in line and "total=" in line
    finally:
        server.stop()
        pool.on_done = on_done


def test_metrics_histograms(served, client):
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": words(3)}],
                                   max_tokens=4)
    text = httpx.get(served[0].url + "/metrics", headers=H()).text
    for name in ("pyllamakv_time_to_first_token_seconds", "pyllamakv_prefill_seconds",
                 "pyllamakv_decode_seconds", "pyllamakv_inter_token_seconds"):
        assert f"{name}_count" in text, name
    assert 'pyllamakv_request_seconds_bucket{endpoint="/v1/chat/completions",le="600.0"}' \
        in text


# ---------------------------------------------------------------- llama-server's options

def test_llama_server_options(tmp_path):
    """`serve` with llama-server's spellings: -c, -np, -ctk/-ctv, -n, --temp, --seed,
    --api-key-file, --chat-template-file, --slots, --no-metrics, --log-level."""
    require_model_path()
    from _server import Subprocess
    keys = tmp_path / "keys"
    keys.write_text("# keys\nalpha\n\nbeta\n")
    tpl = tmp_path / "t.jinja"
    tpl.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                   "[assistant] ")
    k = random.randint(2, 6)
    s = Subprocess("-c", "512", "-np", "2", "-ctk", "q8_0", "-ctv", "q8_0", "-n", str(k),
                   "--temp", "0", "--seed", "5", "--api-key-file", str(keys),
                   "--chat-template-file", str(tpl), "--slots", "--no-metrics",
                   "--log-level", "info", "-ngl", "0", "-fa", "on", "--jinja", "-t", "1")
    try:
        h = {"X-Api-Key": "beta"}
        assert httpx.get(s.url + "/props", headers={"X-Api-Key": "gamma"}).status_code == 401
        props = httpx.get(s.url + "/props", headers=h).json()
        assert props["total_slots"] == 2 and props["default_generation_settings"]["n_ctx"] == 512
        assert props["chat_template"] == tpl.read_text()
        assert len(httpx.get(s.url + "/slots", headers=h).json()) == 2
        assert httpx.get(s.url + "/metrics", headers=h).status_code == 404
        msgs = [{"role": "user", "content": words(2)}]
        a = httpx.post(s.url + "/apply-template", json={"messages": msgs}, headers=h).json()
        assert a["prompt"] == f"[user] {msgs[0]['content']}\n[assistant] "
        r = httpx.post(s.url + "/v1/chat/completions", json={"messages": msgs},
                       headers={"Authorization": "Bearer alpha"}, timeout=60).json()
        assert r["usage"]["completion_tokens"] <= k       # -n: the default max_tokens
        s.stop()
        log = s.log()
        assert re.search(r"POST /v1/chat/completions 200 in=\d+ out=\d+ ttft=[\d.]+s "
                         r"total=[\d.]+s", log), log
    finally:
        s.stop()


def test_cancelled_stream_counts_as_cancellation(served):
    """A client that leaves mid-stream: status 499 in /metrics and the cancellation
    counter, never a 503."""
    url = served[0].url

    def metric(text: str, name: str) -> float:
        return sum(float(ln.split(" ")[1]) for ln in text.splitlines()
                   if ln.startswith(name) and not ln.startswith("#"))

    before = httpx.get(url + "/metrics", headers=H()).text
    body = {"messages": [{"role": "user", "content": f"Tell a long story about {words(2)}"}],
            "max_tokens": 400, "stream": True, "logit_bias": {"2": -100, "0": -100}}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, headers=H(),
                      timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and '"content":"' in line:
                break                         # one piece, then the client leaves
    key = 'pyllamakv_requests_total{endpoint="/v1/chat/completions",status="499"}'
    t_end = time.monotonic() + 30
    while time.monotonic() < t_end:
        after = httpx.get(url + "/metrics", headers=H()).text
        if metric(after, key) > metric(before, key) and \
                metric(after, "pyllamakv_cancelled_requests_total") > \
                metric(before, "pyllamakv_cancelled_requests_total"):
            break
        time.sleep(0.2)
    assert metric(after, key) == metric(before, key) + 1
    assert metric(after, "pyllamakv_cancelled_requests_total") > \
        metric(before, "pyllamakv_cancelled_requests_total")
    assert 'status="503"' not in after
