"""``python -m torch_npu._inductor.patchset upstream-patch``: thin glue over :mod:`.upstream_patch`.

Exit status: 0 written; 1 the checkout (or every branch) already carries a fix, nothing written;
2 bad input (not a checkout, dirty tree, unknown layout or branch, no git identity, an output folder
that does not exist), nothing written. Errors name the checkout as given.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from . import patch as up


def add_parser(sub) -> None:
    p = sub.add_parser("upstream-patch", help="write the fix as a git-format patch for a torch_npu checkout")
    p.add_argument("--checkout", required=True, metavar="DIR", help="a torch_npu source checkout (git work tree)")
    p.add_argument("--out", metavar="FILE", help="where the patch goes (default: standard output)")
    p.add_argument("--branches", metavar="B1,B2,...", help="patch these branches of DIR's repository instead")
    p.add_argument("--out-dir", metavar="DIR2", help="with --branches: where <branch>.patch files go")
    p.add_argument("--author", help="'Name <email>' of the commit (default: the checkout's git user.name / "
                   "user.email)")
    p.add_argument("--json", action="store_true", help="with --branches: the table as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    try:
        if args.branches:
            return _branches(args)
        if args.out_dir:
            raise up.UpstreamPatchError("--out-dir goes with --branches; for one checkout use --out FILE")
        if args.out and not Path(args.out).resolve().parent.is_dir():
            raise up.UpstreamPatchError(f"--out {args.out}: folder {Path(args.out).parent} does not exist")
        patch = up.make_patch(args.checkout, author=args.author)
    except up.AlreadyFixed as exc:
        print(f"upstream-patch: {args.checkout}: {exc}; no patch written", file=sys.stderr)
        return 1
    except up.UpstreamPatchError as exc:
        print(f"upstream-patch: {exc}; nothing written", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).write_text(patch.text)
        added, removed = patch.lines
        print(f"{args.out}: {patch.layout} layout, {len(patch.files)} files, +{added} -{removed}; "
              f"apply with: git -C {args.checkout} am {Path(args.out).resolve()}", file=sys.stderr)
    else:
        sys.stdout.write(patch.text)
    return 0


def _branches(args) -> int:
    if not args.out_dir:
        raise up.UpstreamPatchError("--branches needs --out-dir DIR2 (one <branch>.patch each)")
    names = [b.strip() for b in args.branches.split(",") if b.strip()]
    if not names:
        raise up.UpstreamPatchError(f"--branches {args.branches!r} names no branch")
    rows = up.for_branches(args.checkout, names, args.out_dir, author=args.author)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(up.table(rows))
    applied = [r for r in rows if r["result"] == "applies"]
    if any(r["result"] == "cannot apply" for r in rows):
        return 2
    return 0 if applied else 1
