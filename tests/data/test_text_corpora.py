"""``load_text_ntp``: the standard library's docstrings as a corpus (issue #49, item 5) and
the validation of every numeric argument (issue #47, item 5)."""

import inspect
import json.decoder
import operator
import sys
from collections import Counter

import numpy as np
import pytest

from skntp.datasets import _stdlib as stdlib
from skntp.datasets import _text as text
from skntp.datasets import load_text_ntp
from skntp.datasets._text import _prose_lines, _stdlib_docstring_sentences


# --------------------------------------------------------------------------
# The reader, on a tree of our own
# --------------------------------------------------------------------------
def _write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _fake_stdlib(root):
    _write(root, "zeta.py", '"""Zeta module."""\n')
    _write(root, "alpha.py", '''"""Alpha module."""

class A:
    """Class A."""

    def f(self):
        """Method f."""
        def inner():
            """Inner function."""

    async def g(self):
        """Coroutine g."""


def h():
    pass


if True:
    def k():
        """Conditional k."""
''')
    _write(root, "pkg/__init__.py", '"""Package."""\n')
    _write(root, "pkg/mod.py", 'def m():\n    """Function m."""\n')
    for rel in ("test/test_x.py", "tests/t.py", "pkg/tests/t.py", "pkg/test/t.py",
                "idlelib/idle_test/t.py", "site-packages/third.py", "dist-packages/t.py"):
        _write(root, rel, '"""A docstring of a test suite or third-party package."""\n')
    _write(root, "broken.py", '"""Never read."""\ndef (:\n')
    _write(root, "notes.txt", '"""Not Python."""\n')


def test_reader_keeps_docstrings_in_path_then_source_order(tmp_path):
    _fake_stdlib(tmp_path)
    docstrings, skipped = stdlib.stdlib_docstrings(str(tmp_path))
    assert [(p, q) for p, q, _ in docstrings] == [
        ("alpha.py", ""), ("alpha.py", "A"), ("alpha.py", "A.f"), ("alpha.py", "A.f.inner"),
        ("alpha.py", "A.g"), ("alpha.py", "k"), ("pkg/__init__.py", ""),
        ("pkg/mod.py", "m"), ("zeta.py", ""),
    ]
    assert docstrings[1][2] == "Class A." and docstrings[5][2] == "Conditional k."
    assert skipped == ("broken.py",)  # a file that does not parse is left out
    assert not any("test suite" in doc for _, _, doc in docstrings)


def test_reader_order_does_not_depend_on_the_file_system(tmp_path, monkeypatch):
    _fake_stdlib(tmp_path)
    expected = stdlib._source_files(tmp_path)
    walk = stdlib.os.walk

    def reversed_walk(root):
        for dirpath, dirnames, filenames in walk(root):
            dirnames.reverse()
            yield dirpath, dirnames, filenames[::-1]

    monkeypatch.setattr(stdlib.os, "walk", reversed_walk)
    assert stdlib._source_files(tmp_path) == expected
    assert [f.as_posix() for f in expected] == [
        "alpha.py", "broken.py", "pkg/__init__.py", "pkg/mod.py", "zeta.py"]


def test_reader_without_sources_says_so(tmp_path):
    _write(tmp_path, "site-packages/x.py", '"""Third party."""\n')
    with pytest.raises(FileNotFoundError, match="no Python source of the standard library"):
        stdlib.stdlib_docstrings(str(tmp_path))


def test_prose_lines_drop_doctests_and_literal_blocks_only():
    doc = inspect.cleandoc('''Summary line.

        Parameters:
            x -- the value, kept.

        >>> f(1)
        doctest output
        more output

        Example::

            code(line)
              deeper

        Back to prose.
        .. note:: a directive
        ''')
    assert _prose_lines(doc) == [
        "Summary line.", "", "Parameters:", "    x -- the value, kept.", "", "",
        "Example::", "Back to prose."]


# --------------------------------------------------------------------------
# The installed standard library
# --------------------------------------------------------------------------
def test_docstrings_are_the_modules_own_in_source_order():
    docstrings, _ = stdlib.stdlib_docstrings()
    found = [(q, doc) for p, q, doc in docstrings if p == "json/decoder.py"]
    names = [q for q, _ in found]
    assert names[0] == "" and "JSONDecoder.raw_decode" in names
    objects = [json.decoder if q == "" else operator.attrgetter(q)(json.decoder)
               for q in names]
    assert found == [(q, inspect.cleandoc(obj.__doc__)) for q, obj in zip(names, objects)]
    lines = [inspect.getsourcelines(obj)[1] if q else 0 for q, obj in zip(names, objects)]
    assert lines == sorted(lines)


def test_corpus_size_and_no_test_suite():
    docstrings, skipped = stdlib.stdlib_docstrings()
    sentences, modules = _stdlib_docstring_sentences()
    paths = Counter(p for p, _, _ in docstrings)
    assert not [p for p in paths if stdlib.EXCLUDED_DIRECTORIES & set(p.split("/")[:-1])]
    assert not [p for p in paths if p.startswith(("test/", "idlelib/idle_test/"))]
    assert list(modules) == list(paths) == sorted(paths, key=lambda p: p.split("/"))
    n_words = sum(map(len, sentences))
    # the documented range (CPython 3.11.7: 8,604 docstrings in 645 modules,
    # 31,595 sentences, 259,465 words); other versions differ a little
    assert 6_000 <= len(docstrings) <= 12_000 and 450 <= len(modules) <= 900
    assert 200_000 <= n_words <= 330_000 and 24_000 <= len(sentences) <= 42_000
    assert len(skipped) <= 5
    if sys.version_info[:3] == (3, 11, 7):
        assert (len(docstrings), len(modules), len(sentences), n_words) == (
            8_604, 645, 31_595, 259_465)


def test_loads_are_equal_and_shaped_as_the_python_corpus():
    kw = {"n_words": 40, "embedding": "words", "n_features": 4, "random_state": 1}
    ref = load_text_ntp(corpus="python", **kw)
    b = load_text_ntp(corpus="stdlib-docstrings", **kw)
    again = load_text_ntp(corpus="stdlib-docstrings", **kw)
    np.testing.assert_array_equal(b.data, again.data)
    np.testing.assert_array_equal(b.target, again.target)
    assert b.contexts == again.contexts and b.vocabulary == again.vocabulary
    assert set(b) == set(ref)
    for key in ("data", "target"):
        assert type(b[key]) is type(ref[key]) and b[key].ndim == ref[key].ndim
        assert b[key].dtype.kind == ref[key].dtype.kind
    assert b.data.shape[1] == ref.data.shape[1] == 8 and b.data.shape[0] > ref.data.shape[0]
    assert len(b.vocabulary) == 40 and set(b.target) <= set(b.vocabulary)
    assert all(isinstance(c, tuple) and 1 <= len(c) <= 2 for c in b.contexts)
    assert "docstrings of Python" in b.DESCR and b.files[0].endswith(".py")
    for x, c in zip(b.data, b.contexts):
        assert np.array_equal(x, b.embeddings[c])
    X, y = load_text_ntp(corpus="stdlib-docstrings", return_X_y=True, **kw)
    np.testing.assert_array_equal(X, b.data)
    np.testing.assert_array_equal(y, b.target)
    few = load_text_ntp(corpus="stdlib-docstrings", n_sentences=300, **kw)
    assert few.data.shape[0] < b.data.shape[0] / 20


def test_three_word_contexts_reach_a_hundred_thousand():
    b = load_text_ntp(corpus="stdlib-docstrings", context_size=3, n_words=3000,
                      embedding="words", n_features=1)
    m = len(b.embeddings)
    assert len(set(b.contexts)) == m and 90_000 <= m <= 130_000
    assert len(set(b.target)) > 2_500
    if sys.version_info[:3] == (3, 11, 7):  # the docstring's figures
        assert (b.data.shape[0], m, len(set(b.target))) == (208_677, 105_782, 2_990)


def test_too_large_embeddings_are_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(text, "available_memory", lambda: 10**6)
    with pytest.raises(MemoryError, match=r"load_text_ntp: \d+ samples .* embedding='words'"):
        load_text_ntp(corpus="python", n_words=200, embedding="gaussian")
    load_text_ntp(corpus="sklearn", n_words=10, embedding="words", n_features=2)


# --------------------------------------------------------------------------
# Validation of the numeric arguments
# --------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, match", [
    ({"context_size": 1.5}, r"context_size must be a positive integer, not 1\.5 of type float"),
    ({"context_size": 2.0}, r"context_size must be a positive integer, not 2\.0 of type float"),
    ({"context_size": True}, "context_size must be a positive integer, not the boolean True"),
    ({"context_size": "2"}, "context_size must be a positive integer, not '2' of type str"),
    ({"n_words": 2.7}, r"n_words must be an integer at least 2, not 2\.7 of type float"),
    ({"n_words": np.float64(30)}, "n_words must be an integer at least 2, not"),
    ({"n_words": True}, "n_words must be an integer at least 2, not the boolean True"),
    ({"n_features": 2.5}, r"n_features must be None or a positive integer, not 2\.5"),
    ({"n_features": np.True_}, "n_features must be None or a positive integer, not the "
                               "boolean"),
    ({"n_sentences": 10.0}, r"n_sentences must be None or a positive integer, not 10\.0"),
    ({"n_sentences": False}, "n_sentences must be None or a positive integer, not the "
                             "boolean False"),
    ({"random_state": True}, "random_state must be None, an integer or a RandomState "
                             "instance, not the boolean True"),
])
def test_a_non_integer_is_refused_by_name(kwargs, match):
    with pytest.raises(TypeError, match=match) as info:
        load_text_ntp(**kwargs)
    assert isinstance(info.value, ValueError)  # as scikit-learn's InvalidParameterError


@pytest.mark.parametrize("kwargs, match", [
    ({"context_size": 0}, "context_size must be a positive integer, got 0"),
    ({"context_size": -2}, "context_size must be a positive integer, got -2"),
    ({"n_words": 1}, "n_words must be at least 2, got 1"),
    ({"n_features": 0}, "n_features must be a positive integer, got 0"),
    ({"n_sentences": 0}, "n_sentences must be a positive integer, got 0"),
    ({"corpus": "stdlib"}, "corpus must be one of 'sklearn', 'python', 'stdlib-docstrings'"),
    ({"corpus": ["python"]}, "corpus must be one of"),
    ({"embedding": "bert"}, "embedding must be 'gaussian', 'onehot' or 'words'"),
])
def test_a_value_out_of_range_is_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        load_text_ntp(**kwargs)


def test_integers_of_any_type_are_accepted():
    kw = {"n_words": 20, "embedding": "words", "n_sentences": 200}
    ref = load_text_ntp(context_size=2, n_features=3, **kw)
    for args in ({"context_size": np.int64(2), "n_features": np.int32(3)},
                 {"context_size": np.uint8(2), "n_features": np.int64(3)}):
        kw2 = {**kw, "n_words": np.int16(20), "n_sentences": np.int64(200)}
        b = load_text_ntp(**args, **kw2)
        np.testing.assert_array_equal(b.data, ref.data)
        assert b.contexts == ref.contexts
