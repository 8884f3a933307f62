"""Configuration: one TOML file (`tickwork.toml`) plus environment overrides.

A foundation module every stage may import, so it imports none of them: the file's
sections and their validation live in `settings`, the `[governor]` section with the
`GOV_*` names of earlier governors in `governor`. Both read the governor's limits from
`harness.contracts`, the plain data every part shares. Where the file is, and where the
service running it answers, live in `location`, on the standard library alone.

Every name is loaded on first use (`harness.fronts`): `tickwork status` reads the
location and asks the running service before it would pay for pydantic-settings.
"""

from __future__ import annotations

import typing

from harness import fronts

if typing.TYPE_CHECKING:
    from harness.config.budgets import (
        host_of,
        legacy_name,
        unpayable,
    )
    from harness.config.crontab import (
        DST_REPEATED,
        DST_SKIPPED,
        DstRepeated,
        DstSkipped,
        WallClockCron,
        crontab_trigger,
        crontab_weekdays,
    )
    from harness.config.governor import (
        LEGACY_ENV,
        GovernorConfig,
        GovernorEnvError,
        with_legacy_env,
        without_credentials,
    )
    from harness.config.location import (
        CONFIG_ENV,
        CONFIG_FILENAME,
        ENV_PREFIX,
        config_path,
        service_socket,
    )
    from harness.config.price_card import PriceCard, load_price_card
    from harness.config.settings import (
        HOME,
        LEVEL_NAME,
        MIN_TOKEN_LENGTH,
        AgentsConfig,
        AlertKind,
        AlertsConfig,
        ApiConfig,
        ConfigError,
        DigestConfig,
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
        load_settings,
        nul_paths,
        parse_interval,
        tick_page,
    )
    from harness.config.windows import Exclusion
    from harness.config.wording import one_line, plain

__getattr__, __all__ = fronts.declared(__name__)
