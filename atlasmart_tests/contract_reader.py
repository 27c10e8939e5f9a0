"""A reader that follows the published/ contract: resolve the version once per pass, read the files its index
names from that version, and check each against the index's sha256. Writes what each pass saw."""

import hashlib
import json
import sys
from pathlib import Path

if __name__ == "__main__":
    data_dir, out, stop = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    passes: list[dict] = []
    errors: list[str] = []
    link = data_dir / "published"
    while not stop.exists():
        version = data_dir / "published_versions" / Path(link.readlink()).name
        try:
            index = json.loads((version / "index.json").read_text())
            total, bad = 0.0, []
            for day, entry in sorted(index["partitions"].items()):
                raw = (version / entry["file"]).read_bytes()
                if hashlib.sha256(raw).hexdigest() != entry["sha256"]:
                    bad.append(day)
                total += json.loads(raw)["controls"][4]
            passes.append({"version": version.name, "total": round(total, 2), "bad": bad})
        except (OSError, ValueError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        if len(passes) % 200 == 0:
            (out.with_suffix(".progress")).write_text(str(len(passes)))
    out.write_text(json.dumps({"passes": passes, "errors": errors}))
