"""``status --against-wheel VERSION`` / ``--against-source DIR``: the patch set applied to a torch_npu
release's or a source checkout's Inductor code (loaded with stand-ins for the NPU, in a subprocess), shown as
``status`` shows the installed one. The CLI hands these flags here (``cli.py``).
"""
from __future__ import annotations

import json
import sys

from ... import _environment
from ..._applier import PatchStatus
from ..releases import wheels as upstream_wheels
from ..releases.release_names import RELEASE, torch_line, unknown_release
from ..upstream.verify import declared_torch_lines, line_wheel


def run(args, table) -> int:
    """``table(env, rows)``: the status table, as the CLI writes it. Bad input: one line, exit 2."""
    try:
        return _against(args, table)
    except UsageError as exc:
        print(f"status: {exc}", file=sys.stderr)
        return 2


class UsageError(Exception):
    """Bad input to a command: one line on stderr, exit 2, nothing done."""


def _check_wheel_release(version: str) -> None:
    """Before anything is downloaded or loaded: ``version`` is a torch_npu release, and of this
    torch's line (a release's Inductor code imports its own torch's internals)."""
    flag = f"--against-wheel {version}"
    m = RELEASE.fullmatch(version)
    if not m:
        raise UsageError(f"{flag}: not a torch_npu release version (like 2.7.1 or 2.7.1.post11)")
    mismatch = _other_torch_line(flag, f"torch_npu {version}", [f"{m.group(1)}.{m.group(2)}"], "a release",
                                 _environment.describe()["torch"])
    if mismatch:
        if upstream_wheels.release_known(version) is False:
            raise UsageError(unknown_release(flag, version, upstream_wheels.index_releases() or []))
        raise UsageError(mismatch)


def _check_source_line(source: str) -> None:
    """Before anything is loaded: a checkout of this torch's line (or one whose files do not say its line)."""
    mismatch = _other_torch_line(f"--against-source {source}", "this torch_npu source", declared_torch_lines(source),
                                 "a checkout", _environment.describe()["torch"])
    if mismatch:
        raise UsageError(mismatch)


def _other_torch_line(flag: str, what: str, needs: list[str], other: str, torch_version: str | None) -> str | None:
    """The one line saying that ``what`` (of the torch lines ``needs``) cannot load with this torch, or None
    where it can or ``needs`` is unknown: a torch_npu's Inductor code imports its own torch's internals."""
    torch_version = torch_version or "not installed"
    have = torch_line(torch_version)
    if not needs or have in needs:
        return None
    lines = " or ".join([", ".join(needs[:-1]), needs[-1]] if len(needs) > 1 else needs)
    plural = "s" if len(needs) > 1 else ""
    return (f"{flag}: {what} needs torch {lines} (its torch line{plural}); this environment has torch {torch_version}: "
            f"run it where torch {lines} is installed, or name {other} of the {have} line")


def _against(args, table) -> int:
    """Apply the patch set to a downloaded torch_npu wheel's Inductor code, or a source
    checkout's (loaded with stand-ins for the NPU, in a subprocess) and report."""
    source = args.against_source
    if source:
        _check_source_line(source)
    if args.against_wheel and not source:
        _check_wheel_release(args.against_wheel)
        try:  # found or downloaded here, so that a failure is one line; the subprocess finds it cached
            upstream_wheels.wheel_path(args.against_wheel)
        except upstream_wheels.WheelUnavailable as exc:
            if exc.known_releases is not None:
                raise UsageError(unknown_release(f"--against-wheel {args.against_wheel}", args.against_wheel,
                                                 exc.known_releases)) from None
            print(f"status --against-wheel {args.against_wheel}: no wheel: {exc}", file=sys.stderr)
            return 1
    schemas = args.against_wheel
    if source and not schemas:  # the checkout's operators as its line's release declares them
        schemas = line_wheel(source)
    what = (schemas or source) if source else args.against_wheel  # names the release loaded
    data = upstream_wheels.status_in_subprocess(what, source=source)
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0 if data.get("ok") else 1
    if not data.get("ok"):
        print(f"torch_npu {source or what}: could not be loaded: {data.get('error')}", file=sys.stderr)
        return 1
    env = _environment.describe()
    code = "source checkout" if source else "wheel code"
    if source:
        schema_note = f"operator schemas of {schemas}" if schemas else "no operator schemas"
        env["torch_npu"] = f"{source} ({code}, {schema_note}, layout {data['layout']}, NPU stand-ins)"
    else:
        env["torch_npu"] = f"{what} ({code}, layout {data['layout']}, NPU stand-ins)"
    for name, err in data.get("import_errors", {}).items():
        env["autoload_failures"].append(f"importing {name}: {err}")
    rows = [PatchStatus.from_json(p) for p in data["patches"]]
    print(table(env, rows))
    return 0
