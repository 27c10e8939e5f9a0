"""The Slack resource and the one place a message is posted; one call posts one message (one attempt)."""

from __future__ import annotations

import math
import os
import urllib.parse
from pathlib import Path
from typing import Callable

import dagster as dg
from dagster_slack import SlackResource
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from atlasmart_assets.alerts import format as fmt

TOKEN_ENV = "ATLASMART_SLACK_TOKEN"
CHANNEL_ENV = "ATLASMART_SLACK_CHANNEL"
BASE_URL_ENV = "ATLASMART_SLACK_BASE_URL"
UI_BASE_URL_ENV = "ATLASMART_UI_BASE_URL"
NOTICE_BASE_URL_ENV = "ATLASMART_NOTICE_BASE_URL"
DEFAULT_CHANNEL = "#atlasmart-data-quality"
DEFAULT_UI_BASE_URL = "http://localhost:3000"
MAX_RETRY_AFTER_S = 3600.0
DEFAULT_RETRY_AFTER_S = 30.0
NO_TOKEN_REASON = f"Slack alerts are off: {TOKEN_ENV} is not set (set it and reload the code location)."
PART_EVENT = "atlasmart_alert"  # message metadata naming which alert part a message is
# Answers that refuse this message's blocks, not the channel: the message is re-sent as plain text instead.
REFUSED_BLOCKS = {"invalid_blocks", "invalid_blocks_format", "msg_too_long", "msg_blocks_too_long",
                  "too_many_attachments"}
# Answers that say Slack is struggling for now, not that it cannot be asked: a lookup meeting one is tried again.
TRANSIENT = {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}
# A lost answer's lookup reads at most this many pages of history (200 messages each) before giving up.
MAX_LOOKUP_PAGES = 10


class SlackPostError(RuntimeError):
    """Slack did not accept a message (error answer, HTTP error or timeout); the alert stays pending."""


class SlackUnanswered(SlackPostError):
    """The request went out but no answer came back (a timeout, a dropped connection): Slack may have posted it."""


class SlackRateLimited(SlackPostError):
    """HTTP 429: Slack asks for no request to this method before `retry_after_s` seconds."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"rate limited by Slack (HTTP 429, Retry-After {retry_after_s:g} s)")
        self.retry_after_s = retry_after_s


class SlackRefusedBlocks(SlackPostError):
    """Slack refused this message's content (e.g. invalid_blocks); another message would go through."""


class SlackOutOfTime(SlackPostError):
    """The caller's time ran out between two pages of a lookup: ask again later."""


class SlackBusy(SlackPostError):
    """Slack could not answer for now (HTTP 5xx, an error such as internal_error, a timeout): ask again later."""


def api_base_url(url: str) -> str:
    """The Web API base with its `/api/` path, from a URL given with or without `/api` (and trailing slash)."""
    base = url.strip().rstrip("/")
    return (base if base.endswith("/api") else base + "/api") + "/"


def _retry_after(headers: object) -> float:
    """Seconds to wait, from Slack's Retry-After: at least 1 (a 0 would retry in a tight loop) and at most
    MAX_RETRY_AFTER_S (a huge value would park the alerts for good); a missing or unreadable one is the default."""
    get = getattr(headers, "get", None)
    raw = (get("Retry-After") or get("retry-after")) if get else None
    try:
        seconds = float(raw) if raw is not None else DEFAULT_RETRY_AFTER_S
    except (TypeError, ValueError):
        seconds = DEFAULT_RETRY_AFTER_S
    if not math.isfinite(seconds) or seconds < 0:
        seconds = DEFAULT_RETRY_AFTER_S
    return min(max(seconds, 1.0), MAX_RETRY_AFTER_S)


class AtlasSlack(SlackResource):
    """Where alerts go: the Slack API (token, base URL, channel), the UI the links point at, and where change
    notices can be read."""

    channel: str = DEFAULT_CHANNEL
    base_url: str = WebClient.BASE_URL
    ui_base_url: str = DEFAULT_UI_BASE_URL
    notice_base_url: str = ""
    timeout_s: float = 10.0
    max_wait_s: float = 10.0

    @property
    def configured(self) -> bool:
        return bool(self.token)

    @property
    def links(self) -> fmt.Links:
        return fmt.Links(self.ui_base_url)

    def get_client(self) -> WebClient:
        # No retry handlers: a failed post is retried by the sensor (Retry-After honoured), with its state journaled.
        return WebClient(token=self.token, base_url=api_base_url(self.base_url), timeout=int(max(1, self.timeout_s)),
                         retry_handlers=[])

    def post(self, message: fmt.Message, thread_ts: str | None = None, broadcast: bool = False) -> str:
        """Post one message (as a reply when thread_ts is given) and return its `ts`."""
        return self.post_part(message, thread_ts, broadcast)[0]

    def post_part(self, message: fmt.Message, thread_ts: str | None = None, broadcast: bool = False,
                  part: str | None = None) -> tuple[str, str]:
        """Post one message and return its (`ts`, channel id). `part` names it in the message's metadata, so a post
        whose answer was lost can be found again (find_part) instead of posted twice. Raises SlackRateLimited,
        SlackRefusedBlocks, SlackUnanswered or SlackPostError (never containing the token) when Slack did not take
        it, or (SlackUnanswered) may have."""
        kwargs: dict[str, object] = {"channel": self.channel, "text": message.text, "unfurl_links": False,
                                     "unfurl_media": False}
        if part:
            kwargs["metadata"] = {"event_type": PART_EVENT, "event_payload": {"part": part}}
        if message.blocks:
            kwargs["blocks"] = [dict(b) for b in message.blocks]
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
            kwargs["reply_broadcast"] = broadcast
        try:
            answer = self.get_client().chat_postMessage(**kwargs)  # type: ignore[arg-type]
        except SlackApiError as exc:
            status, error = exc.response.status_code, _api_error(exc)
            if status == 429 or error == "ratelimited":
                raise SlackRateLimited(_retry_after(exc.response.headers)) from None
            if error in REFUSED_BLOCKS:
                raise SlackRefusedBlocks(f"Slack answered error={error!r}") from None
            raise SlackPostError(f"Slack answered HTTP {status} error={error!r}") from None
        except Exception as exc:  # noqa: BLE001 - no answer: not delivered as far as we know, maybe posted
            raise SlackUnanswered(_scrub(f"{type(exc).__name__}: {exc}", self.token)) from None
        ts = answer.get("ts")
        if not answer.get("ok", False) or not ts:
            raise SlackPostError(f"Slack answered error={answer.get('error')!r}")
        return str(ts), str(answer.get("channel") or "")

    def find_part(self, part: str, channel_id: str, oldest: float, thread_ts: str | None = None,
                  in_time: Callable[[], bool] = lambda: True) -> str | None:
        """The `ts` of the message posted as `part` since `oldest` (epoch seconds), if Slack has it: read with
        conversations.history (or .replies, in a thread), page by page, which needs the app's `channels:history`
        scope (`groups:history` for a private channel). Raises SlackRateLimited (429) or SlackBusy (5xx, a
        transient error, no answer) when Slack should be asked again later, SlackPostError when it cannot be
        asked (e.g. missing_scope, channel_not_found), SlackOutOfTime when `in_time()` turns false before a page."""
        params: dict[str, object] = {"channel": channel_id, "oldest": f"{oldest:.6f}", "limit": 200,
                                     "include_all_metadata": True}
        client = self.get_client()
        for _page in range(MAX_LOOKUP_PAGES):
            if not in_time():
                raise SlackOutOfTime(f"the lookup of {part} ran out of time")
            try:
                answer = (client.conversations_replies(ts=thread_ts, **params) if thread_ts  # type: ignore[arg-type]
                          else client.conversations_history(**params))  # type: ignore[arg-type]
            except SlackApiError as exc:
                status, error = exc.response.status_code, _api_error(exc)
                if status == 429 or error == "ratelimited":
                    raise SlackRateLimited(_retry_after(exc.response.headers)) from None
                if status >= 500 or error in TRANSIENT:
                    raise SlackBusy(f"Slack answered HTTP {status} error={error!r}") from None
                raise SlackPostError(f"Slack answered HTTP {status} error={error!r}") from None
            except Exception as exc:  # noqa: BLE001 - no answer: Slack may answer the next tick
                raise SlackBusy(_scrub(f"{type(exc).__name__}: {exc}", self.token)) from None
            for m in answer.get("messages") or []:
                meta = m.get("metadata") or {}
                if meta.get("event_type") == PART_EVENT and (meta.get("event_payload") or {}).get("part") == part:
                    return str(m["ts"])
            following = (answer.get("response_metadata") or {}).get("next_cursor")
            if not answer.get("has_more") or not following:
                return None
            params["cursor"] = following
        return None

    def run_url(self, run_id: str) -> str:
        return self.links.run(run_id)

    def notice_location(self, path: Path) -> str:
        """Where a reader finds a change notice: its URL under ATLASMART_NOTICE_BASE_URL, else its file path."""
        if not self.notice_base_url:
            return str(path)
        return f"{self.notice_base_url.rstrip('/')}/{urllib.parse.quote(path.name)}"


def _api_error(exc: SlackApiError) -> str | None:
    """Slack's `error` field of an error answer (None when the body was not JSON)."""
    return exc.response.get("error") if isinstance(exc.response.data, dict) else None


def _scrub(text: str, token: str) -> str:
    return text.replace(token, "***") if token else text


def slack_resource() -> AtlasSlack:
    """The deployment's Slack resource, from the environment. The token is read through dg.EnvVar at each
    tick so it never reaches code or the UI; without ATLASMART_SLACK_TOKEN at load time the token is empty
    and the sensors skip with a reason instead of failing on a missing variable."""
    env = os.environ
    token: str | dg.EnvVar = dg.EnvVar(TOKEN_ENV) if env.get(TOKEN_ENV) else ""
    return AtlasSlack(
        token=token,
        channel=env.get(CHANNEL_ENV, DEFAULT_CHANNEL),
        base_url=env.get(BASE_URL_ENV, WebClient.BASE_URL),
        ui_base_url=env.get(UI_BASE_URL_ENV, DEFAULT_UI_BASE_URL),
        notice_base_url=env.get(NOTICE_BASE_URL_ENV, ""),
    )
