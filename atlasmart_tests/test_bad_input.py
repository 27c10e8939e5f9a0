"""Bad raw input fails the run with a message naming file, partition and problem; nothing published changes."""

import json

import pytest

from atlasmart_assets.lab import run_chain
from atlasmart_tests import state

DAY = "2026-09-19"


def _failure_text(result) -> str:
    texts = []
    for event in result.get_step_failure_events():
        data = event.step_failure_data
        texts.append((data.user_failure_data.description if data.user_failure_data else "") or "")
        texts.append(data.error.message if data.error else "")
    return " ".join(texts)


def _drop_file(path):
    path.unlink()


def _malformed(path):
    path.write_text(path.read_text()[:-40])


def _missing_field(path):
    doc = json.loads(path.read_text())
    del doc["lines"][3]["unit_cost"]
    path.write_text(json.dumps(doc))


def _mistyped_value(path):
    doc = json.loads(path.read_text())
    doc["lines"][2]["quantity"] = "two"
    path.write_text(json.dumps(doc))


def _controls_disagree(path):
    doc = json.loads(path.read_text())
    doc["manifest"]["controls"]["gmv"] += 1
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("damage, problem", [
    (_drop_file, "raw file is missing"),
    (_malformed, "malformed JSON"),
    (_missing_field, "lack unit_cost"),
    (_mistyped_value, "quantity 'two' is not an integer"),
    (_controls_disagree, "manifest says"),
])
def test_bad_input_names_file_partition_problem_and_changes_nothing(env, instance, published, damage, problem) -> None:
    published(("2026-09-18", None), ("2026-09-20", None))
    before = state.snapshot(env)
    path = env.raw_dir / f"partition={DAY}.json"
    damage(path)
    for start, end in ((DAY, None), ("2026-09-18", "2026-09-20")):
        result = run_chain(instance, start, end, {"dagster/backfill": "bf-bad"} if end else None)
        assert not result.success
        text = _failure_text(result)
        assert DAY in text and str(path) in text and problem in text, text
        assert state.snapshot(env) == before
