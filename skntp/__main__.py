"""Command line: ``python -m skntp demo`` and ``python -m skntp reproduce NAME``."""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np

from . import _reproduce
from .datasets import make_ntp_data
from .decoder import NTPDecoderClassifier


def demo_table(max_iter=10_000, seed=0):
    """The demo's fits and table: GD, normalized GD and the SVM limit on App. B.2 data.

    Returns
    -------
    fits : dict
        Name -> ``(fitted NTPDecoderClassifier, seconds)``.
    rows : list of (label, values)
        One value per fit, in the order of ``fits``.
    """
    X, y = make_ntp_data(random_state=seed)
    every = max(1, max_iter // 100)
    fits = {}
    for name, est in [
        ("GD (lr 0.5)", NTPDecoderClassifier(solver="gd", lr=0.5, max_iter=max_iter,
                                             record_every=every, random_state=seed)),
        ("NGD (lr 0.01)", NTPDecoderClassifier(solver="ngd", lr=0.01, max_iter=max_iter,
                                               record_every=every, random_state=seed)),
        ("SVM limit", NTPDecoderClassifier(solver="svm")),
    ]:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, y)
        fits[name] = (est, time.perf_counter() - t0)
    ref = fits["SVM limit"][0]

    def cos(a, b):
        return float(np.vdot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))

    columns = [
        (f"CE - H (entropy bound H = {ref.entropy_:.4f})",
         lambda e: float(e.history_["excess_loss"][-1])),
        ("||W||", lambda e: float(np.linalg.norm(e.coef_))),
        ("cos(W, W^mm)", lambda e: cos(e.coef_, e.mm_direction_)),
        ("cos(W - W*, W^mm)", lambda e: cos(e.coef_ - e.finite_component_,
                                            e.mm_direction_)),
        ("||P_F(W) - W*||", lambda e: float(e.history_["finite_distance"][-1])),
        ("iterations", lambda e: int(e.n_iter_)),
    ]
    rows = [(label, [fn(est) for est, _ in fits.values()]) for label, fn in columns]
    rows.append(("time (s)", [seconds for _, seconds in fits.values()]))
    return fits, rows


def _demo(args):
    fits, rows = demo_table(args.max_iter, args.seed)
    est = fits["SVM limit"][0]
    print(
        "skntp demo: next-token prediction with a linear decoder (Thrampoulidis 2024, "
        "App. B.2 data)\n"
        f"  m = 50 distinct contexts, d = {est.n_features_in_}, "
        f"V = {len(est.classes_)}, |S_j| = 6\n"
    )
    print(f"{'':34s}" + "".join(f"{n:>16s}" for n in fits))
    for label, vals in rows:
        cells = (f"{v:16d}" if isinstance(v, int) else
                 f"{v:16.2f}" if label == "time (s)" else f"{v:#16.4g}" for v in vals)
        print(f"{label:34s}" + "".join(cells))
    print(
        f"\nNTP-separable: {est.is_ntp_separable_}   NTP_H-compatible: "
        f"{est.is_ntp_compatible_}   NTP-margin 1/||W^mm|| = {est.mm_margin_:.4g}\n"
        "Theorem 4.1: as iterations grow, CE -> H, ||W|| -> inf, "
        "cos(W - W*, W^mm) -> 1 and P_F(W) -> W*."
    )
    return 0


def main(argv=None):
    """Entry point of ``python -m skntp``."""
    parser = argparse.ArgumentParser(
        prog="python -m skntp",
        description="skntp: the implicit bias of next-token prediction and attention.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="fit NTP data by GD and by the SVM limit, compare")
    demo.add_argument("--max-iter", type=int, default=10_000,
                      help="iterations of the two descents (default 10000)")
    demo.add_argument("--seed", type=int, default=0,
                      help="seed of the data and of the initializations (default 0)")
    rep = sub.add_parser(
        "reproduce",
        help="reproduce a paper figure and print its table",
        description="Reproductions:\n" + "\n".join(
            f"  {name:22s} {fn.__doc__.strip().splitlines()[0]}"
            for name, fn in _reproduce.REPRODUCTIONS.items()
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rep.add_argument("name", choices=sorted(_reproduce.REPRODUCTIONS))
    rep.add_argument("--plot", metavar="OUT.png", default=None,
                     help="save the figure (needs matplotlib)")
    rep.add_argument("--seed", type=int, default=0,
                     help="seed of the reproduction's data and trials (default 0)")
    rep.add_argument("--quick", action="store_true",
                     help="a smaller run (fewer trials/iterations) for a fast look")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    return _reproduce.run(args.name, plot=args.plot, seed=args.seed, quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())
