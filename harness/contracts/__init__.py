"""The contracts between tickwork's stages: plain data that every stage imports.

It owns the events and their store records (`events`, `records`), the tick payload a
worker reads on stdin with the governor limits it carries (`payload`, `governor`), the
result file it writes (`result`), the time-ordered ids events are minted with (`ids`),
and the chars-per-token learner that the calibration projection, the governor and the
payload share (`calibration`). It imports no stage, only pydantic, `uuid_utils` and the
foundation modules, so every stage can depend on it.

Every name is loaded on first use (`harness.fronts`): every stage's import of a contract
runs this front, the configuration, the store and `tickwork status` use the events and
never a payload, and the CLI's redaction of its output (`secrets`) needs no model at all.
"""

from __future__ import annotations

import typing

from harness import fronts

if typing.TYPE_CHECKING:
    from harness.contracts.agents import (
        AGENT_CLIS,
        DEFAULT_AGENTS_DIR,
        AgentKind,
        missing_agent,
        require_agent_api,
    )
    from harness.contracts.budgets import BudgetEntry, BudgetRule, BudgetRuleData, Window, bucket_of
    from harness.contracts.calibration import Calibration, Sample, Verdict
    from harness.contracts.events import (
        ARCHIVE_STREAM,
        BACKFILL_STREAM,
        CONFIG_STREAM,
        CONTROL_STREAM,
        EVENT_TYPES,
        GOVERNOR_STREAM,
        TERMINAL_TYPES,
        THROTTLE_STREAM,
        AgentUsageChecked,
        AlertDelivered,
        AlertRaised,
        ArchiveSummary,
        ArchiveWritten,
        BackfillCancelled,
        BackfillEvent,
        BackfillFinished,
        BackfillRequested,
        BudgetCrossed,
        BudgetProjected,
        BudgetSpent,
        BudgetThreshold,
        CalibrationSampled,
        CancelCleared,
        CancelRequested,
        CatalogRecorded,
        ConfigReloaded,
        DigestClaimed,
        DigestDeliveryFailed,
        DigestEvent,
        DigestPublished,
        DriftRow,
        Event,
        GovernorEvent,
        GovernorFired,
        HedgeDecided,
        HedgeStarted,
        LevelBudgetExceeded,
        LevelPaused,
        LevelResumed,
        LevelResumedV1,
        LevelsRecorded,
        ModelCalled,
        ModelCallStarted,
        OneShotCancelRequested,
        PanelDecided,
        PanelMember,
        Provider,
        QuotaObserved,
        RateLimited,
        RawEvent,
        ReconciliationChecked,
        RouteFallback,
        RoutePromoted,
        StartsSpaced,
        TargetSelfChecked,
        TerminalTickEvent,
        TickAttemptFailed,
        TickBuffered,
        TickCancelled,
        TickCompleted,
        TickEvent,
        TickFailed,
        TickLost,
        TickScheduled,
        TickSkipped,
        TickStarted,
        TickTaken,
        TickTimedOut,
        ToolCalled,
        TranscriptEntry,
        TranscriptKind,
        WorkerStarted,
        alert_stream,
        budget_stream,
        capped,
        catalog_stream,
        config_stream,
        decode,
        digest_stream,
        level_stream,
        reconciliation_stream,
        tick_stream,
        utcnow,
    )
    from harness.contracts.failures import (
        FailureClass,
    )
    from harness.contracts.governor import (
        DEFAULT_DIRECTIVE,
        DEFAULT_STOP,
        HARD_MARGIN,
        MAX_RATIO,
        MIN_RATIO,
        GovernorLimits,
        model_key,
    )
    from harness.contracts.headlines import HIDDEN_FIELDS, ended, headline
    from harness.contracts.ids import (
        new_event_id,
        tick_id_day,
        tick_id_for,
    )
    from harness.contracts.output import OutputSchemaError, load_output_schema
    from harness.contracts.payload import (
        TICK_HEADER,
        QuotaProbe,
        RagSettings,
        RouteCandidate,
        RoutePlan,
        TickBudgets,
        TickPayload,
        TokenRates,
    )
    from harness.contracts.pricing import (
        Billing,
        CallPrice,
        Rates,
        UsageParts,
        billed,
        rates_at,
        usd,
        usd_sum,
    )
    from harness.contracts.rate_limits import (
        Positive,
        ProviderRateLimit,
        RateLimit,
        RateLimitPlan,
        Scope,
        provider_host,
        provider_key,
        target_key,
    )
    from harness.contracts.records import (
        Durability,
        NewEvent,
        StoredEvent,
    )
    from harness.contracts.result import (
        ResultError,
        ResultFileError,
        ResultMissingError,
        ResultToolCalls,
        ResultUsage,
        TickResult,
        read_result,
        write_result,
    )
    from harness.contracts.secrets import (
        ALERT_URLS_ENV,
        API_KEY_ENV,
        SECRET_ENV,
        STORE_PASSWORD_ENV,
        TELEMETRY_HEADERS_ENV,
        TELEMETRY_PREFIX,
        keep_environment_private,
        redact,
        redact_standard_streams,
        register_secret_names,
        register_secret_value,
        secret_names,
        withhold_environment,
    )
    from harness.contracts.tiers import (
        Capabilities,
        ToolTier,
        capabilities,
        claude_tool_args,
        opencode_permissions,
        strands_tools,
    )
    from harness.contracts.wire import (
        API_KEY_ENV_OF,
        APIS,
        BASE_URL_ENV,
        DEFAULT_BASE_URLS,
        THINKING_BUDGETS,
        Api,
        Effort,
        missing_key,
        require_effort,
    )

__getattr__, __all__ = fronts.declared(__name__)
