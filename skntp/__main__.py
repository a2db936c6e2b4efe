"""Command line: ``python -m skntp demo`` and ``python -m skntp reproduce NAME``."""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np

from . import _reproduce


def _demo(args):
    from .datasets import make_ntp_data
    from .decoder import NTPDecoderClassifier

    X, y = make_ntp_data(random_state=args.seed)
    print(
        "skntp demo: next-token prediction with a linear decoder (Thrampoulidis 2024, "
        "App. B.2 data)\n"
        f"  n = {X.shape[0]} samples, m = 50 distinct contexts, d = {X.shape[1]}, "
        f"V = {len(np.unique(y))}, |S_j| = 6\n"
    )
    fits = {}
    for name, est in [
        ("GD (lr 0.5)", NTPDecoderClassifier(solver="gd", lr=0.5, max_iter=args.max_iter,
                                             record_every=max(1, args.max_iter // 100),
                                             random_state=args.seed)),
        ("NGD (lr 0.01)", NTPDecoderClassifier(solver="ngd", lr=0.01,
                                               max_iter=args.max_iter,
                                               record_every=max(1, args.max_iter // 100),
                                               random_state=args.seed)),
        ("SVM limit", NTPDecoderClassifier(solver="svm")),
    ]:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, y)
        fits[name] = (est, time.perf_counter() - t0)
    ref = fits["SVM limit"][0]
    rows = [
        (f"CE - H (entropy bound H = {ref.entropy_:.4f})",
         lambda e: e.history_["excess_loss"][-1]),
        ("||W||", lambda e: np.linalg.norm(e.coef_)),
        ("cos(W, W^mm)", lambda e: e.history_["alignment"][-1]),
        ("cos(W - W*, W^mm)", lambda e: e.alignment_),
        ("||P_F(W) - W*||", lambda e: e.history_["finite_distance"][-1]),
        ("iterations", lambda e: e.n_iter_),
        ("time (s)", None),
    ]
    names = list(fits)
    print(f"{'':34s}" + "".join(f"{n:>16s}" for n in names))
    for label, fn in rows:
        vals = [fits[n][1] if fn is None else fn(fits[n][0]) for n in names]
        print(f"{label:34s}" + "".join(f"{v:16.4g}" for v in vals))
    print(
        f"\nNTP-separable: {ref.is_ntp_separable_}   NTP_H-compatible: "
        f"{ref.is_ntp_compatible_}   NTP-margin 1/||W^mm|| = {ref.mm_margin_:.4g}\n"
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
    demo.add_argument("--max-iter", type=int, default=10_000)
    demo.add_argument("--seed", type=int, default=0)
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
    rep.add_argument("--seed", type=int, default=0)
    rep.add_argument("--quick", action="store_true",
                     help="a smaller run (fewer trials/iterations) for a fast look")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    return _reproduce.run(args.name, plot=args.plot, seed=args.seed, quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())
