"""Next-token prediction on real English text (scikit-learn's dataset descriptions).

Word-level contexts of up to two words with fixed embeddings: the entropy bound,
the NTP-separability check per embedding, GD against the SVM limit, and the rows of
W^mm as word embeddings (words that follow similar contexts get similar rows).

Run ``python examples/ntp_real_text.py [--quick] [--plot out.png] [--seed 0]``; the same as
``python -m skntp reproduce ntp-real-text``.
"""

from skntp._reproduce import example_main


def main(argv=None):
    return example_main("ntp-real-text", __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())
