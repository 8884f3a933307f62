"""A valid routing catalog document, the starting point of the catalog tests' mutations."""

from __future__ import annotations

from typing import Any

Document = dict[str, Any]


def valid() -> Document:
    return {
        "schema_version": 1,
        "timezone": "Europe/Berlin",
        "targets": {
            "local": {"model": "qwen", "execution_class": "local", "base_url_env": "LOCAL_URL"},
            "mini": {
                "model": "gpt-4o-mini",
                "execution_class": "cloud",
                "base_url": "https://api.example.com/v1",
                "api_key_env": "CLOUD_KEY",
            },
            "large": {
                "model": "gpt-4o",
                "execution_class": "cloud",
                "base_url": "https://api.example.com/v1",
                "api_key_env": "CLOUD_KEY",
            },
        },
        "lanes": {
            "min": {
                "rule_id": "min-local",
                "policy_priority": 3,
                "reason_codes": ["cost"],
                "candidates": ["local"],
            },
            "hour": {
                "time_windows": {
                    "day": {
                        "start": "07:00",
                        "end": "23:00",
                        "rule_id": "hour-day",
                        "reason_codes": ["latency"],
                        "candidates": ["mini", "large"],
                    },
                    "night": {
                        "start": "23:00",
                        "end": "07:00",
                        "rule_id": "hour-night",
                        "reason_codes": ["cost"],
                        "candidates": ["local"],
                    },
                }
            },
        },
        "promotions": {"local": "mini", "mini": "large"},
        "promote_local_to_cloud": True,
    }
