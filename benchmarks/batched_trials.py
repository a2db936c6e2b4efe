"""Batched trials: the self-attention paper's figures, 100 instances in one run.

Figs. 3-6 of Li et al. (2024) average 100 random instances of
``NTPAttentionClassifier`` (normalized GD, 4000 steps, each instance with its
own embeddings).  :func:`skntp.sweeps.fit_ntp_trials` trains them in one
batched run of the training loop; the reference, measured in the same run, is
the loop a user writes by hand: ``fit`` on each instance in turn.  The script
prints both times (wall and CPU of the process), the largest difference of the
fitted ``W`` between the two (relative to ``max |W|``) and the figure's mean
correlation with ``W^mm``, with the load before each row.

Usage::

    python benchmarks/batched_trials.py [--trials 100] [--figures fig3 fig4 fig5 fig6]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

try:  # run from a checkout without installing
    import skntp  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skntp import NTPAttentionClassifier
from skntp.datasets import make_token_priority_data
from skntp.graphs import is_acyclic, token_priority_graphs
from skntp.sweeps import fit_ntp_trials


def instance(figure, seed):
    """The data and estimator of one instance of ``figure`` (App. D of the paper)."""
    if figure == "fig4":  # cyclic data, redrawn until some graph has a cycle
        while True:
            X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=seed)
            if not is_acyclic(token_priority_graphs(X, y)):
                break
            seed += 10_000
        return X, y, NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=4000,
                                            record_every=4000)
    X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=figure == "fig3", random_state=seed)
    if figure == "fig3":
        return X, y, NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=4000,
                                            record_every=4000)
    return X, y, NTPAttentionClassifier(E, head="embeddings",
                                        loss="squared" if figure == "fig5" else "ce",
                                        solver="ngd", lr=0.1, max_iter=4000, record_every=4000)


def timed(func):
    wall, cpu = time.perf_counter(), time.process_time()
    out = func()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--figures", nargs="+", default=["fig3", "fig4", "fig5", "fig6"])
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # float64 saturation stops some instances: expected
    print(f"{'figure':>6} {'trials':>6} {'batched s (cpu)':>16} {'one by one s (cpu)':>19} "
          f"{'speed-up':>8} {'max |dW|':>9} {'mean corr':>9}  load")
    for figure in args.figures:
        runs = [instance(figure, seed) for seed in range(args.trials)]
        load = os.getloadavg()[0]
        fits, tb, cb = timed(lambda runs=runs: fit_ntp_trials(
            [est for *_, est in runs], [(X, y) for X, y, _ in runs]))
        alone, ta, ca = timed(lambda runs=runs: [est.fit(X, y) for X, y, est in runs])
        diff = max(np.abs(a.coef_ - b.coef_).max() / max(np.abs(a.coef_).max(), 1e-300)
                   for a, b in zip(alone, fits))
        corr = np.mean([f.history_["alignment"][-1] for f in fits])
        print(f"{figure:>6} {args.trials:>6} {tb:>8.2f} ({cb:5.2f}) {ta:>11.2f} ({ca:5.2f}) "
              f"{ta / tb:>7.1f}x {diff:9.1e} {corr:9.4f}  {load:.2f}", flush=True)


if __name__ == "__main__":
    main()
