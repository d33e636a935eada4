"""The patch-set mechanism: declarations, applier, disable switch, status.

In-process tests point the applier at fixture declarations
(``test/fixtures/declarations``) whose targets are fixture modules shaped like
upstream's; subprocess tests check what ``import torch`` does through the
installed ``torch.backends`` entry point.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import torch_npu_patchset_autoload as autoload
from torch_npu._inductor.patchset import _applier, _declarations

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
FIXTURE_DECLS = FIXTURES / "declarations"
HEURISTICS = "patchset_fixture.upstream_shape.heuristics"
REAL_IDS = ["kernel-sync-metadata", "cpp-wrapper-sync-resources", "aot-npu-launch-lambda",
            "flex-attention-backward-symbolic-grid", "npu-flex-attention-backward-grid",
            "npu-codegen-symbolic-modulus", "cpp-wrapper-numel-sizes", "npu-flex-attention-masked-loads",
            "cpp-wrapper-lazy-backward-config", "npu-empty-cache-launch-memory", "npu-dual-reduction-accumulator"]
STATES = {"applied", "upstream-has-fix", "target-missing", "disabled", "failed", "pending"}


@pytest.fixture
def fixture_patchset(monkeypatch):
    """Applier state reset and pointed at the fixture declarations/modules."""
    monkeypatch.setenv("TORCH_NPU_PATCHSET_DECLARATIONS", str(FIXTURE_DECLS))
    monkeypatch.delenv(autoload.DISABLE_ENV, raising=False)
    monkeypatch.syspath_prepend(str(FIXTURES))
    for name in [m for m in sys.modules if m.startswith("patchset_fixture")]:
        monkeypatch.delitem(sys.modules, name)
    _applier._reset_for_tests()
    yield
    _applier._reset_for_tests()


def by_id(rows):
    return {r.id: r for r in rows}


# --- declarations -----------------------------------------------------------


def test_real_declarations_are_complete():
    decls = _declarations.load()
    assert [d.id for d in decls] == REAL_IDS
    for d in decls:
        assert d.title and d.why and d.detection
        assert "Ascend/pytorch issue 4431" in d.upstream
        assert d.implementation.startswith("torch_npu._inductor.patchset.fixes.")
        assert all(":" in h for h in d.hooks)
        assert d.torch_lines and d.torch_npu_branches
    launch = [d for d in decls if d.id in ("kernel-sync-metadata", "cpp-wrapper-sync-resources")]
    # The eleven branches of the upstream pull request (master and ten release branches), 2.13.0's, and
    # v2.8.0, whose release 2.8.0.post5 has the older layout (codegen/cpp_wrapper.py).
    branches = {f"v{v}{s}" for v in ("2.7.1", "2.9.0", "2.10.0", "2.11.0", "2.12.0") for s in ("", "-26.1.0")}
    for d in launch:
        assert set(d.torch_npu_branches) == branches | {"master", "v2.13.0", "v2.8.0"}
        assert {"2.7.1", "2.8", "2.13", "2.14"} <= set(d.torch_lines)
        # Every release read, of both layouts, is listed under exactly one layout.
        releases = [r for _, rs in d.layouts for r in rs]
        assert len(releases) == len(set(releases))
        older = [rs for name, rs in d.layouts if "cpp_wrapper.py" in name]
        assert older and {"2.7.1.post6", "2.8.0.post5", "2.9.1", "2.11.0.post3", "2.12.0.post3"} <= set(older[0])
    aot = next(d for d in decls if d.id == "aot-npu-launch-lambda")  # torch 2.14's lazy path, master's code
    assert aot.torch_lines == ("2.14",) and aot.torch_npu_branches == ("master",)
    assert dict(aot.layouts)[next(n for n, _ in aot.layouts if "(patched)" in n)] == ("2.14.0",)
    for d in decls:  # each alternative hook set is a real 'module:qualname' too
        assert all(":" in h for hooks in d.alternative_hooks for h in hooks)


GOOD = {"_path": "x.toml", "id": "a", "title": "t", "why": "w", "upstream": "u", "remove_when": "r",
        "implementation": "m", "detection": "d", "targets": {}, "hooks": ["m:f"]}


@pytest.mark.parametrize("change, says", [
    ({"hooks": None}, "x.toml: missing hooks"),
    ({"remove_when": None}, "x.toml: missing remove_when"),
    ({"hooks": ["nocolon"]}, "module:qualname"),
    ({"remove-when": "r"}, "x.toml: unknown key remove-when; known: id, "),
    ({"remove_when": "  "}, "x.toml: remove_when must be non-empty text"),
    ({"why": ["w"]}, "x.toml: why must be non-empty text"),
    ({"targets": "2.7.1"}, "x.toml: targets must be a table"),
])
def test_declaration_validation_names_the_file_and_the_problem(change, says):
    table = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(_declarations.DeclarationError) as exc:
        _declarations.parse(table)
    assert says in str(exc.value) and "\n" not in str(exc.value)
    assert _declarations.parse(GOOD).remove_when == "r"


def test_a_declaration_that_is_not_toml_is_one_line_naming_its_file(tmp_path):
    for src in sorted(FIXTURE_DECLS.glob("*.toml")):
        (tmp_path / src.name).write_text(src.read_text())
    (tmp_path / "fix-zz-bad.toml").write_text('id = "bad"\nwhy = """never closed\n')
    proc = run_py("import sys\nfrom torch_npu._inductor.patchset import cli\nsys.exit(cli.main(['status', '--no-import']))\n",
                  TORCH_NPU_PATCHSET_DECLARATIONS=str(tmp_path), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert proc.returncode == 1 and proc.stdout == "", proc.stdout + proc.stderr
    line, = proc.stderr.strip().splitlines()
    assert line.startswith(f"status: {tmp_path / 'fix-zz-bad.toml'}: not valid TOML: "), line


def test_status_verbose_shows_each_declarations_why_upstream_and_when_to_remove_it():
    table = run_py("import sys\nfrom torch_npu._inductor.patchset import cli\n"
                   "sys.exit(cli.main(['status', '--no-import', '--verbose']))\n")
    assert table.returncode == 0, table.stderr
    for d in _declarations.load():
        block = table.stdout.split(f"\n{d.id} ", 1)[1].split("\n\n")[0]
        for label, text in (("needed:", d.why), ("upstream:", d.upstream), ("remove when:", d.remove_when)):
            assert f"    {label:<13}{text}" in block, (d.id, label)
    as_json = run_py("import sys\nfrom torch_npu._inductor.patchset import cli\n"
                     "sys.exit(cli.main(['status', '--no-import', '--verbose', '--json']))\n")
    rows = {p["id"]: p for p in json.loads(as_json.stdout)["patches"]}
    assert {i: r["remove_when"] for i, r in rows.items()} == {d.id: d.remove_when for d in _declarations.load()}


# The declarations' text, checked against what the project knows where it can be.
RELEASE_MATRIX = HERE.parent / "docs" / "release-matrix.md"
DESIGN = HERE.parent / "docs" / "design.md"


def _matrix_states() -> dict:
    """{release: {patch id: state}} from the generated release matrix's "after apply" column."""
    states = {}
    for row in RELEASE_MATRIX.read_text().splitlines():
        cells = [c.strip() for c in row.split("|")]
        if len(cells) > 5 and re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", cells[1]):
            states[cells[1]] = dict(re.findall(r"([a-z-]+): \*\*([a-z-]+)\*\*", cells[5]))
    return states


def test_a_release_a_declaration_calls_fixed_upstream_is_upstream_has_fix_in_the_release_matrix():
    """``upstream`` may call a release fixed only where the release matrix (generated from the wheels) shows the
    patch upstream-has-fix there; a release where the patch is applied is never called fixed."""
    states = _matrix_states()
    assert "2.7.1.post11" in states and states["2.7.1.post11"]["cpp-wrapper-sync-resources"] == "applied"
    for d in _declarations.load():
        claims = re.findall(r"(?<!not )fixed (?:upstream )?in (?:torch_npu )?(\d+\.\d+\.\d+(?:\.post\d+)?)", d.upstream)
        for claim in claims:
            if d.id in states.get(claim, {}):
                assert states[claim][d.id] == "upstream-has-fix", (d.id, claim, states[claim][d.id])
    sync = next(d for d in _declarations.load() if d.id == "cpp-wrapper-sync-resources")
    assert "fixed upstream" not in sync.upstream and "2.7.1.post11" in sync.upstream


def test_a_section_of_docs_design_md_a_declaration_names_exists():
    headings = [h.lstrip("# ").strip() for h in DESIGN.read_text().splitlines() if h.startswith("## ")]
    named = 0
    for d in _declarations.load():
        for text in (d.why, d.upstream, d.remove_when):
            if "docs/design.md" in text:
                for section in re.findall(r'"([^"]+)"', text.split("docs/design.md", 1)[1]):
                    named += 1
                    assert any(h.startswith(section) for h in headings), (d.id, section)
    assert named >= 2


# --- applier ----------------------------------------------------------------


def test_apply_is_feature_detected_and_idempotent(fixture_patchset):
    from patchset_fixture import fixes

    fixes.CALLS["apply"] = 0
    rows = by_id(_applier.apply(["fix-ok"]))
    assert rows["fix-ok"].state == "applied"
    assert rows["fix-ok"].note == "wrapped Autotuner.save_gpu_kernel"
    heur = sys.modules[HEURISTICS]
    assert heur.Autotuner().save_gpu_kernel(1, 2)["patched"] is True
    wrapped = heur.Autotuner.save_gpu_kernel

    rows = by_id(_applier.apply(["fix-ok"]))
    assert fixes.CALLS["apply"] == 1, "a settled patch must never be applied twice"
    assert heur.Autotuner.save_gpu_kernel is wrapped


def test_probe_saying_upstream_has_fix_changes_nothing(fixture_patchset):
    rows = by_id(_applier.apply(["fix-upstream"]))
    assert rows["fix-upstream"].state == "upstream-has-fix"
    assert "has_sync_metadata" in rows["fix-upstream"].reason
    assert "fixed" in sys.modules[HEURISTICS].AlreadyFixed().save_gpu_kernel(1, 2)


def test_missing_targets(fixture_patchset):
    rows = by_id(_applier.apply())
    assert rows["fix-missing-module"].state == "target-missing"
    assert "patchset_fixture.not_there" in rows["fix-missing-module"].reason
    # The module is there, the hooked object is not: a layout the patch does not know (it may
    # carry the bug), never "target-missing".
    assert rows["fix-missing-attr"].state == "failed"
    assert "unrecognised layout" in rows["fix-missing-attr"].reason and "no_such_method" in rows["fix-missing-attr"].reason


def test_alternative_hook_set_is_used_when_the_first_is_missing(fixture_patchset):
    rows = by_id(_applier.apply(["fix-alternative"]))
    assert rows["fix-alternative"].state == "applied"
    assert rows["fix-alternative"].targets == (f"{HEURISTICS}:Autotuner.save_gpu_kernel",)
    rows = by_id(_applier.apply(["fix-missing-module"]))
    assert "alternative" not in rows["fix-missing-module"].reason


def test_exception_inside_a_patch_rolls_back(fixture_patchset):
    import importlib

    heur = importlib.import_module(HEURISTICS)
    before = dict(vars(heur.AlreadyFixed))
    rows = by_id(_applier.apply(["fix-boom"]))
    assert rows["fix-boom"].state == "failed"
    assert "simulated failure half way" in rows["fix-boom"].reason
    assert rows["fix-boom"].label.startswith("failed: ")
    assert dict(vars(heur.AlreadyFixed)) == before
    assert not hasattr(heur.AlreadyFixed, "brand_new_attribute")


def test_unrecognised_shape_is_failed_with_what_differs(fixture_patchset):
    rows = by_id(_applier.apply(["fix-unrecognised"]))
    assert rows["fix-unrecognised"].state == "failed"
    assert "instead of (self, stream, launcher)" in rows["fix-unrecognised"].reason


@pytest.mark.parametrize("value, off", [("1", {"fix-ok", "fix-upstream"}), ("fix-ok", {"fix-ok"}), ("fix-ok, fix-upstream", {"fix-ok", "fix-upstream"})])
def test_disable_by_variable(fixture_patchset, monkeypatch, value, off):
    monkeypatch.setenv(autoload.DISABLE_ENV, value)
    rows = by_id(_applier.apply(["fix-ok", "fix-upstream"]))
    for pid in ("fix-ok", "fix-upstream"):
        assert (rows[pid].state == "disabled") == (pid in off), rows[pid]
    if "fix-ok" in off:
        import importlib

        assert "patched" not in importlib.import_module(HEURISTICS).Autotuner().save_gpu_kernel(1, 2)


def test_disabled_ids_parsing():
    assert autoload.disabled_ids("") is None
    assert autoload.disabled_ids("0") is None
    assert autoload.disabled_ids("1") == {"*"}
    assert autoload.disabled_ids("all") == {"*"}
    assert autoload.disabled_ids(" a, b ,") == {"a", "b"}


def test_unknown_id_is_an_error(fixture_patchset):
    with pytest.raises(ValueError, match="unknown patch ids"):
        _applier.apply(["no-such-patch"])


def test_hook_does_not_import_and_keeps_missing_targets(fixture_patchset):
    rows = by_id(_applier.apply_ready())
    assert rows["fix-ok"].state == "pending"
    assert HEURISTICS not in sys.modules
    _applier.apply(["fix-missing-module"])
    rows = by_id(_applier.apply_ready())
    assert rows["fix-missing-module"].state == "target-missing"


# --- through import torch (subprocesses) -------------------------------------


def run_py(code: str, **env_extra) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop(autoload.DISABLE_ENV, None)
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_import_torch_arms_hooks_without_importing_inductor():
    proc = run_py(
        "import sys, torch, torch_npu_patchset_autoload as a\n"
        "heavy = sorted(m for m in sys.modules if m.startswith(('torch._inductor', 'torch_npu._inductor')))\n"
        "print(a.ACTIVE, a.FAILURES, heavy)\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True [] []"


def test_patch_is_deferred_until_its_target_is_imported():
    code = (
        "import sys, torch\n"
        "from torch_npu._inductor.patchset import status\n"
        "print({r.id: r.state for r in status()}['fix-ok'])\n"
        f"import {HEURISTICS} as h\n"
        "print(h.Autotuner().save_gpu_kernel(1, 2).get('patched'))\n"
        "print({r.id: r.state for r in status()}['fix-ok'])\n"
    )
    proc = run_py(code, TORCH_NPU_PATCHSET_DECLARATIONS=str(FIXTURE_DECLS), PYTHONPATH=str(FIXTURES))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["pending", "True", "applied"]


def test_target_imported_before_autoload_is_patched_at_once():
    code = (
        f"import {HEURISTICS} as h\n"
        "import torch_npu_patchset_autoload as a\n"
        "a.autoload()\n"
        "print(h.Autotuner().save_gpu_kernel(1, 2).get('patched'))\n"
    )
    env = {"TORCH_NPU_PATCHSET_DECLARATIONS": str(FIXTURE_DECLS), "PYTHONPATH": str(FIXTURES)}
    proc = run_py(code, **env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_disable_switch_keeps_import_torch_untouched():
    proc = run_py(
        "import sys, torch, torch_npu_patchset_autoload as a\n"
        f"import {HEURISTICS} as h\n"
        "print(a.ACTIVE, h.Autotuner().save_gpu_kernel(1, 2).get('patched'))\n",
        TORCH_NPU_PATCHSET_DISABLE="1",
        TORCH_NPU_PATCHSET_DECLARATIONS=str(FIXTURE_DECLS),
        PYTHONPATH=str(FIXTURES),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False None"


def test_broken_declarations_never_break_import_torch(tmp_path):
    (tmp_path / "bad.toml").write_text("this is = = not toml")
    proc = run_py(
        "import torch, torch_npu_patchset_autoload as a\nprint(len(a.FAILURES), a.FAILURES[0][0])\n",
        TORCH_NPU_PATCHSET_DECLARATIONS=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1 autoload"


def test_namespace_torch_npu_runs_nothing_of_ours():
    proc = run_py(
        "import sys\n"
        "import torch_npu\n"
        "print(getattr(torch_npu, '__file__', None), sorted(m for m in sys.modules if 'patchset' in m or m == 'torch'))\n"
    )
    assert proc.returncode == 0, proc.stderr
    if "torch_npu" in proc.stdout and ".py" in proc.stdout.split()[0]:
        pytest.skip("a real torch_npu is installed; the namespace case does not apply")
    assert proc.stdout.strip() == "None []"


HEAVY_INIT = """\
# Stands in for a real torch_npu's _inductor/__init__ (heavy: imports
# torch._inductor, applies torch_npu's own patches). Logs which torch._inductor
# modules were still initialising when it ran.
import os, sys
busy = sorted(n for n, m in list(sys.modules.items()) if n.startswith("torch._inductor")
              and getattr(getattr(m, "__spec__", None), "_initializing", False))
with open(os.environ["HEAVY_INIT_LOG"], "a") as f:
    f.write(repr(busy) + "\\n")
"""


def test_flex_hook_does_not_run_a_real_torch_npus_inductor_init(tmp_path):
    """The Flex patch's target is imported by torch itself, half way through
    ``torch._inductor.lowering``. Applying it must not import a real
    torch_npu's ``_inductor`` package (its __init__ would run in the middle of
    torch's import, before torch registered the rest of its lowerings)."""
    pkg = tmp_path / "torch_npu" / "_inductor"
    pkg.mkdir(parents=True)
    (tmp_path / "torch_npu" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text(HEAVY_INIT)
    (pkg / "patchset").symlink_to(Path(_applier.__file__).resolve().parent, target_is_directory=True)
    log = tmp_path / "heavy.log"
    proc = run_py(
        "import sys, torch\n"
        "import torch._inductor.lowering\n"
        "print('parent imported:', 'torch_npu._inductor' in sys.modules)\n"
        "from torch_npu._inductor.patchset import status\n"
        "print({r.id: r.state for r in status()}['flex-attention-backward-symbolic-grid'])\n"
        "import torch_npu._inductor\n"  # torch_npu's own, later import runs its __init__ once
        "print('bound:', torch_npu._inductor.patchset is sys.modules['torch_npu._inductor.patchset'])\n",
        PYTHONPATH=str(tmp_path), HEAVY_INIT_LOG=str(log),
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "parent imported: False", proc.stdout
    assert lines[1] in ("applied", "upstream-has-fix"), proc.stdout
    assert lines[2] == "bound: True", proc.stdout
    assert log.read_text().splitlines() == ["[]"]  # ran once, with nothing of torch._inductor mid-import


# --- status command ------------------------------------------------------------


def status_json(*args, **env_extra):
    proc = subprocess.run(
        [sys.executable, "-m", "torch_npu._inductor.patchset", "status", "--json", *args],
        capture_output=True, text=True, timeout=600, env={**os.environ, **env_extra},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_status_json_schema_and_truthful_states():
    doc = status_json()
    assert set(doc) == {"environment", "patches"}
    env = doc["environment"]
    for key in ("torch", "torch_npu", "triton-ascend", "python", "patchset", "autoload", "disabled"):
        assert key in env
    import torch

    assert env["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert [p["id"] for p in doc["patches"]] == REAL_IDS
    for p in doc["patches"]:
        assert set(p) >= {"id", "state", "reason", "targets"}
        assert p["state"] in STATES - {"pending"}
        assert p["targets"] and all(":" in t for t in p["targets"])
        assert p["reason"]
    if env["torch_npu"] is None:
        torch_only = {"flex-attention-backward-symbolic-grid", "cpp-wrapper-lazy-backward-config"}  # torch's code
        npu = [p for p in doc["patches"] if p["id"] not in torch_only]
        assert {p["state"] for p in npu} == {"target-missing"}
        npu_flex = next(p for p in npu if p["id"] == "npu-flex-attention-backward-grid")
        assert "no Flex Attention templates of its own" in npu_flex["reason"]


def test_status_reports_disabled_patch():
    doc = status_json(TORCH_NPU_PATCHSET_DISABLE="kernel-sync-metadata")
    rows = {p["id"]: p for p in doc["patches"]}
    assert rows["kernel-sync-metadata"]["state"] == "disabled"
    assert doc["environment"]["disabled"] == ["kernel-sync-metadata"]


def test_status_table_lists_every_patch():
    proc = subprocess.run(
        [sys.executable, "-m", "torch_npu._inductor.patchset", "status"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    for pid in REAL_IDS:
        assert pid in proc.stdout
    assert "torch " in proc.stdout and "torch_npu" in proc.stdout and "triton-ascend" in proc.stdout


def test_status_says_when_an_applied_patch_was_replaced_later(fixture_patchset):
    rows = by_id(_applier.apply(["fix-ok"]))
    assert "superseded" not in rows["fix-ok"].note
    heur = sys.modules[HEURISTICS]
    ours = heur.Autotuner.save_gpu_kernel
    heur.Autotuner.save_gpu_kernel = lambda self, stream, launcher: {}
    try:
        rows = by_id(_applier.status())
        assert rows["fix-ok"].state == "applied"
        assert "; since superseded: " in rows["fix-ok"].note and rows["fix-ok"].note.endswith("<lambda>")
    finally:
        heur.Autotuner.save_gpu_kernel = ours


def test_every_declared_fix_module_meets_the_protocol():
    import importlib

    from torch_npu._inductor.patchset import _declarations
    from torch_npu._inductor.patchset._patching import FixModule

    decls = _declarations.load()
    assert len(decls) >= 4
    for d in decls:
        assert isinstance(importlib.import_module(d.implementation), FixModule), d.implementation
    import types

    assert not isinstance(types.ModuleType("no_apply"), FixModule)  # the check can fail


# --- bad input: a typo in the disable list, a release the status cannot load --------------------------------
FLEX = "flex-attention-backward-symbolic-grid"
TYPO = "flex-attention-backward-symbolic-grd"


def test_a_typo_in_the_disable_list_disables_nothing_and_status_says_so():
    env = {**os.environ, autoload.DISABLE_ENV: f"{TYPO},kernel-sync-metadata"}
    proc = subprocess.run([sys.executable, "-m", "torch_npu._inductor.patchset", "status"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "  disabled       kernel-sync-metadata" in lines
    assert (f"  unknown ids    {TYPO} (in TORCH_NPU_PATCHSET_DISABLE: no such patch, nothing disabled by them; "
            f"valid: {', '.join(REAL_IDS)})") in lines
    flex_row = next(ln for ln in lines if ln.startswith(FLEX))
    assert flex_row.split()[1] in ("applied", "upstream-has-fix"), flex_row  # the patch it meant: not disabled
    warned = [ln for ln in proc.stderr.splitlines() if "names no patch" in ln]
    assert warned == [f"torch_npu._inductor.patchset: TORCH_NPU_PATCHSET_DISABLE={TYPO},kernel-sync-metadata names "
                      f"no patch: {TYPO} (it disables nothing); valid ids: {', '.join(REAL_IDS)}, or 1 for all"], proc.stderr
    doc = status_json(**{autoload.DISABLE_ENV: TYPO})
    assert doc["environment"]["disabled"] == [] and doc["environment"]["disabled_unknown"] == [TYPO]
    assert {p["id"]: p["state"] for p in doc["patches"]}[FLEX] != "disabled"


def test_a_typo_is_warned_about_once_from_import_torch_on():
    """The entry point warns at ``import torch``; the applier, a second apply and Inductor's compile
    workers (fresh interpreters that import torch too) do not repeat it."""
    proc = run_py("import torch, torch._inductor.lowering\n"
                  "import torch_npu._inductor.patchset as p\n"
                  "p.apply(); p.apply()\n"
                  "torch.compile(lambda x: x + 1)(torch.ones(3))\n",
                  **{autoload.DISABLE_ENV: TYPO})
    assert proc.returncode == 0, proc.stderr
    assert sum("names no patch" in ln for ln in proc.stderr.splitlines()) == 1, proc.stderr


def _torch_line() -> str:
    import torch

    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


def against_wheel(version: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torch_npu._inductor.patchset", "status", "--against-wheel", version],
                          capture_output=True, text=True, timeout=900)


def _one_line(proc) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""  # no table, no failed rows
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_against_a_release_of_another_torch_line_says_which_torch_it_needs():
    import importlib.metadata

    version = "2.14.0" if _torch_line() == "2.7" else "2.7.1.post11"
    needs = ".".join(version.split(".")[:2])
    line = _one_line(against_wheel(version))
    assert line == (f"status: --against-wheel {version}: torch_npu {version} needs torch {needs} (its torch line); "
                    f"this environment has torch {importlib.metadata.version('torch')}: run it where torch {needs} is installed, or name "
                    f"a release of the {_torch_line()} line")


def test_against_something_that_is_not_a_version():
    assert _one_line(against_wheel("latest")) == (
        "status: --against-wheel latest: not a torch_npu release version (like 2.7.1 or 2.7.1.post11)")


@pytest.mark.parametrize("version", ["9.9.9", "same-line"])
def test_against_an_unknown_release_is_one_line_with_the_known_releases(version):
    from torch_npu._inductor.patchset.tooling.releases import wheels as upstream_wheels

    known = upstream_wheels.index_releases()
    if known is None:
        pytest.skip("the package index cannot be reached: it alone knows the releases")
    if version == "same-line":  # not a release, of this torch's line: looked up through pip download
        import torch

        version = torch.__version__.split("+")[0] + ".post999"
    line = _one_line(against_wheel(version))
    prefix = f"status: --against-wheel {version}: torch-npu {version} is not a release on the package index; known releases: "
    assert line.startswith(prefix), line
    listed = line[len(prefix):].split(", ")
    assert len(listed) == len(set(listed)) and set(known) <= set(listed) and "2.7.1.post11" in listed


def test_status_says_why_the_autoload_did_not_run():
    doc = status_json(TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert doc["environment"]["autoload"] == (
        "not run: TORCH_DEVICE_BACKEND_AUTOLOAD=0 (torch loads no torch.backends entry points)")
    assert status_json()["environment"]["autoload"] == "armed"


def test_an_autoload_failure_is_recorded_and_reported(tmp_path):
    """A failure inside the entry point is kept (never raised into ``import torch``) and status shows it."""
    (tmp_path / "bad.toml").write_text("this is = = not toml")
    proc = run_py("import torch, torch_npu_patchset_autoload as a\n"
                  "from torch_npu._inductor.patchset import _environment\n"
                  "print(_environment.describe()['autoload_failures'])\n",
                  TORCH_NPU_PATCHSET_DECLARATIONS=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("['autoload: TOMLDecodeError("), proc.stdout


def test_the_kept_launch_memory_is_found_in_every_loaded_library_that_exports_its_give_back(tmp_path):
    """npu-empty-cache-launch-memory's runtime: the loaded shared objects are read from /proc/self/maps (anonymous
    mappings among them), and the give-back entry is called in each library that exports it, once per call."""
    import ctypes
    import subprocess

    from torch_npu._inductor.patchset import launch_memory_back as back

    src = tmp_path / "wrapper.c"
    src.write_text("static unsigned long calls;\n"
                   f"unsigned long {back.SYMBOL}(void) {{ return ++calls; }}\n")
    lib = tmp_path / "libwrapper_like.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    assert str(lib) not in back._loaded_libraries()
    ctypes.CDLL(str(lib))  # as torch loads a compiled wrapper: privately
    assert str(lib) in back._loaded_libraries()
    assert any(p.endswith(".so") or ".so." in p for p in back._loaded_libraries() if p != str(lib))
    assert back.give_back() == 1 and back.give_back() == 2  # its count, called once per give_back()
