"""Delivering notices to Slack once each, in order, across ticks, Slack outages and daemon restarts.

Dagster saves a sensor's cursor only when the tick ends without raising. So that neither a daemon killed
mid-tick nor a tick that raises (how a Slack outage is made visible: the tick shows FAILURE with the reason)
re-sends what Slack already took, every accepted message is also journaled at once in the instance's
key-value store (`instance.daemon_cursor_storage`, the table Dagster keeps its own daemon cursors in):
`{"from": <gen of the cursor the tick started from>, "state": <the state after the message>}`. A tick starts
from the journal when it continues the cursor Dagster holds (same `gen`), else from the cursor. A request that
got no answer may still have been posted: it is looked up in Slack (by the part named in its metadata) before it
is posted again. The one remaining window is a crash between Slack's answer and that single key-value write
(milliseconds): then the message is sent twice, never lost.

A notice longer than one Slack message is several messages: their `ts` values are journaled one by one under
`parts`, so a restart resumes at the first part not yet taken. HTTP 429 is honoured: a short Retry-After is
slept (at most `max_wait_s` per tick), a longer one stops the tick and is kept as `not_before` in the state, so
no later tick posts before it, of this sensor or of any other (`NOT_BEFORE_KEY`: Slack limits the app).

A follow-up about a backfill (its run failed, a check failed, saturation) is a reply in the thread its "started"
message opens. It waits up to THREAD_WAIT_S for that thread, and longer while the lifecycle sensor, which opens
threads, cannot post (up to OPENER_WAIT_MAX_S): after an outage the thread comes first, then its replies."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Callable, Mapping, Sequence

import dagster as dg

from atlasmart_assets.alerts import format as fmt
from atlasmart_assets.alerts.common import dump_cursor, load_cursor
from atlasmart_assets.alerts.slack import (
    AtlasSlack,
    SlackBusy,
    SlackOutOfTime,
    SlackPostError,
    SlackRateLimited,
    SlackRefusedBlocks,
    SlackUnanswered,
)

JOURNAL_KEY = "atlasmart/alerts/journal/{sensor}"
THREAD_KEY = "atlasmart/alerts/thread/{backfill_id}"
# How long an alert about a backfill's run waits for the backfill's "started" message to open its thread.
THREAD_WAIT_S = 300.0
# A sensor's first tick passes over what is older than this: history, not news.
FIRST_TICK_HORIZON_S = 24 * 3600.0
# While the sensor that opens threads (lifecycle) cannot post, follow-ups keep waiting for it, up to this long:
# after a Slack outage the thread comes first, then its replies.
OPENER_BLOCKED_KEY = "atlasmart/alerts/thread_opener_blocked_since"
OPENER_WAIT_MAX_S = 6 * 3600.0
# Slack rate-limits the app (one channel, one token), not a sensor: a Retry-After one sensor met holds them all.
NOT_BEFORE_KEY = "atlasmart/alerts/not_before"
# The channel's id, from Slack's answer to a post: reading history needs the id, not the name.
CHANNEL_KEY = "atlasmart/alerts/channel_id"
# How far before an unanswered post its lookup reads (clock skew between this host and Slack).
LOOKBACK_S = 120.0
# A tick stops posting after this long and leaves the rest to the next: Dagster gives a sensor's evaluation 60 s
# (DAGSTER_SENSOR_GRPC_TIMEOUT_SECONDS) and then runs the next tick, while the code server may still be posting
# this one's messages. Each post, retry and page of a lookup starts within it and takes at most the client's 10 s
# timeout, with at most 10 s of Retry-After slept in all: a tick ends within about 50 s.
TICK_BUDGET_S = 30.0
# How long a lost answer's lookup may meet a busy Slack before the part is posted again (twice rather than lost).
LOOKUP_GIVE_UP_S = 3600.0

Commit = Callable[[str], Mapping[str, str] | None]


class SlackUnavailable(Exception):
    """Raised at the end of a tick in which Slack refused a message: Dagster shows the tick as FAILURE with
    this text; everything delivered before it is journaled, the rest is retried on the next tick."""


def thread_of(instance: dg.DagsterInstance, backfill_id: str) -> str | None:
    """The `ts` of the backfill's "started" message, once the lifecycle sensor has posted it."""
    key = THREAD_KEY.format(backfill_id=backfill_id)
    return instance.daemon_cursor_storage.get_cursor_values({key}).get(key) or None


class Outbox:
    """One tick's deliveries for one sensor: its state (cursor + journal), Slack, and what went wrong."""

    def __init__(self, context: dg.SensorEvaluationContext, slack: AtlasSlack, sensor: str,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 opens_threads: bool = False) -> None:
        self._context, self._slack, self._clock, self._sleep = context, slack, clock, sleep
        self._opens_threads = opens_threads
        self._storage = context.instance.daemon_cursor_storage
        self._key = JOURNAL_KEY.format(sensor=sensor)
        cursor = load_cursor(context.cursor)
        self._from = str(cursor.get("gen", ""))
        state = cursor
        fresh = not cursor
        raw = self._storage.get_cursor_values({self._key}).get(self._key)
        if raw:
            journal = json.loads(raw)
            if journal.get("from") == self._from:
                state = journal["state"]
                fresh = False
            else:
                # The cursor moved on since: this journal is obsolete (and must not match a cursor reset later).
                self._storage.set_cursor_values({self._key: ""})
        self.state: dict[str, Any] = state
        self.state["gen"] = uuid.uuid4().hex[:12]
        # What happened before the sensor's very first tick is history, not news: enabling alerts on an instance
        # with a past posts only what is younger than FIRST_TICK_HORIZON_S (a cursor from before this kept 0).
        self.state.setdefault("since", self._clock() - FIRST_TICK_HORIZON_S if fresh else 0.0)
        self.delivered = 0
        self.waited_s = 0.0
        self._started = self._clock()
        self.out_of_time = False
        self.error: str | None = None
        self.fallbacks: list[str] = []
        self._threads: dict[str, str | None] = {}
        shared = self._storage.get_cursor_values({NOT_BEFORE_KEY, CHANNEL_KEY})
        self._app_not_before = float(shared.get(NOT_BEFORE_KEY) or 0.0)
        self._channel_id = shared.get(CHANNEL_KEY) or ""

    @property
    def since(self) -> float:
        """Events before this (epoch seconds) predate the sensor: they are passed over, never alerted."""
        return float(self.state.get("since") or 0.0)

    @property
    def not_before(self) -> float | None:
        """When Slack's last Retry-After ends (this sensor's, or the app's), if it has not yet."""
        value = max(float(self.state.get("not_before") or 0.0), self._app_not_before)
        return value if value > self._clock() else None

    @property
    def blocked(self) -> bool:
        """Slack did not take a message this tick, or asked to wait."""
        return self.error is not None or self.not_before is not None

    @property
    def stopped(self) -> bool:
        return self.blocked or self.out_of_time

    @property
    def why_stopped(self) -> str:
        return self.error or ("rate limited" if self.not_before is not None else
                              f"the tick's {TICK_BUDGET_S:g} s for Slack are spent" if self.out_of_time else "")

    def _in_time(self) -> bool:
        if self._clock() - self._started >= TICK_BUDGET_S:
            self.out_of_time = True
        return not self.out_of_time

    def thread_of(self, backfill_id: str) -> str | None:
        if backfill_id not in self._threads:
            self._threads[backfill_id] = thread_of(self._context.instance, backfill_id)
        return self._threads[backfill_id]

    def reply_target(self, backfill_id: str | None, since: float) -> tuple[str | None, bool]:
        """Where an alert about a run posted at `since` goes: (the thread of its backfill or None, whether to
        wait for that thread first). It waits at most THREAD_WAIT_S, then posts in the channel."""
        if not backfill_id:
            return None, False
        ts = self.thread_of(backfill_id)
        return ts, ts is None and (self._clock() - since < THREAD_WAIT_S or self._opener_blocked())

    def _opener_blocked(self) -> bool:
        """The thread-opening sensor's last tick could not post (Slack down or rate-limited), not for too long."""
        raw = self._storage.get_cursor_values({OPENER_BLOCKED_KEY}).get(OPENER_BLOCKED_KEY)
        return bool(raw) and self._clock() - float(raw) < OPENER_WAIT_MAX_S

    def _record_opener(self) -> None:
        if not self._opens_threads:
            return
        if not self.blocked:
            self._storage.set_cursor_values({OPENER_BLOCKED_KEY: ""})
        elif not self._storage.get_cursor_values({OPENER_BLOCKED_KEY}).get(OPENER_BLOCKED_KEY):
            self._storage.set_cursor_values({OPENER_BLOCKED_KEY: repr(self._clock())})

    def send(self, key: str, messages: Sequence[fmt.Message], commit: Commit, thread_ts: str | None = None,
             broadcast: bool = False) -> bool:
        """Post what Slack has not yet taken of one notice (`key` names it), then apply `commit(ts of its first
        message)` and journal; `commit` may return key-value pairs to store with it. False when Slack did not
        take a message: the caller stops, the tick ends."""
        if self.stopped:
            return False
        parts: dict[str, list[str]] = self.state.setdefault("parts", {})
        sent = list(parts.get(key, []))
        for i in range(len(sent), len(messages)):
            if not self._in_time():
                return False
            reply_to = thread_ts or (sent[0] if sent else None)
            part = f"{key}#{i}"
            ts = self._already_posted(part, reply_to)
            if ts is None and not self.stopped and self._in_time():
                ts = self._post(messages[i], reply_to, broadcast and i == 0, part)
            if ts is None:
                return False
            self.state.get("unanswered", {}).pop(part, None)
            sent.append(ts)
            if i < len(messages) - 1:
                parts[key] = sent
                self._journal()
        parts.pop(key, None)
        extra = commit(sent[0]) if sent else None
        self.delivered += 1
        self._journal(extra)
        return True

    def _already_posted(self, part: str, thread_ts: str | None) -> str | None:
        """A part whose post went unanswered (a timeout): look for it in Slack before posting it again. If Slack
        cannot be asked (no history scope, no channel id yet), it is posted again: twice rather than lost. If
        Slack is busy (429, 5xx, a timeout: likely just when answers get lost), the tick stops with the part
        pending and asks again next tick; after LOOKUP_GIVE_UP_S of that, it is posted again."""
        unanswered: dict[str, float] = self.state.get("unanswered", {})
        if part not in unanswered or self.stopped:
            return None
        while self._channel_id:
            try:
                return self._slack.find_part(part, self._channel_id, unanswered[part] - LOOKBACK_S, thread_ts,
                                             self._in_time)
            except SlackOutOfTime:
                return None  # out_of_time is set: the part stays pending, looked up again next tick
            except SlackRateLimited as exc:
                if self._waited(exc) and self._in_time():
                    continue
                return None
            except SlackBusy as exc:
                if self._clock() - unanswered[part] < LOOKUP_GIVE_UP_S:
                    self.error = f"could not check whether Slack took {part} before its answer was lost ({exc})"
                    self._journal()
                    return None
                self._context.log.warning(f"could not check whether Slack took {part} before its answer was lost "
                                          f"({exc}) for {LOOKUP_GIVE_UP_S / 60:g} min; posting it again")
                return None
            except SlackPostError as exc:
                self._context.log.warning(f"could not check whether Slack took {part} before its answer was lost "
                                          f"({exc}); posting it again")
                return None
        return None

    def _waited(self, exc: SlackRateLimited) -> bool:
        """Sleep a Retry-After the tick can absorb (True: ask again), else keep it for every sensor and stop."""
        if self.waited_s + exc.retry_after_s <= self._slack.max_wait_s:
            self._sleep(exc.retry_after_s)
            self.waited_s += exc.retry_after_s
            return True
        self.state["not_before"] = self._clock() + exc.retry_after_s
        self._app_not_before = max(self._app_not_before, self.state["not_before"])
        self._storage.set_cursor_values({NOT_BEFORE_KEY: repr(self._app_not_before)})
        self._journal()
        return False

    def _post(self, message: fmt.Message, thread_ts: str | None, broadcast: bool, part: str) -> str | None:
        while True:
            try:
                ts, channel = self._slack.post_part(message, thread_ts, broadcast, part)
                if channel and channel != self._channel_id:
                    self._channel_id = channel
                    self._storage.set_cursor_values({CHANNEL_KEY: channel})
                return ts
            except SlackUnanswered as exc:
                # The first unanswered try is where a later lookup starts, however many tries failed since.
                self.state.setdefault("unanswered", {}).setdefault(part, self._clock())
                self.error = str(exc)
                self._journal()
                return None
            except SlackRateLimited as exc:
                if self._waited(exc) and self._in_time():
                    continue
                return None
            except SlackRefusedBlocks as exc:
                if not message.blocks:
                    self.error = str(exc)
                    self._journal()
                    return None
                self.fallbacks.append(str(exc))
                self._context.log.warning(f"Slack refused a message's blocks ({exc}); sending its text only")
                note = f"\n(Slack refused this message's detail blocks: {exc}; see the Dagster UI for the rest.)"
                text = message.text
                text = text[:-len(fmt.IN_THE_BLOCKS)] + " …" if text.endswith(fmt.IN_THE_BLOCKS) else text
                message = fmt.Message(text + note, ())
                if not self._in_time():
                    return None
            except SlackPostError as exc:
                self.error = str(exc)
                self._journal()
                return None

    def _journal(self, extra: Mapping[str, str] | None = None) -> None:
        pairs = {self._key: json.dumps({"from": self._from, "state": self.state}, sort_keys=True)}
        self._storage.set_cursor_values({**pairs, **(extra or {})})

    def finish(self, summary: str, pending: int) -> dg.SkipReason:
        """End the tick: save the cursor; raise SlackUnavailable if Slack refused a message (the tick then
        shows FAILURE), else skip with a reason saying what was delivered and what waits."""
        if self.not_before is None:
            self.state.pop("not_before", None)
        if self.fallbacks:
            summary += f"; {len(self.fallbacks)} sent as text only (Slack refused their blocks)"
        self._record_opener()
        self._context.update_cursor(dump_cursor(self.state))
        if self.error:
            self._journal()
            raise SlackUnavailable(f"{summary}; Slack did not take the next message ({self.error}); {pending} "
                                   "pending, retried on the next tick (nothing delivered is lost or re-sent)")
        until = self.not_before
        if until is not None:
            stamp = time.strftime("%H:%M:%S UTC", time.gmtime(until))
            return dg.SkipReason(f"{summary}; Slack rate-limited this app (HTTP 429): {pending} pending, next "
                                 f"post not before {stamp}")
        if self.out_of_time:
            return dg.SkipReason(f"{summary}; this tick's {TICK_BUDGET_S:g} s for Slack are spent: {pending} pending, "
                                 "posted next tick")
        return dg.SkipReason(summary)
