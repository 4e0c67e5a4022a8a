"""Autoscaling benchmark (CONTRACT section 12): ``python -m bench.autoscaling [--quick] [--half H] [SERIES_DIR]``.

The table users ask for: replica-hours of every forecaster × policy against the Kubernetes HPA's front at the same
SLO attainment, against the oracle and against the rate-oracle, over hundreds of real series — and the share of
what a perfect forecast would win that the forecast does win.

The series are the report half of the project's corpus (:mod:`bench.lib.corpus`: ServeGen clients alone and in random
aggregates, at 10 minutes and derived at 1 minute; Azure 2023 as the short series); every default was chosen on the
tune half (``--half tune``), which the demand prior was trained on. With ``SERIES_DIR`` the ``timestamp,value`` CSVs
there instead (no rate-oracle, no tenants). Each series through :mod:`bench.lib.autoscaling_runs` (worker processes,
``--workers``); a replica starts in 5 minutes (one step of a 10-minute series), and ``--startups`` sweeps 1, 2, 5 and
10 minutes on the minute series. Figures are medians and 10th/90th percentiles over the series, never a chosen few.
Progress goes to stderr; the last stdout line is JSON (``--plot FILE`` draws the distributions as SVG).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import multiprocessing
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.lib.autoscaling_plot import report_svg
from bench.lib.autoscaling_runs import DEFAULT_STARTUP_S, SeriesRuns, Spec, evaluate
from bench.lib.autoscaling_summary import summarise
from bench.lib.corpus import CorpusSeries, Half, build
from bench.lib.progress import progress_line
from predictor.series_csv import read_series_csv

STARTUPS_S = (60.0, 120.0, DEFAULT_STARTUP_S, 600.0)
QUICK_SERIES = 8

progress = progress_line("autoscaling")


@dataclass(frozen=True)
class Job:
    """One series to evaluate, named so a worker process can find it (a corpus half, or a CSV file)."""

    name: str
    half: Half | None
    path: Path | None
    startups: bool
    backends: tuple[str, ...]


def evaluate_job(job: Job) -> SeriesRuns:
    """In a worker: the series' Spec, then its runs."""
    if job.path is not None:
        return evaluate(Spec(job.name, read_series_csv(job.path).history, backends=job.backends))
    assert job.half is not None
    series = _corpus(job.half)[job.name]
    swept = STARTUPS_S if job.startups and series.minute_level else (DEFAULT_STARTUP_S,)
    corpus = series if series.minute_level else None
    return evaluate(Spec(series.name, series.history, series.members(), corpus, swept, job.backends))


@functools.cache
def _corpus(half: Half) -> dict[str, CorpusSeries]:
    return {series.name: series for series in build(half)}


def run_all(jobs: Sequence[Job], workers: int) -> list[SeriesRuns]:
    """Every series, ``workers`` at a time, in spawned processes (a forked one would inherit OpenMP's threads)."""
    out: list[SeriesRuns] = []
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers) as pool:
        for i, runs in enumerate(pool.imap(evaluate_job, jobs, chunksize=1), start=1):
            out.append(runs)
            progress(f"{i}/{len(jobs)} {runs.name} ({time.perf_counter() - started:.0f} s)")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.autoscaling", description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, default=None, help="series CSVs (default: the corpus)")
    parser.add_argument("--half", choices=[h.value for h in Half], default=Half.REPORT.value)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SERIES} series of the half, no startup sweep")
    parser.add_argument("--startups", action="store_true", help="sweep the startup on the minute series (1-10 min)")
    parser.add_argument("--backends", default="", help="heavy forecasters to add, comma-separated (ets,sarimax,...)")
    parser.add_argument("--stride", type=int, default=1, help="every STRIDE-th series (a sample of the half)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--plot", type=Path, default=None, help="draw the distributions into this SVG file")
    args = parser.parse_args(argv)
    backends = tuple(b for b in args.backends.split(",") if b)
    if args.directory is not None:
        jobs = [Job(p.stem, None, p, False, backends) for p in sorted(args.directory.glob("*.csv"))]
    else:
        half = Half(args.half)
        sweep = args.startups and not args.quick
        jobs = [Job(name, half, None, sweep, backends) for name in _corpus(half)]
    jobs = jobs[:: args.stride]
    if args.quick:
        jobs = jobs[:: max(1, math.ceil(len(jobs) / QUICK_SERIES))][:QUICK_SERIES]
    if not jobs:
        print("bench.autoscaling: no series", file=sys.stderr)
        return 2
    started = time.perf_counter()
    runs = run_all(jobs, args.workers)
    figures = summarise(
        runs, source=str(args.directory or f"corpus {args.half} half"), seconds=time.perf_counter() - started
    )
    for line in figures.pop("table_text"):
        progress(line)
    if args.plot is not None:
        args.plot.write_text(report_svg(runs))
        progress(f"distributions drawn into {args.plot}")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
