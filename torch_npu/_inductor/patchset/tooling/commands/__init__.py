"""What a user runs: ``demo`` (``.ci/demo``: two real releases before and after the patch set),
``selftest`` (the acceptance kit for an Ascend machine), ``launcher`` (one kernel's plan, its C++,
a dry run, the scenarios on a release's own runtime). May import every other room.
"""
