"""serve(): bind the address, load the slots, then run the app under uvicorn
until interrupted. The address is bound first, so a port in use is an error
before the model loads and before anything says "listening"."""
from __future__ import annotations

import socket
import sys

from .guards import uvicorn_options
from .settings import ServerSettings


def _missing(e: ImportError) -> ImportError:
    return ImportError(f"the server needs its extra: pip install 'pyllamakv[server]' ({e})")


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (port 0: a free one); OSError naming the
    address when it cannot be bound (in use, not this machine's, no permission)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as e:
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as uvicorn does
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def serve(settings: ServerSettings, sock: socket.socket | None = None) -> None:
    """Blocks; sock: an already bound socket (tests), else settings.host:port."""
    try:
        import uvicorn
        from .app import create_app
    except ImportError as e:
        raise _missing(e) from None
    if sock is None:
        sock = bind(settings.host, settings.port)
    try:
        from .observe import setup_logging
        from .engines import kv_line, memory_layout
        setup_logging(settings.log_level)
        app = create_app(settings)
        s = app.state.pool.slots
        port = sock.getsockname()[1]
        mem = s[0].engine.memory    # a MoE model under --gpu-memory-mib: where its experts are
        moe = "" if mem is None or mem.n_cpu_moe is None else (
            f"; the routed experts of {mem.n_cpu_moe} layers in host memory (n_cpu_moe"
            f"{' chosen' if settings.n_cpu_moe is None else ''})")
        print(f"pyllamakv: {len(s)} slot(s) of {settings.n_ctx} tokens on {s[0].engine.device}"
              f" ({kv_line(memory_layout([x.engine for x in s]))}){moe}; "
              f"listening on http://{settings.host}:{port}", file=sys.stderr, flush=True)
        # h11 (guards.py's protocol wraps it), not httptools: it sends header names as
        # the app wrote them (cors.py's Access-Control-*), which clients that keep
        # headers in a plain dict look up
        config = uvicorn.Config(app, host=settings.host, port=port, log_level="warning",
                                access_log=False, timeout_graceful_shutdown=5,
                                **uvicorn_options(settings.max_connections,
                                                  settings.header_timeout_s))
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
