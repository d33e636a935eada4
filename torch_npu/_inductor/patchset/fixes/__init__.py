"""One module per patch: ``probe(modules)`` and ``apply(modules, patcher)``."""
