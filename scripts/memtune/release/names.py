"""Names the release code and the sign_skill CLI share, in a module that imports nothing.

Why apart: ``sign_skill.py --help`` prints the signature's file name, and help must not load
the shipped-file walker (start-up time, benchmarks/startup_speed.py).
"""

from __future__ import annotations

#: The signature file at the package root.
SIGNATURE_NAME = "skill.oms.sig"
