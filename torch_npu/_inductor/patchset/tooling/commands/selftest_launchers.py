"""The selftest's checks on the sample kernels' launchers (``codegen``, ``simulation``): tooling, because the
samples, the launcher writer and the host ACL library live in the repository, not in a user's install.

``selftest.py`` (the runtime's command) hands these two checks here, and skips them, saying why, where the
tooling is not installed.
"""
from __future__ import annotations

from pathlib import Path

from ..._check import CheckFailed, CheckSkipped
from ..._read_back import launches_in, read_back
from ...launch_plan import plan_from_metadata
from ..sim import launcher_writer as lc
from ..sim.samples import SAMPLES


def check_codegen() -> tuple[str, dict]:
    """Each sample kernel's launcher (``launcher_writer.launcher_source``: ``call_<k>`` ending in
    ``launchKernel`` and the release), read back as a generated wrapper is."""
    wrong, taking = [], 0
    for s in SAMPLES:
        plan = plan_from_metadata(s.metadata, kernel=s.kernel)
        site = lc.LaunchSite(block_clamp=s.block_clamp, has_ffts=s.has_ffts)
        launches = launches_in(lc.launcher_source(plan, site, lc.args_from_signature(s.signature)))
        if list(launches) != [lc.launcher_function_name(plan)[len("call_"):]]:
            wrong.append(f"{s.key}: launcher functions {sorted(launches)}")
            continue
        read = read_back(next(iter(launches.values())), plan.needs_resources and not site.simt(plan))
        taking += read["takes_memory"]
        wrong += [f"{s.key}: {p}" for p in read["problems"]]
    if wrong:
        raise CheckFailed("; ".join(wrong))
    return (f"{len(SAMPLES)} sample kernels: the {taking} that need memory take it before the launch lambda and "
            "keep it for the thread's next launch on the stream (handed after launchKernel), nothing is "
            "allocated inside a lambda, the others take none", {})


def check_simulation(version: str, library: Path) -> tuple[str, dict]:
    """The sample launchers, as this patch set writes them, on the installed torch_npu release ``version``'s own
    runtime (its task queue and caching allocator, ``library``) over the host ACL library, a test double of CANN
    loaded only into the child process ``releases/real_sources.py`` starts: never into this one."""
    from ..releases import real_artifacts, real_sources

    jobs = []
    for s in SAMPLES:
        plan = plan_from_metadata(s.metadata, kernel=s.kernel)
        site = lc.LaunchSite(block_clamp=s.block_clamp, has_ffts=s.has_ffts)
        jobs.append(real_sources.job(s.key, plan, site, lc.args_from_signature(s.signature), s.grid))
    try:
        with real_artifacts.installed(version, library.parents[2]):  # these files, not the released wheel
            runs = real_sources.run(version, jobs)
    except Exception as exc:  # said in one line: the release could not run here
        raise CheckSkipped(f"torch_npu {version}'s own runtime could not run here: "
                           f"{real_sources.first_line(str(exc)) or type(exc).__name__}") from exc
    bad = {k: [p for la in r["1"]["launches"] for p in la["problems"]] + r["1"]["errors"]
           + ([r["1"]["notes"]] if r["1"]["notes"] else []) for k, r in runs.items() if not r["1"]["ok"]}
    if bad:
        raise CheckFailed(f"launches on torch_npu {version}'s own runtime went wrong: {bad}")
    return (f"{len(jobs)} sample kernels, each launched twice on torch_npu {version}'s own task queue and caching "
            f"allocator (the installed {library}, over the host ACL library: a test double of CANN, in a child "
            "process): every kernel got disjoint, sized, initialised memory", {"installed_library": str(library)})
