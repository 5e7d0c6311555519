"""Checks of a configuration before anything starts: each finding names the key to change.

``findings``: one result and its level; ``validation``: the whole check of one YAML (``config
validate``, ``launch``); ``environment``: what this host must have; ``launch``: the YAML's
``sglang:`` section against our tiers.
"""
