"""A loopback HTTP server that speaks chat.postMessage the way Slack does, for tests: one instance per test.

It answers like Slack: `ts` values and the channel on success, replies accepted with `thread_ts`, HTTP 429 with
a `Retry-After` header and `{"ok": false, "error": "ratelimited"}` when rate limited, `invalid_blocks` for a
message over Block Kit's limits (50 blocks, 3000 characters per section text, 10 fields of 2000, 10 context
elements), `msg_blocks_too_long` past 11,000 characters of text in all its blocks, and HTTP 500 or an answer
slower than the client's timeout on demand (`slow`: nothing posted; `taken_slow`: posted, but the answer comes
after the client gave up). conversations.history and .replies list what was posted, with its metadata when
asked, in pages (`history_error` makes them answer that error, e.g. missing_scope; `ratelimited` is a 429,
`http500` a 500). `script` holds the modes of the next requests (`"ratelimited:<s>"` is a 429 with that
Retry-After); after it runs out, `mode` answers. `hold_if` picks one message to hold unanswered (`held` is set)
until the test sets `release`: then it is answered 503 and posts nothing, as a request that died with its client
(a daemon killed mid-tick) does."""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

OK = "ok"
RATELIMITED = "ratelimited"
HTTP_500 = "http500"
SLOW = "slow"
TAKEN_SLOW = "taken_slow"
CHANNEL_ID = "C0ATLASMART"
MAX_BLOCKS = 50
MAX_SECTION_CHARS = 3000
MAX_FIELDS = 10
MAX_FIELD_CHARS = 2000
MAX_CONTEXT_ELEMENTS = 10
MAX_TEXT_CHARS = 40_000
# Slack refuses a message whose blocks' text adds up past about 12,000 characters ("msg_blocks_too_long"; it
# counts some for the blocks themselves, and has refused 11,341 counted this way): modelled strictly.
MAX_BLOCKS_TEXT_CHARS = 11_000


@dataclass
class SlackServer:
    """Records every accepted message; `script` then `mode` decide how the next requests are answered."""

    mode: str = OK
    slow_s: float = 3.0
    retry_after_s: int = 1
    script: list[str] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    attempts: int = 0
    attempt_times: list[float] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    auth_headers: list[str] = field(default_factory=list)
    hold_if: Callable[[dict[str, Any]], bool] | None = None
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    history_error: str | None = None
    lookups: int = 0
    # The most messages a history page holds (Slack's own cap is 999), and how many pages were read.
    page_limit: int = 999
    pages: int = 0
    # (monotonic arrival time, mode, text) of every request to chat.postMessage, in arrival order.
    answered: list[tuple[float, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def base_url(self) -> str:
        return f"{self.origin}/api/"

    @property
    def texts(self) -> list[str]:
        """The plain-text fallback of every accepted message."""
        return [m["text"] for m in self.messages]

    @property
    def rendered(self) -> list[str]:
        """What a reader sees of every accepted message: every block's text (fields and context included)."""
        return [rendered(m) for m in self.messages]

    def by_ts(self, ts: str) -> dict[str, Any]:
        return next(m for m in self.messages if m["ts"] == ts)

    def next_mode(self, payload: dict[str, Any]) -> str:
        with self._lock:
            mode = self.script.pop(0) if self.script else self.mode
            self.answered.append((time.monotonic(), mode, str(payload.get("text", ""))))
            return mode

    def _hold(self, payload: dict[str, Any]) -> bool:
        """True (after the test released it) when this message is the one to hold; holds one message only."""
        with self._lock:
            if self.hold_if is None or self.held.is_set() or not self.hold_if(payload):
                return False
            self.held.set()
        self.release.wait(timeout=600)
        return True

    def accept(self, payload: dict[str, Any]) -> str:
        """Store a posted message under a `ts` as Slack makes them: the epoch time, unique in the channel."""
        with self._lock:
            last = float(self.messages[-1]["ts"]) if self.messages else 0.0
            ts = f"{max(time.time(), last + 0.000001):.6f}"
            self.messages.append({**payload, "ts": ts})
            return ts

    def __enter__(self) -> "SlackServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def rendered(message: dict[str, Any]) -> str:
    """Every text of a message's blocks, in order, one per line (the fallback when it has no blocks)."""
    blocks = message.get("blocks") or []
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    if not blocks:
        return message.get("text", "")
    out: list[str] = []
    for b in blocks:
        if b.get("text"):
            out.append(b["text"]["text"])
        out += [f["text"] for f in b.get("fields", [])]
        out += [e["text"] for e in b.get("elements", []) if "text" in e]
    return "\n".join(out)


def block_text_chars(blocks: Any) -> int:
    """Every text string in the blocks, summed: what Slack's limit on a message's blocks counts."""
    if isinstance(blocks, dict):
        return sum(len(v) if k == "text" and isinstance(v, str) else block_text_chars(v) for k, v in blocks.items())
    if isinstance(blocks, list):
        return sum(block_text_chars(b) for b in blocks)
    return 0


def block_errors(blocks: list[dict[str, Any]]) -> list[str]:
    """What Slack would refuse in these blocks (empty when they are valid for chat.postMessage)."""
    errors = [f"{len(blocks)} blocks > {MAX_BLOCKS}"] if len(blocks) > MAX_BLOCKS else []
    if block_text_chars(blocks) > MAX_BLOCKS_TEXT_CHARS:
        errors.append(f"blocks' text {block_text_chars(blocks)} > {MAX_BLOCKS_TEXT_CHARS}")
    for i, b in enumerate(blocks):
        text = (b.get("text") or {}).get("text", "")
        if b.get("type") == "section" and len(text) > MAX_SECTION_CHARS:
            errors.append(f"block {i}: section text {len(text)} > {MAX_SECTION_CHARS}")
        if b.get("type") == "section" and not text and not b.get("fields"):
            errors.append(f"block {i}: empty section")
        fields = b.get("fields", [])
        if len(fields) > MAX_FIELDS or any(len(f["text"]) > MAX_FIELD_CHARS for f in fields):
            errors.append(f"block {i}: fields over limits")
        elements = b.get("elements", [])
        if b.get("type") == "context" and (not elements or len(elements) > MAX_CONTEXT_ELEMENTS):
            errors.append(f"block {i}: context elements {len(elements)}")
    return errors


def _handler(server: SlackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            server.attempts += 1
            server.attempt_times.append(time.monotonic())
            server.auth_headers.append(self.headers.get("Authorization", ""))
            if "/api/conversations." in self.path:
                form = {k: v[0] for k, v in urllib.parse.parse_qs(body).items()}
                return self._lookup(self.path, form)
            if not self.path.endswith("/api/chat.postMessage"):
                return self._answer(404, {"ok": False, "error": "unknown_method"})
            if "json" in self.headers.get("Content-Type", ""):
                payload = json.loads(body)
            else:
                payload = {k: v[0] for k, v in urllib.parse.parse_qs(body).items()}
            mode = server.next_mode(payload)
            if mode == HTTP_500:
                return self._answer(500, {"ok": False, "error": "internal_error"})
            if mode.startswith(RATELIMITED):
                retry_after = mode.partition(":")[2] or str(server.retry_after_s)
                return self._answer(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": retry_after})
            if mode == TAKEN_SLOW:
                server.accept(payload)
                time.sleep(server.slow_s)
                return self._answer(504, {"ok": False, "error": "timeout"})
            if mode == SLOW:
                # Answers after the client gave up, and posts nothing: a timeout that lost the request.
                time.sleep(server.slow_s)
                return self._answer(504, {"ok": False, "error": "timeout"})
            if server._hold(payload):
                return self._answer(503, {"ok": False, "error": "service_unavailable"})
            blocks = payload.get("blocks") or []
            if isinstance(blocks, str):
                blocks = json.loads(blocks)
            problems = block_errors(blocks)
            if problems or len(payload.get("text") or "") > MAX_TEXT_CHARS:
                server.refused.append({**payload, "problems": problems})
                error = ("msg_blocks_too_long" if problems and problems[0].startswith("blocks' text") else
                         "invalid_blocks" if problems else "msg_too_long")
                return self._answer(200, {"ok": False, "error": error})
            if not payload.get("text") and not blocks:
                return self._answer(200, {"ok": False, "error": "no_text"})
            ts = server.accept(payload)
            answer = {"ok": True, "channel": CHANNEL_ID, "ts": ts, "message": {"text": payload.get("text"), "ts": ts}}
            if payload.get("thread_ts"):
                answer["message"]["thread_ts"] = payload["thread_ts"]
            self._answer(200, answer)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._lookup(self.path, {})

        def _lookup(self, path: str, form: dict[str, str]) -> None:
            """conversations.history / .replies, as GET (query) or POST (form), the way slack_sdk may send them."""
            url = urllib.parse.urlparse(path)
            q = {**{k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}, **form}
            method = url.path.rsplit("/", 1)[-1]
            if method not in ("conversations.history", "conversations.replies"):
                return self._answer(404, {"ok": False, "error": "unknown_method"})
            server.lookups += 1
            if server.history_error == RATELIMITED:
                return self._answer(429, {"ok": False, "error": RATELIMITED}, {"Retry-After": str(server.retry_after_s)})
            if server.history_error == HTTP_500:
                return self._answer(500, {"ok": False, "error": "internal_error"})
            if server.history_error:
                return self._answer(200, {"ok": False, "error": server.history_error})
            if q.get("channel") != CHANNEL_ID:
                return self._answer(200, {"ok": False, "error": "channel_not_found"})
            oldest = float(q.get("oldest") or 0)
            with server._lock:
                posted = list(server.messages)
            if method == "conversations.replies":
                shown = [m for m in posted if m["ts"] == q.get("ts") or m.get("thread_ts") == q.get("ts")]
            else:
                shown = [m for m in posted if not m.get("thread_ts") or m.get("reply_broadcast")]
            with_meta = q.get("include_all_metadata") in ("1", "true", "True")
            out = [{"type": "message", "ts": m["ts"], "text": m.get("text"),
                    **({"thread_ts": m["thread_ts"]} if m.get("thread_ts") else {}),
                    **({"metadata": m["metadata"]} if with_meta and m.get("metadata") else {})}
                   for m in reversed(shown) if float(m["ts"]) >= oldest]
            # Pages of `limit` messages, newest first, with Slack's cursor to the next page.
            start, limit = int(q.get("cursor") or 0), min(int(q.get("limit") or 100), server.page_limit)
            page = out[start:start + limit]
            more = start + limit < len(out)
            server.pages += 1
            self._answer(200, {"ok": True, "messages": page, "has_more": more,
                               "response_metadata": {"next_cursor": str(start + limit) if more else ""}})

        def _answer(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            try:
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client died waiting (a held request): nothing was posted

    return Handler
