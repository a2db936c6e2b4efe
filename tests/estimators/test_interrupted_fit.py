"""A refit interrupted at any line (``KeyboardInterrupt``) leaves the previous fit intact."""

import gc
import os
import pickle
import sys

import numpy as np
import pytest

import skntp
from skntp import KeyQuerySelector, NTPDecoderClassifier
from skntp.datasets import make_key_query_data, make_ntp_data

PACKAGE = os.path.dirname(skntp.__file__)


class _InterruptAt:
    """A tracer that raises KeyboardInterrupt at the ``k``-th line run in skntp's code."""

    def __init__(self, k):
        self.k, self.seen = k, 0

    def __call__(self, frame, event, arg):
        if not frame.f_code.co_filename.startswith(PACKAGE):
            return None
        if event == "line":
            self.seen += 1
            if self.seen == self.k:
                raise KeyboardInterrupt
        return self


def _lines_of_a_fit(est, X, y):
    counter = _InterruptAt(-1)
    previous = sys.gettrace()  # coverage's tracer under --cov: put it back after
    sys.settrace(counter)
    try:
        est.fit(X, y)
    finally:
        sys.settrace(previous)
    return counter.seen


def _cases():
    X, y = make_ntp_data(n_samples=200, n_contexts=6, n_features=8, n_tokens=4,
                         support_size=2, random_state=0)
    yield ("decoder", NTPDecoderClassifier(solver="gd", max_iter=3, random_state=0),
           X, y, X[:150], y[:150])
    data = make_key_query_data(4, 4, 4, random_state=0)
    est = KeyQuerySelector(head=data.head, query_index=data.query_index,
                           parameterization="KQ", solver="ngd", max_iter=3,
                           classes=[-1, 1], random_state=0)
    yield "key-query selector", est, data.X, data.y, data.X[:3], data.y[:3]


# An interrupt at the line event of a ``with`` statement's exit (the line of the ``with``,
# traced again before its __exit__) skips the __exit__: a file read there (/proc/meminfo,
# available_memory) is closed by the garbage collector with a ResourceWarning, which is no
# part of the estimator's state.  Ignored for the whole test, and collected before it ends
# (in a later test it would be an error: PytestUnraisableExceptionWarning).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.parametrize("case", list(_cases()), ids=lambda c: c[0])
def test_a_refit_interrupted_at_any_line_keeps_the_previous_fit(case):
    _, est, X, y, X2, y2 = case
    est.fit(X, y)
    before = pickle.dumps(est.__dict__)
    before_estimator = pickle.dumps(est)
    prediction = est.predict(X)
    n = _lines_of_a_fit(pickle.loads(pickle.dumps(est)), X2, y2)
    assert n > 100
    # every line of the first 150 (validation, the swap), then 100 spread over the rest
    points = sorted(set(range(1, min(n, 150))) | set(np.linspace(150, n, 100, dtype=int)))
    done = pickle.loads(pickle.dumps(est)).fit(X2, y2)  # the refit, not interrupted
    finished = 0
    previous = sys.gettrace()
    for k in points:
        sys.settrace(_InterruptAt(k))
        try:
            with pytest.raises(KeyboardInterrupt):
                est.fit(X2, y2)
        finally:
            sys.settrace(previous)
        if pickle.dumps(est.__dict__) == before:
            continue
        # else the refit had completed (the interrupt hit its last lines, after the
        # new state was published): all of it, then
        assert sorted(vars(est)) == sorted(vars(done)), f"line event {k} of {n}"
        np.testing.assert_array_equal(est.predict(X), done.predict(X))
        finished += 1
        est = pickle.loads(before_estimator)
    gc.collect()  # the interrupted fits' files, while ResourceWarning is ignored
    assert finished <= 5
    np.testing.assert_array_equal(est.predict(X), prediction)
