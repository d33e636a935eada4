"""Rendered launchers as parts of a translation unit (JIT and aot_mode alike): the samples' ``call_*``
functions, how to find them, and one exported function per launcher that instantiates it."""
from __future__ import annotations

import re

#: A rendered launcher's definition: ``[template <...>] static [inline|__attribute__((...))] void call_<k>(...) {``.
CALL_FN = re.compile(r"(?:template\s*<(?P<tparams>[^>]*)>\s*)?static\s+(?:inline\s+|__attribute__\(\([^)]*\)\)\s+)*"
                     r"void\s+(?P<name>call_\w+)\((?P<params>.*?)\)\s*\{", re.S)


def sample_parts(harness: dict, version: str, error: type[Exception], tag: str = "patched") -> tuple[list[str], list[str]]:
    """Every sample launcher the harness rendered (``tag``: "patched", after apply; "upstream", as
    shipped), as translation-unit parts, and their keys; ``error`` naming the samples it could not render."""
    parts, launchers, errors = [], [], {}
    for key, entry in harness[tag].items():
        if "error" in entry:
            errors[key] = entry["error"]
            continue
        parts.append(f"\n// ---- sample {key} ----\n{entry['cpp']}\n")
        launchers.append(key)
    if errors:
        raise error(f"torch_npu {version}: the harness could not render {sorted(errors)}: {errors}")
    return parts, launchers


def entry_point(fn: re.Match, index: int, types: dict | None = None) -> str:
    """An exported function that instantiates ``call_*`` with at::Tensor arguments (or the type
    ``types`` names for a template parameter: an AOT launcher's ``kernels_type_``) and calls it."""
    tparams = [t.strip().split()[-1] for t in (fn.group("tparams") or "").split(",") if t.strip()]
    params, names = [], []
    for raw in [p.strip() for p in fn.group("params").split(",") if p.strip()]:
        if "=" in raw:  # defaulted (cubin_dir_): left to its default
            continue
        decl = raw
        for t in tparams:
            decl = re.sub(rf"\b{re.escape(t)}\b", (types or {}).get(t, "at::Tensor"), decl)
        params.append(decl)
        names.append(re.findall(r"\w+", raw)[-1])
    return (f'extern "C" __attribute__((visibility("default"))) void npu_patchset_real_artifacts_launch_{index}'
            f"({', '.join(params)}) {{\n    {fn.group('name')}({', '.join(names)});\n}}\n")
