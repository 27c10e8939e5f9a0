"""The Slack resource and the one place a message is posted; one call posts one message."""

from __future__ import annotations

import os

import dagster as dg
from dagster_slack import SlackResource
from slack_sdk import WebClient

TOKEN_ENV = "ATLASMART_SLACK_TOKEN"
CHANNEL_ENV = "ATLASMART_SLACK_CHANNEL"
BASE_URL_ENV = "ATLASMART_SLACK_BASE_URL"
UI_BASE_URL_ENV = "ATLASMART_UI_BASE_URL"
DEFAULT_CHANNEL = "#atlasmart-data-quality"
DEFAULT_UI_BASE_URL = "http://localhost:3000"
NO_TOKEN_REASON = f"Slack alerts are off: {TOKEN_ENV} is not set (set it and reload the code location)."


class SlackPostError(RuntimeError):
    """Slack did not accept a message (error answer, HTTP error or timeout); the alert stays pending."""


class AtlasSlack(SlackResource):
    """Where alerts go: the Slack API (token, base URL, channel) and the UI the links point at."""

    channel: str = DEFAULT_CHANNEL
    base_url: str = WebClient.BASE_URL
    ui_base_url: str = DEFAULT_UI_BASE_URL
    timeout_s: float = 10.0

    @property
    def configured(self) -> bool:
        return bool(self.token)

    def get_client(self) -> WebClient:
        # No retry handlers: a failed post is retried by the next tick, with the cursor left before it.
        return WebClient(token=self.token, base_url=self.base_url, timeout=int(max(1, self.timeout_s)),
                         retry_handlers=[])

    def post(self, text: str) -> None:
        """Post one message; raises SlackPostError (which never contains the token) if Slack did not take it."""
        try:
            answer = self.get_client().chat_postMessage(channel=self.channel, text=text, mrkdwn=True,
                                                         unfurl_links=False)
        except Exception as exc:  # noqa: BLE001 - every transport failure means "not delivered"
            raise SlackPostError(_scrub(f"{type(exc).__name__}: {exc}", self.token)) from None
        if not answer.get("ok", False):
            raise SlackPostError(f"Slack answered error={answer.get('error')!r}")

    def run_url(self, run_id: str) -> str:
        return f"{self.ui_base_url.rstrip('/')}/runs/{run_id}"


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
    )
