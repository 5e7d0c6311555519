"""The YAML a user writes: presets validate, every bad key is named, sources resolve in order."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hicache_mooncake.config import CONFIG_ENV, ConfigError, load_backend_config, validate_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize("preset", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_every_shipped_preset_validates(preset):
    data = yaml.safe_load((CONFIGS / preset).read_text())
    cfg = validate_config(data, source=preset)
    assert cfg.module_path == "hicache_mooncake.backend"
    assert cfg.class_name == "HiCacheMooncakeBackend"


def test_default_preset_carries_sglang_loader_keys():
    data = yaml.safe_load((CONFIGS / "default.yaml").read_text())
    for key in ("backend_name", "module_path", "class_name", "interface_v1"):
        assert key in data


@pytest.mark.parametrize(
    ("doc", "path", "reason"),
    [
        ({"tiers": {"dram": {"capacity": "64XB"}}}, "tiers.dram.capacity", "unknown unit"),
        ({"tiers": {"dram": {"capcity": "1GiB"}}}, "tiers.dram.capcity", "unknown key"),
        ({"tiers": {"dram": {"slab_size": 1000}}}, "tiers.dram", "multiple of 4096"),
        ({"tiers": {"dram": {"capacity": "1MiB"}}}, "tiers.dram", "at least one slab_size"),
        ({"io": {"timeout_s": 0}}, "io.timeout_s", "greater than 0"),
        ({"interface_v1": 7}, "interface_v1", "less than or equal to 1"),
        ({"bogus": 1}, "bogus", "unknown key"),
        ({"metrics": {"port": "http"}}, "metrics.port", "integer"),
        ({"tiers": {"dram": {"prefault": "perhaps"}}}, "tiers.dram.prefault", "boolean"),
        ({"tiers": {"host_cache": "maybe"}}, "tiers.host_cache", "'auto', 'on' or 'off'"),
        ({"host_cache": {"dir": "relative/dir"}}, "host_cache.dir", "absolute path"),
        ({"host_cache": {"name": "a/b"}}, "host_cache.name", "pattern"),
        ({"host_cache": {"idle_timeout_s": -1}}, "host_cache.idle_timeout_s", "greater than or equal to 0"),
    ],
)
def test_bad_values_name_the_key_path_and_reason(doc, path, reason):
    with pytest.raises(ConfigError) as info:
        validate_config(doc)
    message = str(info.value)
    assert f"  {path}: " in message
    assert reason in message


def test_all_errors_are_reported_at_once():
    with pytest.raises(ConfigError) as info:
        validate_config({"tiers": {"dram": {"capacity": "x", "policy_typo": 1}}, "io": {"timeout_s": -1}})
    text = str(info.value)
    assert "tiers.dram.capacity" in text and "tiers.dram.policy_typo" in text and "io.timeout_s" in text


def test_sglang_consumed_keys_are_accepted():
    cfg = validate_config(
        {"prefetch_threshold": 256, "hicache_storage_pass_prefix_keys": True, "tp_lcm_size": 2}
    )
    assert cfg.prefetch_threshold == 256


def test_inline_json_pointing_at_yaml_merges_inline_over_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("tiers:\n  policy: lru\n  dram:\n    capacity: 256MiB\nnamespace:\n  tenant: a\n")
    cfg = load_backend_config({"config_file": str(f), "namespace": {"tenant": "b"}}, environ={})
    assert cfg.tiers.dram.capacity == 256 << 20
    assert cfg.tiers.policy == "lru"
    assert cfg.namespace.tenant == "b"


def test_env_var_overrides_the_config_path(tmp_path):
    f = tmp_path / "prod.yaml"
    f.write_text("tiers:\n  dram:\n    capacity: 128MiB\n")
    cfg = load_backend_config(
        {"module_path": "hicache_mooncake.backend", "tiers": {"dram": {"capacity": "8GiB"}}},
        environ={CONFIG_ENV: str(f)},
    )
    assert cfg.tiers.dram.capacity == 128 << 20


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, "does not exist"),
        ("tiers: [unclosed", "not valid YAML"),
        ("- a list\n- not a mapping\n", "must be a mapping"),
        ("tiers:\n  dram:\n    capacity: lots\n", "tiers.dram.capacity"),
    ],
)
def test_bad_files_are_refused_with_the_file_named(tmp_path, content, match):
    f = tmp_path / "bad.yaml"
    if content is not None:
        f.write_text(content)
    with pytest.raises(ConfigError, match=match) as info:
        load_backend_config({"config_file": str(f)}, environ={})
    assert "bad.yaml" in str(info.value)


def test_unknown_policy_is_refused_with_the_known_ones():
    with pytest.raises(ConfigError, match=r"tiers.policy: unknown policy 'nope'; known: .*lru"):
        validate_config({"tiers": {"policy": "nope"}})


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"tiers": {"placement": "per_tier"}}, r"tiers: 'placement' was removed: one placement path"),
        ({"tiers": {"dram": {"policy": "lru"}}}, r"tiers.dram: 'policy' was removed: .*use tiers.policy"),
        (
            {"tiers": {"dram": {"policy_options": {}}}},
            r"'policy_options' was removed: use tiers.policy_options",
        ),
    ],
)
def test_removed_keys_say_what_replaces_them(data, match):
    with pytest.raises(ConfigError, match=match):
        validate_config(data)


def test_docs_configuration_reference_is_current():
    from hicache_mooncake.config.reference import markdown

    page = (CONFIGS.parent / "docs" / "configuration.md").read_text()
    assert markdown() in page, (
        "regenerate: python -m hicache_mooncake.config.reference --write docs/configuration.md"
    )
