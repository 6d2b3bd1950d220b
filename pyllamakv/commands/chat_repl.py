"""The interactive loop of ``pyllamakv chat``.

On a terminal the prompt is prompt_toolkit's: line editing, and a history kept
in ``~/.pyllamakv_history`` (arrow keys recall earlier turns). Otherwise (a
pipe or a file) it reads plain lines, so scripts can drive it.

Ctrl-C while a reply is being written stops that reply and returns to the
prompt; the part already written stays in the conversation. Ctrl-C at the
prompt clears the line; Ctrl-D, end of input or /exit quits. A reply that
ends because it reached -n tokens says so.

A line that starts with '/' is a command, never sent to the model (see HELP);
'//' sends a line that starts with '/'.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable, Iterator

import click


def _tty_lines(history: Path) -> Iterator[str | None]:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory
    session = PromptSession(history=FileHistory(str(history)))
    while True:
        try:
            yield session.prompt("> ")
        except KeyboardInterrupt:
            yield None              # a cleared line: ask again
        except EOFError:
            return


def _plain_lines(stream) -> Iterator[str | None]:
    while True:
        click.echo("> ", err=True, nl=False)
        line = stream.readline()
        if not line:
            return
        yield line.rstrip("\n")


def input_lines(stdin=None) -> Iterator[str | None]:
    stdin = stdin or sys.stdin
    if stdin.isatty() and sys.stdout.isatty():
        hist = Path(os.environ.get("PYLLAMAKV_HISTORY", Path.home() / ".pyllamakv_history"))
        return _tty_lines(hist)
    return _plain_lines(stdin)


HELP = """commands:
  /help           this list
  /reset          forget the conversation (the system message stays)
  /system TEXT    set the system message (alone: remove it); the conversation stays
  /exit           quit (as Ctrl-D)
  //text          send a line that starts with '/'"""


def command(line: str, messages: list[dict]) -> bool:
    """Runs the slash command `line` on the conversation `messages` (changed in
    place); True when the chat should end. Unknown commands are reported."""
    name, _, arg = line.strip().partition(" ")
    arg = arg.strip()
    if name == "/exit":
        return True
    if name == "/help":
        click.echo(HELP, err=True)
    elif name == "/reset":
        messages[:] = [m for m in messages if m["role"] == "system"]
        click.echo("[conversation cleared]", err=True)
    elif name == "/system":
        messages[:] = [m for m in messages if m["role"] != "system"]
        if arg:
            messages.insert(0, {"role": "system", "content": arg})
        click.echo("[system message set]" if arg else "[system message removed]", err=True)
    else:
        click.echo(f"[unknown command {name}; /help lists the commands]", err=True)
    return False


def run_chat(llm, messages: list[dict], n_predict: int, temp: float, seed: int,
             rates: Callable[[object], str], lines: Iterator[str | None]) -> None:
    for line in lines:
        if line is None or not line.strip():
            continue
        if line.lstrip().startswith("//"):
            line = line.lstrip()[1:]
        elif line.lstrip().startswith("/"):
            if command(line, messages):
                break
            continue
        messages.append({"role": "user", "content": line})
        reply, reason, stream = [], None, None
        try:
            stream = llm.create_chat_completion(messages, max_tokens=n_predict,
                                                temperature=temp, seed=seed, stream=True)
            for chunk in stream:
                choice = chunk["choices"][0]
                text = choice["delta"].get("content", "")
                reply.append(text)
                click.echo(text, nl=False)
                reason = choice["finish_reason"] or reason
        except KeyboardInterrupt:
            reason = "interrupted"
        finally:
            if stream is not None:
                stream.close()
        click.echo()
        messages.append({"role": "assistant", "content": "".join(reply)})
        if reason == "length":
            click.echo(f"[the reply was cut at -n {n_predict} tokens]", err=True)
        elif reason == "interrupted":
            click.echo("[stopped]", err=True)
        click.echo(f"[{rates(llm)}; cached {llm.n_tokens} tokens]", err=True)
