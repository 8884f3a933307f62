"""The routing catalog: operator-owned targets and lanes, validated strictly, with a revision.

The catalog is data the operator owns (TOML or JSON, by file extension), so it is checked
in two passes that both answer with the exact path of what is wrong: pydantic for the
shape (unknown fields, types, names), then the rules that span the document (target ids
that exist, one execution class per candidate list, windows that tile the day, promotions
without cycles). A catalog that passes both can route every level it names at any instant.

The revision is the sha256 of the normalized catalog (every default spelled out, keys
sorted, compact separators), so it changes exactly when the routing can change, and a
bill traced through `TickScheduled.catalog_revision` leads to the catalog that caused it.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from datetime import time
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from harness.config import LEVEL_NAME, IanaZone, PriceOverride, nul_paths, plain
from harness.contracts import (
    AgentKind,
    Api,
    Billing,
    Effort,
    Positive,
    QuotaProbe,
    RateLimit,
    register_secret_names,
    require_agent_api,
    require_effort,
)

MINUTES_A_DAY = 24 * 60

TargetId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
EnvName = Annotated[str, Field(pattern=r"^[A-Z_][A-Z0-9_]*$")]
Code = Annotated[str, Field(min_length=1, max_length=100)]
ClockTime = Annotated[str, Field(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")]
"""`HH:MM`, local to the catalog's time zone."""


class CatalogError(Exception):
    """The catalog cannot be used; `problems` are `path: why` lines, one per error."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        listed = "\n".join(f"  {problem}" for problem in problems)
        super().__init__(f"{source}: invalid catalog\n{listed}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Target(_Strict):
    """Where a model runs. The endpoint is data; the key only ever an environment name."""

    model: Annotated[str, Field(min_length=1)]
    execution_class: Literal["local", "cloud"]
    base_url: Annotated[str, Field(pattern=r"^https?://\S+$")] | None = None
    base_url_env: EnvName | None = None
    api_key_env: EnvName | None = None
    """Default: the protocol's own (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`; Ollama: none)."""
    api: Api = "openai-chat"
    """The wire protocol; `base_url` is what its SDK takes as base: `…/v1` for both OpenAI
    protocols, `https://api.anthropic.com` (no `/v1`) for Anthropic, `http://host:11434`
    for Ollama."""
    effort: Effort | None = None
    agent: AgentKind = "strands"
    """Who runs a tick on this target (`claude-code`, `opencode`: their CLI, through the
    tick's governor); a CLI missing on the host passes the target over to the next."""
    prices: PriceOverride | None = None
    billing: Billing = "api"
    """How calls to the target are paid for: `api` (billed at their list value) or
    `subscription` (a plan: booked with tokens and list value, billed 0). A level's own
    `billing` wins over it."""
    quota_probe: QuotaProbe | None = None
    rpm: Positive | None = None
    """Requests to the target in any minute, by every tick of every process sharing the store."""
    tpm: Positive | None = None
    """Tokens (prompt + completion) of the target's calls in any minute."""
    max_parallel: Positive | None = None
    """The target's calls in flight at once."""
    selfcheck_required: bool = False
    """Whether a tick asks the target a short self-check before it first runs there, and
    again after the target was marked unavailable: a target that answers nothing useful
    is found out by a one-line question, not by a tick's whole work."""

    @property
    def rate_limit(self) -> RateLimit | None:
        """The target's rate limit, if it has one."""
        limit = RateLimit(rpm=self.rpm, tpm=self.tpm, max_parallel=self.max_parallel)
        return None if limit.empty else limit

    @model_validator(mode="after")
    def _effort_for_api(self) -> Target:
        require_effort(self.api, self.effort)
        require_agent_api(self.agent, self.api)
        return self

    @field_validator("base_url")
    @classmethod
    def _no_credentials(cls, url: str | None) -> str | None:
        """Userinfo in the URL is a secret in the file: it would reach payloads and errors."""
        if url is not None and "@" in urlsplit(url).netloc:
            raise ValueError(
                "holds credentials (user:password@): secrets never go in the catalog; "
                "name the key's variable in api_key_env"
            )
        return url


class Rule(_Strict):
    """What a decision records: the operator's rule id, its reasons and its candidates."""

    rule_id: Code
    reason_codes: list[Code]
    candidates: list[TargetId]


class Window(Rule):
    """A rule that holds between two local times of the day."""

    start: ClockTime
    """Inclusive; a window ends where the next one starts."""
    end: ClockTime


class Lane(_Strict):
    """A level's route: one rule, or time windows that each carry their own."""

    policy_priority: Annotated[int, Field(ge=0)] = 0
    """The operator's rank of the lane, recorded with every decision it makes."""
    rule_id: Code | None = None
    reason_codes: list[Code] | None = None
    candidates: list[TargetId] | None = None
    time_windows: dict[Code, Window] | None = None

    def targets(self) -> list[TargetId]:
        """The targets the lane may route to, in any of its windows, each once."""
        windows = (self.time_windows or {}).values()
        found = [*(self.candidates or ()), *(t for window in windows for t in window.candidates)]
        return list(dict.fromkeys(found))

    def rule(self) -> Rule | None:
        """The lane's own rule, when all of its parts are there."""
        if self.rule_id is None or self.reason_codes is None or self.candidates is None:
            return None
        return Rule(
            rule_id=self.rule_id, reason_codes=self.reason_codes, candidates=self.candidates
        )


class Catalog(_Strict):
    """The operator's routing document: targets, a lane per level, promotions on failure."""

    schema_version: Literal[1]
    timezone: IanaZone = "UTC"
    """IANA zone the time windows are read in."""
    targets: dict[TargetId, Target]
    lanes: dict[str, Lane]
    promotions: dict[TargetId, TargetId] = {}
    promote_local_to_cloud: bool = False
    """Whether a local target may promote to a cloud one (its prompts then leave the house)."""

    @property
    def zone(self) -> ZoneInfo:
        """The catalog's time zone as an object, checked valid when the catalog was loaded."""
        return ZoneInfo(self.timezone)

    @property
    def revision(self) -> str:
        """A hash of the content, recorded with each decision to show which catalog made it."""
        return revision_of(self.model_dump(mode="json"))

    def with_promotions(self, targets: Iterable[str]) -> list[TargetId]:
        """`targets`, then every target a content failure may promote them to, each once.

        A tick routed to `targets` may end on any of these: each is priced for it and
        decides how it is billed.
        """
        found = list(dict.fromkeys(targets))
        for target in found:  # grows as it goes: a promotion's own promotion is reached too
            stronger = self.promotions.get(target)
            if stronger is not None and stronger not in found:
                found.append(stronger)
        return found

    def rules(self, level: str) -> list[tuple[str | None, Rule]]:
        """A lane's rules: `(None, rule)` without windows, else `(window name, window)`."""
        lane = self.lanes[level]
        if lane.time_windows is not None:
            return list(lane.time_windows.items())
        rule = lane.rule()
        assert rule is not None, "a validated lane has a rule or time windows"
        return [(None, rule)]


def revision_of(document: Mapping[str, Any]) -> str:
    """A stable hash of a JSON document: key order and spacing do not change it."""
    normal = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(normal.encode()).hexdigest()


def minutes(clock: str) -> int:
    """Minutes after local midnight of an `HH:MM` time."""
    parsed = time.fromisoformat(clock)
    return parsed.hour * 60 + parsed.minute


def path_of(loc: tuple[int | str, ...] | list[int | str]) -> str:
    """`lanes.hour.time_windows.night.candidates[1]` from a location's parts."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


class _JsonObject(dict[str, Any]):
    """A JSON object that remembers the keys it saw twice (json keeps only the last)."""

    duplicates: list[str]


def _json_object(pairs: list[tuple[str, Any]]) -> _JsonObject:
    found = _JsonObject()
    found.duplicates = []
    for key, value in pairs:
        if key in found:
            found.duplicates.append(key)
        found[key] = value
    return found


def _duplicate_keys(value: Any, loc: tuple[int | str, ...] = ()) -> Iterator[str]:
    if isinstance(value, _JsonObject):
        for key in value.duplicates:
            yield f"{path_of((*loc, key))}: key appears more than once"
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _duplicate_keys(inner, (*loc, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _duplicate_keys(inner, (*loc, index))


def _no_constant(name: str) -> Any:
    """JSON has no `Infinity` or `NaN`; Python's parser accepts them unless told not to."""
    raise ValueError(f"{name} is not a JSON number")


def read_document(path: Path) -> dict[str, Any]:
    """The file's content as plain data: `.toml` or `.json`, by its extension."""
    source = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        raise CatalogError(
            source, [f"(file): extension {suffix or '(none)'!r} is not .toml or .json"]
        )
    kind = suffix[1:].upper()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(source, [f"(file): cannot read: {exc.strerror}"]) from exc
    except UnicodeDecodeError as exc:
        problem = f"(file): not UTF-8 text: {exc.reason} at byte {exc.start}"
        raise CatalogError(source, [problem]) from exc
    try:
        if suffix == ".toml":
            return tomllib.loads(text)
        document = json.loads(text, object_pairs_hook=_json_object, parse_constant=_no_constant)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, ValueError) as exc:
        raise CatalogError(source, [f"(file): invalid {kind}: {exc}"]) from exc
    except RecursionError:
        raise CatalogError(source, [f"(file): invalid {kind}: nested too deeply"]) from None
    if not isinstance(document, dict):
        raise CatalogError(source, ["(top level): must be an object"])
    duplicates = list(_duplicate_keys(document))
    if duplicates:
        raise CatalogError(source, duplicates)
    nul = [f"{where}: holds a NUL byte" for where in nul_paths(document)]
    if nul:
        raise CatalogError(source, nul)
    return dict(document)


def _shape_problem(error: Any) -> str:
    loc = tuple(error["loc"])
    if error["type"] == "extra_forbidden" and loc and loc[-1] == "api_key":
        return f"{path_of(loc)}: secrets never go in the catalog; name the variable in api_key_env"
    if error["type"] == "extra_forbidden":
        return f"{path_of(loc)}: unknown field"
    return f"{path_of(loc)}: {plain(error['msg'])}"


def parse_catalog(document: Mapping[str, Any], source: str = "catalog") -> Catalog:
    """Validate plain data as a catalog, or raise CatalogError with every problem's path."""
    try:
        catalog = Catalog.model_validate(document)
    except ValidationError as exc:
        raise CatalogError(source, [_shape_problem(error) for error in exc.errors()]) from exc
    problems = list(_rule_problems(catalog))
    if problems:
        raise CatalogError(source, problems)
    register_secret_names(t.api_key_env for t in catalog.targets.values() if t.api_key_env)
    register_secret_names(
        t.quota_probe.header_env
        for t in catalog.targets.values()
        if t.quota_probe and t.quota_probe.header_env
    )
    return catalog


def load_catalog(path: Path) -> Catalog:
    """Read and validate a catalog file; every problem is reported at once in a CatalogError."""
    return parse_catalog(read_document(path), str(path))


def _rule_problems(catalog: Catalog) -> Iterator[str]:
    for target_id, target in catalog.targets.items():
        if (target.base_url is None) == (target.base_url_env is None):
            yield f"targets.{target_id}: set exactly one of 'base_url' or 'base_url_env'"
        probe = target.quota_probe
        if probe is None:
            continue
        where = f"targets.{target_id}.quota_probe"
        if target.execution_class != "cloud":
            yield f"{where}: only a cloud target has a quota to probe"
        if (probe.url is None) == (probe.command is None):
            yield f"{where}: set exactly one of 'url' or 'command'"
        yield from _capacity_problems(f"{where}.required_capacities", target)
    yield from _identity_problems(catalog)
    if not catalog.targets:
        yield "targets: must name at least one target"
    if not catalog.lanes:
        yield "lanes: must name at least one lane"
    rule_ids: dict[str, str] = {}
    for level, lane in catalog.lanes.items():
        where = f"lanes.{level}"
        if not LEVEL_NAME.match(level):
            yield f"{where}: lane name must be a level name matching {LEVEL_NAME.pattern}"
        yield from _lane_problems(catalog, where, lane)
        windows = lane.time_windows or {}
        named = [
            (where, lane.rule_id),
            *((f"{where}.time_windows.{n}", w.rule_id) for n, w in windows.items()),
        ]
        for owner, rule_id in named:
            if rule_id is None:
                continue
            if rule_id in rule_ids:
                yield f"{owner}.rule_id: {rule_id!r} is used by {rule_ids[rule_id]} already"
            rule_ids.setdefault(rule_id, owner)
    yield from _promotion_problems(catalog)


def _capacity_problems(where: str, target: Target) -> Iterator[str]:
    """A probe requires the account's capacity and its own model's, no other model's."""
    assert target.quota_probe is not None
    own = f"model:{target.model}"
    seen: set[str] = set()
    for index, name in enumerate(target.quota_probe.required_capacities or ()):
        if name in seen:
            yield f"{where}[{index}]: {name!r} is listed twice"
        elif name not in ("overall", own):
            yield (
                f"{where}[{index}]: {name!r} is not a capacity of this target: "
                f"'overall' or {own!r} (its model)"
            )
        seen.add(name)


def _identity_problems(catalog: Catalog) -> Iterator[str]:
    """One runtime (model, endpoint, protocol, effort) under two ids splits its availability."""
    seen: dict[tuple[str, str | None, str | None, str, str | None], str] = {}
    for target_id, target in catalog.targets.items():
        identity = (target.model, target.base_url, target.base_url_env, target.api, target.effort)
        if identity in seen:
            yield (
                f"targets.{target_id}: same model, endpoint and effort as "
                f"targets.{seen[identity]} (duplicate runtime identity)"
            )
        seen.setdefault(identity, target_id)


def _lane_problems(catalog: Catalog, where: str, lane: Lane) -> Iterator[str]:
    own = {
        "rule_id": lane.rule_id,
        "reason_codes": lane.reason_codes,
        "candidates": lane.candidates,
    }
    if lane.time_windows is not None:
        for key, value in own.items():
            if value is not None:
                yield f"{where}.{key}: a lane with time_windows takes its {key} from each window"
        if not lane.time_windows:
            yield f"{where}.time_windows: must declare at least one window"
            return
        for name, window in lane.time_windows.items():
            yield from _rule_fields(catalog, f"{where}.time_windows.{name}", window)
        yield from _tiling_problems(f"{where}.time_windows", lane.time_windows)
        return
    for key, value in own.items():
        if value is None:
            yield f"{where}.{key}: required (or give the lane time_windows instead)"
    rule = lane.rule()
    if rule is not None:
        yield from _rule_fields(catalog, where, rule)


def _rule_fields(catalog: Catalog, where: str, rule: Rule) -> Iterator[str]:
    for key, values in (("reason_codes", rule.reason_codes), ("candidates", rule.candidates)):
        if not values:
            yield f"{where}.{key}: must not be empty"
        seen: set[str] = set()
        for index, value in enumerate(values):
            if value in seen:
                yield f"{where}.{key}[{index}]: {value!r} is listed twice"
            seen.add(value)
    classes: dict[str, str] = {}
    for index, target_id in enumerate(rule.candidates):
        target = catalog.targets.get(target_id)
        if target is None:
            yield f"{where}.candidates[{index}]: unknown target {target_id!r}"
            continue
        first = next(iter(classes.items()), None)
        if first is not None and first[1] != target.execution_class:
            yield (
                f"{where}.candidates[{index}]: {target_id!r} is {target.execution_class}, but "
                f"{first[0]!r} is {first[1]}: a lane's candidates share one execution class"
            )
        classes.setdefault(target_id, target.execution_class)


def _tiling_problems(where: str, windows: Mapping[str, Window]) -> Iterator[str]:
    """Windows tile the day when, sorted by start, each ends where the next one starts."""
    ordered = sorted(windows.items(), key=lambda item: minutes(item[1].start))
    if len(ordered) == 1 and ordered[0][1].start == ordered[0][1].end:
        return
    for (name, window), (after, following) in zip(ordered, [*ordered[1:], ordered[0]], strict=True):
        if window.start == window.end:
            yield f"{where}.{name}: start and end are both {window.start} (empty window)"
        elif window.end != following.start:
            gap = "leave a gap" if _before(window.end, following.start, window.start) else "overlap"
            yield (
                f"{where}.{name}: ends at {window.end} but {after!r} starts at "
                f"{following.start}: the windows {gap} and do not tile the day"
            )


def _before(end: str, start: str, origin: str) -> bool:
    """Whether `end` comes before `start` on the clock counted from `origin`."""
    base = minutes(origin)
    return (minutes(end) - base) % MINUTES_A_DAY < (minutes(start) - base) % MINUTES_A_DAY


def _promotion_problems(catalog: Catalog) -> Iterator[str]:
    for source, stronger in catalog.promotions.items():
        where = f"promotions.{source}"
        if source not in catalog.targets:
            yield f"{where}: unknown target {source!r}"
        if stronger not in catalog.targets:
            yield f"{where}: promotes to unknown target {stronger!r}"
        if stronger == source:
            yield f"{where}: a target cannot promote to itself"
        weaker, to = catalog.targets.get(source), catalog.targets.get(stronger)
        if weaker is None or to is None:
            continue
        if to.execution_class != "cloud" or (
            weaker.execution_class != "cloud" and not catalog.promote_local_to_cloud
        ):
            yield (
                f"{where}: promotions are between cloud targets only ({source!r} is "
                f"{weaker.execution_class}, {stronger!r} is {to.execution_class}); "
                "set promote_local_to_cloud = true to let a local target promote to cloud"
            )
    reported: set[str] = set()
    for start in catalog.promotions:
        chain = [start]
        while chain[-1] in catalog.promotions and chain[-1] != catalog.promotions[chain[-1]]:
            following = catalog.promotions[chain[-1]]
            if following in chain:
                cycle = chain[chain.index(following) :]
                if not reported & set(cycle):
                    first = cycle.index(min(cycle))  # the same report whichever entry found it
                    cycle = cycle[first:] + cycle[:first]
                    loop = " -> ".join([*cycle, cycle[0]])
                    yield f"promotions.{cycle[0]}: promotions form a cycle: {loop}"
                reported.update(cycle)
                break
            chain.append(following)
