"""Run named mutants of a mutmut worktree against chosen test files, in forked children.

mutmut runs every test that calls a mutated function; for the entry points of the
training loop that is several hundred tests and about two minutes a mutant.  This
runs a narrower set first (the module's own tests): it imports the mutated package
and the tests once, forks one child per mutant with ``MUTANT_UNDER_TEST`` set (as
mutmut does) and records ``killed`` (a test failed), ``survived`` or ``timeout``.
The survivors are then run against wider sets, or classified by hand.

Run it from the worktree's ``mutants/`` directory, on tests that pass on the code
mutmut mutated (those of the worktree, not newer ones)::

    cd ../mut4/mutants
    python ../../main/tools/run_mutants.py NAMES.txt OUT.txt tests/test_optim.py

``NAMES.txt`` holds one mutant name per line (``skntp._optim.x__descend__mutmut_61``);
results are appended to ``OUT.txt``, one ``name: verdict (exit code)`` per line.
"""

import argparse
import os
import signal
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", help="file with one mutant name per line")
    parser.add_argument("out", help="file the verdicts are appended to")
    parser.add_argument("tests", nargs="+", help="test files or node ids")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds before a mutant counts as a timeout")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.getcwd())
    import mutmut  # noqa: F401  (tests/conftest.py: Clarabel on one thread under mutmut)
    import pytest

    import skntp

    if not skntp.__file__.startswith(os.getcwd()):
        sys.exit(f"skntp comes from {skntp.__file__}: run this from the mutants/ directory")
    names = [line.strip() for line in open(args.names) if line.strip()]
    pytest_args = ["-x", "-q", "-p", "no:cacheprovider", "-W", "ignore", "--no-header",
                   *args.tests]
    os.environ.pop("MUTANT_UNDER_TEST", None)
    if pytest.main(pytest_args + ["--co", "-q"]):  # import the test modules once, here
        sys.exit("the tests cannot be collected")

    def run(name):
        pid = os.fork()
        if pid == 0:
            os.environ["MUTANT_UNDER_TEST"] = name
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            os._exit(pytest.main(pytest_args))
        start = time.monotonic()
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() - start > args.timeout:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return None
            time.sleep(0.05)

    # a name no trampoline knows: the tests must pass, or every "killed" is void
    if run("none.none") != 0:
        sys.exit("the tests fail without a mutant")
    with open(args.out, "a") as out:
        for name in names:
            code = run(name)
            verdict = "timeout" if code is None else ("survived" if code == 0 else "killed")
            print(f"{name}: {verdict} ({code})", file=out, flush=True)


if __name__ == "__main__":
    main()
