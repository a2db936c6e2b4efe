"""Words to token ids and back: :class:`TokenEncoder` (exported by :mod:`skntp.datasets`)."""

from __future__ import annotations

import re
from collections import Counter
from numbers import Integral

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

__all__ = ["TokenEncoder"]


class TokenEncoder(TransformerMixin, BaseEstimator):
    """Encode word sequences as integer token ids, scikit-learn style.

    ``fit`` learns a vocabulary from raw sentences (strings, split by
    ``token_pattern``) or from sequences already split into tokens;
    ``transform`` maps every sequence to a 1-D array of ids, the input of
    :func:`skntp.datasets.ntp_from_sequences` and of
    :class:`~skntp.NTPAttentionClassifier`; ``inverse_transform`` maps ids
    back to tokens (e.g. a model's predicted next tokens).

    Ids are assigned to the special tokens first (``unknown_token`` when
    ``handle_unknown="use_unknown"``, then ``bos_token``, ``eos_token``),
    then to the words by decreasing count, ties in alphabetical order, so
    the encoding is deterministic.

    Parameters
    ----------
    lowercase : bool, default=True
        Lowercase string tokens before counting and encoding.
    token_pattern : str, default=r"[\\w']+"
        Regular expression of one token in a raw string (``re.findall``);
        not used for inputs already split into tokens.
    max_tokens : int, default=None
        Keep only that many most frequent words (special tokens excluded).
    min_count : int, default=1
        Keep only words seen at least that many times in ``fit``.
    handle_unknown : {"error", "ignore", "use_unknown"}, default="error"
        What ``transform`` does with a word outside the vocabulary: raise a
        ``ValueError``, drop it from the sequence, or encode it as
        ``unknown_token`` (which then has its own id).
    unknown_token : str, default="<unk>"
    bos_token : str, default=None
        Prepended to every sequence when given (a "beginning of sentence"
        token, so that the first word is the next token of a context too).
    eos_token : str, default=None
        Appended to every sequence when given.

    Attributes
    ----------
    vocabulary_ : dict of str to int
        Token -> id.
    tokens_ : ndarray of object, shape (n_tokens,)
        Id -> token (``tokens_[vocabulary_[w]] == w``).
    counts_ : ndarray of int, shape (n_tokens,)
        Occurrences of each token in the data seen by ``fit`` (special
        tokens count the sequences they were added to; ``unknown_token``
        the dropped occurrences).
    n_tokens_ : int
        Vocabulary size ``K`` (or ``V``).

    See Also
    --------
    skntp.datasets.ntp_from_sequences : Contexts and next tokens from id sequences.

    Examples
    --------
    >>> from skntp.datasets import TokenEncoder
    >>> enc = TokenEncoder(bos_token="<s>")
    >>> ids = enc.fit_transform(["The cat sat.", "The dog sat down."])
    >>> ids[0].tolist(), enc.n_tokens_
    ([0, 2, 3, 1], 6)
    >>> enc.inverse_transform(ids[1:])
    [['<s>', 'the', 'dog', 'sat', 'down']]
    >>> enc.inverse_transform([1, 2]).tolist()  # 1-D ids: e.g. predictions
    ['sat', 'the']
    """

    _parameter_constraints = {
        "lowercase": ["boolean"],
        "token_pattern": [str],
        "max_tokens": [Interval(Integral, 1, None, closed="left"), None],
        "min_count": [Interval(Integral, 1, None, closed="left")],
        "handle_unknown": [StrOptions({"error", "ignore", "use_unknown"})],
        "unknown_token": [str],
        "bos_token": [str, None],
        "eos_token": [str, None],
    }

    def __init__(self, *, lowercase=True, token_pattern=r"[\w']+", max_tokens=None,
                 min_count=1, handle_unknown="error", unknown_token="<unk>",
                 bos_token=None, eos_token=None):
        self.lowercase = lowercase
        self.token_pattern = token_pattern
        self.max_tokens = max_tokens
        self.min_count = min_count
        self.handle_unknown = handle_unknown
        self.unknown_token = unknown_token
        self.bos_token = bos_token
        self.eos_token = eos_token

    # ------------------------------------------------------------ tokenize
    def _split(self, X):
        """Lists of (lowercased) word tokens, one per input sequence."""
        if isinstance(X, str):
            raise ValueError(
                "TokenEncoder expects an iterable of sentences (strings) or of token "
                "sequences; got a single string. Wrap it in a list: [text]."
            )
        pattern = re.compile(self.token_pattern)
        out = []
        for i, seq in enumerate(X):
            if isinstance(seq, str):
                words = pattern.findall(seq.lower() if self.lowercase else seq)
            else:
                try:
                    words = list(seq)
                except TypeError:
                    raise ValueError(
                        f"sequence {i} is neither a string nor an iterable of tokens: "
                        f"{seq!r}."
                    ) from None
                if self.lowercase:
                    words = [w.lower() if isinstance(w, str) else w for w in words]
            out.append(words)
        return out

    def _specials(self):
        names = []
        if self.handle_unknown == "use_unknown":
            names.append(self.unknown_token)
        names += [t for t in (self.bos_token, self.eos_token) if t is not None]
        if len(set(names)) != len(names):
            raise ValueError(f"the special tokens must differ, got {names}.")
        return names

    # ----------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Learn the vocabulary.

        Parameters
        ----------
        X : iterable of str or of sequences of tokens
            Raw sentences, or sentences already split into tokens.
        y : None
            Ignored.

        Returns
        -------
        self
        """
        return self._fit_split(self._split(X))

    def _fit_split(self, seqs):
        """``fit`` on the lists of :meth:`_split`."""
        if not seqs:
            raise ValueError("TokenEncoder.fit got no sequences.")
        specials = self._specials()
        counts = Counter(w for s in seqs for w in s)
        for name in specials:
            if name in counts:
                raise ValueError(
                    f"the special token {name!r} occurs in the text; choose another name."
                )
        words = sorted(counts.items(), key=lambda wc: (-wc[1], str(wc[0])))
        words = [w for w, c in words if c >= self.min_count]
        if self.max_tokens is not None:
            words = words[: self.max_tokens]
        if not words:
            raise ValueError(
                "the vocabulary is empty: no token of the text is seen min_count="
                f"{self.min_count} times."
            )
        tokens = specials + words
        self.vocabulary_ = {w: i for i, w in enumerate(tokens)}
        self.tokens_ = np.empty(len(tokens), dtype=object)
        self.tokens_[:] = tokens
        kept = set(words)
        n_seq = len(seqs)
        special_counts = {self.bos_token: n_seq, self.eos_token: n_seq,
                          self.unknown_token: sum(c for w, c in counts.items()
                                                  if w not in kept)}
        self.counts_ = np.array([special_counts[w] if i < len(specials) else counts[w]
                                 for i, w in enumerate(tokens)], dtype=np.int64)
        self.n_tokens_ = len(tokens)
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, X, y=None):
        """Learn the vocabulary and return the token ids of every sequence.

        ``X`` and each of its sequences are read once: generators or any other
        one-pass iterables work, outside and inside (``fit(X).transform(X)``
        would find them used up and return ``[]`` or empty arrays).

        Parameters
        ----------
        X : iterable of str or of sequences of tokens
        y : None
            Ignored.

        Returns
        -------
        list of ndarray of int64
        """
        seqs = self._split(X)
        return self._fit_split(seqs)._encode(seqs)

    # ----------------------------------------------------------- transform
    def transform(self, X):
        """Token ids of every sequence.

        Parameters
        ----------
        X : iterable of str or of sequences of tokens

        Returns
        -------
        list of ndarray of int64
            One 1-D array per sequence (lengths differ).

        Raises
        ------
        ValueError
            On words outside the vocabulary with ``handle_unknown="error"``.
        """
        check_is_fitted(self)
        return self._encode(self._split(X))

    def _encode(self, seqs):
        """``transform`` of the lists of :meth:`_split`."""
        vocab = self.vocabulary_
        unk = vocab.get(self.unknown_token) if self.handle_unknown == "use_unknown" else None
        head = [vocab[self.bos_token]] if self.bos_token is not None else []
        tail = [vocab[self.eos_token]] if self.eos_token is not None else []
        out, unknown = [], set()
        for words in seqs:
            ids = []
            for w in words:
                i = vocab.get(w)
                if i is None:
                    if self.handle_unknown == "use_unknown":
                        i = unk
                    else:
                        unknown.add(w)
                        continue
                ids.append(i)
            out.append(np.asarray(head + ids + tail, dtype=np.int64))
        if unknown and self.handle_unknown == "error":
            shown = sorted(map(str, unknown))[:10]
            raise ValueError(
                f"{len(unknown)} word(s) outside the vocabulary, e.g. {shown}. Pass "
                "handle_unknown='ignore' (drop them) or 'use_unknown' (encode them as "
                "unknown_token)."
            )
        return out

    def inverse_transform(self, X):
        """Tokens of token ids.

        Parameters
        ----------
        X : array-like of int, 1-D, or iterable of 1-D sequences of int
            A 1-D array of ids (e.g. the next tokens predicted by a model)
            or a list of id sequences (e.g. the output of :meth:`transform`).

        Returns
        -------
        ndarray of object or list of list
            The tokens: a 1-D array for a 1-D input, else one list per sequence.
        """
        check_is_fitted(self)
        flat = not isinstance(X, (list, tuple)) or not X or np.ndim(X[0]) == 0
        if flat:
            ids = self._check_ids(np.asarray(X))
            return self.tokens_[ids]
        return [self.tokens_[self._check_ids(np.asarray(s))].tolist() for s in X]

    def _check_ids(self, ids):
        if ids.size == 0:
            return ids.astype(np.int64)
        if ids.ndim != 1:
            raise ValueError(f"expected 1-D arrays of token ids, got shape {ids.shape}.")
        if ids.dtype.kind not in "iu":
            if ids.dtype.kind != "f" or not np.all(ids == np.round(ids)):
                raise ValueError(f"token ids must be integers, got dtype {ids.dtype}.")
            ids = ids.astype(np.int64)
        if ids.min() < 0 or ids.max() >= self.n_tokens_:
            raise ValueError(
                f"token ids must lie in [0, {self.n_tokens_ - 1}], got ids from "
                f"{int(ids.min())} to {int(ids.max())}."
            )
        return ids

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.string = True
        tags.requires_fit = True
        return tags
