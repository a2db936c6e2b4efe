"""Test-suite configuration: the slow tier, deterministic randomness.

* ``--runslow`` runs the tests marked ``slow`` (figure reproductions, large
  sweeps); CI runs them (see the README's test command).
* Hypothesis runs the ``"deterministic"`` profile unless ``--hypothesis-profile``
  names another: derandomized (the examples are a function of the test's
  source, so every run, in CI or locally, tries the same ones), no example
  database, no deadline.  ``--hypothesis-profile=explore`` draws fresh random
  examples (``--hypothesis-seed=N`` to replay), for a local search for
  counterexamples.
* Every test starts with NumPy's global random state seeded, so an estimator
  left at ``random_state=None`` still fits the same model on every run.
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


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        # the slow tests first, so that pytest-xdist's workers do not end with one of
        # them running alone while the other has nothing left (a stable sort: every
        # worker must collect the same order)
        items.sort(key=lambda item: "slow" not in item.keywords)
        return
    skip = pytest.mark.skip(reason="slow: pass --runslow to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


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
