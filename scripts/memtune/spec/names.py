"""Megatron-Core's enumerated option values, importable without the spec dataclasses.

Every helper's command line offers ``--fp8 {recipe}``; the option decorators need the names
when the command is defined, that is on ``--help`` too, and importing them from run_spec
would build ModelSpec and RunSpec (the largest dataclasses) before the help is printed.
"""

#: Megatron-Core's Fp8Recipe names (megatron/core/enums.py), which Megatron Bridge's
#: mixed-precision recipes map to; any other name is refused at start-up.
FP8_RECIPES = ("delayed", "tensorwise", "mxfp8", "blockwise")
#: Megatron-Core's ``cross_entropy_fusion_impl`` values (TransformerConfig).
CROSS_ENTROPY_FUSION_IMPLS = ("native", "te")
