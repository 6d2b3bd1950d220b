"""pyllamakv chat on a real pseudo-terminal, as a person types: line editing and
history (prompt_toolkit), Ctrl-C stopping a reply but not the session."""
import os
import pty
import select
import signal
import sys
import time

import pytest

from _smollm2 import require_model_path

pytest.importorskip("prompt_toolkit")


class _Screen:
    """What the terminal has printed, read as it comes."""

    def __init__(self, fd):
        self.fd, self.buf, self.pos = fd, b"", 0

    def expect(self, needle: bytes, timeout: float) -> bytes:
        """Wait for needle after what earlier calls matched; the text up to it."""
        end = time.monotonic() + timeout
        while needle not in self.buf[self.pos:]:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{needle!r} not seen within {timeout} s; "
                                     f"got {self.buf[-600:]!r}")
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise AssertionError(f"the program ended before {needle!r}: "
                                         f"{self.buf[-600:]!r}")
                self.buf += chunk
        i = self.buf.index(needle, self.pos) + len(needle)
        seen, self.pos = self.buf[self.pos:i], i
        return seen

    def rest(self, timeout: float) -> bytes:
        try:
            while True:
                r, _, _ = select.select([self.fd], [], [], timeout)
                chunk = os.read(self.fd, 4096) if r else b""
                if not chunk:
                    break
                self.buf += chunk
        except OSError:
            pass
        return self.buf


def test_chat_on_a_terminal(tmp_path):
    require_model_path()
    env = dict(os.environ, PYLLAMAKV_HISTORY=str(tmp_path / "hist"), TERM="xterm",
               COLUMNS="100", LINES="30", PROMPT_TOOLKIT_NO_CPR="1")
    if os.environ.get("PYLLAMAKV_LIBRARY"):   # development: the source tree has the package
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    pid, fd = pty.fork()
    if pid == 0:  # the child: the chat, attached to the pseudo-terminal
        os.chdir(tmp_path)   # not the source tree: python -m puts the cwd first on sys.path
        # Ctrl-C as on a user's terminal, also where this run inherited SIGINT ignored
        # (started in the background of a non-interactive shell)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execve(sys.executable, [sys.executable, "-m", "pyllamakv.commands.cli", "chat", "--ctx", "2048",
                                   "-n", "1500", "--temp", "0.9", "--seed", "1"], env)
    screen = _Screen(fd)
    try:
        screen.expect(b"loaded in", 300)
        screen.expect(b">", 60)
        os.write(fd, b"Write a very long story about a dragon.\r")
        screen.expect(b"\n", 60)
        screen.expect(b" ", 120)             # the reply is being written
        os.write(fd, b"\x03")                # Ctrl-C: stop the reply
        screen.expect(b"[stopped]", 30)
        screen.expect(b"cached", 30)
        screen.expect(b">", 30)              # back at the prompt, same session
        os.write(fd, b"\x1b[A")              # up arrow: the last line from the history
        screen.expect(b"dragon", 10)
        os.write(fd, b"\x15")                # Ctrl-U clears it again (line editing)
        os.write(fd, b"/exit\r")
        out = screen.rest(30)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, out[-2000:]
        assert b"dragon" in (tmp_path / "hist").read_bytes()
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(fd)
