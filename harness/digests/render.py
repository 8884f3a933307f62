"""A digest as Markdown (chat and e-mail), HTML (e-mail, the dashboard) or JSON (tools).

Markdown and HTML are built from the same outline, so the two never say different
things; every value that came from a tick (texts, reasons) is escaped for HTML.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from harness.digests.build import Digest, LevelSection

DigestFormat = Literal["md", "html", "json"]
MEDIA_TYPES: dict[DigestFormat, str] = {
    "md": "text/markdown",
    "html": "text/html",
    "json": "application/json",
}

Block = tuple[Literal["h1", "h2", "p", "li", "quote"], str]


def render(digest: Digest, fmt: DigestFormat) -> str:
    """The digest as a document, with every known secret redacted.

    Ticks' texts and errors may quote a key; every kept file and message comes from here.
    """
    from harness.contracts.secrets import redact  # the contracts' models: not for --help

    if fmt == "json":
        return redact(digest.model_dump_json(indent=2)) + "\n"
    blocks = outline(digest)
    return redact(_markdown(blocks) if fmt == "md" else _html(digest, blocks))


def title(digest: Digest) -> str:
    """The heading and notification subject of the digest."""
    return period_title(digest.name, digest.period_start, digest.period_end)


def period_title(name: str, start: datetime, end: datetime) -> str:
    """The title of a period, also usable before a digest is built (for a claim's subject)."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    return f"tickwork digest {name}: {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"


def outline(digest: Digest) -> list[Block]:
    """The digest as format-neutral blocks, so Markdown and HTML say the same things."""
    blocks: list[Block] = [("h1", title(digest))]
    cost = digest.cost_usd
    ticks = sum(sum(section.ticks.values()) for section in digest.levels)
    blocks.append(("p", f"{ticks} tick(s) in {len(digest.levels)} level(s); cost {_usd(cost)}."))
    blocks.append(("h2", f"Anomalies ({len(digest.anomalies)})"))
    if not digest.anomalies:
        blocks.append(("p", "None."))
    for anomaly in digest.anomalies:
        blocks.append(("li", f"{anomaly.kind}: {anomaly.tick_id}: {anomaly.detail}"))
    for section in digest.levels:
        blocks.extend(_level(section))
    return blocks


def _level(section: LevelSection) -> list[Block]:
    blocks: list[Block] = [("h2", f"Level {section.level}")]
    if section.paused:
        blocks.append(("p", f"PAUSED: {section.pause_reason or 'no reason recorded'}"))
    counts = ", ".join(f"{n} {status}" for status, n in sorted(section.ticks.items()))
    blocks.append(("p", f"Ticks: {counts or 'none'}."))
    if section.skipped:
        skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(section.skipped.items()))
        blocks.append(("p", f"Skipped slots: {skipped}."))
    for spend in section.spend:
        blocks.append(
            (
                "li",
                f"{spend.model}: {spend.calls} call(s), {spend.prompt_tokens:,} prompt + "
                f"{spend.completion_tokens:,} completion tokens, {_usd(spend.cost_usd)}",
            )
        )
    if section.tool_budget_exhausted:
        blocks.append(("p", f"Tool budget used up in {section.tool_budget_exhausted} tick(s)."))
    if section.governor_interventions:
        blocks.append(("p", f"Governor interventions: {section.governor_interventions}."))
    if section.hedges:
        blocks.append(
            (
                "p",
                f"Hedges: {section.hedges} twin tick(s), {section.hedge_tokens:,} tokens, "
                f"{_usd(section.hedge_cost_usd)}.",
            )
        )
    for failure in section.failures:
        blocks.append(("li", f"failed {failure.tick_id}: {failure.reason}"))
    for excerpt in section.excerpts:
        blocks.append(("quote", f"{excerpt.tick_id}: {excerpt.text}"))
    return blocks


def _usd(cost: float | None) -> str:
    return "unpriced" if cost is None else f"${cost:,.4f}"


def _markdown(blocks: list[Block]) -> str:
    prefix = {"h1": "# ", "h2": "\n## ", "p": "", "li": "- ", "quote": "> "}
    return "\n".join(prefix[kind] + text for kind, text in blocks) + "\n"


def _html(digest: Digest, blocks: list[Block]) -> str:
    tags = {"h1": "h1", "h2": "h2", "p": "p", "li": "li", "quote": "blockquote"}
    lines, in_list = [], False
    for kind, text in blocks:
        if (kind == "li") != in_list:
            lines.append("<ul>" if kind == "li" else "</ul>")
            in_list = kind == "li"
        lines.append(f"<{tags[kind]}>{html.escape(text)}</{tags[kind]}>")
    if in_list:
        lines.append("</ul>")
    body = "\n".join(lines)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title(digest))}</title></head>\n<body>\n{body}\n</body></html>\n"
    )
