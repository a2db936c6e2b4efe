"""The quickstart notebook runs from top to bottom (so it cannot rot)."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "examples" / "notebooks").glob("*.ipynb"))


def test_there_is_a_notebook():
    assert [p.name for p in NOTEBOOKS] == ["quickstart.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    # the kernel imports this checkout's skntp
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the inline backend shows figures
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "cos(W - W*, W^mm)" in text and "separable: True" in text
    assert "limit NTP-SVM" in text  # the progress of the limit solve (verbose=1)
    assert any(o.output_type == "display_data" and "image/png" in o.get("data", {})
               for o in outputs)
