"""Tick rows' packed format 1, as migrations 0020 and 0023 read and write it.

A migration keeps its own copy of what it needs, so that a revision means forever what it
meant when it was written, whatever the application's code becomes (and the application
never imports its migrations: the store reaches them through Alembic's `script_location`
alone). This is format 1 of a packed tick row: a first byte naming the format, then the
tick's records as JSON, zlib-compressed with a frozen preset dictionary. The same bytes
are written by the application's packer; a test holds the two equal.
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

FORMAT = 1
ZLIB_LEVEL = 6
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HAS_TICK_ID = 1
HAS_LEVEL = 2
PAGE = 1000
"""Tick rows read at a time."""

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

"""Format 1's preset dictionary, byte for byte (frozen)."""


@dataclass(frozen=True)
class Record:
    """One stored event of a tick, as a row of `events` holds it."""

    global_position: int
    event_id: uuid.UUID
    stream_id: str
    stream_position: int
    type: str
    version: int
    data: dict[str, Any]
    metadata: dict[str, Any]
    recorded_at: datetime

    def as_row(self) -> dict[str, Any]:
        """The record as the columns of `events`."""
        return {
            "global_position": self.global_position,
            "event_id": self.event_id,
            "stream_id": self.stream_id,
            "stream_position": self.stream_position,
            "type": self.type,
            "version": self.version,
            "data": self.data,
            "metadata": self.metadata,
            "recorded_at": self.recorded_at,
        }


def pack(tick_id: str, records: Iterable[Record]) -> tuple[bytes, int]:
    """The tick's records as one format-1 blob, and how many it holds.

    A record's tick id and the tick's level (the first one a record holds) are taken out
    of its data and flagged, to be put back on reading.
    """
    level: str | None = None
    packed: list[list[Any]] = []
    for record in sorted(records, key=lambda r: r.stream_position):
        data = dict(record.data)
        flags = 0
        if data.get("tick_id") == tick_id:
            del data["tick_id"]
            flags |= HAS_TICK_ID
        if level is None and isinstance(data.get("level"), str):
            level = data["level"]
        if level is not None and data.get("level") == level:
            del data["level"]
            flags |= HAS_LEVEL
        at = record.recorded_at - EPOCH
        micros = (at.days * 86_400 + at.seconds) * 1_000_000 + at.microseconds
        packed.append(
            [
                record.global_position,
                record.event_id.hex,
                record.stream_position,
                record.type,
                record.version,
                data,
                record.metadata,
                micros,
                flags,
            ]
        )
    packer = zlib.compressobj(
        ZLIB_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS, 9, zlib.Z_DEFAULT_STRATEGY, DICTIONARY
    )
    body = packer.compress(orjson.dumps([level, packed])) + packer.flush()
    return bytes([FORMAT]) + body, len(packed)


def unpack(tick_id: str, blob: bytes) -> list[Record]:
    """The records of a format-1 blob, in stream order; ValueError for another format."""
    if not blob or blob[0] != FORMAT:
        raise ValueError(f"a packed tick of unknown format {blob[:1]!r}")
    unpacker = zlib.decompressobj(zlib.MAX_WBITS, DICTIONARY)
    level, packed = orjson.loads(unpacker.decompress(blob[1:]) + unpacker.flush())
    records = []
    for position, hex_id, stream_position, type_, version, data, metadata, micros, flags in packed:
        if flags & HAS_TICK_ID:
            data["tick_id"] = tick_id
        if flags & HAS_LEVEL:
            data["level"] = level
        records.append(
            Record(
                position,
                uuid.UUID(hex=hex_id),
                f"tick-{tick_id}",
                stream_position,
                type_,
                version,
                data,
                metadata,
                EPOCH + timedelta(microseconds=micros),
            )
        )
    return records
