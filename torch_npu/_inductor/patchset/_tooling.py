"""Whether the verification tooling (``tooling/``) is installed here, and the one line saying it is not.

A user's wheel carries the runtime, ``status`` and ``selftest``; the tooling (``launcher``, ``demo``,
``upstream-patch``, ``status --against-wheel/--against-source``, the selftest's sample-launcher checks)
runs from a repository checkout installed with ``pip install -e``.
"""
from __future__ import annotations

import importlib.util

PACKAGE = __package__ + ".tooling"
NEEDS_CHECKOUT = ("needs a repository checkout of torch-npu-inductor-patches (the verification tooling is not "
                  "part of a user's install: clone the repository and `pip install -e .` there)")


def installed() -> bool:
    return importlib.util.find_spec(PACKAGE) is not None
