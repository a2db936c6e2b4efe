"""NTP paper Fig. 1/2: the 2-D example (d = 2, m = 3, V = 5) and its word embeddings.

Prints the rows of W^mm and W* (words with the same support share their W^mm row)
and how close GD gets to the predicted limit.

Run ``python examples/ntp_fig1_2d.py [--quick] [--plot out.png] [--seed 0]``; the same as
``python -m skntp reproduce ntp-fig1``.
"""

import argparse
import importlib.util

from skntp._reproduce import run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller, faster run")
    parser.add_argument("--plot", metavar="OUT.png", default=None,
                        help="save the figure (default: none; needs matplotlib)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        print("matplotlib is not installed (pip install 'skntp[plot]'); no plot.")
        args.plot = None
    return run("ntp-fig1", plot=args.plot, seed=args.seed, quick=args.quick)


if __name__ == "__main__":
    raise SystemExit(main())
