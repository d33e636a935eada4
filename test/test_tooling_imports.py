"""tooling/ is four rooms whose imports go one way (commands -> upstream -> releases -> sim), with no
circle among its modules (issue 25): read from the source, every import, at module level or inside a
function, absolute or relative."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "torch_npu._inductor.patchset.tooling"
ROOT = Path(__file__).resolve().parents[1] / "torch_npu" / "_inductor" / "patchset" / "tooling"
ROOMS = ("commands", "upstream", "releases", "sim")  # each may import the rooms after it


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join([PACKAGE, *parts[:-1]] + ([] if parts[-1] == "__init__" else [parts[-1]]))


def imports_of(path: Path) -> set[str]:
    """The tooling modules ``path`` imports (a ``from X import y`` counts y when X.y is a module)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m in MODULES and m != me}


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}
GRAPH = {m: imports_of(p) for m, p in MODULES.items()}


def room(module: str) -> str | None:
    parts = module[len(PACKAGE) + 1:].split(".")
    return parts[0] if parts[0] in ROOMS and len(parts) > 1 else None


def test_every_module_is_in_a_room():
    loose = sorted(m for m in MODULES if m != PACKAGE and room(m) is None and not m.endswith(tuple(ROOMS)))
    assert not loose, f"tooling modules outside the rooms {ROOMS}: {loose}"


def test_no_import_circle():
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(GRAPH[m]):
            if state.get(n) == 1:
                circle = path[path.index(n):] + [n]
                pytest.fail("import circle: " + " -> ".join(c[len(PACKAGE) + 1:] for c in circle))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


def test_imports_go_one_way_between_rooms():
    against = sorted((m, n) for m, targets in GRAPH.items() for n in targets
                     if room(m) and room(n) and ROOMS.index(room(n)) < ROOMS.index(room(m)))
    assert not against, f"imports against {' -> '.join(ROOMS)}: {against}"


def test_the_graph_is_read():
    """The checks above see real edges (a reader that found none would pass them all)."""
    assert f"{PACKAGE}.sim.build" in GRAPH[f"{PACKAGE}.releases.rendered"]
    assert f"{PACKAGE}.releases.wheels" in GRAPH[f"{PACKAGE}.releases.release_matrix"]
    assert any(room(n) == "releases" for n in GRAPH[f"{PACKAGE}.upstream.verify"])


def test_the_render_cache_is_keyed_by_everything_the_harness_runs():
    """A rendering is cached under a key of its inputs; every tooling module the wheel harness imports,
    transitively, is one of them (else an edit there would reuse a stale rendering)."""
    from torch_npu._inductor.patchset.tooling.releases import real_artifacts

    seen, todo = set(), [f"{PACKAGE}.releases.wheel_harness"]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(GRAPH[m])
    runs = {MODULES[m].resolve() for m in seen if not MODULES[m].name == "__init__.py"}
    assert runs == {p.resolve() for p in real_artifacts.HARNESS_INPUTS}
