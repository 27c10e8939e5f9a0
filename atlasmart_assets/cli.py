"""`atlasmart`: the operator's command line (lab, plan, rollback, generate)."""

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
    from atlasmart_assets.resources import Warehouse

    pub = rollback.rollback(Warehouse(), args.start, args.end, args.reason, f"cli-rollback-{uuid.uuid4().hex[:8]}",
                            args.to_publication)
    print(json.dumps({"publication_id": pub.publication_id, "window": str(pub.window),
                      "restored": {d: {"rows": c.rows, "controls": c.controls, "sha256": c.sha256}
                                   for d, c in pub.after.items()}}, indent=2))
    return 0


def _plan(args: argparse.Namespace) -> int:
    from atlasmart_assets import plan
    from atlasmart_assets.assets.graph import asset_graph
    from atlasmart_assets.resources import Warehouse

    p = plan.make(Warehouse(), asset_graph(), args.start, args.end, args.assets or None,
                  fence_override=args.fence_override)
    if args.json:
        print(json.dumps(p.as_dict(), indent=2))
    else:
        print(plan.markdown(p))
    if args.png and p.impact:
        with open(args.png, "wb") as fh:
            fh.write(plan.png(p))
    return 0


def _stale(args: argparse.Namespace) -> int:
    from atlasmart_assets import stale
    from atlasmart_assets.resources import Warehouse
    from atlasmart_assets.window import Window

    window = Window.of(args.start, args.end) if args.start else None
    days = stale.stale_days(Warehouse(), window)
    if args.json:
        print(json.dumps([d.as_dict() for d in days], indent=2))
    else:
        for d in days:
            print(f"{d.partition}: {'; '.join(d.reasons)} (published as {d.publication_id})")
        if not days:
            print("no published day is stale")
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
    rb.add_argument("--to-publication", help="restore this publication id (default: one version back per partition)")
    rb.set_defaults(func=_rollback)
    pl = sub.add_parser("plan", help="preview a backfill: scope, fence, reach, neighbours, data impact (writes nothing)")
    pl.add_argument("--from", dest="start", required=True)
    pl.add_argument("--to", dest="end")
    pl.add_argument("--asset", dest="assets", action="append", help="asset key, e.g. fact/fct_order_lines")
    pl.add_argument("--fence-override", help="the reason you would give to include the newest partition")
    pl.add_argument("--json", action="store_true")
    pl.add_argument("--png", help="write the before/after chart here")
    pl.set_defaults(func=_plan)
    st = sub.add_parser("stale", help="published days whose evidence changed since their publication (writes nothing)")
    st.add_argument("--from", dest="start")
    st.add_argument("--to", dest="end")
    st.add_argument("--json", action="store_true", help="a JSON list, one object per stale day: partition, reasons, ...")
    st.set_defaults(func=_stale)
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
