"""A closed tick's stored records packed into one compressed blob, and read back exactly.

A tick's dozen events cost, as rows of `events`, a row each with three or four index
entries and every JSON key spelled out again; packed, they are one row of `tick_rows`
(`harness.store.tick_rows`). The encoding gives every record back as stored (position,
ids, version, data, metadata, time), so no reader of event data changes:

- the tick id (the row's key) and the level are said once: a record whose data held
  them says so in a flag, and they are put back on reading;
- times are integer microseconds since the epoch, ids their 32 hex digits;
- zlib with a preset dictionary of the event types' names and field names, which a
  tick's few KB would otherwise spend most of their bytes on spelling once.

The dictionary is frozen here, byte for byte: a row packed with it must read back
forever, whatever the event classes become. The blob's first byte names the dictionary
(`FORMAT`), so a later one can come beside it.

It lives among the folds because a fold worker (`harness.folds.worker`) reads packed
ticks of its range too, and imports nothing of the store; the store makes records of
what `records_of` gives back (`harness.store.tick_rows.unpack`).
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:  # a fold worker never imports the contracts (pydantic)
    from harness.contracts import StoredEvent
    from harness.folds.ranges import EventData

FORMAT = 1
"""The first byte of a blob: which preset dictionary it was compressed with."""
TICK_PREFIX = "tick-"
ZLIB_LEVEL = 6
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HAS_TICK_ID = 1
HAS_LEVEL = 2
"""Flags of a record whose data held the row's tick id, its level (both taken out)."""

DICTIONARY = (
    b'{"type":"WorkerStarted","occurred_at":null,"worker_id":null,"host":null,"pid":null,"conc'
    b'urrency":null,"queues":null}{"type":"StartsSpaced","occurred_at":null,"spacing_seconds":'
    b'null,"until":null,"last_start":null,"tick_id":null}{"type":"LevelPaused","occurred_at":n'
    b'ull,"level":null,"reason":null,"by":null,"note":null}{"type":"LevelResumed","occurred_at'
    b'":null,"level":null,"by":null}{"type":"LevelBudgetExceeded","occurred_at":null,"level":n'
    b'ull,"day":null,"spent_tokens":null,"spent_usd":null,"reserved_tokens":null}{"type":"Budg'
    b'etCrossed","occurred_at":null,"budget":null,"scope":null,"window_start":null,"window_end'
    b'":null,"threshold":null,"action":null,"used_tokens":null,"used_usd":null,"limit_tokens":'
    b'null,"limit_usd":null,"levels":null}{"type":"DigestClaimed","occurred_at":null,"name":nu'
    b'll,"period_start":null,"period_end":null,"format":null,"content_hash":null,"path":null,"'
    b'targets":null,"host":null,"pid":null}{"type":"DigestDeliveryFailed","occurred_at":null,"'
    b'name":null,"period_start":null,"period_end":null,"target":null,"attempt":null,"error":nu'
    b'll}{"type":"DigestPublished","occurred_at":null,"name":null,"period_start":null,"period_'
    b'end":null,"format":null,"content_hash":null,"path":null,"targets":null,"delivery":null}{'
    b'"type":"CancelRequested","occurred_at":null,"scope":null,"by":null,"why":null}{"type":"C'
    b'ancelCleared","occurred_at":null,"scope":null,"by":null}{"type":"BackfillRequested","occ'
    b'urred_at":null,"backfill_id":null,"level":null,"start":null,"end":null,"overlap":null,"m'
    b'ax_at_once":null,"slots":null,"by":null}{"type":"BackfillCancelled","occurred_at":null,"'
    b'backfill_id":null,"by":null}{"type":"BackfillFinished","occurred_at":null,"backfill_id":'
    b'null}{"type":"AlertRaised","occurred_at":null,"key":null,"kind":null,"level":null,"reaso'
    b'n":null,"tick_id":null,"link":null,"targets":null}{"type":"AlertDelivered","occurred_at"'
    b':null,"key":null,"delivery":null}{"type":"GovernorFired","occurred_at":null,"model":null'
    b',"source":null,"tick_id":null,"decision":null,"est_tokens":null,"threshold":null,"chars"'
    b':null,"chars_per_token":null}{"type":"CalibrationSampled","occurred_at":null,"model":nul'
    b'l,"source":null,"tick_id":null,"chars":null,"prompt_tokens":null,"cached_tokens":null,"c'
    b'ached":null}{"type":"CatalogRecorded","occurred_at":null,"revision":null,"catalog":null}'
    b'{"type":"LevelsRecorded","occurred_at":null,"revision":null,"levels":null}{"type":"Confi'
    b'gReloaded","occurred_at":null,"path":null,"revision":null,"previous_revision":null,"adde'
    b'd":null,"removed":null,"changed":null,"restart":null,"host":null,"pid":null}{"type":"Arc'
    b'hiveWritten","day":null,"first_position":null,"last_position":null,"events":null,"ticks"'
    b':null,"counts":null,"sha256":null,"occurred_at":null,"folder":null,"files":null}{"type":'
    b'"TickBuffered","occurred_at":null,"tick_id":null,"level":null,"slot":null,"policy":null,'
    b'"behind":null}{"type":"RouteFallback","occurred_at":null,"tick_id":null,"level":null,"fr'
    b'om_target":null,"to_target":null,"reason":null,"cached":null}{"type":"RoutePromoted","oc'
    b'curred_at":null,"tick_id":null,"level":null,"from_target":null,"to_target":null,"reason"'
    b':null,"attempt":null}{"type":"QuotaObserved","occurred_at":null,"tick_id":null,"level":n'
    b'ull,"target":null,"source":null,"exhausted":null,"remaining":null,"minimum":null,"reques'
    b'ts_left":null,"tokens_left":null,"retry_after_seconds":null,"detail":null}{"type":"RateL'
    b'imited","occurred_at":null,"tick_id":null,"level":null,"call":null,"bucket":null,"reason'
    b'":null,"waited_ms":null,"taken":null}{"type":"TargetSelfChecked","occurred_at":null,"tic'
    b'k_id":null,"level":null,"target":null,"passed":null,"detail":null}{"type":"TickTaken","o'
    b'ccurred_at":null,"tick_id":null,"level":null,"host":null,"worker_pid":null,"job_id":null'
    b',"worker_id":null}{"type":"ModelCallStarted","occurred_at":null,"tick_id":null,"level":n'
    b'ull,"call":null,"model":null,"estimated_input_tokens":null,"template_hash":null}{"type":'
    b'"ModelCalled","occurred_at":null,"tick_id":null,"level":null,"model":null,"target":null,'
    b'"provider":null,"call":null,"attempt":null,"duration_ms":null,"wait_ms":null,"first_toke'
    b'n_ms":null,"stop_reason":null,"error_class":null,"failure_class":null,"error":null,"prom'
    b'pt_tokens":null,"completion_tokens":null,"estimated":null,"budget_event_id":null,"templa'
    b'te_hash":null}{"type":"AgentUsageChecked","occurred_at":null,"tick_id":null,"level":null'
    b',"agent":null,"reported_prompt_tokens":null,"reported_completion_tokens":null,"booked_pr'
    b'ompt_tokens":null,"booked_completion_tokens":null}{"type":"TickAttemptFailed","occurred_'
    b'at":null,"tick_id":null,"level":null,"attempt":null,"failure_class":null,"reason":null,"'
    b'retry_in_seconds":null}{"type":"HedgeStarted","occurred_at":null,"tick_id":null,"level":'
    b'null,"twin_id":null,"after_seconds":null}{"type":"HedgeDecided","occurred_at":null,"tick'
    b'_id":null,"level":null,"twin_id":null,"winner":null}{"type":"PanelDecided","occurred_at"'
    b':null,"tick_id":null,"level":null,"members":null}{"type":"TickCompleted","occurred_at":n'
    b'ull,"tick_id":null,"level":null,"result_path":null,"stop_reason":null,"prompt_tokens":nu'
    b'll,"completion_tokens":null,"model_calls":null,"tool_calls":null,"tool_calls_cancelled":'
    b'null}{"type":"TickFailed","occurred_at":null,"tick_id":null,"level":null,"reason":null,"'
    b'failure_class":null,"stderr_tail":null,"result_path":null}{"type":"TickTimedOut","occurr'
    b'ed_at":null,"tick_id":null,"level":null,"timeout_seconds":null,"result_path":null,"stder'
    b'r_tail":null}{"type":"TickCancelled","occurred_at":null,"tick_id":null,"level":null,"rea'
    b'son":null}{"type":"TickSkipped","occurred_at":null,"tick_id":null,"level":null,"reason":'
    b'null,"slot":null}{"type":"TickLost","occurred_at":null,"tick_id":null,"level":null,"reas'
    b'on":null}{"type":"TickScheduled","occurred_at":null,"tick_id":null,"level":null,"slot":n'
    b'ull,"fire_at":null,"model":null,"attempt":null,"reserved_tokens":null,"route_id":null,"r'
    b'ule_id":null,"policy_priority":null,"reason_codes":null,"window":null,"candidates":null,'
    b'"catalog_revision":null,"config_revision":null,"manual":null,"forced":null,"host":null,"'
    b'scheduler_pid":null,"backfill":null}{"type":"TickStarted","occurred_at":null,"tick_id":n'
    b'ull,"level":null,"pid":null,"host":null,"attempt":null,"result_path":null,"log_path":nul'
    b'l,"timeout_seconds":null,"runner_pid":null,"template_hash":null}{"type":"ToolCalled","oc'
    b'curred_at":null,"tick_id":null,"level":null,"name":null,"status":null,"duration_ms":null'
    b'}{"type":"BudgetSpent","occurred_at":null,"tick_id":null,"level":null,"model":null,"prom'
    b'pt_tokens":null,"completion_tokens":null,"cache_read_tokens":null,"cache_write_tokens":n'
    b'ull,"estimated":null,"source":null,"template_hash":null,"target":null}{"type":"Transcrip'
    b'tEntry","occurred_at":null,"tick_id":null,"level":null,"kind":null,"text":null,"cut_char'
    b's":null,"tool":null,"tool_use_id":null,"arguments":null,"arguments_cut_chars":null,"stat'
    b'us":null}'
)
"""The preset dictionary of `FORMAT` 1: event types and their fields as JSON spells them.

Each event type's fields as an object of nulls, made once from the event classes of
2026-12-01 (tick events last, the most frequent of them at the very end, where zlib's
matches are shortest). Frozen: never edit it; a new dictionary is a new `FORMAT`.
"""

Record = list[Any]
"""[position, id hex, stream position, type, version, data, metadata, microseconds, flags]."""


def pack(tick_id: str, events: Iterable[StoredEvent]) -> tuple[bytes, int]:
    """The tick's records as one blob, and how many records it holds.

    The level said once is the first one a record's data holds.
    """
    level: str | None = None
    records: list[Record] = []
    for event in sorted(events, key=lambda e: e.stream_position):
        data = dict(event.data)
        flags = 0
        if data.get("tick_id") == tick_id:
            del data["tick_id"]
            flags |= HAS_TICK_ID
        if level is None and isinstance(data.get("level"), str):
            level = data["level"]
        if level is not None and data.get("level") == level:
            del data["level"]
            flags |= HAS_LEVEL
        at = event.recorded_at - EPOCH
        micros = (at.days * 86_400 + at.seconds) * 1_000_000 + at.microseconds
        records.append(
            [
                event.global_position,
                event.event_id.hex,
                event.stream_position,
                event.type,
                event.version,
                data,
                event.metadata,
                micros,
                flags,
            ]
        )
    packer = zlib.compressobj(
        ZLIB_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS, 9, zlib.Z_DEFAULT_STRATEGY, DICTIONARY
    )
    body = packer.compress(orjson.dumps([level, records])) + packer.flush()
    return bytes([FORMAT]) + body, len(records)


def records_of(blob: bytes) -> tuple[str | None, list[Record]]:
    """The level and records of a blob; ValueError for a format this code does not know."""
    if not blob or blob[0] != FORMAT:
        raise ValueError(f"a packed tick of unknown format {blob[:1]!r}")
    unpacker = zlib.decompressobj(zlib.MAX_WBITS, DICTIONARY)
    level, records = orjson.loads(unpacker.decompress(blob[1:]) + unpacker.flush())
    return level, records


def restore(tick_id: str, level: str | None, data: dict[str, Any], flags: int) -> dict[str, Any]:
    """A record's data with the tick id and level it held put back (changed in place)."""
    if flags & HAS_TICK_ID:
        data["tick_id"] = tick_id
    if flags & HAS_LEVEL:
        data["level"] = level
    return data


def unpack_data(
    tick_id: str, blob: bytes, after: int, upper: int, kinds: Collection[str]
) -> list[EventData]:
    """(position, type, data) of a packed tick's records of `kinds` in (after, upper].

    What a fold reads: no record object, no id or time parsed.
    """
    level, records = records_of(blob)
    return [
        (record[0], record[3], restore(tick_id, level, record[5], record[8]))
        for record in records
        if after < record[0] <= upper and record[3] in kinds
    ]


def positions(blob: bytes) -> list[int]:
    """The global positions a packed tick holds."""
    return [record[0] for record in records_of(blob)[1]]
