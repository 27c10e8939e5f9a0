"""A loopback HTTP server that speaks chat.postMessage, for tests: one instance per test, one thread."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OK = "ok"
RATELIMITED = "ratelimited"
HTTP_500 = "http500"
SLOW = "slow"


@dataclass
class SlackServer:
    """Records every accepted message; `mode` decides how the next requests are answered."""

    mode: str = OK
    slow_s: float = 3.0
    messages: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    auth_headers: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/api/"

    @property
    def texts(self) -> list[str]:
        return [m["text"] for m in self.messages]

    def __enter__(self) -> "SlackServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def _handler(server: SlackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            server.attempts += 1
            server.auth_headers.append(self.headers.get("Authorization", ""))
            if not self.path.endswith("/chat.postMessage"):
                return self._answer(404, {"ok": False, "error": "unknown_method"})
            if server.mode == HTTP_500:
                return self._answer(500, {"ok": False, "error": "internal_error"})
            if server.mode == RATELIMITED:
                return self._answer(200, {"ok": False, "error": "ratelimited"})
            if server.mode == SLOW:
                time.sleep(server.slow_s)
                return self._answer(200, {"ok": True})
            if "json" in self.headers.get("Content-Type", ""):
                payload = json.loads(body)
            else:
                payload = {k: v[0] for k, v in urllib.parse.parse_qs(body).items()}
            server.messages.append(payload)
            self._answer(200, {"ok": True, "channel": payload.get("channel"), "ts": f"{len(server.messages)}.0"})

        def _answer(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
