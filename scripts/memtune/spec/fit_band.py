"""The fit band shared by the estimate's verdict and the planner's default headroom.

A constant of its own module because ``plan_memory.py --help`` prints it as the default of
``--headroom``, and --help must load none of the estimator (start-up time; test_bootstrap).
"""

from __future__ import annotations

#: Free share of the GPU below which a fitting run is BORDERLINE (and the planner's default
#: ``--headroom``).
BORDERLINE_SHARE = 0.10
