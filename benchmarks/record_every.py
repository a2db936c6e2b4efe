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

A second table, ``real-text``, is the case of issue #48: the decoder with GD on
Python's help topics, ``load_text_ntp(corpus="python", embedding="words",
n_words=80)`` (m = 970 contexts, d = 16, V = 79; no margin row is separable,
so the finite subspace ``F_I`` is nearly all of ``R^{V x d}``), at
``max_iter`` 600 and 2000 and ``record_every`` in {none (first and last only),
10, 100}, with ``compute_limits`` False and True.  Its reference is the fit
with ``compute_limits=False`` and no records, measured in the same run; each
row gives the whole fit, the one-off limit solve (the fit with ``max_iter=1``
less one step), the descent, their overheads over the reference, and the cost
of one record in gradient steps: (descent with records - descent with first
and last only) / (records - 2) / (reference descent / max_iter).  The load
average is printed before and after.

Usage::

    python benchmarks/record_every.py                  # every problem and real-text
    python benchmarks/record_every.py --values 1 10 --repeat 5 --only decoder-b2
    python benchmarks/record_every.py --only real-text --threads 1
    python benchmarks/record_every.py --threads 1     # on a shared machine
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

from skntp import (
    AttentionSelector,
    JointAttentionSVM,
    NTPAttentionClassifier,
    NTPDecoderClassifier,
    _base,
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


class _TimedRecords:
    """Context: the history's metrics callback of every fit timed (CPU time of the
    process), through the training loop's entry point (``skntp._base.minimize``).

    ``per_record()`` is the mean since the last ``reset()``.
    """

    def __enter__(self):
        self.real = _base.minimize
        self.reset()

        def timed_minimize(*args, metrics=None, **kwargs):
            if metrics is not None:
                inner = metrics

                def metrics(params):
                    t0 = time.process_time()
                    out = inner(params)
                    self.cpu += time.process_time() - t0
                    self.calls += 1
                    return out
            return self.real(*args, metrics=metrics, **kwargs)

        _base.minimize = timed_minimize
        return self

    def __exit__(self, *exc):
        _base.minimize = self.real
        return False

    def reset(self):
        self.cpu, self.calls = 0.0, 0

    def per_record(self):
        return self.cpu / self.calls if self.calls else float("nan")


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
    record = np.inf
    setup = np.inf
    for rep in range(repeat):
        with warnings.catch_warnings(), _TimedRecords() as timer:
            warnings.simplefilter("ignore")
            t0 = time.process_time()
            make(1, 1).fit(X, y)
            setup = min(setup, time.process_time() - t0)
            for v in values[rep % len(values):] + values[:rep % len(values)]:
                timer.reset()
                t0 = time.process_time()
                est = make(v, max_iter).fit(X, y)
                total[v] = min(total[v], time.process_time() - t0)
                wall[v] = min(wall[v], float(est.history_["time"][-1]))
                record = min(record, timer.per_record())
    return wall, {v: t - setup for v, t in total.items()}, record


def _load():
    """``os.getloadavg()`` as text (1, 5, 15 minutes)."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _real_text_runs(X, y, make, configs, repeat, cpu, wall, descent_wall, records,
                    per_record, setup, timer):
    """The fits of :func:`real_text_table` (minima over ``repeat``, rotated order)."""
    for rep in range(repeat):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the loss minimizer is not reached: expected)
            for limits in (False, True):
                t0 = time.process_time()
                make(limits, 1, 1).fit(X, y)
                setup[limits] = min(setup[limits], time.process_time() - t0)
            k = rep % len(configs)
            for c in configs[k:] + configs[:k]:
                limits, it, r = c
                timer.reset()
                t0, w0 = time.process_time(), time.perf_counter()
                est = make(limits, r, it).fit(X, y)
                cpu[c] = min(cpu[c], time.process_time() - t0)
                wall[c] = min(wall[c], time.perf_counter() - w0)
                descent_wall[c] = min(descent_wall[c], float(est.history_["time"][-1]))
                records[c] = len(est.history_["iteration"])
                per_record[c] = min(per_record[c], timer.per_record())


def real_text_table(max_iters=(600, 2000), values=(10, 100), repeat=3):
    """The case of issue #48: print one row per (max_iter, compute_limits, record_every).

    CPU time of the process, the minimum over ``repeat`` fits, every configuration
    interleaved (rotated) within each repeat.  The one-off limit solve is the CPU time
    of the fit with ``max_iter=1`` less that of the same fit without limits; the
    descent is the fit's CPU time less that of the fit with ``max_iter=1`` (the same
    ``compute_limits``).  In brackets: wall time, the descent's from ``history_["time"]``.
    A record's cost is its metrics callback timed inside the fit (CPU time), over
    one gradient step of the reference (its descent over ``max_iter``).
    """
    text = load_text_ntp(corpus="python", embedding="words", n_words=80)
    X, y = text.data, text.target

    def make(limits, r, it):
        return NTPDecoderClassifier(solver="gd", max_iter=it, record_every=r,
                                    compute_limits=limits, random_state=0)

    configs = [(limits, it, r) for it in max_iters for limits in (False, True)
               for r in (it, *values)]
    cpu, wall, descent_wall, per_record = ({c: np.inf for c in configs} for _ in range(4))
    records = {}
    setup = {False: np.inf, True: np.inf}
    with _TimedRecords() as timer:
        _real_text_runs(X, y, make, configs, repeat, cpu, wall, descent_wall, records,
                        per_record, setup, timer)
    est = make(False, 1, 1).fit(X, y)
    (m, d), V = est.contexts_.shape, est.coef_.shape[0]
    print(f"real text: load_text_ntp(corpus='python', embedding='words', n_words=80), "
          f"m={m}, d={d}, V={V}, GD; one-off limit solve {setup[True] - setup[False]:.2f} s "
          f"CPU (the fit with max_iter=1: {setup[True]:.2f} s with limits, "
          f"{setup[False]:.2f} s without)")
    header = ["max_iter", "compute_limits", "record_every", "records", "fit", "descent",
              "fit over ref.", "descent over ref.", "one record (gradient steps)"]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for it in max_iters:
        ref = (False, it, it)
        ref_descent = cpu[ref] - setup[False]
        for limits in (False, True):
            for r in (it, *values):
                c = (limits, it, r)
                descent = cpu[c] - setup[limits]
                cells = [str(it), str(limits), "none" if r == it else str(r), str(records[c]),
                         f"{cpu[c]:.2f} s [{wall[c]:.2f} s]",
                         f"{descent:.2f} s [{descent_wall[c]:.2f} s]",
                         "ref." if c == ref else f"{100 * (cpu[c] / cpu[ref] - 1):+.0f} %",
                         "ref." if c == ref else f"{100 * (descent / ref_descent - 1):+.0f} %",
                         f"{per_record[c] / (ref_descent / it):.2f}"]
                print(" | ".join(cells), flush=True)
    last = max_iters[-1]
    print(f"one gradient step (reference descent / max_iter at max_iter={last}): "
          f"{1e3 * (cpu[(False, last, last)] - setup[False]) / last:.2f} ms CPU")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, nargs="+", default=[1, 2, 5, 10, 20, 50])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="+", default=None,
                        help="problem names, and real-text (the case of issue #48)")
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS threads (threadpoolctl; default: unchanged)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads)
    problems = _problems()
    names = args.only or [*problems, "real-text"]
    default = NTPDecoderClassifier().get_params()["record_every"]
    threads = "default" if args.threads is None else args.threads
    print(f"record_every overhead over the descent alone (default record_every={default}); "
          f"min of {args.repeat} fits, BLAS threads {threads}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}, load average {_load()}")
    if "real-text" in names:
        real_text_table(repeat=args.repeat)
        print(f"load average {_load()}")
        names = [n for n in names if n != "real-text"]
        if not names:
            return 0
        print()
    print("overhead = (descent with records every r steps) / (descent alone) - 1, "
          "CPU time [wall time]")
    header = (["problem", "iters", "descent alone"] + [f"r={v}" for v in args.values]
              + ["one record (gradient steps)"])
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for name in names:
        desc, make, X, y, max_iter = problems[name]
        wall, cpu, record = descent_times(make, X, y, [max_iter, *args.values], max_iter,
                                          args.repeat)
        cells = [name, str(max_iter),
                 f"{1e3 * cpu[max_iter]:.0f} ms [{1e3 * wall[max_iter]:.0f} ms]"]
        for r in args.values:
            cells.append(f"{100 * (cpu[r] / cpu[max_iter] - 1):+.0f} % "
                         f"[{100 * (wall[r] / wall[max_iter] - 1):+.0f} %]")
        cells.append(f"{record / (cpu[max_iter] / max_iter):.2f}")
        print(" | ".join(cells), flush=True)
    print()
    for name in names:
        print(f"{name}: {problems[name][0]}")
    print(f"load average {_load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
