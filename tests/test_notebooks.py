"""The notebooks of notebooks/ run: each one executed top to bottom in a fresh Jupyter kernel (nbclient), as a
reader would run it, from a copy in a temporary folder, so that its runs (``paths.log_dir=outputs``, relative to
the notebook) and any other file it writes land there and never in the checkout. The kernel runs one torch
thread, as every test here does (a worker per core). Each notebook is also stored with the outputs of a real
run, for a reader on GitHub: every code cell executed, none failed.

Needs the ``notebook`` extra (``pip install -e ".[notebook]"``, part of ``.[dev]``)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# those that train a run (02: 300 steps; 03: 600; 04: 500, then a sparse autoencoder) take 20-60 s each on 2 cores;
# 01 (about 10 s) trains nothing
QUICK = {"01_build_a_transformer"}
CELL_TIMEOUT = 600  # seconds for any one cell: the training cells take under a minute on 2 cores
MISSING = [name for name in ("nbclient", "nbformat", "ipykernel") if importlib.util.find_spec(name) is None]
needs_jupyter = pytest.mark.skipif(bool(MISSING), reason='the notebook extra is not installed: '
                                                         'pip install -e ".[notebook]"')
# 04 trains a sparse autoencoder with SAELens on the model's TransformerLens twin: the interop extra
NEEDS_INTEROP = {"04_sparse_autoencoder"}
INTEROP_MISSING = [name for name in ("sae_lens", "transformer_lens") if importlib.util.find_spec(name) is None]
needs_interop = pytest.mark.skipif(bool(INTEROP_MISSING), reason='the interop extra is not installed: '
                                                                 'pip install -e ".[interop]"')


def test_the_notebooks_are_there():
    assert [path.stem for path in NOTEBOOKS] == ["01_build_a_transformer", "02_train_and_look", "03_circuits",
                                                 "04_sparse_autoencoder"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_stored_with_the_outputs_of_a_run(path):
    """What GitHub shows: every code cell ran, in order, and none ended in an error."""
    cells = [cell for cell in json.loads(path.read_text(encoding="utf-8"))["cells"] if cell["cell_type"] == "code"]
    counts = [cell["execution_count"] for cell in cells]
    assert counts == list(range(1, len(cells) + 1)), f"{path.name} is not stored executed top to bottom: {counts}"
    errors = [output for cell in cells for output in cell["outputs"] if output["output_type"] == "error"]
    assert not errors, f"{path.name} is stored with an error: {errors[0]['ename']}: {errors[0]['evalue']}"
    assert any(cell["outputs"] for cell in cells)


def marks(path):
    return ([] if path.stem in QUICK else [pytest.mark.slow]) + ([needs_interop] if path.stem in NEEDS_INTEROP else [])


@needs_jupyter
@pytest.mark.parametrize("path", [pytest.param(path, id=path.stem, marks=marks(path)) for path in NOTEBOOKS])
def test_the_notebook_runs(path, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    work = tmp_path / "notebooks"
    work.mkdir()
    copy = shutil.copy(path, work / path.name)
    notebook = nbformat.read(copy, as_version=4)
    # a fresh kernel: one torch thread (TINYLM_ROOT: a run or cache that ignored paths.log_dir lands here too)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TINYLM_ROOT": str(tmp_path)}
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(work)}})
    start = time.perf_counter()
    client.execute(env=env)  # a cell that raises fails the test with its traceback (CellExecutionError)
    seconds = time.perf_counter() - start
    print(f"{path.name}: {seconds:.1f} s")
    if path.stem != "01_build_a_transformer":  # 02, 03 and 04 train: their runs are under the copy's outputs/
        assert list((work / "outputs" / "runs").iterdir())
