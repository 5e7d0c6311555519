"""Configuration: the YAML schema and how it is loaded (see schema.py for every key)."""

from .errors import ConfigError
from .loader import (
    CONFIG_ENV,
    LoadedConfig,
    deep_merge,
    load_backend_config,
    load_config_file,
    read_yaml_file,
    validate_config,
)
from .schema import BackendConfig, DramTierConfig, IoConfig, MetricsConfig, NamespaceConfig, TiersConfig

__all__ = [
    "CONFIG_ENV",
    "BackendConfig",
    "ConfigError",
    "DramTierConfig",
    "IoConfig",
    "LoadedConfig",
    "MetricsConfig",
    "NamespaceConfig",
    "TiersConfig",
    "deep_merge",
    "load_backend_config",
    "load_config_file",
    "read_yaml_file",
    "validate_config",
]
