"""Hugging Face checkpoints in our hooked model: where the weights come from (the families are model/families).

load.py:  local folders (safetensors only, sharded too) and hub ids → LoadedModel, through model/families' table.
cache.py: the supported models already in the local Hugging Face cache (offline, read-only).
"""
