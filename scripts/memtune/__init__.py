"""memtune: the library behind the nemo-mbridge-perf-memory-tuning helper scripts.

The helpers in ``scripts/*.py`` are thin entry points; the arithmetic, parsing and
reporting live here so that an installed skill copy can run ``python3 scripts/x.py``
without installing this project as a package.
"""

__version__ = "0.1.0"
