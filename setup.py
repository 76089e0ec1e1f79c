"""The compiled parts of the distribution, built when a C compiler is at hand. Everything else
about it is in pyproject.toml.

- ``aiorocketmq.protocol._speedups``: the wire codecs in C (``protocol/_speedups.c``);
  ``aiorocketmq.protocol.speedups`` decides whether they run.
- The broker's hot modules (``aiorocketmq/compiled.py`` lists them) compiled with mypyc from
  their typed Python sources; ``aiorocketmq.compiled`` decides whether they run.

Both are optional, as uvloop's, msgpack's and aiokafka's extensions are: when a part cannot be
built (no compiler, no Python headers, mypyc missing) the build warns and goes on, and the
package runs the Python code. ``AIOROCKETMQ_MYPYC=0`` skips the mypyc build (a faster
install; the C codecs are still built).

Two more commands are set here: ``pip install -e .`` installs a .pth line that type checkers
follow (:class:`EditableWheel`), and an sdist build remakes aiorocketmq/'s links to the
top-level folders, which an sdist does not keep.
"""

from __future__ import annotations

import os
import runpy
import sys
import tomllib
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.editable_wheel import editable_wheel

ROOT = Path(__file__).resolve().parent
COMPILED = runpy.run_path(str(ROOT / "aiorocketmq" / "compiled.py"))


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed compile into a warning instead of a failed install.

    The mypyc modules are skipped as a whole when their shared library fails, since a module's
    extension cannot load without it; a build that has them records the SHA-256 of each
    source beside the library, so that an editable checkout notices a module edited since.
    """

    def finalize_options(self) -> None:
        # mypyc type-checks and generates C when asked for its extensions: done here, once a
        # build needs them, rather than when setup.py is loaded (pip loads it for metadata too).
        modules = self.distribution.ext_modules
        # The digests are of the sources mypyc is about to read: a source edited while the
        # build runs is then seen as changed since, not taken for the one compiled.
        digest, source = COMPILED["source_digest"], COMPILED["source_path"]
        self._digests = [f"{module} {digest(source(module))}" for module in COMPILED["MODULES"]]
        if not any(ext.name in COMPILED["MODULES"] for ext in modules):
            modules.extend(mypyc_extensions())
        super().finalize_options()

    def run(self) -> None:
        self._group_failed = False
        try:
            super().run()
        except Exception as exc:  # no compiler at all (DistutilsPlatformError and kin)
            self._warn("compiled parts", exc)
            return
        if any(ext.name in COMPILED["MODULES"] for ext in self.extensions) and not self._group_failed:
            self._record_sources()

    def build_extension(self, ext: Extension) -> None:
        if ext.name in COMPILED["MODULES"] and self._group_failed:
            return
        try:
            super().build_extension(ext)
        except Exception as exc:  # a compiler or header failure
            if ext.name == COMPILED["LIBRARY"]:
                self._group_failed = True
            self._warn(ext.name, exc)

    def _record_sources(self) -> None:
        library = Path(self.get_ext_fullpath(COMPILED["LIBRARY"]))
        (library.parent / COMPILED["SOURCES_FILE"]).write_text("\n".join(self._digests) + "\n")

    @staticmethod
    def _warn(what: str, exc: Exception | str) -> None:
        print(
            f"WARNING: aiorocketmq's {what} were not built ({exc}); the Python code will run instead",
            file=sys.stderr,
        )


class EditableWheel(editable_wheel):
    """``pip install -e .`` that static type checkers can follow.

    For a layout like this one (subpackages mapped from other folders) setuptools installs an
    import hook, which mypy and pyright do not run: a project importing aiorocketmq from an
    editable install type-checked as if it were missing. aiorocketmq/ holds the whole package
    through its links, so a .pth line naming a folder that holds only a link to it serves the
    interpreter and type checkers alike, without putting the repository's other top-level
    folders (tests, tools, client...) on ``sys.path`` as the "compat" mode would. The folder is
    ``build/editable``; an explicit ``--config-settings editable_mode=...`` is obeyed.
    """

    def _select_strategy(self, name: str, tag: str, build_lib: Any) -> Any:
        if self.mode:
            return super()._select_strategy(name, tag, build_lib)
        try:  # setuptools' own .pth strategy, the one its "compat" mode uses
            from setuptools.command.editable_wheel import _StaticPth

            folder = ROOT / "build" / "editable"
            folder.mkdir(parents=True, exist_ok=True)
            link = folder / "aiorocketmq"
            if not link.is_symlink():
                link.symlink_to(Path("..", "..", "aiorocketmq"), target_is_directory=True)
        except (ImportError, OSError) as exc:  # an older setuptools, or no symlinks here
            print(f"WARNING: editable install through an import hook ({exc})", file=sys.stderr)
            return super()._select_strategy(name, tag, build_lib)
        return _StaticPth(self.distribution, name, [folder])


def link_package_folders() -> None:
    """aiorocketmq/'s links to the top-level folders, made where they are missing: an sdist
    holds the folders but not the links, which mypyc's paths go through."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in mapping.items():
        link = ROOT.joinpath(*package.split("."))
        if package != "aiorocketmq" and not link.exists():
            link.symlink_to(Path("..", folder), target_is_directory=True)


def mypyc_extensions() -> list[Extension]:
    """The hot modules as mypyc extensions, or none when mypyc is off or cannot run."""
    if os.environ.get("AIOROCKETMQ_MYPYC", "1").strip() == "0":
        return []
    try:
        link_package_folders()
        from mypyc.build import mypycify

        # The paths go through aiorocketmq/'s links to the top-level folders, so that mypyc
        # names each module as it is imported: aiorocketmq.broker..., not broker....
        paths = [str(COMPILED["source_path"](module, Path("aiorocketmq"))) for module in COMPILED["MODULES"]]
        return list(mypycify(paths, opt_level="3", group_name=COMPILED["GROUP"]))
    except SystemExit:  # mypy's type check failed; it printed why
        OptionalBuildExt._warn("mypyc-compiled modules", "mypy's check failed, see above")
        return []
    except Exception as exc:  # mypyc missing or broken
        OptionalBuildExt._warn("mypyc-compiled modules", exc)
        return []


setup(
    ext_modules=[
        Extension(
            "aiorocketmq.protocol._speedups",
            sources=["protocol/_speedups.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ],
    cmdclass={"build_ext": OptionalBuildExt, "editable_wheel": EditableWheel},
)
