"""The server through the official openai client (and httpx), on the default model.

The reference for every answer is the library itself: a Llama over the same
loaded model, called directly with the same parameters, must give the same
text (greedy, or sampled with the same seed).
"""
import concurrent.futures as cf
import json
import time

import pytest

from _server import InProcess, need_server_deps, openai_client
from _smollm2 import require_model_path

need_server_deps()
openai = pytest.importorskip("openai")
import httpx  # noqa: E402

PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):",
           "The three primary colors are", "Water boils at", "My favourite fruit is",
           "In 1969, humans", "The quick brown fox"]


@pytest.fixture(scope="module")
def served():
    path = require_model_path()
    from pyllamakv.server import ServerSettings, create_app
    from pyllamakv.server.engines import load_engines
    from pyllamakv.server.slots import SlotPool
    settings = ServerSettings(path, parallel=2, n_ctx=512, queue_size=16, n_threads=1)
    pool = SlotPool(load_engines(settings), settings.queue_size)
    server = InProcess(create_app(settings, pool))
    yield server, pool, settings
    server.stop()
    pool.close()


@pytest.fixture(scope="module")
def ref(served):
    """A Llama of its own over the server's model: the reference."""
    from pyllamakv import Llama
    _, pool, s = served
    engine = pool.slots[0].engine
    return Llama(engine.model_path, n_ctx=s.n_ctx, n_threads=1, _model=engine.model)


@pytest.fixture(scope="module")
def client(served):
    return openai_client(served[0].url)


def test_completion_matches_llama(client, ref):
    r = client.completions.create(model="m", prompt=PROMPTS[0], max_tokens=8, temperature=0)
    want = ref(PROMPTS[0], max_tokens=8, temperature=0)
    assert r.choices[0].text == want["choices"][0]["text"]
    assert r.choices[0].text.startswith(" Paris")
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 8
    assert r.usage.prompt_tokens == want["usage"]["prompt_tokens"]
    assert r.object == "text_completion"


def test_prompt_list_one_choice_each(client, ref):
    """A list of prompts (strings and token lists): one choice per prompt, by index,
    each the text of its own request, whole and streamed; usage sums them."""
    prompts = [PROMPTS[1], PROMPTS[3], PROMPTS[4]]
    want = [ref(p, max_tokens=6, temperature=0)["choices"][0]["text"] for p in prompts]
    r = client.completions.create(model="m", prompt=prompts, max_tokens=6, temperature=0)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert [c.text for c in r.choices] == want
    assert r.usage.completion_tokens == 18
    ids = ref.tokenize(prompts[0].encode(), special=True)
    r = client.completions.create(model="m", prompt=[ids, ids], max_tokens=6, temperature=0)
    assert [c.text for c in r.choices] == [want[0]] * 2
    texts = [""] * 3
    for chunk in client.completions.create(model="m", prompt=prompts, max_tokens=6,
                                           temperature=0, stream=True):
        texts[chunk.choices[0].index] += chunk.choices[0].text
    assert texts == want


def test_chat_matches_llama(client, ref):
    msgs = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Name a planet."}]
    r = client.chat.completions.create(model="m", messages=msgs, max_tokens=12, temperature=0)
    want = ref.create_chat_completion(msgs, max_tokens=12, temperature=0)
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == want["choices"][0]["message"]["content"]
    assert r.choices[0].message.content
    assert r.choices[0].finish_reason == want["choices"][0]["finish_reason"]
    assert r.usage.total_tokens == want["usage"]["total_tokens"]


def test_streaming_equals_whole(client):
    kw = dict(model="m", prompt=PROMPTS[1], max_tokens=10, temperature=0)
    whole = client.completions.create(**kw).choices[0].text
    chunks = list(client.completions.create(stream=True, **kw))
    assert len(chunks) > 2 and "".join(c.choices[0].text for c in chunks) == whole
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])

    msgs = [{"role": "user", "content": "Say hello."}]
    ckw = dict(model="m", messages=msgs, max_tokens=10, temperature=0)
    whole = client.chat.completions.create(**ckw).choices[0].message.content
    chunks = list(client.chat.completions.create(stream=True, **ckw))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole
    assert chunks[-1].choices[0].finish_reason is not None


def test_sse_wire_format(served):
    url = served[0].url + "/v1/completions"
    body = {"prompt": PROMPTS[2], "max_tokens": 3, "temperature": 0, "stream": True}
    with httpx.stream("POST", url, json=body, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        text = r.read().decode()
    events = [e for e in text.split("\n\n") if e.strip()]
    assert all(e.startswith("data: ") for e in events), events
    assert events[-1] == "data: [DONE]"


def test_stop_and_max_tokens(client, ref):
    full = ref(PROMPTS[0], max_tokens=12, temperature=0)["choices"][0]["text"]
    assert "." in full            # " Paris. ..." - the stop string occurs
    r = client.completions.create(model="m", prompt=PROMPTS[0], max_tokens=12, temperature=0,
                                  stop=["."])
    assert r.choices[0].text == full[:full.index(".")]
    assert r.choices[0].finish_reason == "stop"
    for n in (1, 3, 5):
        r = client.completions.create(model="m", prompt=PROMPTS[3], max_tokens=n, temperature=0)
        assert r.usage.completion_tokens == n and r.choices[0].finish_reason == "length"


def test_seed_reproduces(client, ref):
    kw = dict(model="m", prompt=PROMPTS[1], max_tokens=12, temperature=1.0, top_p=1.0,
              extra_body={"top_k": 0, "min_p": 0.0})
    a = client.completions.create(seed=1234, **kw).choices[0].text
    b = client.completions.create(seed=1234, **kw).choices[0].text
    others = {client.completions.create(seed=s, **kw).choices[0].text for s in (1, 2, 3)}
    want = ref(PROMPTS[1], max_tokens=12, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
               seed=1234)["choices"][0]["text"]
    assert a == b == want
    assert len(others | {a}) > 1


def test_concurrent_equal_sequential(client):
    def one(p):
        return client.completions.create(model="m", prompt=p, max_tokens=12,
                                         temperature=0).choices[0].text
    sequential = [one(p) for p in PROMPTS]
    with cf.ThreadPoolExecutor(len(PROMPTS)) as ex:
        concurrent = list(ex.map(one, PROMPTS))
    assert concurrent == sequential
    assert len(set(sequential)) == len(PROMPTS)


def test_n_choices_and_prompt_list_order(client, ref):
    """n choices per prompt, index p * n + i as OpenAI orders them; greedy: each the
    text of a request for it alone; usage counts each prompt once."""
    prompts = [PROMPTS[5], PROMPTS[6]]
    want = [ref(p, max_tokens=5, temperature=0) for p in prompts]
    r = client.completions.create(model="m", prompt=prompts, n=3, max_tokens=5, temperature=0)
    assert [c.index for c in r.choices] == list(range(6))
    assert [c.text for c in r.choices] == [w["choices"][0]["text"] for w in want
                                           for _ in range(3)]
    assert r.usage.prompt_tokens == sum(w["usage"]["prompt_tokens"] for w in want)
    assert r.usage.completion_tokens == 30
    texts = [""] * 6
    ids = set()
    for chunk in client.completions.create(model="m", prompt=prompts, n=3, max_tokens=5,
                                           temperature=0, stream=True):
        ids.add(chunk.id)
        for c in chunk.choices:
            texts[c.index] += c.text
    assert texts == [c.text for c in r.choices] and len(ids) == 1


def test_n_seeded_choices_are_reproducible(client, ref):
    """Seeded: choice i is the completion of seed + i, so the n choices differ."""
    kw = dict(max_tokens=10, temperature=1.0, top_p=1.0)
    extra = {"top_k": 0, "min_p": 0.0}
    r = client.completions.create(model="m", prompt=PROMPTS[1], n=3, seed=77,
                                  extra_body=extra, **kw)
    want = [ref(PROMPTS[1], seed=77 + i, top_k=0, min_p=0.0, **kw)["choices"][0]["text"]
            for i in range(3)]
    assert [c.text for c in r.choices] == want
    assert len(set(want)) > 1


def test_chat_n_choices(client, ref):
    msgs = [{"role": "user", "content": "Name a colour."}]
    want = ref.create_chat_completion(msgs, max_tokens=6, temperature=0)
    r = client.chat.completions.create(model="m", messages=msgs, n=2, max_tokens=6,
                                       temperature=0)
    assert [c.index for c in r.choices] == [0, 1]
    assert [c.message.content for c in r.choices] == \
        [want["choices"][0]["message"]["content"]] * 2
    assert r.usage.prompt_tokens == want["usage"]["prompt_tokens"]
    texts = ["", ""]
    for chunk in client.chat.completions.create(model="m", messages=msgs, n=2, max_tokens=6,
                                                temperature=0, stream=True):
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
    assert texts == [c.message.content for c in r.choices]


def test_prompt_list_is_one_job_per_prompt(served, client):
    """A prompt list runs as a job per prompt (free slots take them at once)."""
    pool = served[1]
    before = sum(s.n_jobs for s in pool.slots)
    client.completions.create(model="m", prompt=PROMPTS[:4], max_tokens=2, temperature=0)
    t_end = time.monotonic() + 10     # a slot counts its job just after the answer leaves
    while sum(s.n_jobs for s in pool.slots) - before < 4 and time.monotonic() < t_end:
        time.sleep(0.02)
    assert sum(s.n_jobs for s in pool.slots) - before == 4


def test_models_health_metrics(served, client):
    server, pool, _ = served
    models = client.models.list()
    assert [m.id for m in models.data] == ["SmolLM2-135M-Instruct.Q4_1.gguf"]
    h = httpx.get(server.url + "/health").json()
    assert h["status"] == "ok" and h["slots_idle"] + h["slots_busy"] == 2
    client.completions.create(model="m", prompt=PROMPTS[4], max_tokens=2, temperature=0)
    text = httpx.get(server.url + "/metrics").text
    lines = {ln.split(" ")[0]: float(ln.split(" ")[1]) for ln in text.splitlines()
             if ln and not ln.startswith("#")}
    assert lines['pyllamakv_requests_total{endpoint="/v1/completions",status="200"}'] >= 1
    assert lines["pyllamakv_generated_tokens_total"] >= 2
    assert lines["pyllamakv_prompt_tokens_total"] >= 1
    assert lines["pyllamakv_slots"] == 2 and lines["pyllamakv_queue_length"] == 0
    for name in ("pyllamakv_kv_resident_bytes", "pyllamakv_kv_bytes_streamed_total",
                 "pyllamakv_kv_resident_chunks"):
        assert f'{name}{{slot="0"}}' in lines and f'{name}{{slot="1"}}' in lines


def test_api_key(served):
    from pyllamakv.server import ServerSettings, create_app
    _, pool, s = served
    settings = ServerSettings(s.model, parallel=2, n_ctx=512, api_key="sekrit")
    keyed = InProcess(create_app(settings, pool))
    try:
        body = {"prompt": "Hi", "max_tokens": 1}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sekrit"}):
            r = httpx.post(keyed.url + "/v1/completions", json=body, headers=headers)
            assert r.status_code == 401, headers
            assert r.json()["error"]["type"] == "authentication_error"
        assert httpx.get(keyed.url + "/v1/models").status_code == 401
        assert httpx.get(keyed.url + "/metrics").status_code == 401
        assert httpx.get(keyed.url + "/health").status_code == 200
        c = openai.OpenAI(base_url=keyed.url + "/v1", api_key="sekrit", max_retries=0)
        assert c.completions.create(model="m", prompt="Hi", max_tokens=2).usage.completion_tokens
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=keyed.url + "/v1", api_key="nope", max_retries=0) \
                .completions.create(model="m", prompt="Hi", max_tokens=2)
    finally:
        keyed.stop()
    pool.on_done = served[0].app.state.metrics.job_done   # back to the module's app


BAD = [
    (b'{"prompt": "Hi", "max_tokens": ', None),                        # malformed JSON
    (b'[1, 2, 3]', None),                                              # not an object
    ({"prompt": 12}, "prompt"),                                        # wrong type
    ({"prompt": "Hi", "max_tokens": "8"}, "max_tokens"),
    ({"prompt": "Hi", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "Hi", "temperature": -1}, "temperature"),              # bad sampling
    ({"prompt": "Hi", "top_p": 1.5}, "top_p"),
    ({"prompt": "Hi", "top_k": -3}, "top_k"),
    ({"prompt": "Hi", "stream": "yes"}, "stream"),
    ({"prompt": "Hi", "logit_bias": {"x": 1}}, "logit_bias"),
    ({"prompt": "Hi", "n": 0}, "n"),
    ({"prompt": "Hi", "n": 129}, "n"),
    ({"prompt": "Hi", "n": "2"}, "n"),
    ({"prompt": ["Hi", "Ho"], "n": 10}, "n"),                          # 20 jobs > 2 + 16
    ({"prompt": "word " * 700}, "prompt"),                             # over the context
    ({"prompt": []}, None),
    ({"prompt": ["Hi", []]}, None),                                  # an empty one of a list
    ({"prompt": ["Hi", "word " * 700]}, "prompt"),
    ({}, "prompt"),
]


@pytest.mark.parametrize("body,param", BAD, ids=range(len(BAD)))
def test_bad_completion_requests_get_400(served, body, param):
    url = served[0].url + "/v1/completions"
    r = (httpx.post(url, content=body, headers={"content-type": "application/json"})
         if isinstance(body, bytes) else httpx.post(url, json=body, timeout=60))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    extra = {"n_prompt_tokens", "n_ctx"} if err["code"] == "context_length_exceeded" else set()
    assert set(err) == {"message", "type", "param", "code"} | extra and err["message"]
    # over the context: llama-server's error type, with OpenAI's code
    assert err["type"] == ("exceed_context_size_error" if err["code"] == "context_length_exceeded"
                           else "invalid_request_error")
    if param is not None:
        assert err["param"] == param, err
    ok = httpx.post(url, json={"prompt": "Hi", "max_tokens": 2, "temperature": 0}, timeout=60)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2


def test_bad_chat_requests_get_400(served, client):
    url = served[0].url + "/v1/chat/completions"
    for body in ({"messages": []}, {"messages": [{"role": "wizard", "content": "x"}]},
                 {"messages": "hello"}, {"messages": [{"role": "user", "content": "x"}],
                                         "presence_penalty": 9},
                 {"messages": [{"role": "user", "content": "word " * 700}]},
                 {"messages": [{"role": "user", "content": "x"}, {"role": "assistant",
                               "content": "a"}, {"role": "assistant", "content": "b"}]}):
        r = httpx.post(url, json=body, timeout=60)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                       temperature=5)
    assert e.value.status_code == 400


def test_native_n_probs_carry_token_ids(served, ref):
    """/completion's n_probs: each token and each alternative with its id, the id's
    text and bytes; the OpenAI answer of the same request carries no ids."""
    url = served[0].url
    body = {"prompt": PROMPTS[3], "n_probs": 5, "temperature": 0, "n_predict": 4}
    for stream in (False, True):
        r = httpx.post(url + "/completion", json=dict(body, stream=stream), timeout=60)
        events = [json.loads(x[6:]) for x in r.text.splitlines() if x.startswith("data: ")] \
            if stream else [r.json()]
        probs = [p for e in events for p in e.get("completion_probabilities", [])]
        assert len(probs) == 4
        for p in probs:
            assert ref.detokenize([p["id"]]).decode() == p["token"]
            assert len(p["top_logprobs"]) == 5
            assert p["id"] == p["top_logprobs"][0]["id"]          # greedy: the likeliest
            for alt in p["top_logprobs"]:
                assert bytes(alt["bytes"]) == ref.detokenize([alt["id"]], special=True)
                assert alt["logprob"] <= 0.0
    r = httpx.post(url + "/v1/completions", json={"prompt": PROMPTS[3], "logprobs": 2,
                                                  "max_tokens": 2, "temperature": 0})
    assert set(r.json()["choices"][0]["logprobs"]) == {"tokens", "text_offset",
                                                       "token_logprobs", "top_logprobs"}


NO_END = {"0": -100, "2": -100, "4": -100}   # SmolLM2's end tokens: never sampled


def wait_idle(url: str, timeout_s: float = 10.0) -> None:
    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        h = httpx.get(url + "/health").json()
        if h["slots_busy"] == 0 and h["queue_length"] == 0:
            return
        time.sleep(0.02)
    raise AssertionError(f"slots still busy after {timeout_s} s: {h}")


def test_disconnect_mid_stream_frees_the_slot(served):
    server, pool, _ = served
    cancelled0 = server.app.state.metrics.cancelled._value.get()
    body = {"prompt": PROMPTS[5], "max_tokens": 480, "temperature": 0.8, "stream": True,
            "seed": 7, "logit_bias": NO_END}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        got = [next(lines) for _ in range(4)]
        assert got[0].startswith("data: ")
    wait_idle(server.url)     # long before 480 tokens could have been generated
    assert server.app.state.metrics.cancelled._value.get() == cancelled0 + 1
    r = httpx.post(server.url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2})
    assert r.status_code == 200


def test_disconnect_mid_stream_frees_every_choice_slot(served):
    """n = 2 streamed on two slots: the client leaves, both slots free."""
    server, pool, _ = served
    cancelled0 = server.app.state.metrics.cancelled._value.get()
    body = {"prompt": PROMPTS[6], "max_tokens": 480, "temperature": 0.8, "stream": True,
            "seed": 9, "n": 2, "logit_bias": NO_END}
    with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        got = [next(lines) for _ in range(8)]
        assert got[0].startswith("data: ")
    wait_idle(server.url)     # long before 2 x 480 tokens could have been generated
    t_end = time.monotonic() + 10     # on_done counts a job just after its slot frees
    while server.app.state.metrics.cancelled._value.get() < cancelled0 + 2 \
            and time.monotonic() < t_end:
        time.sleep(0.02)
    assert server.app.state.metrics.cancelled._value.get() == cancelled0 + 2
    assert pool.busy == 0 and pool.queue_length == 0


def test_time_limit_ends_with_length(client):
    r = client.completions.create(model="m", prompt=PROMPTS[6], max_tokens=480,
                                  temperature=0.8, seed=3, logit_bias=NO_END,
                                  extra_body={"timeout": 1.0})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens < 480       # 480 tokens take several seconds
