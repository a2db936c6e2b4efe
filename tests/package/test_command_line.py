"""The command line (``skntp`` / ``python -m skntp``): a wrong argument is one argparse
error line naming it, exit status 2, before anything is computed; ``--version``; the
program's name as it was called; ``--plot`` checked before the reproduction runs."""

import importlib
import re
import runpy
import sys
from pathlib import Path

import pytest

import skntp
import skntp.__main__ as cli
from skntp import NTPDecoderClassifier, _reproduce
from skntp.datasets import make_ntp_data

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def nothing_computed(monkeypatch):
    """The demo's fits and every reproduction fail the test if they are reached."""

    def computed(*args, **kwargs):
        raise AssertionError("computed before the arguments were checked")

    monkeypatch.setattr(cli, "demo_table", computed)
    monkeypatch.setattr(_reproduce, "run", computed)


BAD = [
    (["demo", "--max-iter", "0"], "--max-iter", "must be >= 1, got 0"),
    (["demo", "--max-iter", "-5"], "--max-iter", "must be >= 1, got -5"),
    (["demo", "--max-iter", "1.5"], "--max-iter", "expected an integer, got '1.5'"),
    (["demo", "--seed", "-1"], "--seed", "between 0 and 4294967295, got -1"),
    (["demo", "--seed", str(2**32)], "--seed", "between 0 and 4294967295"),
    (["demo", "--seed", "abc"], "--seed", "expected an integer"),
    (["reproduce", "ntp-fig1", "--seed", "-2"], "--seed", "between 0 and 4294967295"),
    (["reproduce", "no-such-figure"], "NAME", "invalid choice: 'no-such-figure'"),
    (["reproduce", "ntp-real-text", "--quick", "--plot", "/nonexistent/x.png"], "--plot",
     "the folder '/nonexistent' does not exist"),
    (["reproduce", "ntp-fig1", "--plot", "{tmp}/figure.foo"], "--plot",
     "has '.foo'; name the figure with one of ."),
    (["reproduce", "ntp-fig1", "--plot", "{tmp}/figure"], "--plot", "has no extension"),
    (["reproduce", "ntp-fig1", "--plot", "{tmp}"], "--plot", "is a folder, not a file name"),
]


@pytest.mark.parametrize(("argv", "argument", "message"), BAD,
                         ids=[" ".join(a[:3]) + f"-{k}" for k, (a, _, _) in enumerate(BAD)])
def test_a_wrong_argument_is_one_line_naming_it_before_any_computation(
        argv, argument, message, tmp_path, capsys, nothing_computed):
    if "--plot" in argv:
        pytest.importorskip("matplotlib")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert lines[0].startswith("usage: skntp ")
    assert "Traceback" not in err
    error = lines[-1]
    assert error.startswith(f"skntp {argv[0]}: error: argument {argument}: "), error
    assert message in error, error
    assert list(tmp_path.iterdir()) == []  # the --plot check left nothing behind


def test_a_folder_that_cannot_be_written_is_refused(tmp_path, monkeypatch, capsys,
                                                   nothing_computed):
    pytest.importorskip("matplotlib")

    def refused(*args, **kwargs):  # what the OS says (root may write anywhere, so fake it)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cli.tempfile, "NamedTemporaryFile", refused)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["reproduce", "ntp-fig1", "--plot", str(tmp_path / "fig.png")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"skntp reproduce: error: argument --plot: cannot write into the folder "
        f"'{tmp_path}': Permission denied")


def test_a_writable_plot_path_is_accepted_and_left_as_it_was(tmp_path):
    pytest.importorskip("matplotlib")
    for name in ("fig.png", "fig.PDF", "fig.svg"):
        assert cli.plot_path(str(tmp_path / name)) == str(tmp_path / name)
    existing = tmp_path / "old.png"
    existing.write_bytes(b"old")
    assert cli.plot_path(str(existing)) == str(existing)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.png"]  # no probe left


def test_a_figure_that_cannot_be_saved_after_all_is_one_line_and_status_1(
        tmp_path, monkeypatch, capsys):
    plt = pytest.importorskip("matplotlib.pyplot")

    def broken():  # saving fails after the numbers are computed (a disk filled up)
        fig = plt.figure()
        fig.savefig = lambda *a, **k: (_ for _ in ()).throw(OSError(28, "No space left"))
        return fig

    monkeypatch.setitem(_reproduce.REPRODUCTIONS, "fake",
                        lambda seed, quick: _reproduce.Reproduction("the table", {}, broken))
    opened = plt.get_fignums()
    assert _reproduce.run("fake", plot=str(tmp_path / "fig.png")) == 1
    out, err = capsys.readouterr()
    assert out == "the table\n"
    assert err == f"error: the figure could not be saved to '{tmp_path}/fig.png': " \
                  "No space left\n"
    assert plt.get_fignums() == opened  # the figure was closed


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"skntp {skntp.__version__}\n"


def _called(monkeypatch, capsys, run, *argv):
    """``(exit status, stdout, stderr)`` of ``run()`` with ``sys.argv[1:] = argv``."""
    monkeypatch.setattr(sys, "argv", ["program", *argv])
    with pytest.raises(SystemExit) as exit_:
        run()
    return (exit_.value.code, *capsys.readouterr())


def test_the_program_names_itself_as_it_was_called(monkeypatch, capsys):
    """``python -m skntp`` says so; the console script of pyproject.toml says ``skntp``."""
    # what `python -m skntp` runs (runpy), in this process: skntp/__main__.py as __main__
    monkeypatch.delitem(sys.modules, "skntp.__main__")

    def as_module():
        runpy.run_module("skntp", run_name="__main__", alter_sys=True)

    assert _called(monkeypatch, capsys, as_module, "--version") == (
        0, f"python -m skntp {skntp.__version__}\n", "")
    status, out, err = _called(monkeypatch, capsys, as_module, "demo", "--seed", "-1")
    assert (status, out) == (2, "")
    assert err.splitlines()[0].startswith("usage: python -m skntp demo ")
    assert err.splitlines()[-1].startswith("python -m skntp demo: error: argument --seed: ")
    # the wrapper pip writes for [project.scripts] skntp = "module:function"
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    module, function = re.search(r'^skntp = "([\w.]+):(\w+)"$', pyproject, re.M).groups()

    def as_script():
        sys.exit(getattr(importlib.import_module(module), function)())

    status, out, err = _called(monkeypatch, capsys, as_script, "demo", "--max-iter", "0")
    assert (status, out) == (2, "")
    assert err.splitlines()[0].startswith("usage: skntp demo ")
    assert err.splitlines()[-1].startswith("skntp demo: error: argument --max-iter: ")
    assert _called(monkeypatch, capsys, as_script, "--version")[:2] == (
        0, f"skntp {skntp.__version__}\n")


def test_the_extreme_seeds_and_iterations_reach_the_computation(monkeypatch):
    called = []

    def demo_table(max_iter, seed):
        called.append((max_iter, seed))
        raise KeyboardInterrupt  # stop here: the arguments were accepted

    monkeypatch.setattr(cli, "demo_table", demo_table)
    for argv in (["demo", "--seed", str(cli.MAX_SEED), "--max-iter", "1"], ["demo"]):
        with pytest.raises(KeyboardInterrupt):
            cli.main(argv)
    assert called == [(1, cli.MAX_SEED), (10_000, 0)]
    # and the largest seed is one the data and the estimators accept
    X, y = make_ntp_data(n_samples=60, n_contexts=6, n_features=8, n_tokens=4,
                         support_size=2, random_state=cli.MAX_SEED)
    NTPDecoderClassifier(max_iter=1, random_state=cli.MAX_SEED, compute_limits=False).fit(X, y)
