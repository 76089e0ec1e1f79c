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
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

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
        digest, source = COMPILED["source_digest"], COMPILED["source_path"]
        lines = [f"{module} {digest(source(module))}" for module in COMPILED["MODULES"]]
        (library.parent / COMPILED["SOURCES_FILE"]).write_text("\n".join(lines) + "\n")

    @staticmethod
    def _warn(what: str, exc: Exception | str) -> None:
        print(
            f"WARNING: aiorocketmq's {what} were not built ({exc}); the Python code will run instead",
            file=sys.stderr,
        )


def mypyc_extensions() -> list[Extension]:
    """The hot modules as mypyc extensions, or none when mypyc is off or cannot run."""
    if os.environ.get("AIOROCKETMQ_MYPYC", "1").strip() == "0":
        return []
    try:
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
    cmdclass={"build_ext": OptionalBuildExt},
)
