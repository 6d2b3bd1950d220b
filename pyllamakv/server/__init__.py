"""The OpenAI-compatible server (`pyllamakv serve`); needs the `server` extra.

Re-exports; create_app and serve import FastAPI and uvicorn when first used.
"""
from .settings import ServerSettings

__all__ = ["ServerSettings", "create_app", "serve"]


def __getattr__(name: str):
    if name == "create_app":
        from .app import create_app
        return create_app
    if name == "serve":
        from .run import serve
        return serve
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
