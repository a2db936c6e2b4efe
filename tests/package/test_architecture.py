"""The architecture page (``docs/user_guide/architecture.rst``) says what the code is.

* its module tree names every module of the package, and only existing ones;
* its estimator table lists every public estimator with its module and its size
  (code lines of the class body: no docstrings, comments or blank lines), and
  every estimator stays within 200 code lines over the base;
* its method table is the registry (``skntp.svm.solvers.METHODS``): every method,
  its module, its norms and the program classes whose ``auto`` order tries it;
* fewer than ten imports sit inside functions, besides those of the optional
  dependencies, numba and Python's help topics (the page says so).
"""

import ast
import csv
import inspect
import pathlib
import re
import textwrap

import skntp
from skntp.svm.solvers import AUTO_ORDER, METHODS

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "user_guide" / "architecture.rst"
MAX_ESTIMATOR_LINES = 200


def code_lines(cls):
    """Lines of the class body that are code: no docstring, comment or blank line."""
    src = textwrap.dedent(inspect.getsource(cls))
    tree = ast.parse(src).body[0]
    docstrings = set()
    for node in ast.walk(tree):
        if (isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and ast.get_docstring(node) is not None):
            first = node.body[0]
            docstrings.update(range(first.lineno, first.end_lineno + 1))
    return sum(1 for i, line in enumerate(src.splitlines()[1:], start=2)
               if line.strip() and not line.strip().startswith("#") and i not in docstrings)


def _csv_table(header):
    """The rows of the page's ``csv-table`` whose header starts with ``header``."""
    text = PAGE.read_text()
    at = text.index(f':header: "{header}"')
    rows = []
    for line in text[at:].splitlines()[1:]:
        if not line.strip():
            if rows:
                break
            continue
        if not line.startswith("   "):
            break
        rows.append(next(csv.reader([line.strip()], skipinitialspace=True)))
    return [[cell.strip("`") for cell in row] for row in rows]


def _tree_paths():
    """The files and folders of the page's module tree, as paths from the root."""
    text = PAGE.read_text()
    block = text[text.index("   skntp/\n"):text.index("\n\n", text.index("   skntp/\n"))]
    stack, paths = [], []
    for line in block.splitlines():
        match = re.match(r"^( +)(\S+)", line)
        name = match.group(2)
        if not re.fullmatch(r"[\w.]+/?", name) or not (name.endswith((".py", "/"))):
            continue  # a continuation of a description
        depth = (len(match.group(1)) - 3) // 2
        del stack[depth:]
        stack.append(name.rstrip("/"))
        paths.append("/".join(stack))
    return paths


def test_the_module_tree_is_the_package():
    listed = set(_tree_paths())
    for path in listed:
        assert (ROOT / path).exists(), f"the architecture page lists {path}, which is gone"
    package = ROOT / "skntp"
    for module in package.rglob("*.py"):
        rel = module.relative_to(ROOT).as_posix()
        folder = module.parent.relative_to(ROOT).as_posix()
        listed_in_full = {p.rsplit("/", 1)[0] for p in listed if p.endswith(".py")}
        if module.name == "__init__.py" and folder != "skntp/svm/solvers":
            continue
        # a folder listed without its files (datasets/) stands for them
        if folder in listed_in_full or folder == "skntp":
            assert rel in listed, f"{rel} is missing from the architecture page's tree"


def test_the_estimator_table_is_the_estimators():
    estimators = {name: getattr(skntp, name) for name in skntp.__all__
                  if isinstance(getattr(skntp, name), type)}
    rows = _csv_table("estimator")
    want = sorted([name, cls.__module__, str(code_lines(cls))]
                  for name, cls in estimators.items())
    assert sorted(rows) == want, (
        "update the estimator table of docs/user_guide/architecture.rst to:\n"
        + "\n".join(f'   "``{n}``", "``{m}``", "{c}"' for n, m, c in want))
    for name, cls in estimators.items():
        assert code_lines(cls) <= MAX_ESTIMATOR_LINES, (name, code_lines(cls))


def test_the_method_table_is_the_registry():
    rows = _csv_table("method")
    want = []
    for name, method in METHODS.items():
        classes = [c for c, names in AUTO_ORDER.items() if name in names]
        want.append([name, method.solve.__module__.rsplit(".", 1)[1], ", ".join(method.norms),
                     ", ".join(classes) or "by name only"])
    assert rows == want, (
        "update the method table of docs/user_guide/architecture.rst to:\n"
        + "\n".join('   "``{}``", "``{}``", "{}", "{}"'.format(*w) for w in want))


#: The modules imported inside functions on purpose: the optional dependencies,
#: numba (compiled on first use) and Python's help topics (one corpus).
LAZY_IMPORTS = ("torch", "sklearn.externals.array_api_compat", "matplotlib", "tqdm", "dask",
                "numba", "pydoc_data")
MAX_OTHER_INNER_IMPORTS = 9


def inner_imports():
    """``(path:line, module)`` of every import inside a function of the package that
    is not of :data:`LAZY_IMPORTS`."""
    found = []
    for path in sorted((ROOT / "skntp").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = ["." * node.level + (node.module or "")]
                else:
                    continue
                for name in names:
                    if not any(name == lazy or name.startswith(lazy + ".")
                               for lazy in LAZY_IMPORTS):
                        found.append((f"{path.relative_to(ROOT)}:{node.lineno}", name))
    return sorted(set(found))


def test_few_imports_inside_functions():
    found = inner_imports()
    assert len(found) <= MAX_OTHER_INNER_IMPORTS, (
        "imports inside functions (hoist them to the module's top):\n"
        + "\n".join(f"{where} {name}" for where, name in found))
