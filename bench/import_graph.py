"""The package's import graph: which room stands above which, the arrows that run back up, the circles.

A room is a folder of ``tinylm/`` (``tasks/text``, ``runs``; two levels at most), a folder's ``__init__`` (its
front door: what it re-exports, a registry), or a module at the top of the package (``checkpoint``). An arrow
is an import of one room by another, wherever it is written: at the top of a file, inside a function, or under
``if TYPE_CHECKING``. A circle is a set of modules that import one another (found module by module); an arrow
runs back up when it closes a cycle of rooms. Floors count from the ground: a room with no arrows out is on
floor 0, any other one floor above the highest room it imports (rooms of a cycle share a floor).

    python bench/import_graph.py            # the rooms floor by floor, then the faults
    python bench/import_graph.py --arrows   # every arrow between rooms, with the files that make it
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tinylm"


def modules(package_dir: Path) -> dict[str, Path]:
    """Every module of the package by its dotted name (a folder's ``__init__`` by the folder's name)."""
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` (at ``path``) imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets.update(f"{base}.{alias.name}" for alias in node.names)
            targets.add(base)
    resolved = set()
    for target in targets:
        while target and target not in known:  # a name imported from a module: the module
            target = target.rpartition(".")[0]
        if target and target != name:
            resolved.add(target)
    return resolved


def room_of(module: str, path: Path) -> str:
    """``tinylm.tasks.text.data`` -> ``tasks/text``; ``tinylm.cli`` -> ``cli``; a folder's ``__init__`` is its
    front door, a room above the folder's modules: ``tinylm.tasks`` -> ``tasks/__init__``."""
    parts = module.split(".")[1:]
    if path.name == "__init__.py":
        return "/".join(parts[:2] + ["__init__"])
    return "/".join(parts[:-1][:2]) or parts[0]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan's algorithm, iteratively)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


class ImportGraph:
    """The package's modules, their imports, and the same graph between rooms."""

    def __init__(self, package_dir: Path = ROOT / PACKAGE):
        known = modules(package_dir)
        self.imports = {name: imported(name, path, known) for name, path in known.items()}
        self.rooms = {name: room_of(name, path) for name, path in known.items()}
        self.arrows: dict[tuple[str, str], set[str]] = defaultdict(set)  # (room, imported room) -> modules
        for name, targets in self.imports.items():
            for target in targets:
                if self.rooms[name] != self.rooms[target]:
                    self.arrows[self.rooms[name], self.rooms[target]].add(name)
        self.room_graph = {room: set() for room in self.rooms.values()}
        for source, target in self.arrows:
            self.room_graph[source].add(target)

    def circles(self) -> list[list[str]]:
        """Modules that import one another."""
        return cycles(self.imports)

    def upward(self) -> list[tuple[str, str]]:
        """The arrows between rooms that close a cycle of rooms."""
        tangled = [set(component) for component in cycles(self.room_graph)]
        return sorted(arrow for arrow in self.arrows if any(set(arrow) <= component for component in tangled))

    def floors(self) -> dict[str, int]:
        """Each room's floor: 0 for a room that imports no other, else one above the highest it imports."""
        component_of = {room: frozenset([room]) for room in self.room_graph}
        for component in cycles(self.room_graph):
            for room in component:
                component_of[room] = frozenset(component)
        floor: dict[frozenset, int] = {}

        def height(component: frozenset) -> int:
            if component not in floor:
                floor[component] = 0  # a guard: the condensation has no cycles
                below = {component_of[t] for room in component for t in self.room_graph[room]} - {component}
                floor[component] = 1 + max(map(height, below)) if below else 0
            return floor[component]

        sys.setrecursionlimit(max(1000, 10 * len(self.room_graph)))
        return {room: height(component_of[room]) for room in self.room_graph}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrows", action="store_true", help="list every arrow between rooms")
    args = parser.parse_args()
    graph = ImportGraph()
    floors = graph.floors()
    print(f"{len(floors)} rooms, {max(floors.values()) + 1} floors, {len(graph.arrows)} arrows between rooms, "
          f"{len(graph.upward())} that run back up, {len(graph.circles())} circle(s) of modules")
    for level in sorted(set(floors.values()), reverse=True):
        print(f"  floor {level}: {'  '.join(sorted(room for room, f in floors.items() if f == level))}")
    for source, target in graph.upward():
        print(f"up: {source} -> {target} ({', '.join(sorted(graph.arrows[source, target]))})")
    for circle in graph.circles():
        print(f"circle: {' <-> '.join(circle)}")
    if args.arrows:
        for (source, target), by in sorted(graph.arrows.items()):
            print(f"{source} -> {target}: {', '.join(sorted(by))}")


if __name__ == "__main__":
    main()
