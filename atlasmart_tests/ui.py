"""The Dagster UI driven by Playwright on Debian's chromium: the operator's backfill path as screens and clicks.

Grain: one `Operator` per browser page; every step that matters to a reader leaves a numbered screenshot.
Selectors are roles, placeholders and visible text of Dagster 1.13's UI, found by exploring it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

from playwright.sync_api import Browser, Locator, Page, expect, sync_playwright
from playwright.sync_api import Error as PlaywrightError

CHROMIUM = Path("/usr/bin/chromium")
# No downloaded browser and no traffic beyond the loopback webserver.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
CREATED_BACKFILL = re.compile(r"Created backfill (\w+)")
UI_TIMEOUT_MS = 60_000  # a shared two-core machine renders a page in seconds, not Playwright's default 5 s

# expect() has its own timeout, apart from the page's default.
expect.set_options(timeout=UI_TIMEOUT_MS)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@contextlib.contextmanager
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@dataclass
class Operator:
    """An operator at the Dagster UI: opens pages, fills the backfill dialog, reads what the UI shows."""

    page: Page
    base_url: str
    shots: Path
    taken: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.shots.mkdir(parents=True, exist_ok=True)
        self.page.set_default_timeout(UI_TIMEOUT_MS)

    def shot(self, name: str) -> Path:
        path = self.shots / f"{len(self.taken) + 1:02d}-{name}.png"
        self.page.screenshot(path=str(path))
        self.taken.append(path)
        return path

    def open(self, path: str) -> None:
        self.page.goto(self.base_url + path)

    def open_partitions(self, asset_path: str) -> None:
        self.open(f"/assets/{asset_path}?view=partitions")
        expect(self.page.get_by_text("Partitions Selected")).to_be_visible()

    def launch_backfill(self, partition_range: tuple[str, str], tags: Mapping[str, str], name: str) -> str:
        """Materialize… → (confirm the multi-asset's siblings) → range, tags → Launch backfill; the new backfill id."""
        page = self.page
        siblings = page.get_by_role("dialog").filter(has_text="Additional assets will be materialized")
        dialog = page.get_by_role("dialog").filter(has_text="Launch runs to materialize")
        page.get_by_role("button", name="Materialize…").click()
        expect(siblings.or_(dialog)).to_be_visible()
        if siblings.is_visible():
            self.shot(f"{name}-additional-assets")
            siblings.get_by_role("button", name="Confirm").click()
        try:
            self._select_range(dialog, partition_range)
            add_tags = dialog.get_by_role("button", name="Add tags")
            if not add_tags.is_visible():
                dialog.get_by_text("Tags", exact=True).click()
            add_tags.click()
        except (PlaywrightError, AssertionError) as e:
            raise AssertionError(f"launch dialog for {name}: {e}\n{self._seen(name, dialog)}") from e
        editor = page.get_by_role("dialog").filter(has_text="Add tags to run")
        for i, (key, value) in enumerate(tags.items()):
            if i:
                editor.get_by_role("button", name="Add custom tag").click()
            editor.get_by_placeholder("Tag Key").nth(i).fill(key)
            editor.get_by_placeholder("Tag Value").nth(i).fill(value)
        editor.get_by_role("button", name="Apply").click()
        expect(editor).to_be_hidden()
        for key, value in tags.items():
            expect(dialog.get_by_text(f"{key}: {value}")).to_be_visible()
        self.shot(f"{name}-launch-dialog")
        toasts = page.get_by_text(CREATED_BACKFILL)
        earlier = self._created(toasts.all_inner_texts())
        dialog.get_by_role("button", name="Launch backfill").click()
        deadline = time.monotonic() + 60
        while not (new := self._created(toasts.all_inner_texts()) - earlier):
            if time.monotonic() > deadline:
                raise AssertionError("no 'Created backfill' toast after Launch backfill")
            page.wait_for_timeout(200)
        self.shot(f"{name}-created")
        [backfill_id] = new
        return backfill_id

    def _select_range(self, dialog: Locator, partition_range: tuple[str, str]) -> None:
        """Type the range and commit it by leaving the input; retried until the header counts its days.

        Blurring commits like Enter does, without the risk of Enter reaching a button if the input re-rendered
        and lost focus in between (a flake seen once on a loaded machine).
        """
        first, last = (dt.date.fromisoformat(d) for d in partition_range)
        count = dialog.get_by_text(f"{(last - first).days + 1} partitions", exact=True)
        for attempt in range(3):
            selection = dialog.get_by_role("textbox").first
            selection.fill(f"[{partition_range[0]}...{partition_range[1]}]")
            dialog.get_by_text("Launch runs to materialize").click()
            try:
                expect(count).to_be_visible(timeout=20_000)
                return
            except AssertionError:
                if attempt == 2:
                    raise

    def _seen(self, name: str, dialog: Locator) -> str:
        """A screenshot and the dialog's text, for a step that timed out."""
        path = self.shot(f"{name}-timeout")
        try:
            text = dialog.inner_text(timeout=2_000)
        except PlaywrightError:
            text = "(no launch dialog on the page)"
        return f"screenshot {path}\ndialog text:\n{text}"

    @staticmethod
    def _created(texts: list[str]) -> set[str]:
        return {m.group(1) for t in texts for m in [CREATED_BACKFILL.search(t)] if m}

    def wait_backfill_status(self, backfill_id: str, status: str, timeout_s: float) -> None:
        """Reload the backfill's page until its Status reads `status` (the daemon settles it after the runs)."""
        self.open(f"/runs/b/{backfill_id}")
        # The label's sibling, not the page: the per-asset table's headers also read "Succeeded" / "Failed".
        shown = self.page.get_by_text("Status", exact=True).locator("xpath=following-sibling::div[1]")
        deadline = time.monotonic() + timeout_s
        while (text := shown.inner_text().strip()) != status:
            if time.monotonic() > deadline:
                raise AssertionError(f"backfill {backfill_id} status still {text!r}, not {status!r}, after {timeout_s}s")
            self.page.wait_for_timeout(2000)
            self.page.reload()

    def step_failures(self, run_id: str) -> None:
        """The run's page with its event log narrowed to step failures."""
        self.open(f"/runs/{run_id}")
        self.page.get_by_placeholder("Filter").fill("type:STEP_FAILURE")
