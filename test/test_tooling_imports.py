"""The import graph of the whole package ``torch_npu._inductor.patchset``, read from the source: every import, at
module level or inside a function, absolute or relative (issues 25, 41).

* No import circle anywhere in the package, runtime and tooling together.
* The runtime (every module outside ``tooling/``) imports nothing from ``tooling/``, with one exception: a
  command module (``cli.py``, ``selftest.py``) may hand a subcommand or a check to the tooling from inside a
  function, run only when that command is, and only after asking ``_tooling.installed()`` (a user's wheel has
  no tooling: the command then says in one line that it needs a repository checkout).
* ``tooling/`` is five rooms whose imports go one way (commands -> e2e -> upstream -> releases -> sim).
* In the editable install the tests use, every tooling module imports.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = "torch_npu._inductor.patchset"
TOOLING = f"{PACKAGE}.tooling"
ROOT = Path(__file__).resolve().parents[1] / "torch_npu" / "_inductor" / "patchset"
ROOMS = ("commands", "e2e", "upstream", "releases", "sim")  # each may import the rooms after it
#: Runtime modules that may hand work to the tooling, from inside a function (see the docstring).
DISPATCHERS = {f"{PACKAGE}.cli", f"{PACKAGE}.selftest"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join([PACKAGE, *parts[:-1]] + ([] if parts[-1] == "__init__" else [parts[-1]]))


def imports_of(path: Path) -> set[tuple[str, bool]]:
    """(package module imported, inside a function?) for every import in ``path`` (a ``from X import y``
    counts y when X.y is a module)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    found = set()

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.update((a.name, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                if not me.startswith(base + "."):  # a package this module is in is imported before it anyway
                    found.add((base, in_function))
                found.update((f"{base}.{a.name}", in_function) for a in child.names)
            visit(child, nested)

    visit(ast.parse(path.read_text()), False)
    return {(m, f) for m, f in found if m in MODULES and m != me}


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}
EDGES = {m: imports_of(p) for m, p in MODULES.items()}
GRAPH = {m: {n for n, _ in edges} for m, edges in EDGES.items()}


def is_tooling(module: str) -> bool:
    return module == TOOLING or module.startswith(TOOLING + ".")


def room(module: str) -> str | None:
    if not is_tooling(module):
        return None
    parts = module[len(TOOLING) + 1:].split(".")
    return parts[0] if parts[0] in ROOMS and len(parts) > 1 else None


def test_every_tooling_module_is_in_a_room():
    loose = sorted(m for m in MODULES if is_tooling(m) and m != TOOLING and room(m) is None
                   and not m.endswith(tuple(ROOMS)))
    assert not loose, f"tooling modules outside the rooms {ROOMS}: {loose}"


def test_no_import_circle_in_the_package():
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(GRAPH[m]):
            if state.get(n) == 1:
                circle = path[path.index(n):] + [n]
                pytest.fail("import circle: " + " -> ".join(c[len(PACKAGE) + 1:] or "." for c in circle))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


def test_the_runtime_imports_no_tooling_but_a_command_dispatching_lazily():
    offenders = sorted(f"{m} imports {n}" + (" (inside a function)" if lazy else "")
                       for m, edges in EDGES.items() if not is_tooling(m)
                       for n, lazy in edges if is_tooling(n) and not (lazy and m in DISPATCHERS))
    assert not offenders, offenders


def test_imports_go_one_way_between_rooms():
    against = sorted((m, n) for m, targets in GRAPH.items() for n in targets
                     if room(m) and room(n) and ROOMS.index(room(n)) < ROOMS.index(room(m)))
    assert not against, f"imports against {' -> '.join(ROOMS)}: {against}"


def test_the_graph_is_read():
    """The checks above see real edges (a reader that found none would pass them all), lazy ones included."""
    assert f"{TOOLING}.sim.build" in GRAPH[f"{TOOLING}.releases.rendered"]
    assert f"{TOOLING}.releases.wheels" in GRAPH[f"{TOOLING}.releases.release_matrix"]
    assert any(room(n) == "releases" for n in GRAPH[f"{TOOLING}.upstream.verify"])
    assert f"{PACKAGE}._applier" in GRAPH[f"{PACKAGE}.cli"]
    assert (f"{TOOLING}.commands.status_against", True) in EDGES[f"{PACKAGE}.cli"]
    assert (f"{TOOLING}.commands.selftest_launchers", True) in EDGES[f"{PACKAGE}.selftest"]
    assert len([m for m in MODULES if not is_tooling(m)]) >= 15


def test_a_circle_and_a_runtime_import_of_the_tooling_are_seen(tmp_path):
    """The reader resolves relative imports, module level and inside functions."""
    probe = ROOT / "fixes" / "_import_probe_tmp.py"
    probe.write_text("from .. import cli\n\ndef f():\n    from ..tooling.sim import samples\n")
    try:
        edges = imports_of(probe)
    finally:
        probe.unlink()
    assert (f"{PACKAGE}.cli", False) in edges and (f"{TOOLING}.sim.samples", True) in edges


def runs_on_import(path: Path) -> bool:
    """A child script (the wheel harness, the real-runtime children): it reads ``sys.argv`` at module level."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            continue
        if any(isinstance(n, ast.Attribute) and n.attr == "argv" and isinstance(n.value, ast.Name)
               and n.value.id == "sys" for n in ast.walk(node)):
            return True
    return False


def test_every_tooling_module_imports_in_the_editable_install():
    names = sorted(m for m, p in MODULES.items() if is_tooling(m) and not runs_on_import(p))
    assert len(names) >= 40
    code = ("import importlib, json, sys\nbad = {}\nfor m in sys.argv[1:]:\n    try:\n        importlib.import_module(m)\n"
            "    except Exception as e:\n        bad[m] = f'{type(e).__name__}: {e}'\nprint(json.dumps(bad))\n")
    proc = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {}


def test_the_render_cache_is_keyed_by_everything_the_harness_runs():
    """A rendering is cached under a key of its inputs; every tooling module the wheel harness imports,
    transitively, is one of them (else an edit there would reuse a stale rendering)."""
    from torch_npu._inductor.patchset.tooling.releases import real_artifacts

    seen, todo = set(), [f"{TOOLING}.releases.wheel_harness"]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(n for n in GRAPH[m] if is_tooling(n))
    runs = {MODULES[m].resolve() for m in seen if not MODULES[m].name == "__init__.py"}
    assert runs == {p.resolve() for p in real_artifacts.HARNESS_INPUTS}


#: A release's way through ``tooling/releases/`` (issue 41), in order; a step's modules import only modules of the
#: steps before it, or of their own step. The modules that take a release along the way (``real_sources``,
#: ``real_runtime``, the benchmark, the release matrix) are not steps: they may call any. Its runtime comes before the
#: build against its headers: the build takes the interpreter the runtime step resolved (``real_artifacts.toolchain(
#: release, python)``), and the runtime step reads what it needs of the release (where its files are, which torch they
#: require) from the fetch step, never from the build (``launcher --simulate`` once went runtime_build -> host_runtime
#: -> line_python -> real_artifacts.required_torch: back to a step it was to come to after).
RELEASE_STEPS = (
    ("fetch, extract", ("release_names", "wheels")),
    ("its runtime", ("line_python", "elf", "wheel_needs", "host_runtime")),
    ("build against its headers", ("real_artifacts", "aot_artifacts", "launchers")),
    ("build for its runtime", ("runtime_build",)),
    ("run", ("runtime_run", "child_watch")),
    ("judge", ("real_runtime_judge",)),
)
RELEASES = f"{TOOLING}.releases"
STEP_OF = {f"{RELEASES}.{m}": i for i, (_, mods) in enumerate(RELEASE_STEPS) for m in mods}


def against_the_way(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a step's modules that go to a later step (or to a release module that is no step)."""
    return sorted(f"{m[len(RELEASES) + 1:]} ({RELEASE_STEPS[STEP_OF[m]][0]}) imports {n[len(RELEASES) + 1:]}"
                  + (f" ({RELEASE_STEPS[STEP_OF[n]][0]})" if n in STEP_OF else " (no step)")
                  for m in STEP_OF for n in graph[m]
                  if n.startswith(RELEASES + ".") and STEP_OF.get(n, len(RELEASE_STEPS)) > STEP_OF[m])


def test_a_release_flows_one_way_through_the_steps():
    assert set(STEP_OF) <= set(MODULES), sorted(set(STEP_OF) - set(MODULES))
    against = against_the_way(GRAPH)
    assert not against, f"imports against the release's way {' -> '.join(s for s, _ in RELEASE_STEPS)}: {against}"


def test_launcher_simulate_takes_a_release_along_the_steps_only():
    """``launcher --simulate`` (``real_sources``) reaches the runtime through the steps, not through the tier's
    orchestrator (``real_runtime``), and so does the benchmark's run."""
    steps = {f"{RELEASES}.{m}" for _, mods in RELEASE_STEPS for m in mods}
    reached = {n for n in GRAPH[f"{RELEASES}.real_sources"] if n.startswith(RELEASES + ".")}
    assert reached and reached <= steps, sorted(reached - steps)
    assert {f"{RELEASES}.runtime_build", f"{RELEASES}.runtime_run"} <= GRAPH[f"{RELEASES}.real_runtime_bench"]


def test_a_step_against_the_way_is_seen():
    """The step check reads real edges: a judge that imported the run step would be against the way."""
    assert f"{RELEASES}.real_artifacts" in GRAPH[f"{RELEASES}.real_runtime_judge"]
    assert f"{RELEASES}.host_runtime" in GRAPH[f"{RELEASES}.runtime_run"]
    # the runtime step takes the release's facts from the fetch step; the build gets its interpreter
    assert f"{RELEASES}.wheels" in GRAPH[f"{RELEASES}.line_python"] & GRAPH[f"{RELEASES}.host_runtime"]
    # the back-edge launcher --simulate once took (the runtime step asking the build step which torch) is seen
    back = dict(GRAPH, **{f"{RELEASES}.line_python": GRAPH[f"{RELEASES}.line_python"] | {f"{RELEASES}.real_artifacts"}})
    assert against_the_way(back) == ["line_python (its runtime) imports real_artifacts (build against its headers)"]
