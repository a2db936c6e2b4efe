"""Check surviving mutants against tests written after the mutmut run.

mutmut runs in its own worktree (its results are lost when a source file there changes),
so tests written for its survivors live in another checkout.  For each named mutant this
applies the diff that ``mutmut show`` prints to a scratch copy of that checkout, runs the
given tests there, and says whether they fail (the mutant is killed) or pass; the tests
must pass on the unmutated copy first, or the tool stops.  The diff is applied inside the
mutated function, with the diff's context lines where the removed lines occur there more
than once; one still not unique is reported as ambiguous and not run.

Usage (see docs/mutation.md)::

    python tools/check_mutants.py --mutmut-dir ../mut --tree . \\
        --file skntp/svm/_core.py --test tests/test_mutation_svm.py -k "fast_formulation" \\
        skntp.svm._core.x__solve_highs__mutmut_12 ...
"""

import argparse
import ast
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def mutant_diff(mutmut_dir, name, context=False):
    """``(removed, added)`` source text of one mutant, from ``mutmut show``; with
    ``context``, each with the diff's unchanged lines around it."""
    out = subprocess.run(["mutmut", "show", name], cwd=mutmut_dir, capture_output=True,
                         text=True, check=False).stdout
    lines = out.splitlines()
    if any(line.startswith("@@") for line in lines):
        lines = lines[next(i for i, line in enumerate(lines) if line.startswith("@@")) + 1:]
    keep = (" ", "-", "+") if context else ("-", "+")
    lines = [line for line in lines if line[:1] in keep and not line.startswith(("+++", "---"))]
    removed = "\n".join(line[1:] for line in lines if line[0] in " -")
    added = "\n".join(line[1:] for line in lines if line[0] in " +")
    return removed, added


def function_span(text, label):
    """``(start, end)`` of the mutated function's text (the whole text if not found).

    mutmut names a function ``x_NAME__mutmut_K`` and a method
    ``xǁCLASSǁNAME__mutmut_K``.
    """
    stem = label.rsplit("__mutmut_", 1)[0]
    parts = stem.split("ǁ")
    cls, func = (parts[1], parts[2]) if len(parts) == 3 else (None, stem[2:])
    tree = ast.parse(text)
    scope = tree.body
    if cls is not None:
        scope = next((n.body for n in scope if isinstance(n, ast.ClassDef) and n.name == cls),
                     [])
    node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == func), None)
    if node is None:
        return 0, len(text)
    offsets = [0]
    for line in text.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(line))
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return offsets[first - 1], offsets[node.end_lineno]


def _indented(text, by="    "):
    return "\n".join(by + line if line else line for line in text.split("\n"))


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
        cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
               *args.tests] + (["-k", args.k] if args.k else [])
        # the tests must pass on the code as it is, or every "killed" below is void
        base = subprocess.run(cmd, cwd=scratch, capture_output=True, text=True, check=False)
        if base.returncode:
            sys.exit(f"the tests fail without a mutant:\n{base.stdout[-2000:]}")
        for name in args.names:
            removed, added = mutant_diff(args.mutmut_dir, name)
            label = name.rsplit(".", 1)[-1]
            start, end = function_span(original, label)
            span = original[start:end]
            if removed and span.count(removed) > 1:  # the same line twice: add the context
                removed, added = mutant_diff(args.mutmut_dir, name, context=True)
            if removed and span.count(removed) != 1 and "ǁ" in label:
                # mutmut shows a method dedented: a diff of several lines needs the
                # class body's indentation back to be found
                removed, added = (_indented(removed), _indented(added))
            if not removed or span.count(removed) != 1:
                print(f"{label}: ambiguous", flush=True)
                continue
            target.write_text(original[:start] + span.replace(removed, added)
                              + original[end:])
            run = subprocess.run(cmd, cwd=scratch, capture_output=True, text=True,
                                 check=False)
            print(f"{label}: {'killed' if run.returncode else 'survived'}", flush=True)
        target.write_text(original)


if __name__ == "__main__":
    main()
