"""Next-token prediction on real English text (scikit-learn's dataset descriptions).

Word-level contexts of up to two words with fixed embeddings: the entropy bound,
the NTP-separability check per embedding, GD against the SVM limit, and the rows of
W^mm as word embeddings (words that follow similar contexts get similar rows).

Run ``python examples/ntp_real_text.py [--quick] [--plot out.png] [--seed 0]``; the same as
``python -m skntp reproduce ntp-real-text``.
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
    return run("ntp-real-text", plot=args.plot, seed=args.seed, quick=args.quick)


if __name__ == "__main__":
    raise SystemExit(main())
