"""Figures 3-6 of "Mechanics of next token prediction with self-attention", as tables.

* Fig. 3: acyclic data (K = d = 8, n = 4, T = 6), normalized GD, lr 0.01,
  4000 iterations: correlation of ``W(tau)`` with the Graph-SVM solution
  ``W^mm`` (paper: > 0.99 after 4000 iterations, mean of 100 trials).
* Fig. 4: cyclic data (K = 6, d = 8, n = 6, T = 4; instances whose graphs
  have a cycle), same optimizer: correlation (paper: about 0.987) and
  ``||Pi_Scyc(W) - W^cyc||`` (paper: < 0.01).
* Figs. 5-6: general head (the tied head ``C = E``, Assumption 3), squared
  and cross-entropy loss, general data (K = d = 8, n = 4, T = 6), normalized
  GD with lr 0.1: correlation with the global Graph-SVM vs. with the SVM of
  the *pseudo* token-priority graphs built from the tokens GD selects.
* Fig. 2: one token-priority graph with its SCCs is drawn to
  ``token_priority_graph.png`` when matplotlib is available.

Run ``python examples/self_attention_figs.py --trials 100`` for the paper's
100 trials (about 2-4 minutes per figure on a laptop core); the default is 20.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from skntp.datasets import make_token_priority_data
from skntp.graphs import is_acyclic, token_priority_graphs
from skntp.self_attention import NTPAttentionClassifier

CHECKPOINTS = (0, 500, 1000, 2000, 4000)


def cyclic_instance(seed, K=6, d=8, n=6, T=4):
    """App. D general data, redrawn until a graph has a cycle (Fig. 4's setting)."""
    rs = seed
    while True:
        X, y, E = make_token_priority_data(K, d, n, T, acyclic=False, random_state=rs)
        if not is_acyclic(token_priority_graphs(X, y)):
            return X, y, E
        rs += 10_000


def run(kind, trials):
    rows = {"corr": [], "dist": [], "corr_pseudo": [], "dist_pseudo": [], "curve": [],
            "diverged": []}
    for seed in range(trials):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if kind == "fig3":
                X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=True,
                                                   random_state=seed)
                clf = NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=4000,
                                             record_every=500)
            elif kind == "fig4":
                X, y, E = cyclic_instance(seed)
                clf = NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=4000,
                                             record_every=500)
            else:
                X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=False,
                                                   random_state=seed)
                clf = NTPAttentionClassifier(E, head="embeddings",
                                             loss="squared" if kind == "fig5" else "ce",
                                             solver="ngd", lr=0.1, max_iter=4000,
                                             record_every=500)
            clf.fit(X, y)
            h = clf.history_
            at = np.searchsorted(h["iteration"], CHECKPOINTS)
            rows["curve"].append(h["alignment"][np.minimum(at, len(h["iteration"]) - 1)])
            rows["corr"].append(h["alignment"][-1])
            # NGD moves lr per step: a norm above half of lr * (iterations run) means
            # the iterates kept moving outward (the softmax saturates; the squared
            # loss may even stop early when its gradient underflows), the regime of
            # the SVM theory; below it GD circles a finite stationary point.
            rows["diverged"].append(h["norm"][-1] > 0.5 * clf.lr * max(clf.n_iter_, 1))
            rows["dist"].append(h["finite_distance"][-1])
            if kind in ("fig5", "fig6"):
                p = clf.pseudo_graphs(X, y)
                rows["corr_pseudo"].append(p.alignment)
                rows["dist_pseudo"].append(p.finite_distance)
    return {k: np.asarray(v) for k, v in rows.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--figs", default="3,4,5,6")
    parser.add_argument("--no-draw", action="store_true")
    args = parser.parse_args(argv)
    figs = [f"fig{f.strip()}" for f in args.figs.split(",")]

    for kind in figs:
        t0 = time.perf_counter()
        r = run(kind, args.trials)
        secs = time.perf_counter() - t0
        print(f"\n{kind.upper()}  ({args.trials} trials, {secs:.1f} s)")
        print("  mean correlation <W(tau), W^mm>/(|W(tau)| |W^mm|) by iteration:")
        print("  " + "  ".join(f"{c:>7d}" for c in CHECKPOINTS))
        print("  " + "  ".join(f"{v:7.4f}" for v in r["curve"].mean(axis=0)))
        print(f"  final correlation with global W^mm: mean {r['corr'].mean():.4f}  "
              f"min {r['corr'].min():.4f}")
        print(f"  ||Pi_Scyc(W) - W^cyc||: mean {r['dist'].mean():.3g}  "
              f"median {np.median(r['dist']):.3g}  max {r['dist'].max():.3g}")
        if kind in ("fig5", "fig6"):
            cp, dp = r["corr_pseudo"], r["dist_pseudo"]
            print(f"  final correlation with pseudo W^mm: mean {cp.mean():.4f}  "
                  f"min {cp.min():.4f}  (pseudo > global in "
                  f"{np.mean(cp > r['corr'] + 1e-9):.0%} of trials, equal in "
                  f"{np.mean(np.abs(cp - r['corr']) <= 1e-9):.0%})")
            print(f"  ||Pi_pseudo-Scyc(W) - pseudo W^cyc||: mean {dp.mean():.3g}  "
                  f"median {np.median(dp):.3g}")
            dv = r["diverged"]
            if dv.any():
                print(f"  trials whose norm diverged ({dv.sum()} of {dv.size}): correlation "
                      f"global {r['corr'][dv].mean():.4f}, pseudo {cp[dv].mean():.4f}; "
                      f"distance global {r['dist'][dv].mean():.3g}, pseudo "
                      f"{dp[dv].mean():.3g}")

    if not args.no_draw:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            from skntp.graphs import draw_token_priority_graph, strongly_connected_components
        except ImportError:
            return
        X, y, _ = cyclic_instance(0)
        graphs = token_priority_graphs(X, y)
        sccs = strongly_connected_components(graphs)
        k = max(graphs, key=lambda k: max(len(c) for c in sccs[k]))
        fig, ax = plt.subplots(figsize=(4, 4))
        draw_token_priority_graph(graphs[k], sccs[k], ax=ax)
        ax.set_title(f"token-priority graph G^({k})")
        fig.savefig("token_priority_graph.png", dpi=100)
        print("\nwrote token_priority_graph.png")


if __name__ == "__main__":
    main()
