"""Real English text for next-token prediction, from documentation every install has.

Two corpora: scikit-learn's dataset descriptions (``sklearn/datasets/descr``,
BSD-3-Clause, about 4,400 words) and Python's own language reference topics
(``pydoc_data.topics``, shipped with CPython for ``help()``, PSF License, about
70,000 words).
"""

from __future__ import annotations

import re
from collections import Counter
from importlib import resources

import numpy as np
from sklearn.utils import Bunch, check_random_state

from ._ntp import ntp_from_sequences

__all__ = ["load_text_ntp"]

_SKIP_LINE = re.compile(r"\s*(\.\.|>>>|\.\.\.|[=\-~^*+]{3,}|\|)")
_SENTENCE_BREAK = re.compile(r"[.!?;:()\[\]\"`]+|\n\s*\n")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


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
        lines = [ln for ln in f.read_text(encoding="utf-8").splitlines()
                 if not _SKIP_LINE.match(ln)]
        for chunk in _SENTENCE_BREAK.split("\n".join(lines)):
            words = _WORD.findall(chunk.lower())
            if len(words) >= 2:
                sentences.append(words)
    return sentences, [f.name for f in files]


def _python_doc_sentences():
    """Sentences (lists of lowercase words) of Python's help topics (``pydoc_data``).

    Indented lines (grammar rules and code examples) and underlines are dropped;
    sentences break at punctuation and blank lines.
    """
    from pydoc_data.topics import topics

    sentences = []
    for key in sorted(topics):
        lines = [ln for ln in topics[key].splitlines()
                 if not ln.startswith("   ") and not _SKIP_LINE.match(ln)]
        for chunk in _SENTENCE_BREAK.split("\n".join(lines)):
            words = _WORD.findall(chunk.lower())
            if len(words) >= 2:
                sentences.append(words)
    return sentences, [f"pydoc_data/topics.py:{key}" for key in sorted(topics)]


def load_text_ntp(*, corpus="sklearn", context_size=2, n_words=80, embedding="gaussian",
                  n_features=None, n_sentences=None, random_state=0, return_X_y=False):
    """Next-token prediction data from real English text shipped with the installed packages.

    ``corpus="sklearn"``: the dataset descriptions ``sklearn/datasets/descr/*.rst``
    (about 4,400 words of prose, BSD-3-Clause).  ``corpus="python"``: the help
    topics of Python's language reference, ``pydoc_data.topics`` (the text of
    ``help("if")`` and the like, part of every CPython install; about 70,000
    words, Python Software Foundation License), with the grammar rules and code
    examples (indented lines) left out.  The ``n_words`` most frequent words form
    the vocabulary; every sentence is cut into maximal runs of vocabulary
    words, and every prefix of every run, truncated to its last
    ``context_size`` words, is a context whose next token is the following
    word (NTP paper App. D, via :func:`skntp.datasets.ntp_from_sequences`).
    Repeated contexts are the same context, so a context followed by
    different words has a support set ``S_j`` with ``|S_j| > 1``.

    Parameters
    ----------
    corpus : {"sklearn", "python"}, default="sklearn"
        The text (above).
    context_size : int, default=2
        Words per context (shorter at the start of a run).
    n_words : int, default=80
        Vocabulary size (most frequent words of the text).
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
        See ``embedding`` (ignored by ``"onehot"``).
    n_sentences : int, optional
        Use only the first ``n_sentences`` sentences (all by default).
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
    """
    if corpus not in ("sklearn", "python"):
        raise ValueError(f"corpus must be 'sklearn' or 'python', got {corpus!r}.")
    if n_sentences is not None and (isinstance(n_sentences, bool) or int(n_sentences) < 1):
        raise ValueError(f"n_sentences must be None or a positive integer, got "
                         f"{n_sentences!r}.")
    if int(context_size) < 1:
        raise ValueError(f"context_size must be a positive integer, got {context_size!r}.")
    if int(n_words) < 2:
        raise ValueError(f"n_words must be at least 2, got {n_words!r}.")
    if embedding not in ("gaussian", "onehot", "words"):
        raise ValueError(
            f"embedding must be 'gaussian', 'onehot' or 'words', got {embedding!r}."
        )
    if n_features is not None and int(n_features) < 1:
        raise ValueError(f"n_features must be a positive integer, got {n_features!r}.")
    k = int(context_size)
    rng = check_random_state(random_state)
    sentences, files = _descr_sentences() if corpus == "sklearn" else _python_doc_sentences()
    if n_sentences is not None:
        sentences = sentences[:int(n_sentences)]
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
    if embedding == "words":
        dim = 8 if n_features is None else int(n_features)
        index = {w: i for i, w in enumerate(vocab)}
        table = rng.standard_normal((len(vocab), dim)) / np.sqrt(dim)
        emb = {c: np.concatenate([np.zeros((k - len(c)) * dim),
                                  table[[index[w] for w in c]].ravel()])
               for c in distinct}
    elif embedding == "onehot":
        eye = np.eye(m)
        emb = {c: eye[j] for j, c in enumerate(distinct)}
    else:
        dim = m + 8 if n_features is None else int(n_features)
        H = rng.standard_normal((m, dim)) / np.sqrt(dim)
        emb = {c: H[j] for j, c in enumerate(distinct)}
    X, y = ntp_from_sequences(runs, emb, context_size=k)
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
            + ("the dataset descriptions shipped with scikit-learn" if corpus == "sklearn"
               else "Python's help topics (pydoc_data)")
            + f" ({len(files)} texts): {X.shape[0]} samples, {m} distinct contexts of at most "
            f"{k} words, vocabulary of {len(vocab)} words, {embedding!r} context "
            f"embeddings in R^{X.shape[1]}."
        ),
    )
