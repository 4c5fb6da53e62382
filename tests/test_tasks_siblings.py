"""The tasks are siblings: no task package imports another, and what they share imports none of them."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS_DIR = ROOT / "tinylm" / "tasks"
PACKAGES = sorted(p.name for p in TASKS_DIR.iterdir() if (p / "__init__.py").is_file())


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in the file (a name imported from a module: module.name)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def task_packages_imported(path: Path) -> set[str]:
    """The task packages (``text``, ``translation``, ...) that ``path`` imports from."""
    return {name for module in imported_modules(path) for name in PACKAGES
            if module == f"tinylm.tasks.{name}" or module.startswith(f"tinylm.tasks.{name}.")}


def test_there_are_two_task_packages_at_least():
    assert {"text", "translation"} <= set(PACKAGES)


def test_no_task_package_imports_another():
    crossings = [f"{path.relative_to(ROOT)} imports tasks/{other}"
                 for name in PACKAGES for path in sorted((TASKS_DIR / name).rglob("*.py"))
                 for other in task_packages_imported(path) - {name}]
    assert not crossings


def test_the_shared_modules_of_the_tasks_import_no_task_package():
    """tasks/base.py, tasks/data.py, ... and the registry (which names its tasks as strings, imported on use)."""
    shared = sorted(TASKS_DIR.glob("*.py"))
    assert {"base.py", "data.py", "data_file.py"} <= {p.name for p in shared}
    assert not {str(p.relative_to(ROOT)): task_packages_imported(p) for p in shared if task_packages_imported(p)}


def test_what_both_tasks_use_lives_outside_the_text_task():
    """Generation, the commands' console and the attention views' base import nothing of a task package."""
    shared = [ROOT / "tinylm" / "console.py", ROOT / "tinylm" / "callbacks" / "attention.py",
              *sorted((ROOT / "tinylm" / "generation").glob("*.py"))]
    assert not {str(p.relative_to(ROOT)): task_packages_imported(p) for p in shared if task_packages_imported(p)}


def test_outside_the_tasks_the_package_imports_no_task_package_but_for_a_tasks_own_work():
    """The text task is no common library: nothing of the package imports it outside its own package (the
    configs name its data module and views as strings). Translation is imported only where its own decoding
    is the work (the explorer's translate route and its circuits of a translation, the analyses of an
    encoder-decoder, the Python API's translation) and for the config check of its demo pairs."""
    own_work = {"tinylm/explorer/views.py", "tinylm/analysis/translation.py", "tinylm/training/config_checks.py",
                "tinylm/api/translation.py", "tinylm/explorer/circuits.py"}
    reaches = {}
    for path in sorted((ROOT / "tinylm").rglob("*.py")):
        if path.is_relative_to(TASKS_DIR):
            continue
        name = str(path.relative_to(ROOT))
        if packages := task_packages_imported(path) - ({"translation"} if name in own_work else set()):
            reaches[name] = packages
    assert not reaches
