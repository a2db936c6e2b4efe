"""NTP paper Fig. 1/2: the 2-D example (d = 2, m = 3, V = 5) and its word embeddings.

Prints the rows of W^mm and W* (words with the same support share their W^mm row)
and how close GD gets to the predicted limit.

Run ``python examples/ntp_fig1_2d.py [--quick] [--plot out.png] [--seed 0]``; the same as
``python -m skntp reproduce ntp-fig1``.
"""

from skntp._reproduce import example_main


def main(argv=None):
    return example_main("ntp-fig1", __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
