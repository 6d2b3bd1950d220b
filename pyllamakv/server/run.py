"""serve(): load the slots, then run the app under uvicorn until interrupted."""
from __future__ import annotations

import socket
import sys

from .guards import uvicorn_options
from .settings import ServerSettings


def _missing(e: ImportError) -> ImportError:
    return ImportError(f"the server needs its extra: pip install 'pyllamakv[server]' ({e})")


def serve(settings: ServerSettings, sock: socket.socket | None = None) -> None:
    """Blocks; sock: an already bound socket (tests), else settings.host:port."""
    try:
        import uvicorn
        from .app import create_app
    except ImportError as e:
        raise _missing(e) from None
    app = create_app(settings)
    s = app.state.pool.slots
    print(f"pyllamakv: {len(s)} slot(s) of {settings.n_ctx} tokens on {s[0].engine.device}; "
          f"listening on http://{settings.host}:{settings.port}", file=sys.stderr, flush=True)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=5,
                            **uvicorn_options(settings.max_connections, settings.header_timeout_s))
    uvicorn.Server(config).run(sockets=[sock] if sock is not None else None)
