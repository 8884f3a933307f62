"""The governor's shared core: the ratio learner, the policy and its chain rule, the config."""

from __future__ import annotations

import statistics

import orjson
import pytest
from pydantic import ValidationError

from harness.config import GovernorConfig, GovernorEnvError, with_legacy_env
from harness.contracts.calibration import WINDOW, Calibration, Sample
from harness.contracts.governor import GovernorLimits
from harness.devtools.fake_llm import count_word_tokens, render_prompt
from harness.governor.anthropic_wire import MessagesUsageScanner
from harness.governor.calibration import Calibrations
from harness.governor.estimate import openai_request_chars
from harness.governor.openai_wire import tail_of, usage_of
from harness.governor.policy import decide, fill
from harness.governor.usage import Usage
from tests.corpus import session, text_only_chars


def feed(ratios: list[float], chars: int = 10_000) -> Calibration:
    state = Calibration()
    for ratio in ratios:
        state, _ = state.observe(Sample(chars, round(chars / ratio)))
    return state


def test_first_sample_replaces_the_configured_ratio_then_the_median_holds() -> None:
    assert Calibration().ratio(3.2) == 3.2
    assert feed([2.5]).ratio(3.2) == pytest.approx(2.5, rel=1e-3)
    steady = feed([2.5, 2.6, 2.4] + [2.5] * 20)
    assert steady.ratio(3.2) == pytest.approx(2.5, rel=1e-3)
    assert len(steady.window) == WINDOW


def test_outliers_tiny_requests_and_out_of_bounds_ratios_are_ignored() -> None:
    state = feed([2.5, 2.5, 2.5])
    for sample, verdict in [
        (Sample(10_000, 1_000), "outlier"),  # ratio 10: above the bounds
        (Sample(10_000, 2_000), "outlier"),  # ratio 5: twice the median
        (Sample(300, 100), "tiny"),
        (Sample(10_000, 20_000), "out_of_bounds"),  # ratio 0.5
    ]:
        judged = state.judge(sample)
        assert judged == verdict or (verdict == "outlier" and judged == "out_of_bounds")
        state, _ = state.observe(sample)
    assert state.ratio(3.2) == pytest.approx(2.5, rel=1e-3)
    assert (state.samples, state.ignored) == (3, 4)


def test_a_server_reporting_only_uncached_tokens_is_corrected_or_ignored() -> None:
    state = feed([2.5, 2.5, 2.5])
    corrected, verdict = state.observe(Sample(10_000, 1_000, cached_tokens=3_000, cached=True))
    assert verdict == "accepted" and corrected.window[-1] == 2.5
    hidden, verdict = state.observe(Sample(10_000, 2_500))
    assert verdict in ("outlier", "out_of_bounds") and hidden.window == state.window


def test_calibrations_keep_one_state_per_model_and_can_be_switched_off() -> None:
    learned = Calibrations(3.2)
    learned.learn("a", Sample(10_000, 4_000))
    assert learned.ratio("a") == pytest.approx(2.5)
    assert learned.ratio("b") == 3.2
    assert Calibrations(3.2, learned.models, enabled=False).ratio("a") == 3.2


def test_estimation_error_on_a_tool_dense_corpus_after_five_samples() -> None:
    """Median error ≤ 10 % once five samples are in; counting text alone is far worse."""
    learned = Calibrations(3.2)
    errors, naive = [], []
    for seed in range(6):
        for request in session(seed, 10):
            chars = openai_request_chars(request)
            truth = count_word_tokens(render_prompt(request))
            if learned.models.get("corpus-model", Calibration()).samples >= 5:
                errors.append(abs(chars / learned.ratio("corpus-model") - truth) / truth)
                naive.append(abs(text_only_chars(request) / 3.2 - truth) / truth)
            learned.learn("corpus-model", Sample(chars, truth))
    median = statistics.median(errors)
    print(
        f"\nestimation error after 5 samples: median {median:.1%}, p90 "
        f"{statistics.quantiles(errors, n=10)[-1]:.1%} over {len(errors)} requests; "
        f"text alone at 3.2: median {statistics.median(naive):.1%}"
    )
    assert median <= 0.10
    assert statistics.median(naive) > 3 * median


@pytest.mark.parametrize(
    ("messages", "tail"),
    [
        ([], "empty"),
        ([{"role": "user", "content": "hi"}], "user"),
        ([{"role": "assistant", "content": "done"}], "assistant"),
        ([{"role": "assistant", "tool_calls": [{"id": "1"}]}], "open_tool_calls"),
        ([{"role": "tool", "content": "42"}], "tool_result"),
    ],
)
def test_tail_of_an_openai_chain(messages: list[dict[str, object]], tail: str) -> None:
    assert tail_of(messages) == tail


@pytest.mark.parametrize(
    ("est_chars", "tail", "decision"),
    [
        (3_100, "user", "pass"),
        (3_200, "user", "soft"),
        (3_200, "assistant", "soft"),
        (3_200, "tool_result", "defer"),
        (3_200, "open_tool_calls", "defer"),
        (6_400, "tool_result", "hard"),
        (6_400, "user", "hard"),
    ],
)
def test_decisions_follow_thresholds_and_the_chain_rule(
    est_chars: int, tail: str, decision: str
) -> None:
    limits = GovernorLimits(soft_tokens=1000, hard_tokens=2000)
    verdict = decide(limits, "m", est_chars, 3.2, tail)  # type: ignore[arg-type]
    assert verdict.decision == decision


def test_hard_defaults_to_soft_plus_5000_and_zero_disables_it() -> None:
    assert GovernorLimits(soft_tokens=1000).hard == 6000
    assert (
        decide(GovernorLimits(soft_tokens=10, hard_tokens=0), "m", 10**7, 3.2, "user").decision
        == "soft"
    )
    with pytest.raises(ValidationError, match="must be above soft_tokens"):
        GovernorLimits(soft_tokens=1000, hard_tokens=900)


def test_exempt_models_match_on_the_last_path_segment() -> None:
    limits = GovernorLimits(soft_tokens=10, exempt_models=("vendor/big",))
    assert decide(limits, "gateway/x/big", 10**6, 3.2, "user").decision == "pass"
    assert decide(limits, "big-2", 10**6, 3.2, "user").decision == "hard"
    assert decide(limits, "Gateway/X/BIG", 10**6, 3.2, "user").decision == "pass"
    shouting = GovernorLimits(soft_tokens=10, exempt_models=("Hermes",))
    assert decide(shouting, "hermes", 10**6, 3.2, "user").decision == "pass"


def test_texts_fill_only_their_placeholders() -> None:
    assert fill("{est} of {threshold} {other} {}", 12, 34) == "12 of 34 {other} {}"


def test_usage_reports_of_servers_that_reuse_their_kv_cache() -> None:
    openai_like = usage_of(
        {"usage": {"prompt_tokens": 900, "prompt_tokens_details": {"cached_tokens": 800}}}
    )
    assert openai_like is not None and (openai_like.cached_tokens, openai_like.cached) == (
        800,
        False,
    )
    llama = usage_of(
        {"usage": {"prompt_tokens": 100}, "timings": {"prompt_n": 100, "cache_n": 800}}
    )
    assert llama is not None and (llama.cached_tokens, llama.cached) == (800, True)
    assert usage_of({"usage": None}) is None


def test_legacy_environment_names_override_the_file_and_name_bad_values() -> None:
    env = {
        "GOV_PORT": "9100",
        "GOV_HOST": "0.0.0.0",
        "GOV_UPSTREAM": "http://gw:4000",
        "GOV_THRESHOLD": "50000",
        "GOV_HARD_CEILING": "0",
        "GOV_CHARS_PER_TOKEN": "2.8",
        "GOV_CALIBRATE": "false",
        "GOV_LOG": "/tmp/gov.jsonl",
        "GOV_DIRECTIVE": "wrap {est}",
        "GOV_HARDSTOP_MSG": "stop {threshold}",
        "GOV_EXEMPT_MODELS": "a/b, c",
        "GOV_ANNOUNCE_URL": "http://speaker:9001/api/voice/announce",
        "GOV_ANNOUNCE_THROTTLE": "30",
        "GOV_ANNOUNCE_TEXT": "full at {est}",
    }
    config = with_legacy_env(GovernorConfig(soft_tokens=10), env)
    assert (config.port, config.host, config.upstream) == (9100, "0.0.0.0", "http://gw:4000")
    assert (config.soft_tokens, config.limits().hard, config.chars_per_token) == (50000, 0, 2.8)
    assert config.calibrate is False and str(config.log) == "/tmp/gov.jsonl"
    assert (config.directive, config.stop_message) == ("wrap {est}", "stop {threshold}")
    assert config.exempt_models == ("a/b", "c")
    assert config.announce_url == "http://speaker:9001/api/voice/announce"
    assert (config.announce_throttle_seconds, config.announce_text) == (30, "full at {est}")
    assert with_legacy_env(config, {"GOV_ANNOUNCE_URL": ""}).announce_url is None
    with pytest.raises(GovernorEnvError, match="GOV_ANNOUNCE_THROTTLE"):
        with_legacy_env(GovernorConfig(), {"GOV_ANNOUNCE_THROTTLE": "-1"})
    with pytest.raises(GovernorEnvError, match="GOV_CHARS_PER_TOKEN"):
        with_legacy_env(GovernorConfig(), {"GOV_CHARS_PER_TOKEN": "20"})


def _sse(*events: dict[str, object]) -> bytes:
    return b"".join(
        b"event: " + str(e["type"]).encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n"
        for e in events
    )


def _delta(index: int, kind: str, field: str, value: str) -> dict[str, object]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": kind, field: value}}


ANTHROPIC_STREAM = _sse(
    {
        "type": "message_start",
        "message": {
            "usage": {
                "input_tokens": 70,
                "cache_creation_input_tokens": 20,
                "cache_read_input_tokens": 900,
                "output_tokens": 1,
            }
        },
    },
    _delta(0, "thinking_delta", "thinking", "hm"),
    _delta(1, "text_delta", "text", "Done."),
    _delta(2, "input_json_delta", "partial_json", '{"a":'),
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 33}},
    {"type": "message_stop"},
)


@pytest.mark.parametrize("size", [1, 7, 64, len(ANTHROPIC_STREAM)])
def test_anthropic_usage_is_read_from_a_stream_split_anywhere(size: int) -> None:
    """The prompt counts the cache reads and writes in, as the ledger keeps it."""
    scanner = MessagesUsageScanner(streamed=True)
    for start in range(0, len(ANTHROPIC_STREAM), size):
        scanner.feed(ANTHROPIC_STREAM[start : start + size])
    assert scanner.finish() == Usage(990, 33, 900, False, 20)
    assert scanner.answer_chars == len("hm") + len("Done.") + len('{"a":')


def test_an_anthropic_stream_cut_before_its_end_or_counting_nothing_reports_no_usage() -> None:
    cut = MessagesUsageScanner(streamed=True)
    cut.feed(ANTHROPIC_STREAM[: ANTHROPIC_STREAM.index(b"event: message_delta")])
    assert cut.finish() is None
    zero = MessagesUsageScanner(streamed=False)
    zero.feed(orjson.dumps({"type": "message", "content": [], "usage": {"input_tokens": 0}}))
    assert zero.finish() is None
