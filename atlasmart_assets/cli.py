"""`atlasmart`: the operator's command line (lab, rollback, generate)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import uuid


def _lab(args: argparse.Namespace) -> int:
    os.environ["ATLASMART_DATA_DIR"] = args.data_dir or tempfile.mkdtemp(prefix="atlasmart-lab-")
    os.environ["ATLASMART_AS_OF"] = "2026-09-22"
    from atlasmart_assets import lab

    summary = lab.run()
    print(json.dumps({"data_dir": os.environ["ATLASMART_DATA_DIR"], **summary}, indent=2))
    ok = (summary["historical_controls"] == summary["expected_historical_controls"]
          and summary["current_controls"] == summary["expected_current_controls"]
          and summary["current_hash_unchanged_after_backfill"])
    return 0 if ok else 1


def _rollback(args: argparse.Namespace) -> int:
    from atlasmart_assets import rollback

    pub = rollback.rollback(args.start, args.end, args.reason, f"cli-rollback-{uuid.uuid4().hex[:8]}")
    print(json.dumps({"publication_id": pub.publication_id, "window": str(pub.window),
                      "restored": {d: {"rows": c.rows, "controls": c.controls, "sha256": c.sha256}
                                   for d, c in pub.after.items()}}, indent=2))
    return 0


def _generate(args: argparse.Namespace) -> int:
    from atlasmart_assets import generate

    generate.main(args.rest)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="atlasmart", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    lab = sub.add_parser("lab", help="replay the seed lab on a scratch data dir and print the acceptance summary")
    lab.add_argument("--data-dir", help="where to write (default: a new temporary directory)")
    lab.set_defaults(func=_lab)
    rb = sub.add_parser("rollback", help="restore the previous publication of a range, in one commit")
    rb.add_argument("--from", dest="start", required=True)
    rb.add_argument("--to", dest="end")
    rb.add_argument("--reason", required=True)
    rb.set_defaults(func=_rollback)
    gen = sub.add_parser("generate", help="write deterministic raw evidence (see --help of atlasmart_assets.generate)")
    gen.add_argument("rest", nargs=argparse.REMAINDER)
    gen.set_defaults(func=_generate)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, RuntimeError) as exc:
        print(f"atlasmart {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
