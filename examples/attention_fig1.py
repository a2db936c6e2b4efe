"""GD trajectories of attention (Fig. 1(a)-(c) and Fig. 8 of the max-margin paper).

For each example of :mod:`skntp.datasets` the query ``p`` is trained by
normalized GD (lr 0.1, logistic loss) from the example's starts; the table
shows which tokens the attention selects, whether the direction is the GMM
or an LMM (Def. 2) and the alignment of ``p`` with that max-margin direction;
the plot (``--plot``) draws the trajectories of ``p`` in the key plane
(radially compressed, ``r -> 1.9 tanh(r/3)``, so the diverging paths fit)
with the GMM (solid) and LMM (dashed) directions, as in the paper's figures.

Usage::

    python examples/attention_fig1.py [--iters 2000] [--plot fig1.png]
"""

from __future__ import annotations

import argparse

import numpy as np

from skntp.attention import AttentionSelector
from skntp.datasets import (
    make_attention_fig1a,
    make_attention_fig1b,
    make_attention_fig1c,
    make_attention_fig8,
)

EXAMPLES = {
    "Fig. 1(a)": make_attention_fig1a,
    "Fig. 1(b)": make_attention_fig1b,
    "Fig. 1(c)": make_attention_fig1c,
    "Fig. 8": make_attention_fig8,
}


def run(iters=2000):
    """Fit every example from every start; return ``{title: (data, {start: est})}``."""
    out = {}
    for title, make in EXAMPLES.items():
        data = make()
        fits = {}
        for name, p0 in data.starts.items():
            fits[name] = AttentionSelector(
                data.head, data.key_query, solver="ngd", lr=0.1, max_iter=iters,
                query_init=p0, classes=[-1, 1], record_every=10,
            ).fit(data.X, data.y)
        out[title] = (data, fits)
    return out


def print_table(results):
    print(f"{'example':<10} {'start':<12} {'selected':<10} {'converged to':<13} "
          f"{'alignment':>9} {'||p||':>7}")
    for title, (_, fits) in results.items():
        for name, est in fits.items():
            kind = {"global": "GMM", "local": "LMM"}.get(est.convergence_, est.convergence_)
            print(f"{title:<10} {name:<12} {str(est.selected_tokens_.tolist()):<10} "
                  f"{kind:<13} {est.alignment_:>9.5f} {np.linalg.norm(est.query_):>7.1f}")


def plot(results, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print("matplotlib is not installed: no plot")
        return
    fig, axes = plt.subplots(1, len(results), figsize=(4 * len(results), 4))
    for ax, (title, (data, fits)) in zip(axes, results.items(), strict=True):
        keys = data.K[..., :2]
        for i in range(keys.shape[0]):
            sc = ax.scatter(keys[i, :, 0], keys[i, :, 1], c=data.scores[i], cmap="viridis",
                            vmin=data.scores.min(), vmax=data.scores.max(), s=60,
                            marker="*o^"[i % 3], zorder=3)
        for est in fits.values():
            traj = est.history_["query"][:, :2]
            r = np.linalg.norm(traj, axis=1, keepdims=True)
            # radial compression r -> 1.9 tanh(r / 3): the whole path fits the box
            traj = traj * np.where(r > 0, 1.9 * np.tanh(r / 3) / np.maximum(r, 1e-300), 0)
            ax.plot(traj[:, 0], traj[:, 1], color="gray", lw=1)
            ax.plot(traj[0, 0], traj[0, 1], "o", color="gray", ms=3)
            d = est.mm_direction_[:2] * 1.8
            style = "-" if est.convergence_ == "global" else "--"
            ax.plot([0, d[0]], [0, d[1]], style, color="tab:red", lw=1.5)
        ax.set_title(title)
        ax.set_aspect("equal")
        ax.set_xlim(-2, 2)
        ax.set_ylim(-2, 2)
    fig.colorbar(sc, ax=axes, label=r"score $\gamma$", shrink=0.7)
    fig.savefig(path, dpi=110)
    print(f"saved {path}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--plot", default=None)
    args = ap.parse_args(argv)
    results = run(args.iters)
    print_table(results)
    if args.plot:
        plot(results, args.plot)
    return results


if __name__ == "__main__":
    main()
