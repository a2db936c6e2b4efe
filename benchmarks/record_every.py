"""What recording the history costs: ``record_every`` against the descent alone.

Every estimator records, every ``record_every`` iterations, the loss, the
norm, the alignment with ``mm_direction_``, the distance of the projected
iterate to ``finite_component_`` (and, for the attention models, the
saturation and the iterate itself).  Those metrics cost about as much as a
gradient step, or more (the projection onto the finite subspace), so
recording every iteration multiplies the time of a fit.

This script fits each estimator on a representative problem (the papers'
settings) with the same solver, start and number of iterations, once with
the history recorded only at the first and last iteration (the reference:
``record_every=max_iter``, the descent alone) and once per value of
``record_every``, and prints the descent time of the reference and the
overhead of each value over it, measured in the same run: in CPU time of
the process (robust to other jobs on a shared machine; use ``--threads 1``
there, so that idle BLAS threads do not count) and, in brackets, in wall
time.  Each time is the minimum over ``--repeat`` fits.

Usage::

    python benchmarks/record_every.py                  # every problem
    python benchmarks/record_every.py --values 1 10 --repeat 5 --only decoder-b2
    python benchmarks/record_every.py --threads 1     # on a shared machine
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

try:  # run from a checkout without installing
    import skntp  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skntp import (
    AttentionSelector,
    JointAttentionSVM,
    NTPAttentionClassifier,
    NTPDecoderClassifier,
)
from skntp.datasets import (
    load_text_ntp,
    make_attention_random,
    make_joint_fig3,
    make_ntp_data,
    make_token_priority_data,
)


def _problems():
    """``name -> (description, make_estimator(record_every, max_iter), X, y, max_iter)``."""
    X_b2, y_b2 = make_ntp_data(random_state=0)
    text = load_text_ntp(n_words=50, random_state=0)
    X_sa, y_sa, E_sa = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=3)
    X_at, y_at, v_at = make_attention_random(8, 6, 10, n_trials=1, random_state=0)
    X_jt, y_jt, P_jt = make_joint_fig3("b", return_params=True)
    return {
        "decoder-b2": (
            "NTPDecoderClassifier, NTP App. B.2 (n=5000, m=50, d=60, V=10), GD",
            lambda r, it: NTPDecoderClassifier(solver="gd", lr=0.5, max_iter=it,
                                               record_every=r, random_state=0),
            X_b2, y_b2, 4000),
        "decoder-text": (
            "NTPDecoderClassifier, real text (m=138, d=146, V=46), NGD",
            lambda r, it: NTPDecoderClassifier(solver="ngd", lr=0.5, max_iter=it,
                                               record_every=r, random_state=0),
            text.data, text.target, 3000),
        "self-attention": (
            "NTPAttentionClassifier, cyclic Fig. 4 data (K=6, d=8, n=6, T=4), NGD",
            lambda r, it: NTPAttentionClassifier(E_sa, solver="ngd", lr=0.01, max_iter=it,
                                                 record_every=r),
            X_sa, y_sa, 8000),
        "attention": (
            "AttentionSelector, random instance (n=8, T=6, d=10), NGD",
            lambda r, it: AttentionSelector(v_at[0], solver="ngd", lr=1.0, max_iter=it,
                                            record_every=r),
            X_at[0], y_at[0], 5000),
        "joint": (
            "JointAttentionSVM, Fig. 3(b) (n=3, T=d=2), NGD",
            lambda r, it: JointAttentionSVM(solver="ngd", lr=0.1, max_iter=it,
                                            init=(P_jt.head_init, P_jt.query_init),
                                            record_every=r),
            X_jt, y_jt, 5000),
    }


def descent_times(make, X, y, values, max_iter, repeat):
    """Per ``record_every`` value: the descent's wall and CPU time, minimum over ``repeat``.

    Wall: ``history_["time"]`` at the last record (the loop only).  CPU: the
    process time of the whole fit minus that of the same fit with
    ``max_iter=1`` (validation, the limit solve and one step), each the
    minimum over the repeats, so another job on a shared machine does not
    enter.  The values are interleaved within
    every repeat, in a rotated order, so that neither a change of the
    machine's load nor the position in the sequence favors one of them.
    """
    wall = {v: np.inf for v in values}
    total = {v: np.inf for v in values}
    setup = np.inf
    for rep in range(repeat):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.process_time()
            make(1, 1).fit(X, y)
            setup = min(setup, time.process_time() - t0)
            for v in values[rep % len(values):] + values[:rep % len(values)]:
                t0 = time.process_time()
                est = make(v, max_iter).fit(X, y)
                total[v] = min(total[v], time.process_time() - t0)
                wall[v] = min(wall[v], float(est.history_["time"][-1]))
    return wall, {v: t - setup for v, t in total.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, nargs="+", default=[1, 2, 5, 10, 20, 50])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="+", default=None, help="problem names")
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS threads (threadpoolctl; default: unchanged)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads)
    problems = _problems()
    names = args.only or list(problems)
    default = NTPDecoderClassifier().get_params()["record_every"]
    threads = "default" if args.threads is None else args.threads
    print(f"record_every overhead over the descent alone (default record_every={default}); "
          f"min of {args.repeat} fits, BLAS threads {threads}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    print("overhead = (descent with records every r steps) / (descent alone) - 1, "
          "CPU time [wall time]")
    header = ["problem", "iters", "descent alone"] + [f"r={v}" for v in args.values]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for name in names:
        desc, make, X, y, max_iter = problems[name]
        wall, cpu = descent_times(make, X, y, [max_iter, *args.values], max_iter,
                                  args.repeat)
        cells = [name, str(max_iter),
                 f"{1e3 * cpu[max_iter]:.0f} ms [{1e3 * wall[max_iter]:.0f} ms]"]
        for r in args.values:
            cells.append(f"{100 * (cpu[r] / cpu[max_iter] - 1):+.0f} % "
                         f"[{100 * (wall[r] / wall[max_iter] - 1):+.0f} %]")
        print(" | ".join(cells), flush=True)
    print()
    for name in names:
        print(f"{name}: {problems[name][0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
