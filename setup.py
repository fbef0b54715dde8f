"""Install-time build of the load generator's native read pass (``actors/loadgen/fastread.c``).

Everything else about the package is in pyproject.toml; this file only declares the C file
as an optional extension, so that pip builds it with the machine's C compiler when the
package is installed, never at run time:

- ``pip install .`` puts ``actors/loadgen/_fastread<EXT_SUFFIX>`` (e.g.
  ``_fastread.cpython-311-x86_64-linux-gnu.so``) next to ``fastread.py`` in site-packages;
  ``pip install -e .`` (and ``python setup.py build_ext --inplace``) builds it in place,
  into ``actors/loadgen/`` of the checkout, where ``fastread.py`` looks for it.
- ``optional=True``: with no C compiler, or one that fails, setuptools prints a warning
  and the install goes on without the library; ``fastread.reader()`` is then None (the
  pure-Python pass runs) and ``fastread.why_not()`` says so.

``fastread.c`` is a plain C library that ``fastread.py`` loads with ctypes, not a Python
extension module: it has no ``PyInit__fastread`` and is never imported. Building it as an
``Extension`` works unchanged on Linux (``cc -shared -fPIC``; Unix linkers do not check
the ``PyInit_<name>`` symbol setuptools lists for export). The one thing left is that
list itself, which only Windows linkers act on: ``PlainLibrary`` empties it, so no
platform asks the library for a Python entry point it does not have. No C shim, no
second source. The extension is only declared on Linux (``fastread.c`` uses epoll; the
native pass is Linux-only), so elsewhere there is nothing to build and nothing to warn
about.
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class PlainLibrary(build_ext):
    """``build_ext`` for a ctypes library: no Python entry point to export."""

    def get_export_symbols(self, ext: Extension) -> list[str]:
        return []


FASTREAD = Extension("actors.loadgen._fastread", sources=["actors/loadgen/fastread.c"],
                     extra_compile_args=["-O2"], optional=True)

setup(ext_modules=[FASTREAD] if sys.platform.startswith("linux") else [],
      cmdclass={"build_ext": PlainLibrary})
