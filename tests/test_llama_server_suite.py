"""llama.cpp's own server tests, run against `pyllamakv serve` on the default model.

The suite (``tools/server/tests`` of the llama.cpp source vendored in
llama-cpp-python 0.3.36's sdist) is fetched with pip when this test runs and
unpacked into a temporary folder: nothing of it is in this repository. Its
``utils.ServerProcess`` starts the executable named by LLAMA_SERVER_BIN_PATH
with llama-server's options; that is a small script written here that runs
``tests/llama_server_shim.py`` (llama-server's argv mapped onto `serve`'s,
the model options dropped: the default model is served), and
``tests/llama_server_plugin.py`` turns off the suite's model downloads.

The target: at least 90% of the tests that apply to an OpenAI-compatible
server with the default model pass. What does not apply, and why:

Whole files
- test_compat_anthropic: Anthropic's Messages API, not OpenAI's.
- test_compat_gcp: Google Vertex AI's prediction routes.
- test_compat_oai_responses: OpenAI's Responses API (/v1/responses), which this
  server does not implement (chat and text completions, embeddings only).
- test_router, test_mcp_servers, test_tools_builtin, test_stream, test_proxy:
  llama-server's router mode (several models, a model directory, MCP, its
  built-in tools and proxy).
- test_lora, test_speculative, test_rerank, test_vision_api, test_infill,
  test_tool_call: models the suite downloads (LoRA adapters, a draft MoE, a
  reranker, a vision model, a FIM model, tool-calling models); the default model
  has none of these (no FIM tokens: /infill answers 501, tested in
  tests/test_server_openai.py).
- test_slot_save, test_sleep, test_kv_keep_only_active, test_ctx_shift,
  test_ignore_eos: llama-server's slot files, idle sleep, cache internals,
  context shift and ignore_eos, which pyllamakv does not have (ignore_eos is
  refused by name).
- test_metrics: llama-server's own metric names (``llamacpp:*``); this server's
  are ``pyllamakv_*`` (tests/test_server_openai.py).
- test_template: reasoning templates of other models.
- test_embedding: written for a BERT embedding model (bge-small): its token
  counts, its dimensions, mixed token/text inputs, pooling none on /embeddings.

Single tests (NOT_APPLICABLE below): those that check the text, token counts or
probabilities stories260K gives (a regular expression over its words, 18 prompt
tokens, ...), llama-server's build string, its multi-address listening, its
CORS default (llama-server allows any origin; this server none unless
--cors-origins, by design), its web UI's assets, its request fields this server
refuses by name (multimodal data, return_progress, timings_per_token,
response_fields, post-sampling probabilities, backend sampling), and the
``chat_template_kwargs`` / assistant-prefill conventions of llama-server.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from _server import need_server_deps
from _smollm2 import require_model_path

need_server_deps()
for _name in ("requests", "filelock", "openai"):
    pytest.importorskip(_name, reason="llama.cpp's server tests need it (pyllamakv[test])")

HERE = Path(__file__).resolve().parent
SDIST = "llama-cpp-python==0.3.36"
FILES = ["test_basic.py", "test_chat_completion.py", "test_completion.py", "test_tokenize.py",
         "test_security.py"]
NOT_APPLICABLE = {
    # stories260K's own text, token counts and probabilities
    "test_basic.py::test_load_split_model": "a split stories model's text",
    "test_chat_completion.py::test_chat_completion": "stories260K's text and token counts",
    "test_chat_completion.py::test_chat_completion_cached_tokens": "stories260K's token counts",
    "test_chat_completion.py::test_chat_completion_stream": "stories260K's text",
    "test_chat_completion.py::test_chat_completion_with_openai_library": "stories260K's text",
    "test_chat_completion.py::test_chat_template": "stories260K's token counts",
    "test_chat_completion.py::test_apply_chat_template": "llama.cpp's built-in command-r",
    "test_chat_completion.py::test_completion_with_response_format": "stories260K's text",
    "test_chat_completion.py::test_completion_with_json_schema": "stories260K's text",
    "test_chat_completion.py::test_completion_with_grammar": "stories260K's text",
    "test_chat_completion.py::test_logit_bias": "stories260K's token ids",
    "test_completion.py::test_completion": "stories260K's text and token counts",
    "test_completion.py::test_completion_stream": "stories260K's text and token counts",
    "test_completion.py::test_completion_with_openai_library": "stories260K's text",
    "test_completion.py::test_completion_stream_with_openai_library": "stories260K's text",
    "test_completion.py::test_completion_stream_with_openai_library_stops": "its text",
    "test_completion.py::test_completion_with_tokens_input": "stories260K's token ids",
    "test_completion.py::test_completion_parallel_slots": "stories260K's text",
    "test_completion.py::test_completion_unified": "stories260K's text",
    "test_completion.py::test_logit_bias": "stories260K's token ids",
    "test_completion.py::test_cancel_request": "llama-server's /slots fields of a stopped one",
    "test_completion.py::test_completion_prompt_cache": "stories260K's token counts",
    "test_completion.py::test_nocache_long_input_prompt": "stories260K's token counts",
    "test_tokenize.py::test_tokenize_with_bos": "stories260K's BOS (SmolLM2 adds none)",
    # llama-server's own surface, not OpenAI's
    "test_basic.py::test_server_multiple_addresses": "listening on several addresses",
    "test_chat_completion.py::test_chat_template_assistant_prefill": "assistant prefill",
    "test_chat_completion.py::test_chat_template_continue_final_message_vllm_compat": "vLLM's",
    "test_chat_completion.py::test_chat_template_continue_final_message_mutual_exclusion":
        "vLLM's continue_final_message",
    "test_chat_completion.py::test_chat_completion_with_timings_per_token": "llama-server's",
    "test_chat_completion.py::test_return_progress": "llama-server's return_progress",
    "test_chat_completion.py::test_verbose_debug": "llama-server's __verbose field",
    "test_completion.py::test_json_prompt_no_mtmd": "multimodal prompt objects",
    "test_completion.py::test_json_prompt_mtm_error_when_not_supported": "multimodal",
    "test_completion.py::test_completion_response_fields": "llama-server's response_fields",
    "test_completion.py::test_n_probs_post_sampling": "post-sampling probabilities",
    "test_completion.py::test_n_probs_post_backend_sampling": "backend sampling",
    "test_completion.py::test_consistent_result_different_batch_size": "--batch-size",
    "test_security.py::test_access_static_assets_without_api_key": "llama-server's web UI",
    "test_security.py::test_correct_api_key_anthropic_header": "Anthropic's x-api-key form",
    "test_security.py::test_cors_options": "CORS off by default here, by design",
    "test_security.py::test_cors_origins_defaults_to_localhost_with_tools_enabled": "router",
    "test_security.py::test_cors_proxy_only_forwards_explicit_proxy_headers": "router's proxy",
    "test_security.py::test_local_media_file": "multimodal media files",
}


def _suite(cache: Path) -> Path:
    """tools/server/tests of the sdist, unpacked under cache (downloaded once)."""
    dest = cache / "server-tests"
    if (dest / "utils.py").exists():
        return dest
    got = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                          ":all:", SDIST, "-d", str(cache)], capture_output=True, text=True)
    tars = list(cache.glob("llama_cpp_python-*.tar.gz"))
    if got.returncode != 0 or not tars:
        pytest.skip(f"could not download {SDIST}'s sdist: {got.stderr[-300:]}")
    prefix = "vendor/llama.cpp/tools/server/tests/"
    with tarfile.open(tars[0]) as tar:
        for m in tar.getmembers():
            _, _, rel = m.name.partition("/")
            if rel.startswith(prefix) and m.isfile():
                out = dest / rel[len(prefix):]
                out.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(m) as src, open(out, "wb") as f:
                    shutil.copyfileobj(src, f)
    return dest


def _selected(item: str) -> bool:
    """item (file::test[params]) applies: its test is not in NOT_APPLICABLE."""
    return item.split("[")[0] not in NOT_APPLICABLE


def test_llama_server_suite(tmp_path_factory):
    require_model_path()
    cache = Path(os.environ.get("PYLLAMAKV_SUITE_CACHE") or tmp_path_factory.mktemp("suite"))
    suite = _suite(cache)
    work = tmp_path_factory.mktemp("run")
    exe = work / "llama-server"
    exe.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{HERE / 'llama_server_shim.py'}' "
                   '"$@"\n')
    exe.chmod(0o755)
    with socket.socket() as sock:   # the suite's servers listen on 8080 unless PORT says: a
        sock.bind(("127.0.0.1", 0))  # free port, so that two runs on one machine do not meet
        port = str(sock.getsockname()[1])
    env = dict(os.environ, LLAMA_SERVER_BIN_PATH=str(exe), LLAMA_CACHE=str(work), PORT=port,
               LLAMA_SUITE_SKIP=json.dumps(sorted(NOT_APPLICABLE)),
               PYTHONPATH=os.pathsep.join([str(suite), str(HERE)] + [
                   p for p in [os.environ.get("PYTHONPATH")] if p]))
    report = work / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-p", "llama_server_plugin", "-q",
                    "-p", "no:cacheprovider", f"--junitxml={report}", "-m", "not slow",
                    *[f"unit/{f}" for f in FILES]], cwd=suite, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=3600)
    results = {}
    for case in ET.parse(report).iter("testcase"):
        name = f"{case.get('classname').split('.')[-1]}.py::{case.get('name')}"
        kind = "skipped" if case.find("skipped") is not None else \
            "failed" if case.find("failure") is not None or case.find("error") is not None \
            else "passed"
        results[name] = kind
    applies = {k: v for k, v in results.items() if _selected(k) and v != "skipped"}
    passed = sorted(k for k, v in applies.items() if v == "passed")
    failed = sorted(k for k, v in applies.items() if v != "passed")
    print(json.dumps({"ran": len(results), "apply": len(applies), "passed": len(passed),
                      "failed": failed}, indent=1))
    assert len(applies) >= 40, f"too few of the suite's tests ran: {results}"
    assert len(passed) >= 0.9 * len(applies), f"{len(passed)}/{len(applies)}; failed: {failed}"
