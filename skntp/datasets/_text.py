"""Real English text for next-token prediction, from documentation every install has.

Three corpora: scikit-learn's dataset descriptions (``sklearn/datasets/descr``,
BSD-3-Clause, about 4,400 words), Python's own language reference topics
(``pydoc_data.topics``, shipped with CPython for ``help()``, PSF License, about
70,000 words) and the docstrings of Python's standard library (read with
:mod:`ast` from its installed sources, PSF License, about 260,000 words).  All
three are cut into sentences and words by the same rules (:func:`_sentences`).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from functools import lru_cache
from importlib import resources
from numbers import Integral

import numpy as np
from sklearn.utils import Bunch, check_random_state
from sklearn.utils._param_validation import InvalidParameterError

from ..svm._problem import available_memory
from ._stdlib import stdlib_docstrings

__all__ = ["load_text_ntp"]

_SKIP_LINE = re.compile(r"\s*(\.\.|>>>|\.\.\.|[=\-~^*+]{3,}|\|)")
_SENTENCE_BREAK = re.compile(r"[.!?;:()\[\]\"`]+|\n\s*\n")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_CORPORA = ("sklearn", "python", "stdlib-docstrings")


def _sentences(lines, out):
    """Append to ``out`` the sentences (lists of lowercase words) of ``lines``.

    The one tokenizer of every corpus: sentences break at blank lines and at
    the punctuation ``.!?;:()[]"`` and backticks, words are the runs of ASCII
    letters of the lowercased text (with one inner apostrophe), and sentences
    of fewer than two words are dropped.
    """
    for chunk in _SENTENCE_BREAK.split("\n".join(lines)):
        words = _WORD.findall(chunk.lower())
        if len(words) >= 2:
            out.append(words)


def _descr_sentences():
    """Sentences (lists of lowercase words) of ``sklearn/datasets/descr/*.rst``.

    reStructuredText directives, tables, rules and code lines are dropped;
    sentences break at punctuation and blank lines.
    """
    root = resources.files("sklearn.datasets").joinpath("descr")
    files = sorted((f for f in root.iterdir() if f.name.endswith(".rst")),
                   key=lambda f: f.name)
    sentences = []
    for f in files:
        _sentences([ln for ln in f.read_text(encoding="utf-8").splitlines()
                    if not _SKIP_LINE.match(ln)], sentences)
    return sentences, [f.name for f in files]


def _python_doc_sentences():
    """Sentences (lists of lowercase words) of Python's help topics (``pydoc_data``).

    Indented lines (grammar rules and code examples) and underlines are dropped;
    sentences break at punctuation and blank lines.
    """
    from pydoc_data.topics import topics

    sentences = []
    for key in sorted(topics):
        _sentences([ln for ln in topics[key].splitlines()
                    if not ln.startswith("   ") and not _SKIP_LINE.match(ln)], sentences)
    return sentences, [f"pydoc_data/topics.py:{key}" for key in sorted(topics)]


def _prose_lines(docstring):
    """The lines of a docstring that are prose.

    Dropped, besides what every corpus drops (directives, tables, rules,
    ``>>>`` and ``...`` lines): the output of a doctest (the lines after a
    ``>>>`` line up to a blank line, as :mod:`doctest` reads them) and
    reStructuredText literal blocks (the lines indented deeper than a line that
    ends with ``::``).  Indented lines are otherwise kept: in a cleaned
    docstring they are parameter descriptions and lists more often than code,
    unlike in ``pydoc_data``, where indentation marks grammar and examples.
    """
    lines, in_doctest, literal_indent = [], False, None
    for line in docstring.splitlines():
        text = line.lstrip()
        indent = len(line) - len(text)
        if text.startswith(">>>"):
            in_doctest = True
            continue
        if in_doctest and text:
            continue
        in_doctest = False
        if literal_indent is not None:
            if not text or indent > literal_indent:
                continue
            literal_indent = None
        if text.rstrip().endswith("::"):
            literal_indent = indent
        if not _SKIP_LINE.match(line):
            lines.append(line)
    return lines


@lru_cache(maxsize=4)
def _stdlib_docstring_sentences(root=None):
    """Sentences of the standard library's docstrings, and the modules they come from.

    Each docstring is cut on its own (a sentence never spans two docstrings).
    Cached: the tuples are shared between calls.
    """
    docstrings, _ = stdlib_docstrings(root)
    sentences = []
    for _, _, doc in docstrings:
        _sentences(_prose_lines(doc), sentences)
    modules = tuple(dict.fromkeys(path for path, _, _ in docstrings))
    return tuple(tuple(s) for s in sentences), modules


def _check_integer(value, name, minimum, *, allow_none=False):
    """``value`` as an ``int`` ``>= minimum``, refusing booleans and non-integers.

    Any integer type is accepted (``int``, ``numpy.int64``); a boolean, a float
    (even ``2.0``) or a string raises scikit-learn's ``InvalidParameterError``,
    which is both a ``TypeError`` and a ``ValueError``, as does a value below
    ``minimum``.  Every message names the argument.
    """
    if value is None and allow_none:
        return None
    bound = "a positive integer" if minimum == 1 else f"at least {minimum}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral):
        got = (f"the boolean {value!r}" if isinstance(value, (bool, np.bool_))
               else f"{value!r} of type {type(value).__name__}")
        expected = bound if minimum == 1 else f"an integer {bound}"
        raise InvalidParameterError(
            f"{name} must be {'None or ' if allow_none else ''}{expected}, not {got}.")
    if value < minimum:
        raise InvalidParameterError(f"{name} must be {bound}, got {value!r}.")
    return int(value)


def _check_memory(n_samples, n_contexts, n_features, embedding):
    """Refuse, before allocating, data whose arrays would not fit in memory.

    The samples' embeddings ``(n, d)`` and the table of the distinct contexts'
    ``(m, d)``, in float64.
    """
    need = 8.0 * (n_samples + n_contexts) * n_features
    have = float(available_memory())
    if need > 0.8 * have:
        advice = ("" if embedding == "words" else
                  " embedding='words' gives d = context_size * n_features instead of "
                  f"d = {n_features} ~ m;")
        raise MemoryError(
            f"load_text_ntp: {n_samples} samples of {n_contexts} distinct contexts in "
            f"R^{n_features} ({embedding!r}) need about {need / 2**30:.3g} GiB; "
            f"{have / 2**30:.3g} GiB are available.{advice} choose a smaller n_words, "
            f"n_sentences or n_features."
        )


def load_text_ntp(*, corpus="sklearn", context_size=2, n_words=80, embedding="gaussian",
                  n_features=None, n_sentences=None, random_state=0, return_X_y=False):
    """Next-token prediction data from real English text shipped with the installed packages.

    ``corpus="sklearn"``: the dataset descriptions ``sklearn/datasets/descr/*.rst``
    (about 4,400 words of prose, BSD-3-Clause).  ``corpus="python"``: the help
    topics of Python's language reference, ``pydoc_data.topics`` (the text of
    ``help("if")`` and the like, part of every CPython install; about 70,000
    words, Python Software Foundation License), with the grammar rules and code
    examples (indented lines) left out (34,757 words remain in the sentences on
    CPython 3.11.7).  ``corpus="stdlib-docstrings"``: the
    docstrings of the standard library's modules, classes and functions, read
    with :mod:`ast` from the installed sources (about 260,000 words, Python
    Software Foundation License; see Notes).  The ``n_words`` most frequent
    words form the vocabulary; every sentence is cut into maximal runs of
    vocabulary words, and every prefix of every run, truncated to its last
    ``context_size`` words, is a context whose next token is the following
    word (NTP paper App. D; the same data as
    :func:`skntp.datasets.ntp_from_sequences` of the runs with the returned
    ``embeddings``).  Repeated contexts are the same context, so a context
    followed by different words has a support set ``S_j`` with ``|S_j| > 1``.

    Parameters
    ----------
    corpus : {"sklearn", "python", "stdlib-docstrings"}, default="sklearn"
        The text (above).
    context_size : int, default=2
        Words per context (shorter at the start of a run); an integer >= 1.
    n_words : int, default=80
        Vocabulary size (most frequent words of the text, ties in alphabetical
        order); an integer >= 2.
    embedding : {"gaussian", "onehot", "words"}, default="gaussian"
        Fixed context embeddings ``h_j``.  ``"gaussian"``: an independent
        ``N(0, I/d)`` vector per distinct context, ``d = n_features``
        (default ``m + 8``, so ``d > m`` and, almost surely, the data are
        NTP-separable and NTP_H-compatible: the overparameterized regime of
        the paper's Sec. 3); ``"onehot"``: the ``m`` standard basis vectors
        (``d = m``, linearly independent, same conclusion); ``"words"``: the
        concatenation of the context's last ``context_size`` word vectors
        (i.i.d. ``N(0, I/n_features)`` per word, default 8 dimensions,
        zero-padded), a realistic embedding that can fail both conditions
        when ``d`` is small.
    n_features : int, optional
        See ``embedding`` (ignored by ``"onehot"``); an integer >= 1.
    n_sentences : int, optional
        Use only the first ``n_sentences`` sentences (all by default); an
        integer >= 1.
    random_state : int, RandomState instance or None, default=0
        Seeds the random embeddings.
    return_X_y : bool, default=False
        Return ``(X, y)`` only.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        ``data`` (n, d) context embedding of every sample, ``target`` (n,)
        next word (str), ``contexts`` list of the context (tuple of words) of
        every sample, ``vocabulary`` the ``n_words`` words, ``embeddings``
        dict from context tuple to its vector, ``files`` the text files
        read, ``DESCR``.
    (X, y) : tuple, if ``return_X_y``

    Raises
    ------
    sklearn.utils._param_validation.InvalidParameterError
        A ``ValueError`` and a ``TypeError``: an integer argument that is a
        boolean, a float (even ``2.0``), a string or below its minimum; the
        message names the argument.
    ValueError
        An unknown ``corpus`` or ``embedding``, or no two consecutive
        vocabulary words.
    MemoryError
        Raised before anything large is allocated, when the ``(n + m, d)``
        float64 embeddings would not fit in the available memory (e.g.
        ``embedding="gaussian"`` or ``"onehot"``, whose ``d`` is about ``m``,
        on the whole docstring corpus).
    FileNotFoundError
        ``corpus="stdlib-docstrings"`` on an install without the standard
        library's sources.

    Notes
    -----
    **The standard library's docstrings** (``corpus="stdlib-docstrings"``).
    Source: every ``.py`` file under ``sysconfig.get_paths()["stdlib"]``,
    parsed with :mod:`ast` (nothing is imported or run), outside the test
    suites (directories ``test``, ``tests``, ``idle_test``: ``test/``,
    ``unittest/test/``, ``idlelib/idle_test/``, ``lib2to3/tests/``,
    ``ctypes/test/``, ``tkinter/test/``, ``distutils/tests/``),
    ``site-packages`` and files that do not parse.  The docstrings of modules,
    classes and functions (async ones included) are taken in a fixed order,
    files sorted by path and then definitions in source order, so the corpus
    is the same on every run of the same Python.  Each docstring is cleaned
    (:func:`inspect.cleandoc`) and cut into sentences by the rules of the other
    corpora; doctest examples with their output and reStructuredText literal
    blocks (after ``::``) are left out.  ``files`` lists the modules that have
    a docstring.  Licence: the docstrings are part of the Python standard
    library, distributed under the Python Software Foundation License
    Agreement (PSF-2.0; ``LICENSE.txt`` next to the sources).

    Size on CPython 3.11.7 (other versions differ a little): 734 modules read
    (none fails to parse), 645 of them with docstrings; 8,604 docstrings (565
    of modules, 8,039 of classes and functions); 31,595 sentences of 259,465
    words, 8,940 distinct.  Reading the sources costs about 3 s of one core
    (nearly all in :func:`ast.parse`) and cutting them into sentences 0.2 s,
    once per process (cached); a load from the cache then takes about 0.5 s
    of CPU at ``context_size=2, n_words=3000, embedding="words", n_features=8``.

    Contexts reached (``n`` samples, ``m`` distinct contexts, ``V`` distinct
    next words):

    ==============  ===========  ========  ========  =====
    context_size    n_words      n         m         V
    ==============  ===========  ========  ========  =====
    2               3000         208,677   54,375    2,990
    2               all (8,940)  227,870   69,904    8,471
    3               3000         208,677   105,782   2,990
    3               all (8,940)  227,870   127,360   8,471
    4               3000         208,677   125,355   2,990
    ==============  ===========  ========  ========  =====

    Two-word contexts stop at ``m ≈ 7·10^4`` (there are not more distinct
    word pairs in the text); ``m ≈ 10^5`` takes ``context_size=3``.  With
    ``context_size=3, n_words=3000, embedding="words", n_features=256``
    (``d = 768``, GPT-2 small's width) ``X`` is 208,677 × 768 (1.2 GiB, 2.1 GB
    peak memory): 14-20 s from a cold start on a shared 2-core machine (4 s
    of reading, 1 s of building, up to 5 s of system time for the first touch
    of the memory), 1.6-2.2 s from the cache.
    """
    if not isinstance(corpus, str) or corpus not in _CORPORA:
        raise ValueError(f"corpus must be one of {', '.join(map(repr, _CORPORA))}, got "
                         f"{corpus!r}.")
    k = _check_integer(context_size, "context_size", 1)
    n_words = _check_integer(n_words, "n_words", 2)
    n_features = _check_integer(n_features, "n_features", 1, allow_none=True)
    n_sentences = _check_integer(n_sentences, "n_sentences", 1, allow_none=True)
    if not isinstance(embedding, str) or embedding not in ("gaussian", "onehot", "words"):
        raise ValueError(
            f"embedding must be 'gaussian', 'onehot' or 'words', got {embedding!r}."
        )
    if isinstance(random_state, (bool, np.bool_)):
        raise InvalidParameterError(
            f"random_state must be None, an integer or a RandomState instance, not the "
            f"boolean {random_state!r}.")
    rng = check_random_state(random_state)
    if corpus == "sklearn":
        sentences, files = _descr_sentences()
    elif corpus == "python":
        sentences, files = _python_doc_sentences()
    else:
        sentences, files = _stdlib_docstring_sentences()
        files = list(files)
    if n_sentences is not None:
        sentences = sentences[:n_sentences]
    counts = Counter(w for s in sentences for w in s)
    vocab = [w for w, _ in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))][:n_words]
    in_vocab = set(vocab)
    runs = []
    for s in sentences:
        run = []
        for w in [*s, None]:
            if w in in_vocab:
                run.append(w)
                continue
            if len(run) >= 2:
                runs.append(run)
            run = []
    if not runs:
        raise ValueError("no two consecutive vocabulary words; increase n_words.")
    contexts = [tuple(run[max(0, t - k):t]) for run in runs for t in range(1, len(run))]
    distinct = list(dict.fromkeys(contexts))
    m = len(distinct)
    # The arrays of ntp_from_sequences(runs, embeddings, context_size=k), built
    # by indexing one (m, d) table: no per-sample arrays (a third of the time
    # and half the peak memory at m ~ 10^5).
    if embedding == "words":
        dim = 8 if n_features is None else n_features
        _check_memory(len(contexts), m, k * dim, embedding)
        index = {w: i for i, w in enumerate(vocab)}
        table = rng.standard_normal((len(vocab), dim)) / np.sqrt(dim)
        padded = np.vstack([table, np.zeros((1, dim))])  # row V: the left padding
        ids = np.array([[len(vocab)] * (k - len(c)) + [index[w] for w in c]
                        for c in distinct], dtype=np.intp)
        E = padded[ids].reshape(m, k * dim)
    elif embedding == "onehot":
        _check_memory(len(contexts), m, m, embedding)
        E = np.eye(m)
    else:
        dim = m + 8 if n_features is None else n_features
        _check_memory(len(contexts), m, dim, embedding)
        E = rng.standard_normal((m, dim)) / np.sqrt(dim)
    emb = {c: E[j] for j, c in enumerate(distinct)}
    row = {c: j for j, c in enumerate(distinct)}
    X = E[np.fromiter((row[c] for c in contexts), dtype=np.intp, count=len(contexts))]
    y = np.asarray([run[t] for run in runs for t in range(1, len(run))])
    if return_X_y:
        return X, y
    return Bunch(
        data=X,
        target=y,
        contexts=contexts,
        vocabulary=vocab,
        embeddings=emb,
        files=files,
        DESCR=(
            "Next-token prediction on "
            + {"sklearn": "the dataset descriptions shipped with scikit-learn",
               "python": "Python's help topics (pydoc_data)",
               "stdlib-docstrings": "the docstrings of Python "
               f"{sys.version_info.major}.{sys.version_info.minor}'s standard library"
               }[corpus]
            + f" ({len(files)} texts): {X.shape[0]} samples, {m} distinct contexts of at most "
            f"{k} words, vocabulary of {len(vocab)} words, {embedding!r} context "
            f"embeddings in R^{X.shape[1]}."
        ),
    )
