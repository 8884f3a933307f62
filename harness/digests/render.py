"""A digest as Markdown (chat and e-mail), HTML (e-mail, the dashboard) or JSON (tools).

Markdown and HTML are built from the same outline, so the two never say different
things; every value that came from a tick (texts, reasons) is escaped for HTML.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from harness.digests.build import Digest, LevelSection
    from harness.scheduling import BudgetStatus

DigestFormat = Literal["md", "html", "json"]
MEDIA_TYPES: dict[DigestFormat, str] = {
    "md": "text/markdown",
    "html": "text/html",
    "json": "application/json",
}

BlockKind = Literal["h1", "h2", "p", "paused", "anomaly", "spend", "failure", "quote"]


@dataclass(frozen=True)
class Block:
    """One thing the digest says; `ticks` are the tick ids it is about (linked in HTML)."""

    kind: BlockKind
    text: str
    ticks: tuple[str, ...] = ()
    cells: tuple[str, ...] = ()
    """A table row's cells, for the kinds HTML shows as tables (anomaly, spend)."""


STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; color: #222; max-width: 60rem; margin: 1.5rem auto;
  padding: 0 1rem; }
h1 { font-size: 1.35rem; } h2 { font-size: 1.1rem; margin-top: 1.6rem;
  border-bottom: 1px solid #ddd; padding-bottom: 0.2rem; }
table { border-collapse: collapse; margin: 0.4rem 0; }
th, td { text-align: left; padding: 0.25rem 0.8rem 0.25rem 0.4rem; border-bottom: 1px solid #eee;
  vertical-align: top; }
th { background: #f4f4f4; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
table.anomalies td { background: #fdecea; } table.anomalies td.kind { font-weight: 600;
  color: #a4161a; }
.paused { background: #fff4e0; border-left: 4px solid #f28e2b; padding: 0.3rem 0.6rem; }
li.failure { color: #a4161a; }
blockquote { margin: 0.4rem 0; padding: 0.3rem 0.8rem; border-left: 4px solid #4e79a7;
  background: #f6f8fb; }
blockquote .ticks { color: #555; font-size: 0.9em; }
a { color: #2b5d9b; }
"""


def render(digest: Digest, fmt: DigestFormat, public_url: str | None = None) -> str:
    """The digest as a document, with every known secret redacted.

    Ticks' texts and errors may quote a key; every kept file and message comes from here.
    With `public_url` (`[api] public_url`) the HTML links each tick to its dashboard page.
    """
    from harness.contracts import redact

    if fmt == "json":
        return redact(digest.model_dump_json(indent=2)) + "\n"
    blocks = outline(digest)
    return redact(_markdown(blocks) if fmt == "md" else _html(digest, blocks, public_url))


def title(digest: Digest) -> str:
    """The heading and notification subject of the digest."""
    return period_title(digest.name, digest.period_start, digest.period_end)


def period_title(name: str, start: datetime, end: datetime) -> str:
    """The title of a period, also usable before a digest is built (for a claim's subject)."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    return f"tickwork digest {name}: {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"


def outline(digest: Digest) -> list[Block]:
    """The digest as format-neutral blocks, so Markdown and HTML say the same things."""
    blocks = [Block("h1", title(digest))]
    cost = digest.cost_usd
    ticks = sum(sum(section.ticks.values()) for section in digest.levels)
    ticked = sum(1 for section in digest.levels if section.ticks)
    levels = f"{ticked} level(s)"
    if ticked != len(digest.levels):  # a level with no tick in the period has a section too
        levels = f"{ticked} of {len(digest.levels)} level(s)"
    blocks.append(Block("p", f"{ticks} tick(s) in {levels}; cost {_usd(cost)}."))
    blocks.append(Block("h2", f"Anomalies ({len(digest.anomalies)})"))
    if not digest.anomalies:
        blocks.append(Block("p", "None."))
    for anomaly in digest.anomalies:
        blocks.append(
            Block("anomaly", anomaly.detail, (anomaly.tick_id,), (anomaly.kind, anomaly.detail))
        )
    if digest.budgets:
        blocks.append(Block("h2", f"Budgets ({len(digest.budgets)})"))
    for budget in digest.budgets:
        blocks.append(_budget(budget))
    for section in digest.levels:
        blocks.extend(_level(section))
    return blocks


def _budget(budget: BudgetStatus) -> Block:
    """A budget's line: used against its limit, what is reserved, when it ends or runs out."""
    runs_out = (
        f"runs out {budget.runs_out_at:%Y-%m-%d %H:%M} UTC at this rate"
        if budget.runs_out_at
        else "lasts the window at this rate"
    )
    text = (
        f"{budget.name} ({budget.scope}, {budget.window}, {budget.action}): "
        f"{budget.used_fraction:.0%} of {budget.limit_text()} used ({budget.used_tokens:,} tokens, "
        f"{_usd(budget.used_usd)}), {budget.reserved_tokens:,} reserved; window ends "
        f"{budget.window_end:%Y-%m-%d %H:%M} UTC with {budget.projected_fraction:.0%} used "
        f"at this rate, {runs_out}."
    )
    return Block("p", text)


def _level(section: LevelSection) -> list[Block]:
    blocks = [Block("h2", f"Level {section.level}")]
    if section.paused:
        blocks.append(Block("paused", f"PAUSED: {section.pause_reason or 'no reason recorded'}"))
    counts = ", ".join(f"{n} {status}" for status, n in sorted(section.ticks.items()))
    blocks.append(Block("p", f"Ticks: {counts or 'none'}."))
    if section.skipped:
        skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(section.skipped.items()))
        blocks.append(Block("p", f"Skipped slots: {skipped}."))
    for spend in section.spend:
        text = (
            f"{spend.model}: {spend.calls} call(s), {spend.prompt_tokens:,} prompt + "
            f"{spend.completion_tokens:,} completion tokens, {_usd(spend.cost_usd)}"
        )
        cells = (
            spend.model,
            f"{spend.calls:,}",
            f"{spend.prompt_tokens:,}",
            f"{spend.completion_tokens:,}",
            _usd(spend.cost_usd),
        )
        blocks.append(Block("spend", text, cells=cells))
    if section.tool_budget_exhausted:
        blocks.append(
            Block("p", f"Tool budget used up in {section.tool_budget_exhausted} tick(s).")
        )
    if section.governor_interventions:
        blocks.append(Block("p", f"Governor interventions: {section.governor_interventions}."))
    if section.hedges:
        text = (
            f"Hedges: {section.hedges} twin tick(s), {section.hedge_tokens:,} tokens, "
            f"{_usd(section.hedge_cost_usd)}."
        )
        blocks.append(Block("p", text))
    for failure in section.failures:
        blocks.append(Block("failure", failure.reason, (failure.tick_id,)))
    said: dict[str, list[str]] = {}
    for excerpt in section.excerpts:  # identical texts folded into one quote
        said.setdefault(excerpt.text, []).append(excerpt.tick_id)
    for text, tick_ids in said.items():
        blocks.append(Block("quote", text, tuple(tick_ids)))
    return blocks


def _usd(cost: float | None) -> str:
    from harness.prices import format_usd  # its configuration models: not for `--help`

    return "unpriced" if cost is None else f"${format_usd(cost)}"


def _who(ticks: tuple[str, ...]) -> str:
    """The ticks a quote stands for: one id, or ids and how many said the same."""
    return ticks[0] if len(ticks) == 1 else f"{', '.join(ticks)} ({len(ticks)} ticks, same text)"


def _markdown(blocks: list[Block]) -> str:
    lines = []
    for block in blocks:
        text = block.text
        if block.kind == "anomaly":
            text = f"- {block.cells[0]}: {block.ticks[0]}: {block.text}"
        elif block.kind == "failure":
            text = f"- failed {block.ticks[0]}: {block.text}"
        elif block.kind == "quote":
            text = f"> {_who(block.ticks)}: {block.text}"
        else:
            prefix = {"h1": "# ", "h2": "\n## ", "spend": "- "}
            text = prefix.get(block.kind, "") + block.text
        lines.append(text)
    return "\n".join(lines) + "\n"


TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "anomaly": ("anomalies", ("kind", "tick", "detail")),
    "spend": ("spend", ("model", "calls", "prompt tokens", "completion tokens", "cost")),
}


def _html(digest: Digest, blocks: list[Block], public_url: str | None) -> str:
    from harness.config import tick_page  # the settings' models: not for --help

    def tick(tick_id: str) -> str:
        href = tick_page(public_url, tick_id)
        if href is None:
            return html.escape(tick_id)
        return f'<a href="{html.escape(href)}" target="_blank">{html.escape(tick_id)}</a>'

    lines: list[str] = []
    group: str | None = None  # the table or list the previous block opened
    for block in blocks:
        wanted = "ul" if block.kind == "failure" else block.kind if block.kind in TABLES else None
        if wanted != group:
            if group is not None:
                lines.append("</ul>" if group == "ul" else "</table>")
            if wanted == "ul":
                lines.append("<ul>")
            elif wanted is not None:
                name, heads = TABLES[wanted]
                head = "".join(f"<th>{h}</th>" for h in heads)
                lines.append(f'<table class="{name}"><tr>{head}</tr>')
            group = wanted
        text = html.escape(block.text)
        if block.kind == "anomaly":
            kind, detail = (html.escape(cell) for cell in block.cells)
            lines.append(
                f'<tr><td class="kind">{kind}</td><td>{tick(block.ticks[0])}</td>'
                f"<td>{detail}</td></tr>"
            )
        elif block.kind == "spend":
            model, *numbers = (html.escape(cell) for cell in block.cells)
            cells = "".join(f'<td class="n">{n}</td>' for n in numbers)
            lines.append(f"<tr><td>{model}</td>{cells}</tr>")
        elif block.kind == "failure":
            lines.append(f'<li class="failure">failed {tick(block.ticks[0])}: {text}</li>')
        elif block.kind == "quote":
            who = ", ".join(tick(t) for t in block.ticks)
            if len(block.ticks) > 1:
                who += f" ({len(block.ticks)} ticks, same text)"
            lines.append(f'<blockquote><span class="ticks">{who}</span>: {text}</blockquote>')
        elif block.kind == "paused":
            lines.append(f'<p class="paused">{text}</p>')
        else:
            lines.append(f"<{block.kind}>{text}</{block.kind}>")
    if group is not None:
        lines.append("</ul>" if group == "ul" else "</table>")
    body = "\n".join(lines)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title(digest))}</title><style>{STYLE}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )
