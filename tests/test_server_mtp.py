"""speculative.type "mtp" per request: a tiny random qwen35 GGUF with an MTP (nextn)
block behind the server (tests/fixtures/tiny_qwen35.py), through the openai client.

Greedy output with the MTP drafter is the plain greedy output (spec_decode.py's
exactness), /metrics counts its drafts like the other drafters', and a slot
runs its MTP block only for a request that drafts with it.
"""
import time

import httpx
import numpy as np
import pytest

from _server import InProcess, need_server_deps, openai_client
from fixtures.tiny_qwen35 import write_tiny_qwen35

need_server_deps()
openai = pytest.importorskip("openai")

from test_server_speculative import SPEC, counters  # noqa: E402

N_VOCAB = 320


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from pyllamakv.server import ServerSettings, create_app
    from pyllamakv.server.engines import load_engines
    from pyllamakv.server.slots import SlotPool
    seed = int(np.random.default_rng().integers(1 << 30))
    path = write_tiny_qwen35(tmp_path_factory.mktemp("srv-mtp") / "mtp.gguf", seed=seed,
                             n_nextn=1)
    settings = ServerSettings(str(path), parallel=2, n_ctx=128, queue_size=4, n_threads=1,
                              type_k="f32", type_v="f32")
    pool = SlotPool(load_engines(settings), settings.queue_size)
    server = InProcess(create_app(settings, pool))
    yield server, pool
    server.stop()
    pool.close()


@pytest.fixture(scope="module")
def client(served):
    return openai_client(served[0].url)


def _complete(client, prompt, n=1, **extra):
    r = client.completions.create(model="m", prompt=prompt, max_tokens=24, temperature=0, n=n,
                                  extra_body=extra or None)
    return [c.text for c in r.choices]


def test_mtp_per_request_is_exact_and_counted(served, client):
    url = served[0].url
    prompt = np.random.default_rng().integers(3, N_VOCAB, 12).tolist()
    before = counters(url)
    slots = served[1].slots
    rows = lambda: [s.engine.mtp_stats()["rows_computed"] for s in slots]
    on = lambda: [s.engine.mtp_stats()["on"] for s in slots]
    rows0 = rows()
    plain = _complete(client, prompt)
    assert counters(url) == before, "a request without speculation moved the counters"
    # the slots run their MTP blocks only for requests that draft with them
    assert rows() == rows0 and not any(on())
    got = _complete(client, prompt, n=2, **{"speculative.type": "mtp", "speculative.n_max": 3})
    assert got == plain * 2, "greedy MTP speculation changed the text"
    assert all(a > b for a, b in zip(rows(), rows0)) and all(on())
    want = [f'pyllamakv_mtp_on{{slot="{s.index}"}} 1.0' for s in slots] + \
        [f'pyllamakv_mtp_rows_total{{slot="{s.index}"}} {float(n)}' for s, n in zip(slots, rows())]
    for _ in range(50):   # the slots' snapshots, taken by their threads after their jobs
        text = httpx.get(url + "/metrics").text
        if all(w in text for w in want):
            break
        time.sleep(0.05)
    assert all(w in text for w in want), [w for w in want if w not in text]
    after = counters(url)
    drafted, accepted, passes = (after[k] - before[k] for k in SPEC)
    assert drafted > 0 and passes > 0, (before, after)
    assert 0 <= accepted <= drafted
    assert all(e.engine.spec_mtp.num_pred_tokens == 3 for e in served[1].slots)
    # n_max sets this request's draft length only: the slots' drafters are restored
    _complete(client, prompt, **{"speculative.type": "mtp", "speculative.n_max": 1})
    assert all(s.engine.spec_mtp.num_pred_tokens == 3 for s in served[1].slots)


def test_streamed_mtp_equals_whole(client):
    prompt = np.random.default_rng().integers(3, N_VOCAB, 9).tolist()
    whole = _complete(client, prompt, **{"speculative.type": "mtp"})[0]
    chunks = client.completions.create(model="m", prompt=prompt, max_tokens=24, temperature=0,
                                       stream=True, extra_body={"speculative.type": "mtp"})
    assert "".join(c.choices[0].text for c in chunks) == whole
