"""CORS for --cors-origins: Starlette's CORSMiddleware, with llama-server's spellings.

Off unless origins are given (a page a user visits must not drive a key-less
local server). ``*`` allows any origin; ``localhost`` any origin on this
machine (localhost, 127.0.0.1, [::1], any port); anything else is an exact
origin. A preflight from an origin not allowed is answered 200 without any
Access-Control header, as llama-server answers it: the browser refuses the
call all the same. The Access-Control headers go out in their usual
capitalisation (Starlette writes them lower-case): header names are
case-insensitive, but clients that copy them into a plain dict are not.
"""
from __future__ import annotations

from starlette.middleware.cors import CORSMiddleware
from starlette.responses import PlainTextResponse

LOCAL = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"


def cors_options(origins: tuple[str, ...]) -> dict:
    exact = [o for o in origins if o != "localhost"]
    return dict(allow_origins=exact, allow_origin_regex=LOCAL if "localhost" in origins
                else None, allow_methods=["*"], allow_headers=["*"])


class CORS(CORSMiddleware):
    def preflight_response(self, request_headers):
        if not self.is_allowed_origin(request_headers.get("origin", "")):
            return PlainTextResponse("OK", status_code=200)
        return super().preflight_response(request_headers)

    async def __call__(self, scope, receive, send):
        async def sending(message):
            if message["type"] == "http.response.start":
                message["headers"] = [(_title(k), v) for k, v in message.get("headers", [])]
            await send(message)
        await super().__call__(scope, receive, sending)


def _title(name: bytes) -> bytes:
    return name.title() if name.startswith(b"access-control-") else name
