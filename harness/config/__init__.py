"""Configuration: one TOML file (`tickwork.toml`) plus environment overrides.

A foundation module every stage may import, so it imports none of them: the file's
sections and their validation live in `settings`, the `[governor]` section with the
`GOV_*` names of earlier governors in `governor`. Both read the governor's limits from
`harness.contracts`, the plain data every part shares.
"""

from __future__ import annotations

from harness.config.budgets import host_of, legacy_name
from harness.config.crontab import crontab_trigger, crontab_weekdays
from harness.config.governor import LEGACY_ENV, GovernorConfig, GovernorEnvError, with_legacy_env
from harness.config.settings import (
    CONFIG_ENV,
    CONFIG_FILENAME,
    HOME,
    LEVEL_NAME,
    MIN_TOKEN_LENGTH,
    AgentsConfig,
    AlertKind,
    AlertsConfig,
    ApiConfig,
    ConfigError,
    DigestConfig,
    Durability,
    ExecutorConfig,
    IanaZone,
    LevelConfig,
    Overlap,
    PathsConfig,
    PriceOverride,
    RagConfig,
    RetentionConfig,
    RoutingConfig,
    RunnerConfig,
    Scheduled,
    Settings,
    StoreConfig,
    config_path,
    load_settings,
    nul_paths,
    parse_interval,
    tick_page,
)

__all__ = [
    "CONFIG_ENV",
    "CONFIG_FILENAME",
    "HOME",
    "LEGACY_ENV",
    "LEVEL_NAME",
    "MIN_TOKEN_LENGTH",
    "AgentsConfig",
    "AlertKind",
    "AlertsConfig",
    "ApiConfig",
    "ConfigError",
    "DigestConfig",
    "Durability",
    "ExecutorConfig",
    "GovernorConfig",
    "GovernorEnvError",
    "IanaZone",
    "LevelConfig",
    "Overlap",
    "PathsConfig",
    "PriceOverride",
    "RagConfig",
    "RetentionConfig",
    "RoutingConfig",
    "RunnerConfig",
    "Scheduled",
    "Settings",
    "StoreConfig",
    "config_path",
    "crontab_trigger",
    "crontab_weekdays",
    "host_of",
    "legacy_name",
    "load_settings",
    "nul_paths",
    "parse_interval",
    "tick_page",
    "with_legacy_env",
]
