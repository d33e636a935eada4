"""``python -m torch_npu._inductor.patchset <command>``.

* ``status [--json]``: versions found, then each patch's state and target
  (``--against-wheel VERSION`` / ``--against-source DIR``: on a release's or a checkout's code).
* ``upstream-patch --checkout DIR ...``: the fix as a git-format patch for torch_npu itself.
* ``launcher ...``: the launch plan / C++ / dry run for one kernel's metadata.
* ``selftest [--device D] [--json] [--report FILE]``: acceptance checks, passed / failed / skipped.
"""
from __future__ import annotations

import argparse
import json
import re
import sys

from . import _applier, _environment


def _status(args) -> int:
    if args.against_wheel or args.against_source:
        return _status_against_wheel(args)
    rows = _applier.apply(import_targets=not args.no_import)
    env = _environment.describe()
    if args.json:
        json.dump({"environment": env, "patches": [r.to_json() for r in rows]}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(_table(env, rows))
    return 0


class UsageError(Exception):
    """Bad input to a command: one line on stderr, exit 2, nothing done."""


#: A torch_npu release: its torch line (major.minor), then the rest (patch, .postN, rcN).
_RELEASE = re.compile(r"(\d+)\.(\d+)\.\d+(?:rc\d+)?(?:\.post\d+)?")


def _torch_line(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def _check_wheel_release(version: str) -> None:
    """Before anything is downloaded or loaded: ``version`` is a torch_npu release, and of this
    torch's line (a release's Inductor code imports its own torch's internals)."""
    from .tooling.releases import wheels as upstream_wheels

    flag = f"--against-wheel {version}"
    m = _RELEASE.fullmatch(version)
    if not m:
        raise UsageError(f"{flag}: not a torch_npu release version (like 2.7.1 or 2.7.1.post11)")
    mismatch = _other_torch_line(flag, f"torch_npu {version}", [f"{m.group(1)}.{m.group(2)}"], "a release",
                                 _environment.describe()["torch"])
    if mismatch:
        if upstream_wheels.release_known(version) is False:
            raise UsageError(_unknown_release(flag, version, upstream_wheels.index_releases() or []))
        raise UsageError(mismatch)


def _check_source_line(source: str) -> None:
    """Before anything is loaded: a checkout of this torch's line (or one whose files do not say its line)."""
    from .tooling.upstream.verify import declared_torch_lines

    mismatch = _other_torch_line(f"--against-source {source}", "this torch_npu source", declared_torch_lines(source),
                                 "a checkout", _environment.describe()["torch"])
    if mismatch:
        raise UsageError(mismatch)


def _other_torch_line(flag: str, what: str, needs: list[str], other: str, torch_version: str | None) -> str | None:
    """The one line saying that ``what`` (of the torch lines ``needs``) cannot load with this torch, or None
    where it can or ``needs`` is unknown: a torch_npu's Inductor code imports its own torch's internals."""
    torch_version = torch_version or "not installed"
    have = _torch_line(torch_version)
    if not needs or have in needs:
        return None
    lines = " or ".join([", ".join(needs[:-1]), needs[-1]] if len(needs) > 1 else needs)
    plural = "s" if len(needs) > 1 else ""
    return (f"{flag}: {what} needs torch {lines} (its torch line{plural}); this environment has torch {torch_version}: "
            f"run it where torch {lines} is installed, or name {other} of the {have} line")


def _unknown_release(flag: str, version: str, known: list[str]) -> str:
    listed = ", ".join(known) if known else "none listed"
    return f"{flag}: torch-npu {version} is not a release on the package index; known releases: {listed}"


def _status_against_wheel(args) -> int:
    """Apply the patch set to a downloaded torch_npu wheel's Inductor code, or a source
    checkout's (loaded with stand-ins for the NPU, in a subprocess) and report."""
    from ._applier import PatchStatus
    from .tooling.releases import wheels as upstream_wheels

    source = args.against_source
    if source:
        _check_source_line(source)
    if args.against_wheel and not source:
        _check_wheel_release(args.against_wheel)
        try:  # found or downloaded here, so that a failure is one line; the subprocess finds it cached
            upstream_wheels.wheel_path(args.against_wheel)
        except upstream_wheels.WheelUnavailable as exc:
            if exc.known_releases is not None:
                raise UsageError(_unknown_release(f"--against-wheel {args.against_wheel}", args.against_wheel,
                                                  exc.known_releases)) from None
            print(f"status --against-wheel {args.against_wheel}: no wheel: {exc}", file=sys.stderr)
            return 1
    schemas = args.against_wheel
    if source and not schemas:  # the checkout's operators as its line's release declares them
        from .tooling.upstream.verify import line_wheel

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
    print(_table(env, rows))
    return 0


def _table(env: dict, rows) -> str:
    out = [f"torch-npu-inductor-patches {env['patchset']}"]
    for key in ("torch", "torch_npu", "triton-ascend", "python"):
        out.append(f"  {key:<14} {env[key] or 'not installed'}")
    out.append(f"  {'autoload':<14} {env['autoload']}")
    out.append(f"  {'disabled':<14} {', '.join(env['disabled']) or '(none)'}")
    if env.get("disabled_unknown"):  # a typo disables nothing: never shown as disabled
        out.append(f"  {'unknown ids':<14} {', '.join(env['disabled_unknown'])} (in TORCH_NPU_PATCHSET_DISABLE: "
                   f"no such patch, nothing disabled by them; valid: {', '.join(env['patch_ids'])})")
    for failure in env["autoload_failures"]:
        out.append(f"  autoload failure: {failure}")
    out.append("")
    width = max(len(r.id) for r in rows) + 2
    out.append(f"{'patch':<{width}}state")
    for r in rows:
        out.append(f"{r.id:<{width}}{r.label}")
        for target in r.targets:
            out.append(f"    target: {target}")
        if r.state != "failed":
            out.append(f"    why:    {r.reason}")
        if r.note:
            out.append(f"    note:   {r.note}")
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m torch_npu._inductor.patchset")
    sub = parser.add_subparsers(dest="command", required=True)
    st = sub.add_parser("status", help="show what applied where and why")
    st.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    st.add_argument(
        "--no-import",
        action="store_true",
        help="do not import target modules; report patches still waiting as pending",
    )
    st.add_argument(
        "--against-wheel",
        metavar="VERSION",
        help="apply to a torch_npu wheel's Inductor code instead (downloaded, cached; e.g. 2.7.1.post11)",
    )
    st.add_argument(
        "--against-source",
        metavar="DIR",
        help="apply to a torch_npu source checkout's Inductor code instead (DIR holds torch_npu/_inductor; "
        "its operator schemas are those of its line's release, from version.txt, or of --against-wheel)",
    )
    st.set_defaults(func=_status)
    try:
        from .tooling.commands import launcher as launcher_cli
        from .tooling.commands import selftest
    except ImportError:
        pass
    else:
        launcher_cli.add_parser(sub)
        selftest.add_parser(sub)  # `selftest`: the acceptance checks on this machine
    try:
        from .tooling.upstream import cli as upstream_patch_cli
    except ImportError:
        pass
    else:
        upstream_patch_cli.add_parser(sub)  # `upstream-patch`: the fix as a pull request to torch_npu
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"{args.command}: {exc}", file=sys.stderr)
        return 2
