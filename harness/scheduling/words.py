"""A level's schedule in words, for `tickwork levels`: what an operator reads at a glance.

Cron expressions are read as tickwork's triggers read them (`harness.config.crontab`):
weekday numbers as crontab's, so `1-5` is said as `mon,tue,wed,thu,fri`. Forms too
irregular to phrase fall back to naming the field, never to a guess.
"""

from __future__ import annotations

from harness.config import LevelConfig, crontab_weekdays


def schedule_words(config: LevelConfig, jitter_seconds: float = 0.0) -> str:
    """The whole schedule in one sentence: its specs, window, exclusions, limit and jitter."""
    parts = [cron_words(cron) for cron in config.crons]
    if config.every is not None:
        parts.append(f"every {config.every}")
    said = " and ".join(parts)
    if config.crons:
        said += f" ({config.timezone})"
    if config.start_at is not None:
        said += f", from {config.start_at}"
    if config.end_at is not None:
        said += f", through {config.end_at}"
    if config.exclude:
        said += ", except " + ", ".join(config.exclude)
    if config.max_runs is not None:
        said += f", at most {config.max_runs} run(s)"
    if jitter_seconds:
        said += f", each slot delayed by up to {jitter_seconds:g} s (jitter)"
    return said


def cron_words(cron: str) -> str:
    """A five-field cron expression in words: `at 09:00 on mon-fri`, `every 5 minutes`."""
    minute, hour, day, month, weekday = cron.split()
    said = _time_words(minute, hour)
    if day != "*":
        said += f" on day {day} of the month"
    if month != "*":
        said += f" in month {month}"
    if weekday != "*":
        said += f" on {crontab_weekdays(weekday)}"
    elif day == "*" and month == "*" and ":" in said:
        said += " every day"
    return said


def _time_words(minute: str, hour: str) -> str:
    if minute == "*" and hour == "*":
        return "every minute"
    if minute.startswith("*/") and hour == "*":
        return f"every {minute[2:]} minutes"
    if minute.isdigit() and hour == "*":
        return f"at minute {minute} of every hour"
    if minute.isdigit() and all(h.isdigit() for h in hour.split(",")):
        return "at " + ", ".join(f"{int(h):02d}:{int(minute):02d}" for h in hour.split(","))
    return f"at minute {minute} of hour {hour}"
