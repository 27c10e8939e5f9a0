"""A step that fails once after its commit (while writing its events, say), for the tests of its re-execution."""

from __future__ import annotations

from typing import Any

import pytest


def fail_once(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[bool]:
    """`owner.name` raises at its first call, then is itself again; the list returned is non-empty once it has."""
    real, failed = getattr(owner, name), []

    def once(*args: Any, **kwargs: Any) -> Any:
        if not failed:
            failed.append(True)
            raise RuntimeError(f"{name} failed once, after the commit")
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, once)
    return failed
