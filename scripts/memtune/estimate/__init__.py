"""Memory arithmetic and planning: the estimator, the planner and its ladder, throughput
costs, ZeRO regather, plan reports.
"""
