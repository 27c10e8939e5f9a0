"""AtlasMart scale bench: a year's backfill vs the raw-scan floor, vs one run per partition, and vs today's load.

`python -m bench.run` (or `make bench`). Every heavy workload runs in its own child process; wall time is
measured by the child around the work itself, peak memory (ru_maxrss) by this process from wait4.
Raw evidence is generated once under --root and reused while the generator parameters match.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from atlasmart_assets import generate
from bench.memory import TreePeak

REPO = Path(__file__).resolve().parent.parent
OUT = Path(__file__).resolve().parent / "out"
MiB = 1024 * 1024
# The late scenario's delta batches land on every third day of the window.
LATE_EVERY = 3


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def spawn(cmd: list[str], env: dict[str, str], log_name: str) -> tuple[subprocess.Popen, Any]:
    OUT.joinpath("logs").mkdir(parents=True, exist_ok=True)
    fh = open(OUT / "logs" / f"{log_name}.log", "w")  # noqa: SIM115 - closed by reap()
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)
    proc.tree_peak = TreePeak(proc.pid)  # type: ignore[attr-defined]
    return proc, fh


def reap(proc: subprocess.Popen, fh: Any) -> tuple[int, float]:
    """Wait for one child; returns (exit status, its peak RSS in MiB) from that child's own rusage: its largest
    single process (tree_peak(proc): what its whole tree held at once)."""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.tree_peak_mib = proc.tree_peak.stop()  # type: ignore[attr-defined]
    fh.close()
    return proc.returncode, usage.ru_maxrss / 1024


def tree_peak(proc: subprocess.Popen) -> float | None:
    """The peak PSS of a reaped child's whole process tree, in MiB (bench/memory.py)."""
    return getattr(proc, "tree_peak_mib", None)


def run_child(cmd: list[str], env: dict[str, str], log_name: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc, fh = spawn(cmd, env, log_name)
    code, rss = reap(proc, fh)
    wall = time.perf_counter() - t0
    if code != 0:
        raise RuntimeError(f"{log_name} exited {code}; see {OUT / 'logs' / (log_name + '.log')}")
    return {"process_wall_s": round(wall, 3), "peak_rss_mib": round(rss, 1), "peak_tree_pss_mib": tree_peak(proc)}


def worker(mode: str, out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "bench.worker", mode, "--out", str(out), *args]


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.root = Path(args.root)
        self.start = dt.date.fromisoformat(args.start)
        # Raw covers the backfill window plus one more day: the newest partition, which the current lane owns.
        self.raw_days = args.days + 1
        self.raw_dir = self.root / f"raw-{args.start}-d{self.raw_days}-l{args.lines}-c{args.customers}"
        self.last = self.start + dt.timedelta(days=args.days - 1)
        self.newest = self.start + dt.timedelta(days=args.days)
        self.as_of = self.newest + dt.timedelta(days=1)
        self.slice_end = self.start + dt.timedelta(days=min(args.slice, args.days) - 1)
        # Keyed as the raw directory is: a bench of other parameters under the same --root never removes this one's.
        self.work = self.root / f"work-{args.start}-d{self.raw_days}-l{args.lines}-c{args.customers}"
        self.results: dict[str, Any] = {}

    def env(self, data_dir: Path, home: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ATLASMART_")}
        env.update({
            "ATLASMART_RAW_DIR": str(self.raw_dir), "ATLASMART_DATA_DIR": str(data_dir),
            "ATLASMART_AS_OF": self.as_of.isoformat(), "ATLASMART_START_DATE": self.start.isoformat(),
            "DAGSTER_HOME": str(home), "PYTHONUNBUFFERED": "1",
        })
        if self.args.memory_limit:
            env["ATLASMART_DUCKDB_MEMORY_LIMIT"] = self.args.memory_limit
        return env

    def dagster_home(self, name: str) -> Path:
        home = self.work / name
        home.mkdir(parents=True, exist_ok=True)
        # The shipped instance (its event log storage among the rest), as an operator's deployment has it.
        shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
        return home

    def fresh(self, name: str) -> tuple[Path, dict[str, str]]:
        """An empty data dir and an empty Dagster instance: an earlier bench's runs (one left STARTED in the current
        lane holds every backfill up) must not carry over."""
        data = self.work / name
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(self.work / f"{name}-home", ignore_errors=True)
        data.mkdir(parents=True)
        return data, self.env(data, self.dagster_home(f"{name}-home"))

    def clone(self, src: Path, name: str) -> tuple[Path, dict[str, str]]:
        data = self.work / name
        shutil.rmtree(data, ignore_errors=True)
        shutil.copytree(src, data, symlinks=True)
        return data, self.env(data, self.dagster_home(f"{name}-home"))

    # -- 1. raw evidence -------------------------------------------------------------------------------------
    def generate(self) -> None:
        params = {"start": self.args.start, "days": self.raw_days, "lines": self.args.lines,
                  "customers": self.args.customers}
        marker = self.raw_dir / ".complete.json"
        if marker.exists() and json.loads(marker.read_text()).get("params") == params:
            info = json.loads(marker.read_text())
            log(f"reusing raw {self.raw_dir} (generated in {info['wall_s']} s)")
            self.results["generate"] = {**info, "reused": True}
            return
        shutil.rmtree(self.raw_dir, ignore_errors=True)
        log(f"generating {self.raw_days} days x {self.args.lines} lines into {self.raw_dir}")
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "atlasmart_assets.generate", "--raw-dir", str(self.raw_dir),
                        "--start", self.args.start, "--days", str(self.raw_days), "--lines", str(self.args.lines),
                        "--customers", str(self.args.customers)], cwd=REPO, check=True)
        wall = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in self.raw_dir.glob("*.json"))
        info = {"params": params, "wall_s": round(wall, 1), "bytes": size,
                "lines_per_s": round(self.raw_days * self.args.lines / wall)}
        marker.write_text(json.dumps(info))
        self.results["generate"] = {**info, "reused": False}

    # -- 2. floor --------------------------------------------------------------------------------------------
    def floor(self) -> None:
        runs = []
        for k in range(self.args.repeats):
            out = self.work / f"floor-{k}.json"
            meta = run_child(worker("floor", out, "--raw-dir", str(self.raw_dir), "--start", self.start.isoformat(),
                                    "--end", self.last.isoformat()), self.env(self.work, self.work), f"floor-{k}")
            runs.append({**json.loads(out.read_text()), **meta})
            log(f"floor {k + 1}/{self.args.repeats}: {runs[-1]['wall_s']} s, {runs[-1]['peak_rss_mib']} MiB")
        assert all(r["matches_manifests"] for r in runs), "the floor query disagrees with the manifests"
        self.results["floor"] = {"runs": runs, "median_s": med(r["wall_s"] for r in runs),
                                 "peak_rss_mib": max(r["peak_rss_mib"] for r in runs)}

    # -- 2b. write floor -------------------------------------------------------------------------------------
    def write_floor(self) -> None:
        """The least a first load writes in this layout (bench/worker.py, WRITE_FLOOR_RAW_SQL): its raw and staged
        lines, each written once into a DuckDB file with AtlasMart's connection settings, with nothing else."""
        runs = []
        for k in range(self.args.repeats):
            out = self.work / f"write-floor-{k}.json"
            meta = run_child(worker("write_floor", out, "--raw-dir", str(self.raw_dir), "--start",
                                    self.start.isoformat(), "--end", self.last.isoformat()),
                             self.env(self.work, self.work), f"write-floor-{k}")
            runs.append({**json.loads(out.read_text()), **meta})
            log(f"write floor {k + 1}/{self.args.repeats}: {runs[-1]['wall_s']} s (raw {runs[-1]['raw_s']} s, "
                f"staged {runs[-1]['staged_s']} s), {runs[-1]['peak_rss_mib']} MiB")
        assert all(r["matches_manifests"] for r in runs), "the write floor disagrees with the manifests"
        self.results["write_floor"] = {"runs": runs, "median_s": med(r["wall_s"] for r in runs),
                                       "raw_median_s": med(r["raw_s"] for r in runs),
                                       "staged_median_s": med(r["staged_s"] for r in runs),
                                       "peak_rss_mib": max(r["peak_rss_mib"] for r in runs)}

    # -- 3. the 30-day slice: project path vs Dagster's default (one run per partition) ---------------------
    def slice(self) -> None:
        s, e = self.start.isoformat(), self.slice_end.isoformat()
        seed, env = self.fresh("slice-seed")
        out = self.work / "slice-seed.json"
        meta = run_child(worker("chain", out, "--start", s, "--end", e, "--backfill", "bench-slice-seed"), env,
                         "slice-seed")
        first = {**json.loads(out.read_text()), **meta}
        check(first, "slice seed")
        log(f"slice seed (first publication of {s}..{e}): {first['total_s']} s")
        ranged = []
        for k in range(self.args.repeats):
            _, env = self.clone(seed, f"slice-ranged-{k}")
            out = self.work / f"slice-ranged-{k}.json"
            meta = run_child(worker("chain", out, "--start", s, "--end", e, "--backfill", f"bench-slice-{k}"), env,
                             f"slice-ranged-{k}")
            ranged.append({**json.loads(out.read_text()), **meta})
            check(ranged[-1], "slice ranged")
            log(f"slice ranged {k + 1}/{self.args.repeats}: {ranged[-1]['total_s']} s")
        _, env = self.clone(seed, "slice-per-partition")
        out = self.work / "slice-per-partition.json"
        meta = run_child(worker("chain", out, "--start", s, "--end", e, "--backfill", "bench-slice-pp",
                                "--per-partition"), env, "slice-per-partition")
        per_partition = {**json.loads(out.read_text()), **meta}
        check(per_partition, "slice per partition")
        log(f"slice, {len(per_partition['runs'])} single-partition runs in one process: {per_partition['total_s']} s")
        self.results["slice"] = {"window": f"{s}..{e}", "seed_first_publication": summary(first),
                                 "ranged": [summary(r) for r in ranged],
                                 "ranged_median_s": med(r["total_s"] for r in ranged),
                                 "ranged_peak_rss_mib": max(r["peak_rss_mib"] for r in ranged),
                                 "per_partition_in_process": summary(per_partition)}
        if not self.args.skip_cli:
            self.results["slice"]["per_partition_cli"] = self.slice_cli(seed)

    def slice_cli(self, seed: Path) -> dict[str, Any]:
        """What a deployment pays: one OS process per run (DefaultRunLauncher), code location loaded each time."""
        data, env = self.clone(seed, "slice-cli")
        dagster = str(Path(sys.executable).parent / "dagster")
        walls, rss = [], []
        day = self.start
        while day <= self.slice_end:
            t0 = time.perf_counter()
            proc, fh = spawn([dagster, "asset", "materialize", "-m", "atlasmart_assets.definitions", "--select", "*",
                              "--partition", day.isoformat()], env, f"slice-cli-{day}")
            code, peak = reap(proc, fh)
            walls.append(round(time.perf_counter() - t0, 3))
            rss.append(peak)
            if code != 0:
                raise RuntimeError(f"dagster asset materialize --partition {day} exited {code}")
            day += dt.timedelta(days=1)
        log(f"slice, {len(walls)} `dagster asset materialize --partition D` processes: {sum(walls):.1f} s")
        return {"runs": len(walls), "total_s": round(sum(walls), 3), "median_s": med(walls), "max_s": max(walls),
                "peak_rss_mib": round(max(rss), 1), "walls": walls}

    # -- 3b. what an operator waits for: a backfill launched through the UI's mutation on a real deployment -------
    def ui(self) -> None:
        """launch -> complete of a --slice-day backfill through launchPartitionBackfill (the UI's backfill dialog)
        on dagster-webserver + dagster-daemon with the repo's dagster.yaml, on fresh data: the project's ranged run,
        then the same graph with Dagster's default of one run per partition (ATLASMART_BACKFILL_POLICY)."""
        from atlasmart_tests.deployment import FINISHED, backfill_runs, deployment

        s, e = self.start, self.slice_end
        keys = [(s + dt.timedelta(days=k)).isoformat() for k in range((e - s).days + 1)]
        chain = [["raw", "order_lines"], ["staged", "order_lines"], ["fact", "fct_order_lines"],
                 ["mart", "revenue_daily"]]
        out: dict[str, Any] = {"window": f"{keys[0]}..{keys[-1]}"}
        for policy in ("single_run", "per_partition"):
            data = self.work / f"ui-{policy}"
            shutil.rmtree(data, ignore_errors=True)
            data.mkdir(parents=True)
            env = {k: v for k, v in self.env(data, data).items() if k.startswith("ATLASMART_")}
            env.update({"ATLASMART_BACKFILL_POLICY": policy, "ATLASMART_CATCH_UP": "off"})
            with deployment(data / "deployment", env) as dep:
                dep.quiet()
                t0 = time.time()
                backfill_id = dep.launch_backfill(chain, keys, {"atlasmart/reason": "bench: what an operator waits for"},
                                                  title=f"bench {policy}")
                with dep.instance() as instance:
                    def done() -> bool:
                        record = instance.get_backfill(backfill_id)
                        runs = backfill_runs(instance, backfill_id)
                        return (record.status.value not in ("REQUESTED", "CANCELING") and bool(runs)
                                and all(r.dagster_run.status.value in FINISHED for r in runs))
                    dep.wait_for(f"backfill {backfill_id} ({policy}) to complete", done, timeout_s=3600, poll_s=0.5)
                    wall = time.time() - t0
                    runs = backfill_runs(instance, backfill_id)
                    statuses = sorted({r.dagster_run.status.value for r in runs})
                    status = instance.get_backfill(backfill_id).status.value
                if statuses != ["SUCCESS"] or status != "COMPLETED_SUCCESS":
                    raise RuntimeError(f"ui bench {policy}: backfill {status}, runs {statuses}; see {data}")
                durations = [round(r.end_time - r.start_time, 3) for r in runs if r.end_time and r.start_time]
                # Where the wait goes: until the first run starts (the backfill daemon's tick, the queue, the run's
                # process), the runs, and after the last run ends until the daemon marks the backfill complete.
                starts = [r.start_time for r in runs if r.start_time]
                ends = [r.end_time for r in runs if r.end_time]
                out[policy] = {"launch_to_complete_s": round(wall, 1), "runs": len(runs),
                               "run_median_s": med(durations), "run_sum_s": round(sum(durations), 1),
                               "launch_to_first_start_s": round(min(starts) - t0, 1),
                               "launch_to_last_end_s": round(max(ends) - t0, 1)}
                log(f"ui {policy}: {len(runs)} run(s), launch -> complete {wall:.1f} s")
        self.results["ui"] = out

    # -- 4. the year, and today's load beside it ---------------------------------------------------------------
    def current_runs(self, env: dict[str, str], name: str, runs: int, until: Path | None = None,
                     delay: float = 0.0, pause: float = 0.0) -> tuple[subprocess.Popen, Any, Path]:
        out = self.work / f"{name}.json"
        cmd = worker("chain", out, "--start", self.newest.isoformat(), "--runs", str(runs), "--delay", str(delay),
                     "--pause", str(pause))
        if until is not None:
            cmd += ["--until-file", str(until)]
        proc, fh = spawn(cmd, env, name)
        return proc, fh, out

    def idle_runs(self, env: dict[str, str], name: str) -> dict[str, Any]:
        """`--repeats` runs of today's load with no backfill beside it."""
        proc, fh, out = self.current_runs(env, name, self.args.repeats)
        code, rss = reap(proc, fh)
        if code != 0:
            raise RuntimeError(f"{name} failed")
        idle = {**json.loads(out.read_text()), "peak_rss_mib": round(rss, 1)}
        check(idle, name)
        log(f"current daily run idle ({name}): median {idle['median_s']} s over {len(idle['runs'])} runs")
        return idle

    def once(self, env: dict[str, str], name: str) -> None:
        """One run of today's load, its figures not kept."""
        proc, fh, out = self.current_runs(env, name, 1)
        code, _ = reap(proc, fh)
        if code != 0:
            raise RuntimeError(f"{name} failed")
        check(json.loads(out.read_text()), name)

    def backfill(self, env: dict[str, str], name: str, rederive: bool = False) -> dict[str, Any]:
        out = self.work / f"{name}.json"
        extra = ["--rederive", "bench: every day built again"] if rederive else []
        meta = run_child(worker("chain", out, "--start", self.start.isoformat(), "--end", self.last.isoformat(),
                                "--backfill", "bench", *extra), env, name)
        result = {**json.loads(out.read_text()), **meta}
        check(result, name)
        return result

    def beside(self, env: dict[str, str], name: str, current: str,
               backfills: int = 1) -> tuple[dict[str, Any], dict[str, Any]]:
        """The backfill `name` (`backfills` runs of it, back to back) with today's load started a few seconds in, in
        its own process, on the same data dir; it keeps loading the newest day until the last backfill has finished.
        Returns the backfills' result and the figures of the current runs that overlap them (beside_figures)."""
        stop = self.work / f"{name}-done"
        stop.unlink(missing_ok=True)
        t0 = time.time()
        bproc, bfh = spawn(worker("chain", self.work / f"{name}.json", "--start", self.start.isoformat(),
                                  "--end", self.last.isoformat(), "--backfill", "bench", "--runs", str(backfills)),
                           env, name)
        cproc, cfh, cout = self.current_runs(env, current, 1, until=stop,
                                             delay=self.args.current_delay, pause=self.args.current_pause)
        bcode, brss = reap(bproc, bfh)
        t1 = time.time()
        stop.touch()
        ccode, crss = reap(cproc, cfh)
        if bcode != 0 or ccode != 0:
            raise RuntimeError(f"{name}: backfill exited {bcode}, current runs exited {ccode}")
        during_all = json.loads(cout.read_text())
        check(during_all, current)
        backfill = {**json.loads((self.work / f"{name}.json").read_text()), "peak_rss_mib": round(brss, 1),
                    "peak_tree_pss_mib": tree_peak(bproc)}
        check(backfill, name)  # figures beside a backfill that did not do its work measure nothing
        spans = [(b["began"], b["ended"]) for b in backfill.get("runs", [])] or [(t0, t1)]
        during = {**beside_figures(during_all["runs"], spans), "backfill_wall_s": round(t1 - t0, 3),
                  "peak_rss_mib": round(crss, 1)}
        log(f"current daily run during the {name}: {during['n']} runs, median {during['median_s']} s, "
            f"max {during['max_s']} s (backfill beside it: {backfill['total_s']} s)")
        return backfill, during

    def year(self) -> None:
        _, env = self.fresh("year")
        # The year reads a copy of the raw directory whose day files are links to the generated ones: the late
        # scenario, run last, lands its delta batches there, where the loaded batches' files are (a batch is read
        # back from the warehouse, not parsed again, only from the path it was loaded from).
        raw = self.work / "raw-year"
        shutil.rmtree(raw, ignore_errors=True)
        shutil.copytree(self.raw_dir, raw, copy_function=os.symlink)
        env = {**env, "ATLASMART_RAW_DIR": str(raw)}
        first = self.backfill(env, "year-first-load")
        log(f"{self.args.days}-day backfill, first load: {first['total_s']} s, {first['peak_rss_mib']} MiB")
        before = self.idle_runs(env, "current-idle")
        again = self.backfill(env, "year-republish")
        log(f"{self.args.days}-day backfill, re-publish: {again['total_s']} s, {again['peak_rss_mib']} MiB")
        # The same re-publish with atlasmart/rederive: every day built and audited again, none kept as published (what
        # a re-publish cost before days were kept, and what one after a new release or dimension version costs).
        rederived = self.backfill(env, "year-rederive", rederive=True)
        log(f"{self.args.days}-day backfill, re-derived: {rederived['total_s']} s, {rederived['peak_rss_mib']} MiB")
        # A re-publish takes 10-13 s, so beside one only 2 of today's runs fall (one every ~7 s), and the p95 of so
        # few is the bench's extrapolation above the slowest. Three back to back gave it 6-7; five give it about 10.
        concurrent, during = self.beside(env, "year-concurrent", "current-during-backfill",
                                         backfills=self.args.beside_republishes)
        # A first load beside today's load, on a data dir of its own: the longer backfill, parsing and appending
        # every day, and so the one that gives the most runs beside it. Today's load has run there once before, as
        # it has every day in production before anyone backfills history: otherwise the first run beside the
        # backfill would be the warehouse's very first (creating it, every migration), and that run, unlike any
        # idle one, would decide the p95.
        # A first load gives 7-8 of today's runs beside it, and the p95 of so few is the bench's extrapolation above
        # the slowest (one run's 0.5 s lock wait read 1.70x): `--beside-first-loads` first loads, each on a data dir
        # of its own, give it 14-16, their figures taken together.
        firsts = []
        for k in range(self.args.beside_first_loads):
            tag = "year-first-beside" if k == 0 else f"year-first-beside-{k + 1}"
            _, first_env = self.fresh(tag)
            self.once(first_env, f"current-before-first-beside-{k + 1}")
            firsts.append(self.beside(first_env, tag, f"current-during-first-load-{k + 1}"))
        first_concurrent = firsts[0][0]
        during_first = pooled([during for _, during in firsts])
        # Idle runs before and after the backfills: a shared machine's speed drifts within minutes (idle medians of
        # 2.13 and 3.33 s in bench runs of the same hour), and a reference from one side only moves the ratio with it.
        after = self.idle_runs(env, "current-idle-after")
        late = self.late(env)
        log(f"{self.args.days}-day backfill, re-publish after late batches: {late['total_s']} s, "
            f"{late['peak_rss_mib']} MiB")
        both = before["runs"] + after["runs"]
        idle = {"runs": both, "median_s": med(r["wall_s"] for r in both),
                "peak_rss_mib": max(before["peak_rss_mib"], after["peak_rss_mib"])}
        self.results["year"] = {"window": f"{self.start}..{self.last}", "first_load": summary(first),
                                "republish": summary(again), "rederive": summary(rederived), "late": summary(late),
                                "republish_with_current_runs": summary(concurrent),
                                "first_load_with_current_runs": summary(first_concurrent),
                                "first_loads_beside_s": [backfill["total_s"] for backfill, _ in firsts],
                                "current_idle": {**summary(idle), "median_before_s": before["median_s"],
                                                 "median_after_s": after["median_s"]},
                                "current_during_backfill": during, "current_during_first_load": during_first}

    def late(self, env: dict[str, str]) -> dict[str, Any]:
        """A re-publish of the published year after a late delta batch landed on every third day (5 new lines, 3
        restated, 2 retracted each): those days built, the others kept. Last of the year's runs: the batches land
        in its raw directory (a copy of links, made anew by each bench run)."""
        raw = Path(env["ATLASMART_RAW_DIR"])
        for k in range(0, self.args.days, LATE_EVERY):
            day = self.start + dt.timedelta(days=k)
            generate.late_delta(raw, day, f"B-{day}-LATE", new=5, restate=3, retract=2)
        return self.backfill(env, "year-late")

    def machine(self) -> dict[str, Any]:
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), platform.processor())
        mem = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal"))
        import duckdb

        return {"nproc": os.cpu_count(), "mem_gib": round(mem / 1024 / 1024, 1), "cpu": model,
                "python": platform.python_version(), "duckdb": duckdb.__version__,
                "dagster": _version("dagster"), "loadavg_at_start": os.getloadavg()}


def beside_figures(runs: list[dict[str, Any]], spans: list[tuple[float, float]]) -> dict[str, Any]:
    """Today's runs that ran beside a backfill, and their figures. A run is beside it when it overlaps one of the
    backfill runs' (began, ended) `spans`: one in the gap between two back-to-back backfills still overlaps one of
    them; one that ended before the first began (the backfill's process still importing) or began after the last
    ended ran on an idle machine."""
    return run_figures([r for r in runs if any(r["began"] < end and r["ended"] > start for start, end in spans)])


def pooled(durings: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of today's runs beside several backfills (each one's beside_figures), taken together."""
    figures = run_figures([r for during in durings for r in during["runs"]])
    return {**figures, "backfill_wall_s": [d["backfill_wall_s"] for d in durings],
            "peak_rss_mib": max(d["peak_rss_mib"] for d in durings), "n_each": [d["n"] for d in durings]}


def run_figures(overlap: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, max and p95 of today's runs `overlap`. The p95 is the exclusive quantile: with few runs it lies above
    the slowest."""
    walls = [r["wall_s"] for r in overlap]
    return {"runs": overlap, "n": len(overlap), "median_s": med(walls) if walls else None,
            "max_s": max(walls) if walls else None,
            "p95_s": round(statistics.quantiles(walls, n=20)[18], 3) if len(walls) > 1 else None,
            "lock_wait_max_s": max((r["lock"]["lock_wait_max_s"] for r in overlap), default=None)}


def _version(pkg: str) -> str:
    from importlib.metadata import version

    return version(pkg)


def med(values: Any) -> float:
    return round(statistics.median(list(values)), 3)


def check(result: dict[str, Any], what: str) -> None:
    if not result.get("all_success"):
        raise RuntimeError(f"{what}: a run failed; see bench/out/logs")


def summary(r: dict[str, Any]) -> dict[str, Any]:
    keep = {k: r[k] for k in ("total_s", "median_s", "max_s", "peak_rss_mib", "peak_tree_pss_mib", "process_wall_s")
            if k in r}
    keep["runs"] = len(r.get("runs", []))
    if len(r.get("runs", [])) == 1:
        keep["steps"] = r["runs"][0]["steps"]
        keep["phases"] = r["runs"][0]["phases"]
        keep["lock"] = r["runs"][0]["lock"]
        keep["event_log"] = r["runs"][0].get("event_log")
        keep["run_start_to_end_s"] = r["runs"][0].get("run_start_to_end_s")
    else:
        keep["walls"] = [x["wall_s"] for x in r.get("runs", [])]
    return keep


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def report(b: Bench) -> list[tuple[str, str, str, str]]:
    r, a = b.results, b.args
    rows: list[tuple[str, str, str, str]] = []
    g = r.get("generate")
    if g:
        rows.append((f"generate raw: {g['params']['days']} days x {a.lines} lines",
                     f"{g['wall_s']:.1f} s" + (" (earlier run, reused)" if g["reused"] else ""),
                     f"{g['bytes'] / MiB:.0f} MiB on disk", f"{g['lines_per_s']:,} lines/s"))
    fl = r.get("floor")
    year = r.get("year")
    wf = r.get("write_floor")
    if fl:
        rows.append((f"floor: DuckDB reads {a.days} raw files once, controls in one query",
                     f"{fl['median_s']:.1f} s (median of {len(fl['runs'])})", f"{fl['peak_rss_mib']:.0f} MiB", ""))
    if wf:
        rows.append((f"write floor: the {a.days} days' raw and staged lines each written once into a DuckDB file",
                     f"{wf['median_s']:.1f} s (median of {len(wf['runs'])}; raw {wf['raw_median_s']:.1f} s, "
                     f"staged {wf['staged_median_s']:.1f} s)", f"{wf['peak_rss_mib']:.0f} MiB",
                     f"{ratio(wf['median_s'], fl['median_s'] if fl else None)}x floor"))
    if year:
        rep, first = year["republish"], year["first_load"]
        floor_s = fl["median_s"] if fl else None
        beyond = f", {ratio(first['total_s'], wf['median_s'])}x write floor" if wf else ""
        rows.append((f"{a.days}-day backfill, first load (1 run, audited, published)", f"{first['total_s']:.1f} s",
                     f"{first['peak_rss_mib']:.0f} MiB", f"{ratio(first['total_s'], floor_s)}x floor{beyond}"))
        rows.append((f"{a.days}-day backfill re-publishing the published window", f"{rep['total_s']:.1f} s",
                     f"{rep['peak_rss_mib']:.0f} MiB", f"{ratio(rep['total_s'], floor_s)}x floor (target <= 3x)"))
        again = year.get("rederive")
        if again:
            rows.append((f"{a.days}-day backfill re-deriving the published window (atlasmart/rederive: every day built)",
                         f"{again['total_s']:.1f} s", f"{again['peak_rss_mib']:.0f} MiB",
                         f"{ratio(again['total_s'], floor_s)}x floor"))
        late = year.get("late")
        if late:
            rows.append((f"{a.days}-day backfill re-publishing after late batches on one day in {LATE_EVERY} "
                         f"({len(range(0, a.days, LATE_EVERY))} days built, the rest kept)",
                         f"{late['total_s']:.1f} s", f"{late['peak_rss_mib']:.0f} MiB",
                         f"{ratio(late['total_s'], floor_s)}x floor"))
        for label, run in (("first load", first), ("re-publish", rep), ("re-derive", again),
                           ("re-publish after late batches", late)):
            if not run:
                continue
            phases = run.get("phases") or {}
            span = run.get("run_start_to_end_s")
            stored = phases.get("dagster.store_event", 0.0) + phases.get("dagster.store_event_batch", 0.0)
            if span:
                rows.append((f"{a.days}-day backfill, {label}: the run's start -> end as Dagster records it",
                             f"{span:.1f} s", f"{run['total_s'] - span:.1f} s before it (creation, planned events)",
                             f"{ratio(span, floor_s)}x floor"))
            if stored:
                rows.append((f"{a.days}-day backfill, {label}: of the whole, Dagster storing the run's events",
                             f"{stored:.1f} s", f"{(run.get('event_log') or {}).get('events')} events",
                             f"{ratio(stored, floor_s)}x floor"))
            lock = run.get("lock") or {}
            rows.append((f"{a.days}-day backfill, {label}: longest warehouse-lock hold", f"{lock.get('lock_hold_max_s')} s",
                         f"total held {lock.get('lock_hold_total_s')} s", "target <= 5 s"))
            ev = run.get("event_log")
            if ev:
                rows.append((f"{a.days}-day backfill, {label}: event log written", f"{ev['bytes']:,} bytes ({ev['bytes'] / MiB:.2f} MiB)",
                             f"{ev['events']} events, largest {ev['largest_bytes'] / 1024:.1f} KiB",
                             "target <= 5 MB (5,000,000 bytes), none over 64 KiB"))
    sl = r.get("slice")
    if sl:
        n = min(a.slice, a.days)
        rng = sl["ranged_median_s"]
        pp = sl["per_partition_in_process"]
        rows.append((f"{n}-day slice, project path (1 ranged run)", f"{rng:.1f} s (median of {len(sl['ranged'])})",
                     f"{sl['ranged_peak_rss_mib']:.0f} MiB", "1x"))
        rows.append((f"{n}-day slice, {pp['runs']} single-partition runs, one process", f"{pp['total_s']:.1f} s",
                     f"{pp['peak_rss_mib']:.0f} MiB", f"{ratio(pp['total_s'], rng)}x slower (target >= 20x)"))
        cli = sl.get("per_partition_cli")
        if cli:
            rows.append((f"{n}-day slice, {cli['runs']} `dagster asset materialize --partition D` processes",
                         f"{cli['total_s']:.1f} s", f"{cli['peak_rss_mib']:.0f} MiB each (max)",
                         f"{ratio(cli['total_s'], rng)}x slower (target >= 20x)"))
    ui = r.get("ui")
    if ui:
        one, many = ui["single_run"], ui["per_partition"]
        def waits(x: dict[str, Any]) -> str:
            return (f"first run started at {x.get('launch_to_first_start_s', '?')} s, last ended at "
                    f"{x.get('launch_to_last_end_s', '?')} s")
        rows.append((f"{ui['window']} backfill launched through the UI's mutation (webserver + daemon), 1 ranged run",
                     f"{one['launch_to_complete_s']:.1f} s launch -> complete ({waits(one)})",
                     f"{one['runs']} run", "1x"))
        rows.append(("same, Dagster's default: one run per partition (lane limit 1)",
                     f"{many['launch_to_complete_s']:.1f} s launch -> complete ({waits(many)})",
                     f"{many['runs']} runs, median {many['run_median_s']} s each",
                     f"{ratio(many['launch_to_complete_s'], one['launch_to_complete_s'])}x slower"))
    if year:
        idle = year["current_idle"]
        rows.append(("current daily run (newest day), idle before and after the backfills",
                     f"{idle['median_s']:.2f} s (median of {idle['runs']}; {idle['median_before_s']:.2f} s before, "
                     f"{idle['median_after_s']:.2f} s after)", f"{idle['peak_rss_mib']:.0f} MiB", "1x"))
        n_rep, n_first = a.beside_republishes, a.beside_first_loads
        for label, key in ((f"re-publish{'' if n_rep == 1 else f' ({n_rep} back to back)'}", "current_during_backfill"),
                           (f"first load{'' if n_first == 1 else f' ({n_first}, each on a fresh data dir)'}",
                            "current_during_first_load")):
            during = year.get(key)
            if during is not None and not during["n"]:
                rows.append((f"current daily run during the {a.days}-day backfill's {label}", "not measured",
                             "no run of today's load overlapped the backfill", "target <= 1.5x: no figure"))
                continue
            if not during:
                continue
            # A p95 needs two runs at least: a backfill shorter than one current run's pause leaves one.
            p95 = during.get("p95_s")
            p95_wall, p95_ratio = ((f"p95 {p95} s", f"{ratio(p95, idle['median_s'])}x p95") if p95 is not None
                                   else ("no p95 of 1 run", "no p95"))
            rows.append((f"current daily run during the {a.days}-day backfill's {label}",
                         f"median {during['median_s']:.2f} s, {p95_wall}, max {during['max_s']:.2f} s "
                         f"({during['n']} run{'s' if during['n'] != 1 else ''}"
                         + ("; under 20 runs the exclusive p95 lies above the slowest" if during["n"] < 20 else "")
                         + ")",
                         f"lock wait max {during['lock_wait_max_s']} s",
                         f"{ratio(during['median_s'], idle['median_s'])}x median, "
                         f"{p95_ratio} (target <= 1.5x), {ratio(during['max_s'], idle['median_s'])}x max"))
    mem = []
    if year:
        mem.append((f"1 day (on a {a.days}-day warehouse)", year["current_idle"]["peak_rss_mib"]))
    if sl:
        mem.append((f"{min(a.slice, a.days)} days", sl["ranged_peak_rss_mib"]))
    if year:
        mem.append((f"{a.days} days", max(year[k]["peak_rss_mib"] for k in ("first_load", "republish", "late") if k in year)))
    if mem:
        rows.append(("peak RSS of the run's largest process by window (DuckDB + Dagster)", ", ".join(f"{d}: {m:.0f} MiB" for d, m in mem), "",
                     "target <= 2048 MiB, flat in days"))
    trees = [(k, year[k].get("peak_tree_pss_mib")) for k in ("first_load", "republish", "late") if year and k in year]
    if any(t for _, t in trees):
        rows.append((f"peak memory of the {a.days}-day backfill's whole process tree (PSS: the step and its scratch "
                     "child at once)", ", ".join(f"{k.replace('_', ' ')}: {t:.0f} MiB" for k, t in trees if t), "",
                     "target <= 2048 MiB"))
    return rows


def print_table(rows: list[tuple[str, str, str, str]]) -> str:
    head = ("measure", "wall", "memory / note", "ratio")
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(4)]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in rows]
    text = "\n".join(lines)
    print(text)
    return text


PARTS = ("floor", "write_floor", "slice", "ui", "year")


def at_least_one(text: str) -> int:
    """A count of runs the year's figures pool (one at the least: the table reads the first of them)."""
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is not a count of runs: 1 at the least")
    return n


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--days", type=int, default=365, help="days in the backfill (raw gets one more: the newest day)")
    p.add_argument("--lines", type=int, default=20_000, help="order lines per day")
    p.add_argument("--customers", type=int, default=5_000)
    p.add_argument("--slice", type=int, default=30, help="days in the one-run-per-partition comparison")
    p.add_argument("--start", default="2025-09-22", help="first raw day")
    p.add_argument("--repeats", type=int, default=3, help="repetitions of the short measurements (medians)")
    p.add_argument("--current-delay", type=float, default=3.0, help="seconds after the backfill starts (plus imports)")
    p.add_argument("--current-pause", type=float, default=5.0,
                   help="seconds between two current runs beside the backfill (back to back, a backfill that gives "
                        "way to today's load would wait its whole ATLASMART_BACKFILL_GIVE_WAY_S at every hold)")
    p.add_argument("--beside-republishes", type=at_least_one, default=5,
                   help="re-publishes of the year run back to back beside today's load (more of its runs beside them)")
    p.add_argument("--beside-first-loads", type=at_least_one, default=2,
                   help="first loads of the year, each on a fresh data dir, beside today's load (figures pooled)")
    p.add_argument("--memory-limit", help="ATLASMART_DUCKDB_MEMORY_LIMIT for every run and floor (default: the "
                                         "product's own, 1GB): what the peak memory follows")
    p.add_argument("--root", default="/tmp/atlasmart-bench", help="raw evidence and run data (outside the repo)")
    p.add_argument("--skip-cli", action="store_true", help="skip the one-process-per-partition CLI measurement")
    p.add_argument("--only", nargs="*", choices=PARTS, default=PARTS)
    args = p.parse_args(argv)
    b = Bench(args)
    if b.as_of > dt.datetime.now(dt.timezone.utc).date():  # the partitions' "today" is UTC's
        # Dagster has no partition for a day not closed yet: today's load of the bench would fail on it, after the
        # first load has run (a 730-day bench from 2025-09-22 did, on 2026-12-06).
        p.error(f"--start {args.start} and --days {args.days} make {b.newest} the newest day, which has not closed "
                "yet: choose an earlier --start")
    b.work.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    b.results["machine"] = b.machine()
    b.results["args"] = vars(args) | {"only": list(args.only)}
    b.results["as_of"] = b.as_of.isoformat()
    started = time.perf_counter()
    b.generate()
    for part in PARTS:
        if part in args.only:
            getattr(b, part)()
            (OUT / "results.json").write_text(json.dumps(b.results, indent=1, default=str))
    b.results["bench_wall_s"] = round(time.perf_counter() - started, 1)
    b.results["table"] = print_table(report(b))
    (OUT / "results.json").write_text(json.dumps(b.results, indent=1, default=str))
    log(f"wrote {OUT / 'results.json'} in {b.results['bench_wall_s']} s; "
        f"reproduce: python -m bench.run " + " ".join(argv if argv is not None else sys.argv[1:]))


if __name__ == "__main__":
    main()
