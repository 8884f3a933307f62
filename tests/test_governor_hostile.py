"""The governor proxy under careless and hostile clients and upstreams: no 500, no traceback.

A client may send nonsense, go away mid-request, or use an upstream URL with credentials;
an upstream may stall in the middle of an answer. Each gets a clear answer or a clean end.
"""

from __future__ import annotations

import base64
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anthropic
import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.devtools.fake_llm import FakeUpstream, Step
from harness.store import open_store
from tests import web
from tests.governor_support import echo_app, governor_proxy, serving
from tests.test_governor_proxy import config, messages, origin_of
from tests.waiting import wait_until

OVER_HARD = 7000
"""Characters: about 2,190 tokens at 3.2 per token, over the tests' hard ceiling of 2,000."""


@pytest.mark.parametrize("options", ["yes", [1], 3, True])
def test_a_stopped_stream_with_nonsense_stream_options_is_a_400(options: Any) -> None:
    with governor_proxy(config("http://127.0.0.1:9")) as (origin, _):
        body = {"model": "m", "messages": messages(OVER_HARD), "stream": True}
        answer = web.post(f"{origin}/v1/chat/completions", json={**body, "stream_options": options})
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "stream_options"


def test_credentials_in_the_upstream_url_and_the_clients_own_both_work() -> None:
    with serving(echo_app(), "echo") as echo:
        parts = urlsplit(echo)
        upstream = f"http://gw%40user:pa%3Ass@{parts.hostname}:{parts.port}"
        with governor_proxy(config(upstream)) as (origin, _):
            own = web.get(f"{origin}/v1/models", headers={"Authorization": "Bearer client-key"})
            none = web.get(f"{origin}/v1/models")
    assert own.status_code == none.status_code == 200

    def authorization(answer: httpx.Response) -> list[str]:
        return [value for name, value in answer.json()["headers"] if name == "authorization"]

    assert authorization(own) == ["Bearer client-key"]
    assert authorization(none) == ["Basic " + base64.b64encode(b"gw@user:pa:ss").decode()]


def test_a_client_that_goes_away_mid_request_leaves_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    with governor_proxy(config("http://127.0.0.1:9")) as (origin, governor):
        parts = urlsplit(origin)
        with socket.create_connection((parts.hostname, parts.port)) as raw:
            raw.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b'Content-Length: 1000\r\n\r\n{"model":'
            )
        wait_until(lambda: governor.counters["client_gone"] == 1, "the proxy noticing")
    assert not [record for record in caplog.records if record.exc_info], caplog.text


def test_an_upstream_stalling_mid_answer_ends_it_with_an_error(fake: FakeUpstream) -> None:
    fake.script("stall", [Step(text="x" * 64, chunk_delay=60.0)])
    idle = config(origin_of(fake), upstream_idle_seconds=0.5)
    body = {"model": "m", "messages": messages(10), "stream": True}
    with governor_proxy(idle) as (origin, governor):
        started = time.monotonic()
        answer = web.post(
            f"{origin}/v1/chat/completions",
            json=body,
            headers={"X-Tickwork-Tick": "stall"},
            timeout=30,
        )
        took = time.monotonic() - started
    assert b"upstream_error" in answer.content and b"silent for 0.5 s" in answer.content
    assert took < 30.0, "the client is let go long before the upstream's next chunk"
    assert governor.counters["upstream_cut"] == 1


def _answer_short(listener: socket.socket) -> None:
    """An upstream that reads one request and sends 6 bytes of a 100-byte answer."""
    connection, _ = listener.accept()
    with connection:
        received = b""
        while b"\r\n\r\n" not in received:
            received += connection.recv(65536)
        head, _, body = received.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.lower().split(b"\r\n")
            if line.startswith(b"content-length:")
        )
        while len(body) < length:
            body += connection.recv(65536)
        connection.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b'content-length: 100\r\n\r\n{"id":'
        )


def test_a_whole_answer_cut_short_is_a_502_that_says_so() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        threading.Thread(target=_answer_short, args=(listener,), daemon=True).start()
        upstream = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with governor_proxy(config(upstream)) as (origin, governor):
            answer = web.post(
                f"{origin}/v1/chat/completions", json={"model": "m", "messages": messages(10)}
            )
    assert answer.status_code == 502
    assert "the upstream cut the answer" in answer.json()["error"]["message"]
    assert governor.counters["upstream_cut"] == 1


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
"""What a JSON body can hold (httpx refuses NaN and infinities)."""
chat_fields = st.fixed_dictionaries(
    {},
    optional={
        "model": json_scalars,
        "stream": json_scalars,
        "stream_options": json_scalars | st.dictionaries(st.text(max_size=5), json_scalars),
        "tools": json_scalars | st.lists(json_scalars, max_size=2),
        "system": json_scalars | st.lists(json_scalars, max_size=2),
    },
)


@pytest.fixture(scope="module")
def unreachable() -> Iterator[str]:
    """A governor whose upstream never answers: what it says itself is under test."""
    with governor_proxy(config("http://127.0.0.1:9")) as (origin, _):
        yield origin


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fields=chat_fields,
    size=st.sampled_from([10, OVER_HARD]),
    path=st.sampled_from(["/v1/chat/completions", "/v1/messages"]),
)
def test_no_model_call_gets_a_500_from_the_governor(
    unreachable: str, fields: dict[str, Any], size: int, path: str
) -> None:
    answer = web.post(f"{unreachable}{path}", json={**fields, "messages": messages(size)})
    assert answer.status_code < 500 or answer.status_code == 502, answer.text


CLAUDE_TURN = [{"role": "user", "content": "hello"}]


BAD_MESSAGES = [
    (b"{not json", "body"),
    (b"[1]", "body"),
    ({"messages": CLAUDE_TURN}, "model"),
    ({"model": "c"}, "messages"),
    ({"model": "c", "messages": "hello"}, "messages"),
    ({"model": "c", "messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
    ({"model": "c", "messages": [*CLAUDE_TURN, {"role": "user"}]}, "messages.1.content"),
    ({"model": "c", "messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
    ({"model": "c", "messages": CLAUDE_TURN, "system": 3}, "system"),
    ({"model": "c", "messages": CLAUDE_TURN, "tools": "all"}, "tools"),
    ({"model": "c", "messages": CLAUDE_TURN, "stream": "yes"}, "stream"),
    ({"model": "c", "messages": CLAUDE_TURN, "stream": 1}, "stream"),
    ({"model": "c", "messages": ["hello"]}, "messages.0"),
]
"""Messages bodies the governor cannot measure, and the field each answer must name."""


def test_a_messages_body_the_governor_cannot_measure_is_a_400_naming_the_field(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    received = len(fake.state.received)
    store_url = f"sqlite:///{tmp_path}/events.db"
    log_file = tmp_path / "decisions.jsonl"
    cfg = config(origin_of(fake), log=log_file)
    with governor_proxy(cfg, store_url, tmp_path / "spool") as (origin, governor):
        answers = [
            web.post(
                f"{origin}/v1/messages",
                content=body if isinstance(body, bytes) else orjson.dumps(body),
            )
            for body, _ in BAD_MESSAGES
        ]
    store = open_store(store_url)
    try:
        recorded = list(store.read_all(limit=10))
    finally:
        store.close()
    assert [answer.status_code for answer in answers] == [400] * len(BAD_MESSAGES)
    for answer, (_, field) in zip(answers, BAD_MESSAGES, strict=True):
        error = answer.json()
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
        assert error["error"]["message"].startswith(f"governor: {field}: "), error
    assert len(fake.state.received) == received, "the upstream was asked"
    assert recorded == [] and governor.counters["chat"] == 0
    assert governor.counters["invalid"] == len(BAD_MESSAGES)
    assert not log_file.exists() or log_file.read_text() == ""


def test_secrets_an_upstream_echoes_reach_their_client_and_nothing_else(
    fake: FakeUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A careless upstream quotes the key back; the client gets its own key, no log does."""
    store_url = f"sqlite:///{tmp_path}/events.db"
    caplog.set_level(logging.DEBUG)
    secret = "sk-ant-hostile-SECRET-7"
    fake.script("echoes", [Step(status=401, error_message="invalid x-api-key {key}")])
    fake.script("cut", [Step(text="x" * 200, cut_stream=True)])
    log_file = tmp_path / "decisions.jsonl"
    cfg = config(origin_of(fake), log=log_file)
    with governor_proxy(cfg, store_url, tmp_path / "spool") as (origin, governor):
        api = anthropic.Anthropic(base_url=origin, api_key=secret, max_retries=0)
        turn = {"model": "claude-m", "max_tokens": 64, "messages": CLAUDE_TURN}
        with pytest.raises(anthropic.AuthenticationError) as refused:
            api.messages.create(**turn, extra_headers={"X-Tickwork-Tick": "echoes"})
        with (
            pytest.raises(anthropic.APIStatusError) as cut,
            api.messages.stream(**turn, extra_headers={"X-Tickwork-Tick": "cut"}) as events,
        ):
            events.until_done()
        status = web.get(f"{origin}/governor/status").text
    store = open_store(store_url)
    try:
        recorded = orjson.dumps([e.data for e in store.read_all(limit=100)]).decode()
    finally:
        store.close()
    assert secret in str(refused.value), "the client reads its upstream's answer unchanged"
    assert "the upstream cut the answer" in str(cut.value)
    lines = [orjson.loads(line) for line in log_file.read_text().splitlines()]
    assert [(line["status"], line["ended"]) for line in lines] == [(401, "answered"), (200, "cut")]
    for kept in (status, recorded, log_file.read_text(), caplog.text):
        assert secret not in kept
    assert governor.counters["upstream_cut"] == 1
