"""Read a training log and say which out-of-memory failure it shows and what to change (the
diagnose helper's pipeline).
"""
