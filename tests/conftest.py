"""Test-suite configuration: the slow tier, deterministic randomness.

* ``--runslow`` runs the tests marked ``slow`` (figure reproductions, large
  sweeps); CI runs them (see the README's test command).  The run then starts
  with the longest tests (``LONGEST``, a measured 2-core CI run) and ends with
  the short ones, and pytest-xdist's ``load`` scheduling hands the tests out
  one at a time (``--maxschedchunk=1`` unless given): by default its first
  chunk is a quarter of a worker's share of the collection, consecutive
  tests, so one worker got every long test of the front and ran them alone,
  minutes after the other had finished.
* Hypothesis runs the ``"deterministic"`` profile unless ``--hypothesis-profile``
  names another: derandomized (the examples are a function of the test's
  source, so every run, in CI or locally, tries the same ones), no example
  database, no deadline.  ``--hypothesis-profile=explore`` draws fresh random
  examples (``--hypothesis-seed=N`` to replay), for a local search for
  counterexamples.
* Every test starts with NumPy's global random state seeded, so an estimator
  left at ``random_state=None`` still fits the same model on every run.
* Warnings are errors (``filterwarnings`` in ``pyproject.toml``, with its
  commented exceptions): a test that provokes one says so with ``pytest.warns``.
  Every test ends with the matplotlib figures it left open closed.
* ``--cov-fail-under-lines=L --cov-fail-under-branches=B`` (with pytest-cov's
  ``--cov``) print the line and the branch coverage of the run separately and
  fail it when either is below its goal (coverage's own ``fail_under`` only
  sees their combined total).
* Under mutmut, Clarabel runs on one thread (``max_threads=1`` unless a test
  sets it).  mutmut runs the suite once in its own process and then forks a
  child per mutant; Clarabel's Rayon thread pool does not survive the fork, so
  a child's first factorization large enough to go parallel waits forever on
  the parent's threads, and mutmut reports the mutant as a timeout, counted as
  killed, whatever the tests would have said (docs/mutation.md, run 8).
"""

import json
import os
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "deterministic", derandomize=True, database=None, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore", derandomize=False, database=None, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("deterministic")


def _clarabel_on_one_thread():
    from cvxpy.reductions.solvers.conic_solvers.clarabel_conif import CLARABEL

    parse = CLARABEL.parse_solver_opts

    def parse_solver_opts(verbose, opts, settings=None):
        return parse(verbose, {"max_threads": 1, **opts}, settings)

    CLARABEL.parse_solver_opts = staticmethod(parse_solver_opts)


if "mutmut" in sys.modules:
    _clarabel_on_one_thread()


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="run tests marked slow (figure reproductions, sweeps)")
    parser.addoption("--cov-fail-under-lines", type=float, default=None, metavar="PERCENT",
                     help="fail if the line coverage of --cov is below PERCENT")
    parser.addoption("--cov-fail-under-branches", type=float, default=None,
                     metavar="PERCENT",
                     help="fail if the branch coverage of --cov is below PERCENT")


# The longest tests of the run with --runslow: roughly the seconds of one call in a CI
# run (2 cores, -n auto, coverage on; the clean-clone run of 434796a); only their order
# matters.  A prefix names every parametrization of a test.
LONGEST = {
    "tests/package/test_docs.py::test_docs_build_with_gallery": 185,
    "tests/estimators/test_key_query.py::test_goal_over_100_seeds[KQ-": 95,
    "tests/svm/test_certificate.py::test_the_thousand_context_max_norm_program_is_c": 85,
    "tests/estimators/test_key_query.py::test_goal_over_100_seeds[W-": 40,
    "tests/estimators/test_reliability.py::test_extreme_norms_1e5[joint-": 35,
    "tests/svm/test_certificate.py::test_max_norm_programs_of_a_few_hundred_contexts": 30,
    "tests/estimators/test_attention.py::test_fig9_reproduction_full": 34,
    "tests/estimators/test_key_query.py::test_relu_head_limit_over_many_runs": 25,
    "tests/estimators/test_reliability.py::test_extreme_norms_1e5[decoder-soft": 18,
    "tests/training/test_optimizer_limits.py::test_optimizer_norm_matrix_over_seeds": 16,
    "tests/svm/solvers/test_accelerated_dual.py::test_matches_cvxpy_many": 15,
    "tests/package/test_examples.py::test_reproduction_quick": 15,
    "tests/estimators/test_joint.py::test_fig3_with_10000_steps": 14,
    # default-tier tests as long as slow ones, which must not come last either
    "tests/package/test_readme.py::test_readme_snippet_runs_as_written": 13,
    "tests/estimators/test_key_query.py::test_regularization_path_of_the_factors_conv": 13,
    "tests/package/test_demo.py::test_every_row_of_the_demo_is_what_its_label_says": 12,
    "tests/estimators/test_decoder.py::test_ngd_and_adam_converge_faster_than_gd_at_t": 12,
}


def _expected_seconds(item):
    """``LONGEST``'s seconds for the item, 1 for another slow test, 0 for the others."""
    for prefix, seconds in LONGEST.items():
        if item.nodeid.startswith(prefix):
            return seconds
    return 1 if "slow" in item.keywords else 0


def pytest_configure(config):
    # pytest-xdist's "load" scheduling sends a worker its first quarter of a share of
    # consecutive tests at once, and no worker takes a test sent to another: one at a
    # time instead, so that the short tests at the end fill the worker that is free
    if (config.getoption("--runslow") and getattr(config.option, "dist", "no") == "load"
            and getattr(config.option, "maxschedchunk", 0) is None):
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        # the longest tests first, the short ones last, so that pytest-xdist's workers
        # do not end with one long test running alone while the other has nothing left
        # (a stable sort: every worker must collect the same order)
        items.sort(key=lambda item: -_expected_seconds(item))
        return
    skip = pytest.mark.skip(reason="slow: pass --runslow to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _close_figures():
    """Close the matplotlib figures a test leaves open.

    pyplot keeps every figure until it is closed, and past 20 open figures it warns
    (a RuntimeWarning, an error under the suite's ``filterwarnings``) in whichever
    later test of the same worker opens the next one.
    """
    yield
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")


@pytest.fixture(autouse=True)
def _seed_global_random_state():
    """Seed NumPy's global RandomState (``check_random_state(None)``) for every test."""
    # the legacy global state is what scikit-learn's check_random_state(None) draws from
    state = np.random.get_state()  # noqa: NPY002
    np.random.seed(0)  # noqa: NPY002
    yield
    np.random.set_state(state)  # noqa: NPY002


def _line_and_branch_coverage(cov):
    """``(lines %, branches %)`` of a finished ``coverage.Coverage`` (its JSON totals)."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        cov.json_report(outfile=path)
        with open(path, encoding="utf-8") as f:
            totals = json.load(f)["totals"]
    finally:
        os.remove(path)
    lines = 100.0 * totals["covered_lines"] / max(1, totals["num_statements"])
    branches = 100.0 * totals["covered_branches"] / max(1, totals["num_branches"])
    return lines, branches


_COVERAGE_REPORT = []


def pytest_sessionfinish(session, exitstatus):
    # pytest-cov has stopped and combined its data (at the end of the test loop)
    config = session.config
    goals = {"lines": config.getoption("--cov-fail-under-lines"),
             "branches": config.getoption("--cov-fail-under-branches")}
    if (all(g is None for g in goals.values()) or config.option.collectonly
            or hasattr(config, "workerinput")):  # a pytest-xdist worker: the controller decides
        return
    plugin = config.pluginmanager.getplugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    if controller is None or controller.cov is None:
        _COVERAGE_REPORT.append("ERROR: --cov-fail-under-lines/-branches need --cov")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    measured = dict(zip(("lines", "branches"), _line_and_branch_coverage(controller.cov)))
    _COVERAGE_REPORT.append("coverage of the run: " + ", ".join(
        f"{k} {measured[k]:.2f} %" + (f" (goal {goals[k]:g} %)" if goals[k] is not None else "")
        for k in ("lines", "branches")))
    for key, goal in goals.items():
        if goal is not None and measured[key] < goal:
            _COVERAGE_REPORT.append(f"ERROR: {key} coverage {measured[key]:.2f} % is below "
                                    f"the goal of {goal:g} %")
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter):
    for line in _COVERAGE_REPORT:
        terminalreporter.write_line(line, bold=True, red=line.startswith("ERROR"))
