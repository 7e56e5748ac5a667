"""What a model and a run are (ModelSpec, RunSpec, presets, GPUs, Hydra overrides): the
shared vocabulary every pipeline speaks.
"""
