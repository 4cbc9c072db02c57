"""The versions of what virtual time patches that the patches were verified
on (sim/runtime/patches.py). A module of its own, importing nothing, so that
`coordsim` can refuse an untested interpreter before it imports anything."""

from __future__ import annotations

from typing import Final

__all__ = ["VERIFIED_ANYIO", "VERIFIED_PYTHON"]

#: (major, minor) of the CPython versions the asyncio patches were verified on;
#: pyproject.toml's `requires-python` declares the same.
VERIFIED_PYTHON: Final = ((3, 11),)
#: (major, minor) of the anyio versions the anyio patches were verified on;
#: pyproject.toml pins anyio to these.
VERIFIED_ANYIO: Final = ((4, 16),)
