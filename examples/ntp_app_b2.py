"""NTP paper App. B.2, Fig. 4/5: GD, normalized GD and Adam on overparameterized synthetic NTP data.

Prints CE against the entropy bound, the norm, both correlations with W^mm and the
distance of P_F(W) to W* at 100/1000/10000 iterations (Thm. 4.1).

Run ``python examples/ntp_app_b2.py [--quick] [--plot out.png] [--seed 0]``; the same as
``python -m skntp reproduce ntp-fig4``.
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
    return run("ntp-fig4", plot=args.plot, seed=args.seed, quick=args.quick)


if __name__ == "__main__":
    raise SystemExit(main())
