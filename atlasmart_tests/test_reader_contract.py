"""Readers that follow the published/ contract never see a mix of versions, even while versions are pruned."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from atlasmart_assets import extracts
from atlasmart_assets.lab import run_chain
from atlasmart_assets.settings import load

REPO = Path(__file__).resolve().parent.parent
DAYS = [f"2026-09-{d:02d}" for d in range(10, 20)]


def _version_texts(base: dict[str, dict], k: int) -> dict[str, str]:
    """Every day of the range with cost + k: a version whose total cost identifies it."""
    texts = {}
    for day, doc in base.items():
        changed = {**doc, "controls": [*doc["controls"][:4], round(doc["controls"][4] + k, 2), *doc["controls"][5:]]}
        texts[day] = json.dumps(changed, sort_keys=True, indent=1) + "\n"
    return texts


def test_contract_readers_never_see_a_mix_over_a_thousand_passes(env, instance, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ATLASMART_RETAIN_VERSIONS", "1")
    assert run_chain(instance, DAYS[0], DAYS[-1]).success
    cfg = load()
    docs = {d: json.loads((extracts.resolve(cfg) / extracts.file_name(d)).read_text()) for d in DAYS}
    base = sum(doc["controls"][4] for doc in docs.values())
    out, stop = tmp_path / "passes.json", tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-m", "atlasmart_tests.contract_reader", str(cfg.data_dir), str(out),
                               str(stop)], cwd=REPO, env=os.environ.copy())
    totals = {round(base, 2)}
    swaps, k, deadline = 0, 0, time.monotonic() + 240
    progress = out.with_suffix(".progress")
    while time.monotonic() < deadline:
        k += 1
        version = f"test-{k:05d}"
        extracts.stage(cfg, version, _version_texts(docs, k))
        totals.add(round(base + len(DAYS) * k, 2))
        extracts.swap(cfg, version)
        extracts.prune(cfg, {version})  # retention 1: every older version is prunable once its grace has passed
        swaps += 1
        if swaps >= 20 and progress.exists() and int(progress.read_text() or 0) >= 1000:
            break
    stop.touch()
    assert reader.wait(timeout=60) == 0
    seen = json.loads(out.read_text())
    passes = seen["passes"]
    assert len(passes) >= 1000 and swaps >= 20, (len(passes), swaps)
    assert seen["errors"] == [], seen["errors"][:3]
    assert all(not p["bad"] for p in passes)
    mixed = [p for p in passes if not any(abs(p["total"] - t) < 0.05 for t in totals)]
    assert not mixed, mixed[:3]
    assert len({p["version"] for p in passes}) > 2, "the reader saw the swaps happen"
