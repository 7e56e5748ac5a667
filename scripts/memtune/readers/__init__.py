"""Turn a user's files (HF config, Megatron flags, Bridge YAML, launch scripts, allocator
settings) into specs and run views.
"""
