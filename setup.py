"""Packaging glue that pyproject.toml cannot express.

* Only ``torch_npu._inductor.patchset`` (and its subpackages) are packages of
  ours: ``torch_npu`` and ``torch_npu._inductor`` stay namespace portions, so
  installing beside a real torch_npu adds files and replaces none.
* ``patches/*.toml`` is the single source of the patch declarations; a build
  copies them into the package (``_declarations/``) so an installed wheel has
  them, while an editable install reads ``patches/`` in place.
* A user's wheel (``pip install .``) carries the runtime, ``status`` and
  ``selftest`` only: ``tooling/`` (the verification tooling) is no package of
  the distribution. An editable install (``pip install -e .``, what the tests
  and maintainers use) maps the package's folder, so ``tooling/`` imports from
  the checkout there.
"""
import pathlib
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = pathlib.Path(__file__).resolve().parent
PKG = "torch_npu._inductor.patchset"


class build_py_with_declarations(build_py):
    def run(self):
        if not self.editable_mode:  # a build/ left by an earlier layout (tooling included) would ship as well
            shutil.rmtree(pathlib.Path(self.build_lib, *PKG.split(".")), ignore_errors=True)
        super().run()
        if self.editable_mode:
            return
        dest = pathlib.Path(self.build_lib, *PKG.split("."), "_declarations")
        dest.mkdir(parents=True, exist_ok=True)
        for toml in sorted((ROOT / "patches").glob("*.toml")):
            shutil.copy2(toml, dest / toml.name)


setup(
    packages=[PKG, PKG + ".fixes"],
    py_modules=["torch_npu_patchset_autoload"],
    package_data={PKG: ["csrc/**/*"]},
    include_package_data=False,
    cmdclass={"build_py": build_py_with_declarations},
)
