"""Speculative decoding per request (llama-server's speculative.* fields) and its
/metrics counters, through the openai client and httpx on the default model.

Greedy output with any drafter is the plain greedy output (spec_decode.py's
exactness); the counters move by what the request's timings say.
"""
import pytest

from _server import InProcess, need_server_deps, openai_client
from _smollm2 import model_path, require_model_path

need_server_deps()
openai = pytest.importorskip("openai")
import httpx  # noqa: E402

# text that repeats itself: prompt lookup finds n-grams to draft from, and the
# model continues the pattern
PROMPT = "a b c d e f g " * 3 + "a b"
SPEC = ("pyllamakv_spec_decode_num_draft_tokens_total",
        "pyllamakv_spec_decode_num_accepted_tokens_total", "pyllamakv_spec_decode_num_drafts_total")


def start(**kw):
    path = require_model_path()
    from pyllamakv.server import ServerSettings, create_app
    from pyllamakv.server.engines import load_engines
    from pyllamakv.server.slots import SlotPool
    settings = ServerSettings(path, parallel=1, n_ctx=512, queue_size=4, n_threads=1, **kw)
    pool = SlotPool(load_engines(settings), settings.queue_size)
    return InProcess(create_app(settings, pool)), pool


@pytest.fixture(scope="module")
def served():
    server, pool = start()
    yield server, pool
    server.stop()
    pool.close()


@pytest.fixture(scope="module")
def client(served):
    return openai_client(served[0].url)


def counters(url: str) -> dict:
    text = httpx.get(url + "/metrics").text
    vals = {ln.split(" ")[0]: float(ln.split(" ")[1]) for ln in text.splitlines()
            if ln and not ln.startswith("#")}
    return {k: vals[k] for k in SPEC}


def complete(client, **extra):
    r = client.completions.create(model="m", prompt=PROMPT, max_tokens=24, temperature=0,
                                  extra_body=extra or None)
    return r.choices[0].text


@pytest.fixture(scope="module")
def plain(client):
    return complete(client)


def test_counters_exist_and_plain_requests_leave_them(served, client, plain):
    url = served[0].url
    before = counters(url)
    assert complete(client) == plain
    assert counters(url) == before, "a request without speculation moved the counters"


def test_lookup_per_request_is_exact_and_counted(served, client, plain):
    url = served[0].url
    before = counters(url)
    text = complete(client, **{"speculative.type": "ngram-simple", "speculative.n_max": 4})
    assert text == plain, "greedy speculation changed the text"
    after = counters(url)
    drafted, accepted, passes = (after[k] - before[k] for k in SPEC)
    assert drafted > 0 and passes > 0, (before, after)
    assert 0 < accepted <= drafted, (drafted, accepted)
    assert drafted <= 4 * passes, f"n_max=4 but {drafted} drafts in {passes} passes"


def test_n_max_zero_and_none_turn_it_off(served, client, plain):
    url = served[0].url
    before = counters(url)
    assert complete(client, **{"speculative.type": "lookup", "speculative.n_max": 0}) == plain
    assert complete(client, **{"speculative.type": "none"}) == plain
    assert counters(url) == before


def test_n_min_drops_short_drafts(served, client, plain):
    url = served[0].url
    before = counters(url)
    text = complete(client, **{"speculative.type": "lookup", "speculative.n_max": 3,
                               "speculative.n_min": 3})
    assert text == plain
    after = counters(url)
    drafted, passes = after[SPEC[0]] - before[SPEC[0]], after[SPEC[2]] - before[SPEC[2]]
    # every verified draft is 3 long (the adaptive lookup may verify none in a pass)
    assert drafted % 3 == 0 and drafted <= 3 * passes, (drafted, passes)


def test_streaming_with_speculation_equals_whole(client, plain):
    chunks = client.completions.create(model="m", prompt=PROMPT, max_tokens=24, temperature=0,
                                       stream=True, extra_body={"speculative.type": "lookup"})
    assert "".join(c.choices[0].text for c in chunks) == plain


def test_sampled_chat_with_speculation_runs(client):
    r = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": PROMPT}], max_tokens=12,
        temperature=0.7, seed=3, extra_body={"speculative.type": "lookup"})
    assert r.usage.completion_tokens <= 12 and r.choices[0].message.content


@pytest.mark.parametrize("fields, needle", [
    ({"speculative.type": "medusa"}, "speculative.type must be one of"),
    ({"speculative.n_max": -1}, "speculative.n_max"),
    ({"speculative.n_max": 1000}, "speculative.n_max"),
    ({"speculative.n_min": "2"}, "speculative.n_min"),
    ({"speculative.type": "draft-simple"}, "--draft"),
])
def test_bad_fields_get_400(served, fields, needle):
    r = httpx.post(served[0].url + "/v1/completions",
                   json={"prompt": "x", "max_tokens": 2, **fields}, timeout=60)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"], r.text


def test_mtp_without_an_mtp_block_gets_400_naming_the_field(served):
    """The default model has no MTP (nextn) block: 400 before the request queues."""
    r = httpx.post(served[0].url + "/v1/chat/completions",
                   json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 2,
                         "speculative.type": "mtp"}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "speculative.type" and "MTP" in err["message"], err
    ok = httpx.post(served[0].url + "/v1/completions",
                    json={"prompt": "x", "max_tokens": 2, "temperature": 0}, timeout=60)
    assert ok.status_code == 200


def test_server_default_and_draft_model(plain):
    """--draft MODEL.gguf: speculation by default with the draft model (here the
    target itself, so nearly every draft is kept); a request can turn it off."""
    server, pool = start(draft_model=model_path())
    try:
        c = openai_client(server.url)
        before = counters(server.url)
        assert complete(c) == plain
        mid = counters(server.url)
        drafted, accepted = (mid[k] - before[k] for k in SPEC[:2])
        assert drafted > 0 and accepted >= 0.75 * drafted, (drafted, accepted)
        assert complete(c, **{"speculative.type": "none"}) == plain
        assert counters(server.url) == mid
        assert complete(c, **{"speculative.n_max": 2}) == plain
        assert pool.slots[0].engine.spec_draft_model.num_pred_tokens == 4   # restored
    finally:
        server.stop()
        pool.close()


def test_settings_check_the_draft():
    from pyllamakv.server import ServerSettings
    with pytest.raises(ValueError, match="draft_model"):
        ServerSettings(draft_model="")
