"""What a maintainer runs from a checkout: ``demo`` (``.ci/demo``: two real releases before and after the patch
set), ``launcher`` (one kernel's plan, its C++, a dry run, the scenarios on a release's own runtime),
``status_against`` (``status --against-wheel/--against-source``) and ``selftest_launchers`` (the selftest's
checks on the sample launchers; the selftest itself is the runtime's, ``selftest.py``). May import every other
room.
"""
