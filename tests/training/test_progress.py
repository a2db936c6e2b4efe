"""Progress of fits: plain lines in logs, redraws on terminals, tqdm, and the limit solve."""

import io

import numpy as np
import pytest

from skntp import AttentionSelector, JointAttentionSVM, NTPAttentionClassifier
from skntp._progress import (
    LimitProgress,
    ProgressBar,
    close_progress,
    make_limit_progress,
    make_progress,
)
from skntp.datasets import make_attention_fig1a, make_joint_fig3, make_token_priority_data


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_log_stream_gets_occasional_full_lines():
    log = io.StringIO()
    bar = ProgressBar(1000, desc="gd", stream=log, line_interval=3600.0)
    for k in range(1, 1001):
        bar(k, 1.0 / k)
    text = log.getvalue()
    # no carriage returns, and only the last iteration within an hour
    assert "\r" not in text and text.count("\n") == 1 and "1000/1000" in text
    log = io.StringIO()
    bar = ProgressBar(50, stream=log, line_interval=0.0)
    for k in range(1, 21):
        bar(k, 1.0)
    bar.close()  # stopped early: the last state once more, marked as stopped
    lines = log.getvalue().splitlines()
    assert len(lines) == 20 and "20/50" in lines[-1] and "eta" in lines[0]


def test_stopped_run_writes_its_last_state_on_close():
    log = io.StringIO()
    bar = ProgressBar(100, stream=log, line_interval=3600.0)
    for k in range(1, 8):
        bar(k, 0.5)
    assert log.getvalue() == ""
    bar.close()
    assert "7/100" in log.getvalue() and "(stopped)" in log.getvalue()
    bar.close()  # idempotent
    assert log.getvalue().count("\n") == 1


def test_limit_progress_adds_up_successive_solves():
    log = io.StringIO()
    cb = LimitProgress("limit X", stream=log, line_interval=3600.0)
    for it in (0, 50, 100):
        cb(it, 1e-3 / (it + 1), 1e-6)
    for it in (0, 20):  # a second solve (fallback method, or a second program)
        cb(it, 1e-9, 1e-12)
    cb.close()
    text = log.getvalue()
    assert text.count("\n") == 1 and "limit X: it=120" in text and "gap=1.00e-09" in text


def test_make_progress_styles():
    assert make_limit_progress(0) is None and make_progress(0, 10) is None
    assert isinstance(make_progress(1, 10, stream=io.StringIO()), ProgressBar)
    assert isinstance(make_limit_progress(1, stream=io.StringIO()), LimitProgress)
    with pytest.raises(ValueError, match="style"):
        make_progress(1, 10, style="fancy")


def test_tqdm_bars():
    pytest.importorskip("tqdm")
    term = _Terminal()
    bar = make_progress(1, 200, desc="ngd", stream=term)  # a terminal: tqdm
    assert not isinstance(bar, ProgressBar)
    for k in range(1, 201):
        bar(k, 1.0 / k, {"alignment": 0.9})
    close_progress(bar)
    text = term.getvalue()
    assert "200/200" in text and "100%" in text and "cos(w,mm)=0.9000" in text
    term = _Terminal()
    cb = make_limit_progress(1, desc="limit NTP-SVM", stream=term, style="tqdm")
    for it in (0, 10, 30):
        cb(it, 1e-9, 1e-12)
    close_progress(cb)
    assert "limit NTP-SVM" in term.getvalue() and "gap=1.00e-09" in term.getvalue()


def test_every_estimator_reports_its_limit_solve(capsys):
    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=3)
    NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=20, verbose=1).fit(X, y)
    err = capsys.readouterr().err
    assert "limit Graph-SVM: it=" in err and "20/20" in err
    d = make_attention_fig1a()
    AttentionSelector(d.head, d.key_query, classes=[-1, 1], max_iter=20,
                      verbose=1).fit(d.X, d.y)
    assert "limit ATT-SVM (GMM): it=" in capsys.readouterr().err
    Xj, yj, P = make_joint_fig3("b", return_params=True)
    JointAttentionSVM(max_iter=200, init=(P.head_init, P.query_init),
                      verbose=1).fit(Xj, yj)
    err = capsys.readouterr().err
    assert "limit head SVM: it=" in err and "limit ATT-SVM of the selected tokens: it=" in err
    JointAttentionSVM(solver="svm", verbose=1).fit(Xj, yj)
    err = capsys.readouterr().err
    assert "limit joint SVM: it=" in err and "\r" not in err
    NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=20).fit(X, y)
    assert capsys.readouterr().err == ""


def test_progress_does_not_change_the_fit():
    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=3)
    quiet = NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=30).fit(X, y)
    loud = NTPAttentionClassifier(E, solver="ngd", lr=0.01, max_iter=30,
                                  verbose=1).fit(X, y)
    np.testing.assert_array_equal(quiet.coef_, loud.coef_)


def test_regularization_path_draws_no_dangling_descent_bar(capsys):
    from skntp import NTPDecoderClassifier
    from skntp.datasets import make_ntp_data

    X, y = make_ntp_data(n_samples=100, n_contexts=5, n_features=8, n_tokens=4,
                         support_size=2, random_state=1)
    NTPDecoderClassifier(solver="regpath", max_iter=20, path_radii=[1.0, 2.0],
                         verbose=1).fit(X, y)
    err = capsys.readouterr().err
    assert "limit NTP-SVM: it=" in err and "regpath" not in err


def test_the_finite_component_of_data_that_are_not_separable_shows_progress(capsys):
    from skntp import NTPDecoderClassifier
    from skntp.datasets import load_text_ntp

    X, y = load_text_ntp(corpus="python", n_words=30, embedding="words", n_features=4,
                         return_X_y=True)
    est = NTPDecoderClassifier(solver="svm", verbose=1).fit(X, y)
    err = capsys.readouterr().err
    assert not est.is_ntp_separable_ and est.separable_fraction_ == 0.0
    assert "limit W_fin (gap: relative gradient): it=" in err
    # every phase says what it does and what it found
    assert "the in-support log-odds equations" in err and "NTP_H-compatible: False" in err
    assert ("separability: 0 of" in err and "margin rows separable, certified (positive "
            "spanning)" in err)
    NTPDecoderClassifier(solver="svm").fit(X, y)
    assert capsys.readouterr().err == ""


def test_the_compatibility_of_data_whose_finite_part_is_w_fin_may_be_unknown(monkeypatch,
                                                                             capsys):
    # where W_fin replaces the log-odds equations' solution only their verdict is used:
    # an LSQR that stops on its iterations above the residual threshold says "unknown"
    # (None)
    import functools

    from skntp import NTPDecoderClassifier, decoder
    from skntp.datasets import load_text_ntp
    from skntp.svm import log_odds_solvable

    X, y = load_text_ntp(corpus="python", n_words=30, embedding="words", n_features=4,
                         return_X_y=True)
    full = NTPDecoderClassifier(solver="svm").fit(X, y)
    assert full.is_ntp_compatible_ is False
    monkeypatch.setattr(decoder, "log_odds_solvable",
                        functools.partial(log_odds_solvable, max_iter=1))
    est = NTPDecoderClassifier(solver="svm", verbose=1).fit(X, y)
    assert est.is_ntp_compatible_ is None
    assert "NTP_H-compatible: unknown (LSQR stopped on its iterations" in capsys.readouterr().err
    np.testing.assert_array_equal(est.finite_component_, full.finite_component_)


def test_the_decoders_phases_are_logged_at_info_when_quiet(caplog):
    import logging

    from skntp import NTPDecoderClassifier
    from skntp.datasets import load_text_ntp

    X, y = load_text_ntp(corpus="python", n_words=30, embedding="words", n_features=4,
                         return_X_y=True)
    with caplog.at_level(logging.INFO, logger="skntp"):
        NTPDecoderClassifier(solver="svm").fit(X, y)
    said = [r.getMessage() for r in caplog.records]
    assert any("log-odds equations" in m for m in said) and any("separability: " in m for m in said)
