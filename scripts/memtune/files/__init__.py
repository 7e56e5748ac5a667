"""File and YAML plumbing shared by every group: package paths, bounded text reading, safe
YAML loading, named write errors.
"""
