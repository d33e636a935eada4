"""The README and docs/verification.md against the tree (issue 41): a statement a reader can check by looking
at the repository is checked here, so that it fails when the code moves and the words do not.

* The README's Layout block: every name it gives exists, and a folder with lines under it has each of its entries
  named there (a folder line with nothing under it stands for its whole contents). The runtime package, the
  tooling package and each tooling room must be listed entry by entry.
* The README's patch table names every declaration in patches/, and nothing else.
* No hand-written counts in the README or docs/verification.md ("29 cases, 32 runs" went stale that way).
* One word for each thing: the retired names of the ACL double are not used, and the launch rule is referred
  to (docs/design.md, "When the block goes back"), not restated.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
VERIFICATION = ROOT / "docs" / "verification.md"
PACKAGE = "torch_npu/_inductor/patchset/"
#: Folders the Layout block must list entry by entry (the runtime, the tooling and each room of it).
LISTED_WHOLE = [PACKAGE, PACKAGE + "tooling/"] + sorted(
    f"{p.parent.relative_to(ROOT).as_posix()}/" for p in (ROOT / PACKAGE / "tooling").glob("*/__init__.py"))
#: What a folder holds that is no entry of the source tree.
NOT_ENTRIES = {"__pycache__", ".pytest_cache"}
NAME = re.compile(r"^[\w.+-]+(/[\w.+-]+)*(/|\.\w+)$")


def layout_block() -> list[str]:
    section = re.search(r"^## Layout\n(.*?)(?=^## |\Z)", README.read_text(), re.S | re.M)
    assert section, "README.md has no '## Layout' section"
    block = re.search(r"^```\n(.*?)^```", section.group(1), re.S | re.M)
    assert block, "the README's Layout section has no ``` block"
    return [ln for ln in block.group(1).splitlines() if ln.strip()]


def layout_entries() -> dict[str, list[str]]:
    """{folder path from the root ('' for the root): the names its lines give}, read by indentation (2 spaces a
    level). Each line is its names, then two or more spaces, then what they are."""
    entries: dict[str, list[str]] = {}
    stack: list[str] = []  # the folder of each open level
    for ln in layout_block():
        indent = len(ln) - len(ln.lstrip(" "))
        assert indent % 2 == 0 and indent // 2 <= len(stack), f"Layout line indented oddly: {ln!r}"
        level = indent // 2
        del stack[level:]
        names = re.split(r"\s{2,}", ln.strip(), maxsplit=1)[0].split()
        bad = [n for n in names if not NAME.match(n)]
        assert names and not bad, f"a Layout line starts with the names it describes (no wrapped lines): {ln!r}"
        parent = stack[-1] if stack else ""
        entries.setdefault(parent, []).extend(names)
        if len(names) == 1 and names[0].endswith("/"):
            stack.append(parent + names[0])
    return entries


def entries_of(folder: Path) -> set[str]:
    return {p.name + ("/" if p.is_dir() else "") for p in folder.iterdir()
            if p.name not in NOT_ENTRIES and not p.name.endswith((".pyc", ".egg-info"))}


def test_every_name_in_the_layout_exists():
    missing = [parent + n for parent, names in layout_entries().items() for n in names
               if not (ROOT / parent / n).exists() or n.endswith("/") != (ROOT / parent / n).is_dir()]
    assert not missing, f"README Layout names what the tree does not have: {missing}"


def test_a_folder_with_lines_under_it_has_every_entry_named():
    unnamed = {parent: sorted(entries_of(ROOT / parent) - set(names))
               for parent, names in layout_entries().items() if parent}
    unnamed = {k: v for k, v in unnamed.items() if v}
    assert not unnamed, f"README Layout leaves these out (name them on a line under their folder): {unnamed}"


@pytest.mark.parametrize("folder", LISTED_WHOLE)
def test_the_runtime_and_each_tooling_room_are_listed_entry_by_entry(folder):
    assert folder in layout_entries(), f"README Layout gives {folder} no lines of its own"


def test_the_patch_table_names_every_declaration():
    section = re.search(r"^## What it fixes\n(.*?)(?=^## )", README.read_text(), re.S | re.M).group(1)
    table = re.findall(r"^\| `([\w-]+)` \|", section, re.M)
    declared = sorted(p.stem for p in (ROOT / "patches").glob("*.toml"))
    assert sorted(table) == declared


COUNT = re.compile(r"\b(\d+|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve) "
                   r"(cases|runs|tests|modules|lines|files|patches|checks|scenarios|releases|rooms|sample)\b", re.I)


@pytest.mark.parametrize("doc", [README, VERIFICATION], ids=lambda p: p.name)
def test_no_hand_written_counts(doc):
    found = [m.group(0) for m in COUNT.finditer(doc.read_text())]
    assert not found, f"{doc.name} states counts no test keeps true: {found}"


#: Names the project no longer uses for its ACL double: it is the host ACL library (what a released wheel runs
#: over) or acl_sim's torch_npu stand-ins (docs/verification.md, "Words").
RETIRED_WORDS = ("host ACL simulation", "host simulation", "ACL simulation")
#: Old launch rules, said in words that no longer hold (the rule: docs/design.md, "When the block goes back").
RETIRED_RULES = ("right after `launchKernel`", "as soon as the launch is queued", "handed back right after",
                 "released right after", "lambda records the block's event", "the lambda's event")
DOCS = [README, VERIFICATION, ROOT / "docs" / "design.md", ROOT / "docs" / "real-runtime-scenarios.md"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_one_word_for_each_thing(doc):
    text = doc.read_text()
    assert not [w for w in RETIRED_WORDS if w.lower() in text.lower()], doc.name
    if doc.name != "design.md":  # where the rule is stated, in its own words
        assert not [r for r in RETIRED_RULES if r in text], doc.name


@pytest.mark.parametrize("doc", [README, VERIFICATION], ids=lambda p: p.name)
def test_the_launch_rule_is_referred_to_where_it_is_stated(doc):
    headings = [h[3:] for h in (ROOT / "docs" / "design.md").read_text().splitlines() if h.startswith("## ")]
    assert any(h.startswith("When the block goes back") for h in headings)
    assert re.search(r"design\.md\)?,? \"When the block goes back\"", doc.read_text()), doc.name


def test_links_between_the_docs_resolve():
    for doc in [README, VERIFICATION]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{doc.name} links {target}, which does not exist"
