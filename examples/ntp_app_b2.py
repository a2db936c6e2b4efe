"""NTP paper App. B.2, Fig. 4/5: GD, normalized GD and Adam on overparameterized synthetic NTP data.

Prints CE against the entropy bound, the norm, both correlations with W^mm and the
distance of P_F(W) to W* at 100/1000/10000 iterations (Thm. 4.1).

Run ``python examples/ntp_app_b2.py [--quick] [--plot out.png] [--seed 0]``; the same as
``python -m skntp reproduce ntp-fig4``.
"""

from skntp._reproduce import example_main


def main(argv=None):
    return example_main("ntp-fig4", __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
