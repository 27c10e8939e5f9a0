"""Names from files and tags that reach a path, SQL or a notice are matched whole: `$` also matches before a trailing
newline, so a request file named `DR-0800\\n.json` loaded and its id reached the change notice (found by a review)."""

import json
from pathlib import Path

import pytest

from atlasmart_assets import deletions, notices, sql, stale
from atlasmart_assets.warehouse import connection, scratch


@pytest.mark.parametrize("pattern, good", [
    (deletions.REQUEST_ID, "DR-0800"),
    (notices.SAFE_NAME, "bf-2026"),
    (scratch.RUN_ID, "0f3c-run"),
    (connection.IDENTIFIER, "w"),
    (stale.QUALIFIED, "fact.fct_order_lines"),
    (sql.MIGRATION, "014_requests_named.sql"),
])
def test_a_name_with_a_trailing_newline_does_not_match(pattern, good) -> None:  # noqa: ANN001
    assert pattern.match(good)
    assert not pattern.match(good + "\n")


def test_a_request_whose_id_ends_in_a_newline_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "deletions"
    folder.mkdir()
    request = {"request_id": "DR-0800\n", "requested_at": "2026-09-25T10:00:00Z", "reason": "erasure",
               "customer_id": "C-1"}
    (folder / "DR-0800\n.json").write_text(json.dumps(request))
    with pytest.raises(deletions.RequestError, match="is not named as a deletion request"):
        deletions.load(tmp_path)


def test_a_scratch_file_name_is_never_a_run_id_with_a_newline(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a usable run id"):
        scratch.path(tmp_path, "run\n")

