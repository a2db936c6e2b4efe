"""Command line: ``python -m skntp demo`` and ``python -m skntp reproduce NAME``.

Installed, the same program is the ``skntp`` console script (``skntp demo``).
Every argument is checked before anything is computed: a wrong one ends the
program with argparse's usage line and one error line naming it (``skntp demo:
error: argument --seed: ...``), exit status 2, as for an unknown option.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from . import __version__, _reproduce
from .datasets import make_ntp_data
from .decoder import NTPDecoderClassifier

#: the seeds NumPy and scikit-learn accept as ``random_state``
MAX_SEED = 2**32 - 1


def demo_table(max_iter=10_000, seed=0):
    """The demo's fits and table: GD, normalized GD and the SVM limit on App. B.2 data.

    Parameters
    ----------
    max_iter : int, default=10_000
        Iterations (gradient steps) of the two descents.
    seed : int, default=0
        Seed of the data and of the descents' initializations.

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
            # a descent stopped short of convergence may warn: the table shows how far
            # it got, which is the point of the demo (any other warning is shown)
            warnings.simplefilter("ignore", ConvergenceWarning)
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


def _legend(svm):
    """What each row and flag of the demo's table is (the NTP paper's notation)."""
    method = svm.svm_result_.method if svm.svm_result_ is not None else "none"
    return (
        "What the rows are (W: the fitted decoder, V x d; the SVM limit's W is\n"
        f"W* + R W^mm/||W^mm|| with R = {svm.svm_radius_:.4g}, computed, not trained):\n"
        "  CE - H             the cross-entropy (eq. 2) above its infimum H, the entropy\n"
        "                     of the next-token distributions p_j (Sec. 2)\n"
        "  ||W||              Frobenius norm of W; it grows without bound along GD\n"
        "  cos(W, W^mm)       cosine of W with the NTP-SVM direction W^mm (eq. 4)\n"
        "  cos(W - W*, W^mm)  the same, W* subtracted first (alignment_)\n"
        "  ||P_F(W) - W*||    distance of W's projection onto the subspace F (eq. 5) to\n"
        "                     W*, the finite component that solves the log-odds eq. (3)\n"
        "  iterations         n_iter_: gradient steps of GD and NGD; for the SVM limit,\n"
        "                     the iterations of the method that solved the NTP-SVM\n"
        f"                     (method '{method}'), not gradient steps\n"
        "  time               seconds of the fit\n"
        "  NTP-separable      the NTP-SVM is feasible (Def. 3.2)\n"
        "  NTP_H-compatible   eq. (3) has a solution: some W matches every log-odds\n"
        "                     log(p_jz / p_jz') of the data (Def. 3.1)\n"
        "  NTP-margin         1/||W^mm||, the margin of the NTP-SVM"
    )


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
        "cos(W - W*, W^mm) -> 1 and P_F(W) -> W*.\n"
    )
    print(_legend(est))
    return 0


def _integer(low, high, what):
    """An argparse ``type``: an integer in ``[low, high]`` (``high=None``: no bound)."""

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"between {low} and {high}"
            raise argparse.ArgumentTypeError(f"{what} must be {bound}, got {value}")
        return value

    return parse


def plot_path(text):
    """An argparse ``type``: a figure file that can be written, checked before computing.

    Parameters
    ----------
    text : str
        The path given to ``--plot``.

    Returns
    -------
    str
        ``text``, unchanged.

    Raises
    ------
    argparse.ArgumentTypeError
        matplotlib is not installed, the extension is not one matplotlib saves,
        the folder does not exist or cannot be written, or the path is a folder.
    """
    path = Path(text)
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise argparse.ArgumentTypeError(
            "saving a figure needs matplotlib (pip install 'skntp[plot]')") from None
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder, not a file name")
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    extension = path.suffix.lower().lstrip(".")
    if extension not in formats:
        got = f"'.{extension}'" if extension else "no extension"
        raise argparse.ArgumentTypeError(
            f"{text!r} has {got}; name the figure with one of ."
            + ", .".join(formats))
    folder = path.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"the folder {str(folder)!r} does not exist")
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text!r} cannot be overwritten (permission denied)")
    try:  # writing is what tells (os.access says yes to root, and to read-only file systems)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".skntp-", suffix=path.suffix):
            pass
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"cannot write into the folder {str(folder)!r}: {exc.strerror or exc}") from None
    return text


def build_parser(prog="skntp"):
    """The command line's parser (``prog``: the name its messages give the program)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="skntp: the implicit bias of next-token prediction and attention.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{demo,reproduce}")
    seed = _integer(0, MAX_SEED, "the seed")
    demo = sub.add_parser("demo", help="fit NTP data by GD and by the SVM limit, compare")
    demo.add_argument("--max-iter", type=_integer(1, None, "the number of iterations"),
                      default=10_000, metavar="N",
                      help="iterations (gradient steps) of the two descents, >= 1 "
                           "(default 10000)")
    demo.add_argument("--seed", type=seed, default=0,
                      help=f"seed of the data and of the initializations, 0 to {MAX_SEED} "
                           "(default 0)")
    rep = sub.add_parser(
        "reproduce",
        help="reproduce a paper figure and print its table",
        description="Reproductions:\n" + "\n".join(
            f"  {name:22s} {fn.__doc__.strip().splitlines()[0]}"
            for name, fn in _reproduce.REPRODUCTIONS.items()
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rep.add_argument("name", metavar="NAME", choices=sorted(_reproduce.REPRODUCTIONS),
                     help="one of the reproductions listed above")
    rep.add_argument("--plot", metavar="OUT.png", default=None, type=plot_path,
                     help="save the figure, in the format of its extension (.png, .pdf, "
                          ".svg, ...; needs matplotlib); checked before computing")
    rep.add_argument("--seed", type=seed, default=0,
                     help=f"seed of the reproduction's data and trials, 0 to {MAX_SEED} "
                          "(default 0)")
    rep.add_argument("--quick", action="store_true",
                     help="a smaller run (fewer trials/iterations) for a fast look")
    return parser


def main(argv=None, prog="skntp"):
    """Entry point of the ``skntp`` console script and of ``python -m skntp``.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default: ``sys.argv[1:]``).
    prog : str, default="skntp"
        The program's name in its usage and error messages; ``python -m skntp``
        passes ``"python -m skntp"``.

    Returns
    -------
    int
        The exit status (0). A wrong argument exits with status 2 before
        anything is computed (``SystemExit``).
    """
    args = build_parser(prog).parse_args(argv)
    if args.command == "demo":
        return _demo(args)
    return _reproduce.run(args.name, plot=args.plot, seed=args.seed, quick=args.quick)


if __name__ == "__main__":
    sys.exit(main(prog="python -m skntp"))
