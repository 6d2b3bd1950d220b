"""The only cffi user: loads the core library in ABI mode.

The declarations come from the installed header ``llamakv.h`` (the text between
its two ``LKV_CDEF`` marker comments), so the header is the single source of the
ABI. A library whose ``lkv_abi_version()`` differs from the header's
``LKV_ABI_VERSION`` is refused.

``PYLLAMAKV_LIBRARY`` (a path to the shared library) overrides the packaged one;
the header is then looked up beside it, in the package, or in the source tree.
"""
from __future__ import annotations

import importlib.resources
import os
import re
from pathlib import Path

import cffi

LIB_NAME = "libllamakv.so"
HEADER_NAME = "llamakv.h"


class LibraryError(ImportError):
    """The core library or its header is missing or does not match."""


def _package_file(name: str) -> Path | None:
    try:
        p = importlib.resources.files("pyllamakv") / name
        if p.is_file():
            return Path(str(p))
    except (ModuleNotFoundError, FileNotFoundError):
        pass
    return None


def _find_library() -> Path:
    env = os.environ.get("PYLLAMAKV_LIBRARY")
    if env:
        p = Path(env)
        if not p.is_file():
            raise LibraryError(f"PYLLAMAKV_LIBRARY={env!r} is not a file")
        return p
    p = _package_file(LIB_NAME)
    if p is None:
        raise LibraryError(
            f"{LIB_NAME} is not installed inside the pyllamakv package; "
            "install the package with `pip install .` (it compiles the core)")
    return p


def _find_header(lib_path: Path) -> Path:
    here = Path(__file__).resolve().parent
    for cand in (lib_path.parent / HEADER_NAME, _package_file(HEADER_NAME),
                 here.parent.parent / "native" / "include" / HEADER_NAME):
        if cand is not None and cand.is_file():
            return cand
    raise LibraryError(f"{HEADER_NAME} not found beside {lib_path} nor in the package")


def _cdef_text(header: str) -> tuple[str, int]:
    m = re.search(r"/\* LKV_CDEF_BEGIN \*/(.*)/\* LKV_CDEF_END \*/", header, re.S)
    if not m:
        raise LibraryError("llamakv.h lacks the LKV_CDEF_BEGIN/END markers")
    v = re.search(r"#define\s+LKV_ABI_VERSION\s+(\d+)", header)
    if not v:
        raise LibraryError("llamakv.h lacks LKV_ABI_VERSION")
    return m.group(1), int(v.group(1))


def declared_functions(cdef: str) -> list[str]:
    """Names of the functions declared in the cdef text (for the ABI test)."""
    return re.findall(r"\b(lkv_\w+)\s*\(", re.sub(r"/\*.*?\*/", "", cdef, flags=re.S))


LIB_PATH = _find_library()
HEADER_PATH = _find_header(LIB_PATH)
CDEF, ABI_VERSION = _cdef_text(HEADER_PATH.read_text())

ffi = cffi.FFI()
ffi.cdef(CDEF)
lib = ffi.dlopen(str(LIB_PATH))

if lib.lkv_abi_version() != ABI_VERSION:
    raise LibraryError(
        f"{LIB_PATH} has ABI version {lib.lkv_abi_version()}, the header "
        f"{HEADER_PATH} declares {ABI_VERSION}; reinstall pyllamakv")


def last_error() -> str:
    return ffi.string(lib.lkv_last_error()).decode("utf-8", "replace")
