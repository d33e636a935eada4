"""What a launch costs on torch_npu's own runtime: the floor, torch_npu's own fix and the patch set, side by side.

Released wheels over the host ACL library (a test double of CANN, loaded only into the benchmark's subprocesses):
``torch_npu/_inductor/patchset/tooling/releases/real_runtime_bench.py`` does the work; ``--help`` lists its options.
``--real-runtime`` is accepted and changes nothing: the simulation-only run it once chose against is retired
(benchmarks/README.md says why).

    python benchmarks/launch_overhead.py [--real-runtime] [--quick] [--json PATH] ...
"""
from __future__ import annotations

import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    from torch_npu._inductor.patchset.tooling.releases import real_runtime_bench

    return real_runtime_bench.main([x for x in argv if x != "--real-runtime"])


if __name__ == "__main__":
    sys.exit(main())
