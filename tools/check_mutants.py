"""Check surviving mutants against tests written after the mutmut run.

mutmut runs in its own worktree (its results are lost when a source file there changes),
so tests written for its survivors live in another checkout.  For each named mutant this
applies the diff that ``mutmut show`` prints to a scratch copy of that checkout, runs the
given tests there, and says whether they fail (the mutant is killed) or pass.  A diff
whose removed lines occur more than once in the file is reported as ambiguous and not run.

Usage (see docs/mutation.md)::

    python tools/check_mutants.py --mutmut-dir ../mut --tree . \\
        --file skntp/svm/_core.py --test tests/test_mutation_svm.py -k "fast_formulation" \\
        skntp.svm._core.x__solve_highs__mutmut_12 ...
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def mutant_diff(mutmut_dir, name):
    """``(removed, added)`` source text of one mutant, from ``mutmut show``."""
    out = subprocess.run(["mutmut", "show", name], cwd=mutmut_dir, capture_output=True,
                         text=True, check=False).stdout
    lines = [line for line in out.splitlines()
             if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    removed = "\n".join(line[1:] for line in lines if line[0] == "-")
    added = "\n".join(line[1:] for line in lines if line[0] == "+")
    return removed, added


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutmut-dir", required=True, help="the worktree mutmut ran in")
    parser.add_argument("--tree", default=".", help="the checkout with the new tests")
    parser.add_argument("--file", required=True, help="the mutated file, relative path")
    parser.add_argument("-k", default=None, help="pytest -k expression")
    parser.add_argument("--test", action="append", required=True, dest="tests",
                        help="a test file to run (repeat for more)")
    parser.add_argument("names", nargs="+", help="mutant names, as mutmut lists them")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        for part in ("skntp", "tests", "pyproject.toml"):
            src = Path(args.tree, part)
            if src.is_dir():
                shutil.copytree(src, Path(scratch, part),
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(src, Path(scratch, part))
        target = Path(scratch, args.file)
        original = target.read_text()
        for name in args.names:
            removed, added = mutant_diff(args.mutmut_dir, name)
            label = name.rsplit(".", 1)[-1]
            if not removed or original.count(removed) != 1:
                print(f"{label}: ambiguous", flush=True)
                continue
            target.write_text(original.replace(removed, added))
            cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                   *args.tests] + (["-k", args.k] if args.k else [])
            run = subprocess.run(cmd, cwd=scratch, capture_output=True, text=True,
                                 check=False)
            print(f"{label}: {'killed' if run.returncode else 'survived'}", flush=True)
        target.write_text(original)


if __name__ == "__main__":
    main()
