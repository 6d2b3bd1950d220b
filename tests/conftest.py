"""Test the installed package, not the source tree.

``python -m pytest`` puts the current directory first on sys.path; from the
repository root that would import ./pyllamakv, which has no compiled core.
Unless PYLLAMAKV_LIBRARY points at a built library (development), the root
is taken off sys.path so the installed package is imported.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if not os.environ.get("PYLLAMAKV_LIBRARY") and "pyllamakv" not in sys.modules:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != ROOT]
