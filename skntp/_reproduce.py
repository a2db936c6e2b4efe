"""Paper-figure reproductions, shared by ``python -m skntp reproduce`` and ``examples/``.

Each reproduction is a function ``(seed, quick) -> Reproduction`` registered
under a name; it computes the figure's numbers, and ``Reproduction.table``
prints them next to what the paper reports.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

__all__ = ["REPRODUCTIONS", "Reproduction", "register", "run"]

REPRODUCTIONS = {}


@dataclass
class Reproduction:
    """Numbers of one reproduced figure.

    Attributes
    ----------
    table : str
        The printed table.
    data : dict
        The raw numbers (histories, fitted estimators, ...).
    plot : callable or None
        ``plot() -> matplotlib.figure.Figure``.
    """

    table: str
    data: dict = field(default_factory=dict)
    plot: object = None


def register(name):
    """Register a reproduction function under ``name``."""

    def deco(fn):
        REPRODUCTIONS[name] = fn
        return fn

    return deco


def run(name, *, plot=None, seed=0, quick=False):
    """Run a reproduction, print its table and optionally save its plot."""
    rep = REPRODUCTIONS[name](seed=seed, quick=quick)
    print(rep.table)
    if plot is not None:
        if rep.plot is None:
            print(f"(no plot for {name})")
        else:
            fig = rep.plot()
            fig.savefig(plot, dpi=120, bbox_inches="tight")
            print(f"saved {plot}")
    return 0


def _fmt_table(header, rows, widths=None):
    widths = widths or [max(len(str(h)), 12) for h in header]
    line = "  ".join(f"{h:>{w}}" for h, w in zip(header, widths))
    out = [line, "-" * len(line)]
    for r in rows:
        out.append("  ".join(
            f"{v:>{w}.4g}" if isinstance(v, (float, np.floating)) else f"{v!s:>{w}}"
            for v, w in zip(r, widths)
        ))
    return "\n".join(out)


@register("ntp-fig4")
def ntp_fig4(seed=0, quick=False):
    """NTP paper Fig. 4/5 (App. B.2): GD, NGD and Adam on overparameterized data."""
    from .datasets import make_ntp_data
    from .decoder import NTPDecoderClassifier

    X, y = make_ntp_data(random_state=seed)
    max_iter = 1000 if quick else 10_000
    checkpoints = [c for c in (100, 1000, 10_000) if c <= max_iter]
    fits = {}
    for solver, lr in (("gd", 0.5), ("ngd", 0.01), ("adam", 0.01)):
        est = NTPDecoderClassifier(solver=solver, lr=lr, max_iter=max_iter,
                                   random_state=seed)
        fits[solver] = est.fit(X, y)
    H = fits["gd"].entropy_
    rows = []
    for solver, est in fits.items():
        h = est.history_
        for c in checkpoints:
            i = int(np.searchsorted(h["iteration"], c))
            rows.append((solver, c, h["loss"][i], h["excess_loss"][i], h["norm"][i],
                         h["alignment"][i], h["alignment_corrected"][i],
                         h["finite_distance"][i]))
    table = (
        f"NTP App. B.2: n=5000, m=50, d=60, V=10, |S_j|=6; entropy H = {H:.4f} "
        "(paper: ~1.445)\n"
        + _fmt_table(["solver", "iter", "CE", "CE - H", "||W||", "cos(W,Wmm)",
                      "cos(W-W*,Wmm)", "||P_F W-W*||"],
                     rows)
        + "\npaper (Fig. 4/5): CE -> H, norm grows, both correlations -> 1, "
        "||P_F(W) - W*|| -> 0; NGD and Adam faster than GD."
    )

    def plot():
        from .plotting import plot_training_curves

        return plot_training_curves(list(fits.values()), labels=list(fits))

    return Reproduction(table, {"fits": fits}, plot)


@register("ntp-fig1")
def ntp_fig1(seed=0, quick=False):
    """NTP paper Fig. 1/2: the 2-D example, W^mm and W* rows as word embeddings."""
    from .datasets import make_ntp_2d_example
    from .decoder import NTPDecoderClassifier

    H, P, w = make_ntp_2d_example()
    svm = NTPDecoderClassifier(solver="svm").fit(H, P, sample_weight=w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gd = NTPDecoderClassifier(solver="gd", lr=0.5, max_iter=2000 if quick else 20_000,
                                  random_state=seed).fit(H, P, sample_weight=w)
    rows = [(v, *np.round(svm.mm_direction_[v], 4), *np.round(svm.finite_component_[v], 4))
            for v in range(P.shape[1])]
    table = (
        "NTP Fig. 1/2: d=2, m=3, V=5, |S_j|=3 (contexts A, B, C at 90, 210, 330 deg)\n"
        + _fmt_table(["word", "Wmm_x", "Wmm_y", "W*_x", "W*_y"], rows)
        + f"\nwords 0 and 4 share their support pattern: equal W^mm rows, different W* rows"
        f"\nGD after {gd.n_iter_} steps: cos(W - W*, W^mm) = {gd.alignment_:.4f}, "
        f"||P_F(W) - W*|| = {gd.history_['finite_distance'][-1]:.3g}, "
        f"CE - H = {gd.history_['excess_loss'][-1]:.3g}"
    )

    def plot():
        from .plotting import plot_word_embeddings

        angles = np.rad2deg(np.arctan2(svm.contexts_[:, 1], svm.contexts_[:, 0])) % 360
        names = [{90: "A", 210: "B", 330: "C"}.get(int(round(a)), "?") for a in angles]
        return plot_word_embeddings(svm, contexts=names)

    return Reproduction(table, {"svm": svm, "gd": gd}, plot)
