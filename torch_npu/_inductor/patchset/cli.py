"""``python -m torch_npu._inductor.patchset <command>`` (also ``torch-npu-patchset``).

In every install:

* ``status [--json] [--verbose]``: versions found, then each patch's state and target; ``--verbose`` adds
  each patch's declaration: why it exists, where upstream stands, when it can go.
* ``selftest [--device D] [--json] [--report FILE]``: acceptance checks, passed / failed / skipped.

From a repository checkout only (the verification tooling, ``tooling/``; a user's wheel says so in one line,
exit 2):

* ``status --against-wheel VERSION`` / ``--against-source DIR``: on a release's or a checkout's code.
* ``launcher ...``: the launch plan / C++ / dry run for one kernel's metadata.
* ``upstream-patch --checkout DIR ...``: the fix as a git-format patch for torch_npu itself.
* ``demo``: two real releases before and after the patch set (``.ci/demo``).
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

from . import _applier, _declarations, _environment, _tooling

#: Subcommands that live in the tooling: (help, the module that adds their parser, or None: takes argv as is).
TOOLING_COMMANDS = {
    "launcher": ("the launch plan, C++ and a dry run for one kernel's metadata", "tooling.commands.launcher"),
    "upstream-patch": ("write the fix as a git-format patch for a torch_npu checkout", "tooling.upstream.cli"),
    "demo": ("two real torch_npu releases before and after the patch set, without an NPU", None),
}


def _status(args) -> int:
    if args.against_wheel or args.against_source:
        flag = "--against-wheel" if args.against_wheel else "--against-source"
        if not _tooling.installed():
            print(f"status {flag}: {_tooling.NEEDS_CHECKOUT}", file=sys.stderr)
            return 2
        from .tooling.commands import status_against

        return status_against.run(args, lambda env, rows: _table(env, rows, args.verbose))
    rows = _applier.apply(import_targets=not args.no_import)
    env = _environment.describe()
    if args.json:
        patches = [dict(r.to_json(), **(_declared(r.id) if args.verbose else {})) for r in rows]
        json.dump({"environment": env, "patches": patches}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(_table(env, rows, args.verbose))
    return 0


def _declared(patch_id: str) -> dict:
    """What the patch's declaration says about it, beyond its state (``--verbose``)."""
    decl = next((d for d in _declarations.load() if d.id == patch_id), None)
    if decl is None:
        return {}
    return {"title": decl.title, "why": decl.why, "upstream": decl.upstream, "remove_when": decl.remove_when}


def _table(env: dict, rows, verbose: bool = False) -> str:
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
        if verbose:
            declared = _declared(r.id)
            for key, label in (("why", "needed"), ("upstream", "upstream"), ("remove_when", "remove when")):
                if declared.get(key):
                    out.append(f"    {label + ':':<13}{declared[key]}")
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
    st.add_argument("--verbose", action="store_true",
                    help="also each patch's declaration: why it is needed, upstream, when it can be removed")
    st.set_defaults(func=_status)
    from . import selftest

    selftest.add_parser(sub)  # `selftest`: the acceptance checks on this machine
    tooling = _tooling.installed()
    for name, (what, module) in TOOLING_COMMANDS.items():
        if tooling and module is not None:  # the command's own parser, from the checkout's tooling
            importlib.import_module(f"{__package__}.{module}").add_parser(sub)
        else:  # parsed by the command itself (demo), or answered in main() where the tooling is not installed
            sub.add_parser(name, help=what if tooling else f"{what} (needs a repository checkout)", add_help=False)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv else None
    if command in TOOLING_COMMANDS:  # handed to the tooling, only when run: nothing else imports it
        if not _tooling.installed():
            print(f"{command}: {_tooling.NEEDS_CHECKOUT}", file=sys.stderr)
            return 2
        if TOOLING_COMMANDS[command][1] is None:
            from .tooling.commands import demo

            return demo.main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except _declarations.DeclarationError as exc:  # a broken install: one line, not a traceback
        print(f"{args.command}: {exc}", file=sys.stderr)
        return 1
