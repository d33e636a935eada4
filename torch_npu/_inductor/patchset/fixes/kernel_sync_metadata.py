"""Placeholder until the fix lands: reports itself truthfully as not implemented."""


def probe(modules):
    raise NotImplementedError("not implemented")


def apply(modules, patcher):  # pragma: no cover - probe never says NEEDED
    raise NotImplementedError("not implemented")
