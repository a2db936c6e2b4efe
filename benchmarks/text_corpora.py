"""The real-text corpora of ``load_text_ntp``: their size, the contexts they reach, load times.

Prints, for each corpus (``sklearn``, ``python``, ``stdlib-docstrings``), the
time to read it (once per process; later loads use the cache), its number of
texts, sentences, words and distinct words, and then, for each
``context_size`` and ``n_words``, the data ``load_text_ntp`` makes of it:
``n`` samples, ``m`` distinct contexts, ``V`` distinct next words, and the
time of the load from the cache (``embedding="words"``, ``n_features=1``, so
that the time is the text's, not the embeddings').  ``--width 768`` also
builds the ``d = 768`` data of the largest setting (``n_features = 768 //
context_size``) and prints its time and the process's peak memory.  These are
the figures of ``load_text_ntp``'s docstring.

Usage::

    python benchmarks/text_corpora.py                      # every corpus
    python benchmarks/text_corpora.py --corpus stdlib-docstrings --context-size 2 3 \\
        --n-words 3000 all --width 768
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

try:  # run from a checkout without installing
    import skntp  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from skntp.datasets import load_text_ntp
from skntp.datasets._stdlib import stdlib_docstrings
from skntp.datasets._text import (
    _descr_sentences,
    _python_doc_sentences,
    _stdlib_docstring_sentences,
)

READERS = {"sklearn": _descr_sentences, "python": _python_doc_sentences,
           "stdlib-docstrings": _stdlib_docstring_sentences}


def _clock():
    return time.perf_counter(), time.process_time()


def _since(start):
    wall, cpu = _clock()
    return f"{wall - start[0]:.2f} s wall, {cpu - start[1]:.2f} s CPU"


def corpus_size(corpus):
    """Read the corpus (timed) and print its size."""
    start = _clock()
    sentences, files = READERS[corpus]()
    print(f"\n== {corpus}: read in {_since(start)}")
    words = [w for s in sentences for w in s]
    print(f"   {len(files):,} texts, {len(sentences):,} sentences, {len(words):,} words, "
          f"{len(set(words)):,} distinct")
    if corpus == "stdlib-docstrings":
        docstrings, skipped = stdlib_docstrings()
        modules = sum(1 for _, name, _ in docstrings if name == "")
        print(f"   {len(docstrings):,} docstrings ({modules:,} of modules), "
              f"{len(skipped)} files that do not parse; Python {sys.version.split()[0]}")
    return len(set(words))


def contexts_table(corpus, context_sizes, n_words):
    """Print ``(n, m, V)`` for every setting."""
    print(f"   {'context_size':>12} {'n_words':>8} {'n':>9} {'m':>9} {'V':>7}  load")
    for k in context_sizes:
        for nw in n_words:
            start = _clock()
            b = load_text_ntp(corpus=corpus, context_size=k, n_words=nw,
                              embedding="words", n_features=1)
            took = _since(start)
            print(f"   {k:>12} {len(b.vocabulary):>8,} {len(b.target):>9,} "
                  f"{len(b.embeddings):>9,} {len(set(b.target)):>7,}  {took}")


def wide(corpus, context_size, n_words, width):
    """Build the ``d = width`` data and print its time and the peak memory."""
    n_features = width // context_size
    start = _clock()
    X, _ = load_text_ntp(corpus=corpus, context_size=context_size, n_words=n_words,
                         embedding="words", n_features=n_features, return_X_y=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    print(f"   d = {X.shape[1]} (context_size={context_size}, n_features={n_features}): "
          f"X {X.shape[0]:,} x {X.shape[1]} ({X.nbytes / 2**30:.2f} GiB) in {_since(start)}; "
          f"peak memory of the process {peak:.2f} GiB")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", nargs="+", choices=list(READERS), default=list(READERS))
    parser.add_argument("--context-size", nargs="+", type=int, default=[2, 3])
    parser.add_argument("--n-words", nargs="+", default=["3000", "all"],
                        help="vocabulary sizes; 'all' for every word of the corpus")
    parser.add_argument("--width", type=int, default=None,
                        help="also build the data of this d (e.g. 768) at the largest setting")
    args = parser.parse_args(argv)
    for corpus in args.corpus:
        n_distinct = corpus_size(corpus)
        n_words = sorted({n_distinct if w == "all" else min(int(w), n_distinct)
                          for w in args.n_words})
        contexts_table(corpus, args.context_size, n_words)
        if args.width:
            wide(corpus, max(args.context_size), max(n_words), args.width)


if __name__ == "__main__":
    main()
