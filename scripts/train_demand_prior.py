"""Train the demand prior shipped as ``predictor/prior/demand_prior.npz`` on the tune half of the project's corpus.

The corpus (``bench.lib.corpus``: ServeGen's per-client windows, singles and aggregates, at 10 minutes and derived at
1 minute, and the Azure 2023 short series) is split once by client; only the tune half is read here, so every figure
``bench.autoscaling`` reports on the report half is held out. Deterministic (seeded): the same corpus and settings
write the same file. About two minutes on two cores.

Usage: python scripts/train_demand_prior.py [--out predictor/prior/demand_prior.npz]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.lib.corpus import Half, build
from predictor.prior.model import SHIPPED
from predictor.prior.train import TrainSettings, save_prior, train


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=SHIPPED)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    corpus = build(Half.TUNE)
    settings = TrainSettings()
    prior = train(
        [s.history for s in corpus],
        settings,
        trained_on=f"bench.lib.corpus tune half: {len(corpus)} series, {settings.rows_per_series} rows each",
    )
    save_prior(prior, args.out)
    seconds = time.perf_counter() - started
    print(f"{args.out}: {len(prior.levels)} levels from {len(corpus)} series in {seconds:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
