"""The compiled hot paths (``aiorocketmq.protocol._speedups``), built when a C compiler is at
hand. Everything else about the distribution is in pyproject.toml.

The extension is optional, as uvloop's, msgpack's and aiokafka's are: when it cannot be built
(no compiler, no Python headers) the build warns and goes on, and the package runs its
pure-Python codecs (``aiorocketmq.protocol.speedups`` decides which are active).
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed compile into a warning instead of a failed install."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all (DistutilsPlatformError and kin)
            self._warn(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # a compiler or header failure
            self._warn(exc)

    @staticmethod
    def _warn(exc: Exception) -> None:
        print(
            f"WARNING: aiorocketmq's compiled codecs were not built ({exc}); "
            "the pure-Python codecs will be used",
            file=sys.stderr,
        )


setup(
    ext_modules=[
        Extension(
            "aiorocketmq.protocol._speedups",
            sources=["protocol/_speedups.c"],
            extra_compile_args=["-O2"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
