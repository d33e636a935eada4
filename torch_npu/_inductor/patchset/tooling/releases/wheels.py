"""Load the real torch_npu Inductor Python code from a released wheel, without an NPU.

Used by the tests (and by ``python -m torch_npu._inductor.patchset.tooling.releases.wheels
status VERSION``) to apply this patch set to the code torch_npu actually ships.

* :func:`wheel_path` finds ``torch_npu-<version>-*.whl`` in the cache
  (``~/.cache/torch-npu-inductor-patches/wheels``, or
  ``$TORCH_NPU_PATCHSET_WHEEL_CACHE``), downloading it with
  ``pip download --no-deps`` when absent.
* :func:`extracted_tree` unpacks only ``torch_npu/_inductor/`` from it.
* :func:`install_stand_ins` makes this process import those files as
  ``torch_npu._inductor.*``: a stand-in ``torch_npu`` package (no C
  extension) whose ``_inductor`` package skips the wheel's heavy
  ``_inductor/__init__.py``; every other ``torch_npu.*`` module the code
  imports becomes an inert stub; ``torch.npu`` and triton-ascend's
  ``triton.backends.ascend.utils`` answer the few questions that code asks at
  import or codegen time (SoC version, core counts, FFTS, auto-blockify).
  Do it in a fresh process: it replaces ``torch_npu`` for good.

Everything this module does to the process is listed in :data:`STAND_INS`.
"""
from __future__ import annotations

import argparse
import email.parser
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import types
import zipfile
from pathlib import Path

from ..sim import cache_root
from ..sim.samples import VECTOR_CORES  # the stand-in device's vector cores, defined once

#: What the stand-ins answer (an Ascend 910B-like device). torch_npu's Ascend910B1 is 220; from
#: Ascend950 (260) on, torch_npu honours a kernel's SIMT-only flag. Tests set
#: TORCH_NPU_PATCHSET_STAND_IN_SOC=260 to render for an Ascend 950.
SOC_VERSION = int(os.environ.get("TORCH_NPU_PATCHSET_STAND_IN_SOC", "220"))
CUBE_CORES = 24

#: Stand-in behaviour of triton-ascend's target queries; tests flip these.
TRITON_ASCEND = {"ffts": True, "auto_blockify": True}

#: Names of everything stubbed or faked in this process (for reports).
STAND_INS: list[str] = []

PATCHSET_DIR = Path(__file__).resolve().parents[2]
_OUR_INDUCTOR = PATCHSET_DIR.parent  # <checkout or site-packages>/torch_npu/_inductor
_OUR_TORCH_NPU = _OUR_INDUCTOR.parent


class WheelUnavailable(RuntimeError):
    """The wheel could not be had; ``index_unreachable`` says whether the index was the cause;
    ``known_releases`` (the index's torch-npu versions) is set when the version is not among them."""

    def __init__(self, message: str, index_unreachable: bool = False, known_releases: list[str] | None = None):
        super().__init__(message)
        self.index_unreachable = index_unreachable
        self.known_releases = known_releases


def cache_dir() -> Path:
    override = os.environ.get("TORCH_NPU_PATCHSET_WHEEL_CACHE")
    if override:
        return Path(override)
    return CACHE_ROOT / "wheels"


#: The project's cache folder (wheels, builds, environments of torch lines, the end-to-end tier's results).
CACHE_ROOT = cache_root.root()

# ---- a release's files, and the torch they require: what every later step of a release's way reads --------------
#: Releases served from an installed torch_npu instead of their released wheel: version -> the folder holding
#: ``torch_npu/`` and its ``.dist-info`` (the selftest runs THIS machine's files; ``real_artifacts.installed``).
INSTALLED: dict[str, Path] = {}


def installed_site(version: str) -> Path | None:
    return INSTALLED.get(version)


def required_torch(version: str) -> str:
    """The torch release ``version``'s wheel (or its installed files) requires (``Requires-Dist:
    torch==2.10.0+cpu`` -> ``2.10.0``); its own X.Y.Z where it pins none. Raises :class:`WheelUnavailable`."""
    if version in INSTALLED:
        meta = next(INSTALLED[version].glob("torch_npu-*.dist-info/METADATA"), None)
        msg = email.parser.Parser().parsestr(meta.read_text() if meta is not None else "")
    else:
        with zipfile.ZipFile(wheel_path(version)) as zf:
            meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
            msg = email.parser.Parser().parsestr(zf.read(meta).decode())
    for req in msg.get_all("Requires-Dist") or []:
        m = re.match(r"\s*torch\s*==\s*([0-9]+(?:\.[0-9]+)*)", req)
        if m:
            return m.group(1)
    # No pin: the release's own X.Y.Z (a local build's too: 2.7.1+gitabc -> 2.7.1)
    return ".".join(version.split("+")[0].split(".")[:3])


def _find_wheel(version: str) -> Path | None:
    found = sorted(cache_dir().glob(f"torch_npu-{version}-*.whl"))
    return found[0] if found else None


_UNREACHABLE_HINTS = (
    "connection", "network is unreachable", "temporary failure in name resolution",
    "name or service not known", "max retries exceeded", "timed out", "proxyerror", "ssl",
)


#: pip's list of what the index has, in its "no matching distribution" error.
_PIP_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")


def _versions_in(text: str) -> list[str]:
    """The versions pip listed in ``text`` (each attempt lists them again: once each, in pip's order)."""
    seen: dict[str, None] = {}
    for listed in _PIP_VERSIONS.findall(text):
        for v in listed.split(","):
            if v.strip() and v.strip() != "none":
                seen.setdefault(v.strip(), None)
    return list(seen)


def index_releases(timeout: float = 120) -> list[str] | None:
    """torch-npu's versions on the package index (``pip index versions --pre``, oldest first), or
    None when pip cannot say (index unreachable, a pip without that command): no download."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", "--pre", "--disable-pip-version-check", "torch-npu"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"^Available versions:\s*(.+)$", proc.stdout, re.M)
    if proc.returncode != 0 or not m:
        return None
    return [v.strip() for v in m.group(1).split(",") if v.strip()][::-1]


def release_known(version: str) -> bool | None:
    """Whether ``version`` is a torch-npu release: a cached wheel, else the index's list (no download);
    None when the index cannot say."""
    if _find_wheel(version) is not None:
        return True
    known = index_releases()
    return None if known is None else version in known


def _pip_download(cmd: list[str], say, timeout: float = 900) -> str:
    """Run ``pip download``; hand each line pip prints that says what it fetches (and how big) to
    ``say`` as it comes; return everything pip printed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if say is not None and line.lstrip().startswith("Downloading "):
                say(line.strip())
        proc.wait()
    finally:
        timer.cancel()
    return "".join(lines)


def wheel_path(version: str, download: bool = True, say=None) -> Path:
    """The cached wheel of torch-npu ``version``, downloaded first when absent (and ``download``).
    ``say``: called with a line for each step of a download (what, how big, how long), for a user
    who would otherwise wait in silence; None for quiet."""
    found = _find_wheel(version)
    if found is not None or not download:
        if found is None:
            raise WheelUnavailable(f"torch-npu=={version}: no wheel in {cache_dir()} and downloading is off")
        return found
    cache_dir().mkdir(parents=True, exist_ok=True)
    # Only the Python files are used, so any binary wheel of the release will
    # do: try this interpreter's first, then a fixed, widely published one.
    attempts = [
        [],
        ["--only-binary=:all:", "--platform", "manylinux_2_28_x86_64", "--python-version", "3.11"],
        ["--only-binary=:all:", "--platform", "manylinux_2_28_aarch64", "--python-version", "3.11"],
    ]
    errors, outputs = [], []
    started = time.monotonic()
    if say is not None:
        say(f"downloading torch-npu=={version} from the package index into {cache_dir()} (once; later runs use it)")
    for extra in attempts:
        # Into a folder of its own, then renamed into the cache: another process never sees half a wheel.
        with tempfile.TemporaryDirectory(prefix=".download-", dir=cache_dir()) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                   "--progress-bar", "off", "-d", tmp, f"torch-npu=={version}", *extra]
            printed = _pip_download(cmd, say)
            for got in Path(tmp).glob(f"torch_npu-{version}-*.whl"):
                os.replace(got, cache_dir() / got.name)
        found = _find_wheel(version)
        if found is not None:
            if say is not None:
                say(f"torch-npu=={version}: {found.stat().st_size / 1e6:.1f} MB in {time.monotonic() - started:.0f} s")
            return found
        outputs.append(printed)
        errors.append(outputs[-1].strip().splitlines()[-3:])
    # Not a release at all: one line with what the index has (pip lists it once per attempt).
    known = _versions_in("\n".join(outputs))
    if known and version not in known:
        raise WheelUnavailable(f"torch-npu {version} is not a release on the package index; known releases: "
                               f"{', '.join(known)}", known_releases=known)
    text = " | ".join(" ".join(e) for e in errors)
    # pip says why it could not connect in its retry warnings, well before its last lines.
    unreachable = any(h in "\n".join(outputs).lower() for h in _UNREACHABLE_HINTS)
    raise WheelUnavailable(f"pip download torch-npu=={version} failed: {text}", index_unreachable=unreachable)


#: The wheel's pure-Python members loaded as they are: the Inductor code, and the torch-version
#: shims it imports (``torch_npu/_compat``, 2.13.0 on; e.g. ``device_to_aten`` of the aot_mode path).
_PY_MEMBERS = ("torch_npu/_inductor/", "torch_npu/_compat/")


def extracted_tree(version: str, download: bool = True) -> Path:
    """Directory containing ``torch_npu/_inductor`` (and ``_compat``) of the wheel (extracted once,
    into a folder of its own then renamed into place: another process never reads a partial tree)."""
    dest = cache_dir() / "extracted" / version
    members = " ".join(_PY_MEMBERS)
    if (dest / ".complete").exists() and (dest / ".complete").read_text().split("\n")[1:2] == [members]:
        return dest
    wheel = wheel_path(version, download=download)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=dest.parent))
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = [n for n in zf.namelist() if n.startswith(_PY_MEMBERS) and n.endswith(".py")]
            if not any(n.startswith(_PY_MEMBERS[0]) for n in names):
                raise WheelUnavailable(f"{wheel.name} has no {_PY_MEMBERS[0]} Python files")
            for n in names:
                zf.extract(n, tmp)
        (tmp / ".complete").write_text(wheel.name + "\n" + members + "\n")
        if dest.exists():  # an extraction of fewer members (an older layout of this cache): set aside
            shutil.rmtree(dest.rename(dest.with_name(f".{version}-old-{os.getpid()}")), ignore_errors=True)
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / ".complete").exists():  # not a concurrent winner
                raise
    except zipfile.BadZipFile as exc:
        raise WheelUnavailable(f"{wheel} is not a valid wheel ({exc}); delete it to download again") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


#: Where a wheel declares its ``torch.ops.npu`` operators (schemas as torchgen reads them).
OP_SCHEMA_FILE = "torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml"
_OP_REF = re.compile(r"torch\.ops\.npu\.(\w+)")
_OP_LIBRARIES: list = []
_FUNC_LINE = re.compile(r"^\s*-?\s*func:\s*((\w+)(?:\.\w+)?\(.*\)\s*->\s*.+?)\s*$")


def op_schemas(tree: Path, wheel: Path | None) -> list[str]:
    """The wheel's own schemas of the ``torch.ops.npu`` operators its Inductor code names.

    Its Flex Attention lowering (2.9.0.post9, 2.10.0.post7, 2.13.0, 2.14.0) reaches modules that read
    ``torch.ops.npu.npu_fusion_attention_v3.default`` and clone its schema at import; without the C
    extension no such operator exists. Schemas only (no kernel: calling one fails), read from the
    wheel's ``OP_SCHEMA_FILE``; nothing when there is no wheel (a source checkout) or no such file."""
    if wheel is None:
        return []
    named = set()
    for py in (tree / "torch_npu" / "_inductor").rglob("*.py"):
        named.update(_OP_REF.findall(py.read_text(errors="replace")))
    try:
        with zipfile.ZipFile(wheel) as zf:
            text = zf.read(OP_SCHEMA_FILE).decode()
    except KeyError:
        return []
    schemas = {}
    for line in text.splitlines():
        m = _FUNC_LINE.match(line)
        if m and m.group(2) in named:
            schemas.setdefault(m.group(1).split("(", 1)[0], m.group(1))  # first declaration of each overload
    return list(schemas.values())


def define_op_schemas(schemas: list[str]) -> list[str]:
    """Declare ``schemas`` in the ``npu`` operator namespace (schema only); returns those declared."""
    import torch

    lib = torch.library.Library("npu", "FRAGMENT")
    _OP_LIBRARIES.append(lib)  # a Library's declarations live as long as the object
    done = []
    for schema in schemas:
        try:
            lib.define(schema)
        except RuntimeError as exc:  # already declared, or a type this torch lacks: left out, said so
            STAND_INS.append(f"torch.ops.npu schema not declared ({exc.__class__.__name__}): {schema[:80]}")
            continue
        done.append(schema.split("(", 1)[0])
    if done:
        STAND_INS.append(f"torch.ops.npu: {len(done)} operator schemas from the wheel, no kernels ({', '.join(done)})")
    return done


def layout_of(tree: Path) -> str:
    """``"cpp_wrapper_npu"`` (2.7.1.post8+, 2.9.0.post9, 2.10.0.post7, 2.13.0, 2.14.0) or ``"legacy"``
    (``codegen/cpp_wrapper.py``, rtKernelLaunch: up to 2.7.1.post6, 2.8.0.post5, 2.9.1, 2.11.0.post3,
    2.12.0.post3)."""
    ind = tree / "torch_npu" / "_inductor"
    return "cpp_wrapper_npu" if (ind / "codegen" / "cpp_wrapper_npu.py").exists() else "legacy"


# ---- stand-ins -----------------------------------------------------------------
class _Inert:
    """Stub value: callable, subscriptable, usable as a base class and as a decorator."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return _Inert()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())


def _stub_module(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__file__ = f"<stand-in for {name}>"
    mod.__path__ = []  # a package, so that submodules can be stubbed too

    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        STAND_INS.append(f"{name}.{attr}")
        return type(attr, (_Inert,), {"__module__": name})

    mod.__getattr__ = __getattr__
    return mod


#: torch_npu modules a patch hooks outside its Inductor code (npu-empty-cache-launch-memory's): a stand-in of them
#: would be patched as if it were torch_npu's, so the status says target-missing for them instead.
_NOT_STUBBED = ("torch_npu.npu.memory",)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: any torch_npu.* module not found on disk is a stub."""

    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith("torch_npu.") or fullname.startswith("torch_npu._inductor."):
            return None
        if fullname in _NOT_STUBBED:  # what a patch hooks outside the Inductor code: missing here, not a stand-in
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        STAND_INS.append(f"module {spec.name}")
        return _stub_module(spec.name)

    def exec_module(self, module):
        pass


def _fake_torch_npu_device() -> types.ModuleType:
    npu = _stub_module("torch.npu")
    npu.current_device = lambda: 0
    npu.device_count = lambda: 1
    npu.is_available = lambda: False
    npu.get_device_properties = lambda device=0: types.SimpleNamespace(
        name="Ascend910B (stand-in)", cube_core_num=CUBE_CORES, vector_core_num=VECTOR_CORES,
        total_memory=64 << 30,
    )
    npu.current_stream = lambda device=None: types.SimpleNamespace(npu_stream=0)
    npu.synchronize = lambda device=None: None
    return npu


def _fake_triton_ascend_utils() -> types.ModuleType:
    mod = _stub_module("triton.backends.ascend.utils")
    mod._is_auto_map_parallel_blocks_enabled = lambda: TRITON_ASCEND["auto_blockify"]
    mod.get_ascend_arch_from_env = lambda: "Ascend910B1"
    mod.is_ffts_supported = lambda arch: TRITON_ASCEND["ffts"]
    mod.force_disable_ffts = lambda: False
    return mod


class _FakeNpuDriver:
    """triton-ascend's NPU driver as older torch_npu reads it at import (device properties)."""

    def get_current_target(self):
        return types.SimpleNamespace(backend="npu", arch="Ascend910B1", warp_size=0)

    def get_current_device(self):
        return 0

    def get_device_interface(self):
        return _Inert()

    def get_empty_cache_for_benchmark(self):
        return _Inert()

    utils = types.SimpleNamespace(
        get_device_properties=lambda device=0: {"num_aicore": CUBE_CORES, "num_vectorcore": VECTOR_CORES,
                                                "max_shared_mem": 1 << 20},
    )


def _install_fake_triton_driver() -> None:
    try:
        import triton.runtime.driver  # noqa: F401
    except ImportError:
        return
    # triton.runtime re-exports the DriverConfig instance under the submodule's name.
    config = sys.modules["triton.runtime.driver"].driver
    if config is not None and hasattr(config, "set_active"):
        config.set_active(_FakeNpuDriver())
        STAND_INS.append("triton.runtime.driver.active (an NPU driver answering device properties)")


def install_stand_ins(tree: Path) -> None:
    """Make ``torch_npu._inductor.*`` resolve to ``tree``'s files in this process."""
    # In torch's own import order: importing inductor modules first is circular.
    import torch  # noqa: I001  (the real one: torch_npu's code builds on it)
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    import torch._inductor.codegen.cpp_wrapper_gpu  # noqa: F401

    real = sys.modules.get("torch_npu")
    if real is not None and getattr(real, "__file__", None) and not str(real.__file__).startswith("<"):
        raise RuntimeError(f"a real torch_npu is imported ({real.__file__}); use a fresh process")
    tn = types.ModuleType("torch_npu")
    tn.__file__ = f"<stand-in torch_npu over {tree}>"
    tn.__path__ = [str(tree / "torch_npu"), str(_OUR_TORCH_NPU)]
    tn.__version__ = tree.name
    ind = types.ModuleType("torch_npu._inductor")
    ind.__file__ = f"<stand-in torch_npu._inductor over {tree}; the wheel's __init__ is not run>"
    ind.__path__ = [str(tree / "torch_npu" / "_inductor"), str(_OUR_INDUCTOR)]
    tn._inductor = ind
    ours = sys.modules.get("torch_npu._inductor.patchset")
    if ours is not None:
        ind.patchset = ours
    sys.modules["torch_npu"] = tn
    sys.modules["torch_npu._inductor"] = ind
    npu_backends = _stub_module("torch_npu.npu._backends")
    npu_backends.get_soc_version = lambda: SOC_VERSION
    sys.modules["torch_npu.npu._backends"] = npu_backends
    sys.modules.setdefault("torch_npu.npu", _stub_module("torch_npu.npu")).__dict__["_backends"] = npu_backends
    import torch as _torch

    _torch.npu = _fake_torch_npu_device()
    sys.modules["torch.npu"] = _torch.npu
    for name in ("triton.backends.ascend",):
        sys.modules.setdefault(name, _stub_module(name))
    sys.modules["triton.backends.ascend.utils"] = _fake_triton_ascend_utils()
    for dep in _THIRD_PARTY:  # torch_npu's own dependencies, inert when not installed
        if dep not in sys.modules and importlib.util.find_spec(dep) is None:
            sys.modules[dep] = _stub_module(dep)
            STAND_INS.append(f"{dep} (not installed here; inert)")
    _install_fake_triton_driver()
    try:  # triton-ascend's language extension (torch_npu's triton_helpers reads it)
        import triton.language.extra as tl_extra
    except ImportError:
        tl_extra = None
    if tl_extra is not None and not hasattr(tl_extra, "ascend"):
        tl_extra.ascend = sys.modules["triton.language.extra.ascend"] = _stub_module("triton.language.extra.ascend")
        STAND_INS.append("triton.language.extra.ascend (inert)")
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.append(_StubFinder())
    STAND_INS.extend(
        [
            "torch_npu (package object; C extension absent)",
            "torch_npu._inductor (package object; the wheel's __init__ not run)",
            f"torch_npu.npu._backends.get_soc_version -> {SOC_VERSION}",
            f"torch.npu (device 0: {VECTOR_CORES} vector / {CUBE_CORES} cube cores)",
            "triton.backends.ascend.utils (FFTS / auto-blockify answers)",
        ]
    )


#: torch_npu's third-party runtime dependencies that its _inductor code imports.
_THIRD_PARTY = ("psutil",)

TARGETS = ("torch_npu._inductor.runtime.triton_heuristics", "torch_npu._inductor.codegen.cpp_wrapper_npu")
#: The same targets in the older layout (C++ wrapper in codegen/cpp_wrapper.py, launch through
#: rtKernelLaunch: 2.7.1 .. 2.7.1.post6, 2.8.0.post5, 2.9.1, 2.11.0.post3, 2.12.0.post3).
OLDER_TARGETS = ("torch_npu._inductor.npu_triton_heuristics", "torch_npu._inductor.codegen.cpp_wrapper")


_RELEASE = re.compile(r"\d+\.\d+\.\d+(?:\.post\d+)?")


def source_tree(directory: str | os.PathLike) -> Path:
    """A torch_npu source checkout to load instead of a wheel: the directory holding
    ``torch_npu/_inductor/`` (raises ``WheelUnavailable`` naming what is missing)."""
    root = Path(directory).resolve()
    if not (root / "torch_npu" / "_inductor").is_dir():
        raise WheelUnavailable(f"{root} is not a torch_npu source checkout: it has no torch_npu/_inductor/")
    return root


def load(version: str, download: bool = True, source: str | os.PathLike | None = None) -> dict:
    """Install the stand-ins for ``version`` and import its target modules.

    ``source``: load the Inductor code of this source checkout instead of the wheel's
    (``version`` then only names it in reports).

    Returns ``{"version", "tree", "layout", "modules": {name: module or None},
    "import_errors": {name: text}}``. A module missing from the wheel is None
    without an error; one that exists but fails to import has an error.
    """
    tree = source_tree(source) if source is not None else extracted_tree(version, download=download)
    install_stand_ins(tree)
    # A source checkout has no built C extension: its operator schemas are those of the release named
    # by ``version`` when that is a release (the wheel of the checkout's line), else none.
    schemas_from = version if source is None or _RELEASE.fullmatch(version) else None
    define_op_schemas(op_schemas(tree, schemas_from and wheel_path(schemas_from, download=download)))
    modules, errors = {}, {}
    for name in TARGETS + OLDER_TARGETS:
        rel = Path(*name.split(".")).with_suffix(".py")
        if not (tree / rel).exists():
            modules[name] = None
            continue
        try:
            modules[name] = importlib.import_module(name)
        except Exception as exc:  # reported, never hidden
            modules[name] = None
            errors[name] = f"{type(exc).__name__}: {exc}"
    return {"version": version, "tree": str(tree), "layout": layout_of(tree), "modules": modules,
            "import_errors": errors}


def status_against(version: str, download: bool = True, source: str | os.PathLike | None = None) -> dict:
    """In THIS process: load ``version`` (or the checkout ``source``), apply the patch set, return its status."""
    loaded = load(version, download=download, source=source)
    from ... import _applier

    rows = _applier.apply(import_targets=True)
    return {
        "torch_npu": version,
        "layout": loaded["layout"],
        "loaded_from": loaded["tree"],
        "import_errors": loaded["import_errors"],
        "stand_ins": sorted(set(STAND_INS)),
        "patches": [r.to_json() for r in rows],
    }


def status_in_subprocess(version: str, timeout: float = 600, source: str | os.PathLike | None = None) -> dict:
    """Run :func:`status_against` in a fresh interpreter; never raises for a bad wheel.

    The result always has ``"ok"``; when false, ``"error"`` says exactly why
    (download failure, index unreachable, import failure, crash).
    """
    cmd = [sys.executable, "-m", "torch_npu._inductor.patchset.tooling.releases.wheels", "status", version]
    if source is not None:
        cmd += ["--source", str(Path(source).resolve())]
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    # `python -m` puts its working directory first on sys.path: started inside a torch_npu checkout (as
    # `status --against-source .` is), it would import the checkout's own torch_npu package instead of
    # this one. An empty directory holds nothing importable.
    with tempfile.TemporaryDirectory(prefix="torch-npu-patchset-status-") as cwd:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"ok": False, "torch_npu": version,
                "error": f"status subprocess exited {proc.returncode}: {proc.stderr.strip()[-2000:]}"}
    return data


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_npu._inductor.patchset.tooling.releases.wheels")
    sub = parser.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("status", help="apply the patch set to a torch_npu wheel's code; print status JSON")
    st.add_argument("version")
    st.add_argument("--no-download", action="store_true")
    st.add_argument("--source", default=None, help="a torch_npu source checkout to load instead of the wheel")
    fetch = sub.add_parser("fetch", help="download and extract wheels into the cache")
    fetch.add_argument("versions", nargs="+")
    args = parser.parse_args(argv)
    if args.cmd == "fetch":
        for v in args.versions:
            print(v, extracted_tree(v))
        return 0
    try:
        data = status_against(args.version, download=not args.no_download, source=args.source)
        data["ok"] = True
    except WheelUnavailable as exc:
        data = {"ok": False, "torch_npu": args.version, "error": str(exc),
                "index_unreachable": exc.index_unreachable, "known_releases": exc.known_releases}
    except Exception as exc:
        data = {"ok": False, "torch_npu": args.version, "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(data))
    return 0 if data["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
