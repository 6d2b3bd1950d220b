"""`pyllamakv chat`'s slash commands (pyllamakv/commands/chat_repl.py): they act
on the conversation and never reach the model; '//' escapes a leading '/'."""
from __future__ import annotations

import random
import string

from click.testing import CliRunner

from pyllamakv.commands.chat_repl import HELP, run_chat


class Recorder:
    """A stand-in model that records the messages of each request and replies
    with a fresh random word."""
    n_tokens = 0

    def __init__(self, rng: random.Random):
        self.rng, self.requests, self.replies = rng, [], []

    def create_chat_completion(self, messages, **kw):
        self.requests.append([dict(m) for m in messages])
        word = "".join(self.rng.choices(string.ascii_lowercase, k=6))
        self.replies.append(word)

        def gen():
            yield {"choices": [{"delta": {"content": word}, "finish_reason": "stop"}]}
        return gen()


def chat(lines, messages=None, seed=None):
    rng = random.Random(seed)
    llm = Recorder(rng)
    messages = [] if messages is None else messages
    run_chat(llm, messages, 8, 0.0, 1, lambda _: "rates", iter(lines))
    return llm, messages


def word(rng):
    return "".join(rng.choices(string.ascii_letters, k=rng.randint(3, 10)))


def test_help_and_unknown_commands_are_not_sent(capsys):
    rng = random.Random()
    user = word(rng)
    llm, messages = chat(["/help", f"/{word(rng)} x", user])
    assert len(llm.requests) == 1
    assert llm.requests[0] == [{"role": "user", "content": user}]
    err = capsys.readouterr().err
    assert HELP in err and "unknown command" in err
    for name in ("/help", "/reset", "/system", "/exit"):
        assert name in HELP


def test_reset_keeps_only_the_system_message():
    rng = random.Random()
    system, a, b, c = (word(rng) for _ in range(4))
    llm, messages = chat([a, b, "/reset", c], [{"role": "system", "content": system}])
    assert len(llm.requests) == 3
    assert llm.requests[2] == [{"role": "system", "content": system},
                               {"role": "user", "content": c}]
    assert messages == [{"role": "system", "content": system}, {"role": "user", "content": c},
                        {"role": "assistant", "content": llm.replies[2]}]


def test_system_sets_replaces_and_removes():
    rng = random.Random()
    s1, s2, a, b, c = (word(rng) for _ in range(5))
    llm, messages = chat([f"/system {s1}", a, f"/system   {s2}  ", b, "/system", c])
    assert llm.requests[0] == [{"role": "system", "content": s1}, {"role": "user", "content": a}]
    assert llm.requests[1][0] == {"role": "system", "content": s2}
    assert [m["content"] for m in llm.requests[1][1:]] == [a, llm.replies[0], b]
    assert all(m["role"] != "system" for m in llm.requests[2])
    assert llm.requests[2][-1] == {"role": "user", "content": c}


def test_exit_stops_reading_and_double_slash_sends_a_slash_line():
    rng = random.Random()
    a, after = word(rng), word(rng)
    llm, _ = chat([f"//{a}", "  /exit  ", after])
    assert llm.requests == [[{"role": "user", "content": f"/{a}"}]]


def test_chat_command_help_names_the_slash_commands():
    from pyllamakv.commands.cli import main
    r = CliRunner().invoke(main, ["chat", "--help"])
    assert r.exit_code == 0
    for name in ("/help", "/reset", "/system", "/exit"):
        assert name in r.output
