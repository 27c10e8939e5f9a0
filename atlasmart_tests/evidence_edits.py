"""New reference evidence as its sources deliver it, for tests: a deletion request, a dimension batch."""

import json
from pathlib import Path


def deletion_request(raw: Path, request_id: str, reason: str = "GDPR art. 17", **subject: object) -> Path:
    """raw/deletions/<request_id>.json naming `subject` (customer_id=..., or line_ids=[...])."""
    (raw / "deletions").mkdir(exist_ok=True)
    path = raw / "deletions" / f"{request_id}.json"
    path.write_text(json.dumps({"request_id": request_id, "requested_at": "2026-09-25T10:00:00Z", "reason": reason,
                                **subject}))
    return path


def customer_and_days(raw: Path, days: list[str], day: str) -> tuple[str, list[str]]:
    """The customer of the first line of `day`'s first batch, and the days of `days` whose first batch holds a line
    of theirs."""
    lines = {d: json.loads((raw / f"partition={d}.json").read_text())["lines"] for d in days}
    subject = lines[day][0]["customer_id"]
    return subject, [d for d in days if any(x["customer_id"] == subject for x in lines[d])]


def retier_first_customer(raw: Path, batch_id: str = "D-2026-09-25-01") -> Path:
    """A new dimension batch: the first customer of customers.json in another tier (a new dimension version)."""
    first = json.loads((raw / "customers.json").read_text())["customers"][0]
    (raw / "customers").mkdir(exist_ok=True)
    path = raw / "customers" / f"{batch_id}.json"
    path.write_text(json.dumps({"customers": [
        {**first, "tier": "platinum" if first["tier"] != "platinum" else "gold"}]}))
    return path
