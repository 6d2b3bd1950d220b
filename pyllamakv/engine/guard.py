"""Serialised access, closing and interruption: what makes one Llama safe to share.

``Guard`` is a Llama's lock. Every public call holds it for its duration, so
calls from several threads run one after another, never interleaved. A stream
(``generate``, ``create_completion(stream=True)``, chat streams) *reserves* the
Llama from the call that opens it until it is exhausted, closed or garbage
collected: while it is open, calls from other threads wait; the thread that
opened it may still call (as with llama-cpp-python, interleaving its own calls
with its own stream is its own business). The stream itself may be iterated
from any thread; each item it produces is made under the lock.

A stream that is abandoned but still referenced (no step for ``STREAM_IDLE_S``
seconds) does not hold the Llama forever: the first thread that waits past
that closes it in its owner's place (as ``close()`` would) and goes on; the
stream's next item raises ``StreamExpiredError``. Without a waiter an idle
stream keeps its reservation however long it rests.

``close()`` takes the lock, so it waits for a call or a stream step in
progress (never frees memory in use); afterwards every call, and the next item
of an open stream, raises ``ClosedError``.

``abortable`` runs a long C call (a prefill) on a helper thread while the
calling thread waits in short slices, so a KeyboardInterrupt (a real SIGINT
or ``_thread.interrupt_main``) reaches Python at once; it then sets the
core's abort flag, waits for the call to stop (the core checks between
layers) and re-raises. The core leaves the cache as it was before an aborted
call, so Python and C agree whatever the outcome.
"""
from __future__ import annotations

import _thread
import functools
import threading
import time
import weakref
from typing import Callable, Iterator, TypeVar

from ..errors import ClosedError, StreamExpiredError

T = TypeVar("T")
POLL_S = 0.02       # how often a waiting caller looks for a pending interrupt
STREAM_IDLE_S = 60.0   # a stream idle this long while another thread waits is closed for it


def abortable(call: Callable[[], T], abort: Callable[[bool], None]) -> T:
    """call() on a helper thread; on an exception in the waiting thread,
    abort(True), wait for call to return, abort(False), re-raise.

    The wait is on a plain lock that the helper releases when it is done, not
    Thread.join: an interrupted join can mark a running thread as stopped."""
    box: list = []
    done = _thread.allocate_lock()
    done.acquire()

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as e:     # handed to the caller
            box.append((False, e))
        finally:
            done.release()

    pending: BaseException | None = None
    _thread.start_new_thread(run, ())
    while not box:            # (not the acquire's result: an interrupt may follow it)
        try:
            done.acquire(timeout=POLL_S)
        except BaseException as e:     # KeyboardInterrupt or another async exception
            if pending is None:
                pending = e
                abort(True)
    if pending is not None:
        abort(False)
        raise pending
    ok, value = box[0]
    if not ok:
        raise value
    return value


def atomic(fn: Callable[[], T]) -> T:
    """fn() as one step that an exception in the calling thread (an interrupt)
    cannot split: it runs on a helper thread, the caller's exception waits."""
    return abortable(fn, lambda on: None)


class Guard:
    """The lock, the closed flag and the stream reservation of one object."""

    def __init__(self, what: str, stream_idle_s: float | None = None) -> None:
        self.what = what
        self.stream_idle_s = STREAM_IDLE_S if stream_idle_s is None else stream_idle_s
        self.closed = False
        self._stream_ref: Callable[[], "_Stream | None"] | None = None
        self._touched = 0.0                     # the open stream's last step
        self._cond = threading.Condition(threading.RLock())
        self._stream: object | None = None      # the open stream's token
        # the thread that opened it: the Thread itself, since an ident is reused
        # once its thread ends (another thread would pass as the stream's owner)
        self._stream_thread: threading.Thread | None = None
        self._holder: int | None = None         # the thread inside a call, and its depth
        self._depth = 0
        self._waiting = 0                       # threads waiting for a stream to end

    def _enter(self, token: object | None) -> None:
        """Take the lock (the caller holds it afterwards) once it is our turn.
        A call nested in one this thread is already making enters at once."""
        self._cond.acquire()
        me = threading.get_ident()
        if self._holder == me:
            self._depth += 1
            return
        try:
            while (self._stream is not None and self._stream is not token
                   and self._stream_thread is not threading.current_thread()
                   and not self.closed):
                idle = time.monotonic() - self._touched
                if idle >= self.stream_idle_s and self._holder is None:
                    self._expire(me)
                    continue
                self._waiting += 1
                try:
                    self._cond.wait(max(self.stream_idle_s - idle, POLL_S))
                finally:
                    self._waiting -= 1
            if self.closed:
                raise ClosedError(f"the {self.what} is closed")
        except BaseException:
            self._cond.release()
            raise
        self._holder, self._depth = me, 1

    def _expire(self, me: int) -> None:
        """Close the idle stream for its owner (the lock is held, no call in progress)."""
        s = self._stream_ref() if self._stream_ref is not None else None
        self._stream, self._stream_thread, self._stream_ref = None, None, None
        if s is None or s._it is None:
            return
        it, s._it, s._expired = s._it, None, True
        close = getattr(it, "close", None)
        if close is not None:
            self._holder, self._depth = me, 1
            try:
                close()
            except Exception:
                pass
            finally:
                self._holder, self._depth = None, 0

    def _exit(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._holder = None
            if self._waiting:
                self._cond.notify_all()
        self._cond.release()

    def call(self, fn: Callable[..., T], *args, **kwargs) -> T:
        self._enter(None)
        try:
            return fn(*args, **kwargs)
        finally:
            self._exit()

    def stream(self, make: Callable[[], Iterator[T]]) -> Iterator[T]:
        """Reserve for a stream; make() builds it (and may run the prefill) now."""
        token = object()
        self._enter(None)
        try:
            if self._stream is not None:   # the same thread opens a second stream
                return _Stream(self, None, make())
            self._stream, self._stream_thread = token, threading.current_thread()
            self._touched = time.monotonic()
            try:
                s = _Stream(self, token, make())
            except BaseException:
                self._stream, self._stream_thread = None, None
                raise
            self._stream_ref = weakref.ref(s)
            self._touched = time.monotonic()
            return s
        finally:
            self._exit()

    def release_stream(self, token: object | None) -> None:
        with self._cond:
            if token is not None and self._stream is token:
                self._stream, self._stream_thread, self._stream_ref = None, None, None
                self._cond.notify_all()

    def close(self, free: Callable[[], None]) -> None:
        """Wait for the call in progress, run free() once, refuse all later calls."""
        with self._cond:
            if not self.closed:
                self.closed = True
                self._stream, self._stream_thread = None, None
                self._cond.notify_all()
                free()


class _Stream:
    """An iterator made under a Guard; it holds the reservation until it ends."""

    def __init__(self, guard: Guard, token: object | None, it: Iterator) -> None:
        self._guard, self._token, self._it = guard, token, it
        self._expired = False

    def __iter__(self) -> "_Stream":
        return self

    def __next__(self):
        g = self._guard
        if self._it is None:
            self._raise_if_expired()
            raise StopIteration
        g._enter(self._token)
        try:
            if self._it is None:            # expired while this thread waited
                self._raise_if_expired()
                raise StopIteration
            if self._token is not None:
                g._touched = time.monotonic()
            return next(self._it)
        except BaseException:
            self._finish()
            raise
        finally:
            g._exit()

    def send(self, value):
        return self.__next__()

    def _raise_if_expired(self) -> None:
        if self._expired:
            self._expired = False           # once; then it is simply exhausted
            raise StreamExpiredError(
                f"this stream was idle for {self._guard.stream_idle_s:g} s while another "
                f"thread waited for the {self._guard.what}; it was closed")

    def _finish(self) -> None:
        it, self._it = self._it, None
        if it is None:
            return
        g = self._guard
        try:
            close = getattr(it, "close", None)
            if close is not None:
                try:
                    g._enter(self._token)
                except ClosedError:        # closed under it: nothing left to clean up
                    return
                try:
                    close()
                finally:
                    g._exit()
        finally:
            g.release_stream(self._token)

    def close(self) -> None:
        self._finish()

    def __del__(self) -> None:
        try:
            self._finish()
        except Exception:
            pass


def guarded(method: Callable[..., T]) -> Callable[..., T]:
    """A method of an object with a ``_guard``, run under it."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        return self._guard.call(method, self, *args, **kwargs)
    return wrapper
