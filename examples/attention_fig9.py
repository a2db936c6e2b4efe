"""Reproduce Fig. 9 of "Max-Margin Token Selection in Attention Mechanism" (App. E).

Random instances (``n = 4`` inputs of ``T = 6`` tokens, tokens and head
uniform on the unit sphere of ``R^d``, labels uniform ``+-1``, ``W = I``),
1000 trials per ``d in {2, 5, 10, 100, 300, 500}``, the query ``p`` trained
from ``p(0) = 0`` by normalized GD with learning rate 1 for 1000 iterations
(logistic loss).  Every trial is classified as in App. E:

* **not saturated**: the mean softmax probability of the selected tokens
  ``mean_i S(X_i p)_{alpha_i}`` is below ``1 - 1e-5`` (red bars);
* **LMM**: saturated, and the selected tokens ``alpha`` are locally optimal
  (Def. 2), so ``p^mm(alpha)`` is an LMM direction (blue bars; they include
  the GMM runs);
* **GMM**: saturated on the optimal tokens, ``p^mm(alpha) = p^mm*`` (green);
* **other**: saturated but the selection is not locally optimal (some
  SVM-neighbor has a higher score: minimal score gap ``< 0``, Fig. 9(b)).

The table also gives the mean correlation of ``p`` with ``p^mm(alpha)``
over the saturated runs (the paper reports 0.997) and the share of
saturated runs with a negative minimal score gap (the paper: under 1%).

Every chunk of trials is one vectorized run of the shared training loop
(:func:`skntp.attention.attention_trials`); chunks are spread over cores by
joblib through :func:`skntp.sweeps.run_sweep`, so
``with joblib.parallel_config(backend="dask"): main()`` runs the same sweep
on a cluster.

Usage::

    python examples/attention_fig9.py [--trials 1000] [--iters 1000] [--n-jobs 2]
                                      [--plot fig9.png]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from skntp.attention import attention_trials
from skntp.datasets import make_attention_random
from skntp.sweeps import run_sweep

DIMS = (2, 5, 10, 100, 300, 500)


def run_chunk(d, chunk, *, n_trials, seed, n=4, T=6, lr=1.0, max_iter=1000):
    """One vectorized chunk of trials (a module-level function, for joblib)."""
    rng = np.random.RandomState(np.random.SeedSequence([seed, d, chunk]).generate_state(1))
    X, y, v = make_attention_random(n, T, d, n_trials=n_trials, random_state=rng)
    with warnings.catch_warnings():
        # at d >= 100 the softmax saturates to exactly 1 in float64 before the
        # last iteration; the loop then stops those trials (expected here)
        warnings.simplefilter("ignore")
        return attention_trials(X, y, v, solver="ngd", lr=lr, max_iter=max_iter)


def sweep(dims=DIMS, trials=1000, max_iter=1000, chunk_size=250, n_jobs=2, seed=0):
    """Run the sweep; return ``{d: dict of per-trial arrays}``."""
    chunks = []
    for d in dims:
        left, c = trials, 0
        while left > 0:
            chunks.append({"d": d, "chunk": c, "n_trials": min(chunk_size, left)})
            left -= chunk_size
            c += 1
    results = run_sweep(run_chunk, chunks, n_jobs=n_jobs, seed=seed, max_iter=max_iter)
    out = {}
    for params, res in results:
        acc = out.setdefault(params["d"], {k: [] for k in res})
        for k, val in res.items():
            acc[k].append(val)
    return {d: {k: np.concatenate(v) for k, v in acc.items()} for d, acc in out.items()}


def summarize(results):
    """Per-``d`` rows of the table (fractions of all trials)."""
    rows = []
    for d, r in sorted(results.items()):
        conv = r["convergence"]
        sat = conv != "not-saturated"
        lmm = (conv == "local") | (conv == "global")
        corr = r["correlation"][sat]
        gap = r["min_score_gap"][sat]
        rows.append({
            "d": d,
            "trials": conv.size,
            "not_saturated": float(np.mean(~sat)),
            "lmm": float(np.mean(lmm)),
            "gmm": float(np.mean(conv == "global")),
            "other": float(np.mean(conv == "other")),
            "corr_saturated": float(np.nanmean(corr)) if sat.any() else float("nan"),
            "neg_gap_saturated": float(np.mean(gap < 0)) if sat.any() else float("nan"),
            "n_saturated": int(sat.sum()),
            "n_neg_gap": int(np.sum(gap < 0)),
            "n_corr": int(np.sum(np.isfinite(corr))),
            "corr_sum": float(np.nansum(corr)),
        })
    return rows


def print_table(rows):
    print(f"{'d':>5} {'trials':>6} {'not sat.':>9} {'LMM':>7} {'GMM':>7} {'other':>7} "
          f"{'corr(p,p^mm)':>13} {'gap<0':>7}")
    for r in rows:
        print(f"{r['d']:>5} {r['trials']:>6} {r['not_saturated']:>9.3f} {r['lmm']:>7.3f} "
              f"{r['gmm']:>7.3f} {r['other']:>7.3f} {r['corr_saturated']:>13.4f} "
              f"{r['neg_gap_saturated']:>7.3%}")
    n_sat = sum(r["n_saturated"] for r in rows)
    corr = sum(r["corr_sum"] for r in rows) / max(1, sum(r["n_corr"] for r in rows))
    neg = sum(r["n_neg_gap"] for r in rows)
    print(f"all d: mean correlation of p with p^mm(alpha) over {n_sat} saturated runs = "
          f"{corr:.4f} (paper: 0.997); negative minimal score gap in {neg}/{n_sat} = "
          f"{neg / max(1, n_sat):.2%} of saturated runs (paper: under 1%)")


def plot(rows, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print("matplotlib is not installed: no plot")
        return
    x = np.arange(len(rows))
    w = 0.27
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(x - w, [r["not_saturated"] for r in rows], w, color="tab:red",
           label="not saturated")
    ax.bar(x, [r["lmm"] for r in rows], w, color="tab:blue", label=r"$p \to$ LMM")
    ax.bar(x + w, [r["gmm"] for r in rows], w, color="tab:green", label=r"$p \to$ GMM")
    ax.set_xticks(x, [str(r["d"]) for r in rows])
    ax.set_xlabel("d")
    ax.set_ylabel("probability")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title("Fig. 9(a): n=4, T=6, NGD lr=1, 1000 iterations")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"saved {path}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--n-jobs", type=int, default=2)
    ap.add_argument("--chunk-size", type=int, default=250)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dims", type=int, nargs="+", default=list(DIMS))
    ap.add_argument("--plot", default=None, help="save the bar plot to this file")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    results = sweep(args.dims, args.trials, args.iters, args.chunk_size, args.n_jobs,
                    args.seed)
    rows = summarize(results)
    print_table(rows)
    print(f"{sum(r['trials'] for r in rows)} trials in {time.perf_counter() - t0:.1f} s")
    if args.plot:
        plot(rows, args.plot)
    return rows


if __name__ == "__main__":
    main()
