"""Every bearer-token check is throttled as the sign-in form is (ten wrong tokens a minute from
one host, whichever door and transport), and a wrong token is told apart from a missing one
without a word about the token itself."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import grpc
import pytest

from receiver_support import request, running_server, stable_run
from verdictgate import ManualClock
from verdictgate.receiver.transport.bearer import Presented, TokenThrottle

TOKEN = "s3cret-token"


def test_only_wrong_tokens_count_and_a_host_past_them_waits_whatever_it_sends():
    clock = ManualClock(100.0)
    throttle = TokenThrottle(allowed=3, window=60.0, clock=clock)
    for _ in range(20):  # a missing token guesses nothing; the right one costs nothing
        assert throttle.check(None, TOKEN, "10.0.0.7") == (Presented.MISSING, 0)
        assert throttle.check(f"Bearer {TOKEN}", TOKEN, "10.0.0.7") == (Presented.RIGHT, 0)
    assert throttle.hosts() == 0
    wrong = [throttle.check(f"Bearer guess-{n}", TOKEN, "10.0.0.7") for n in range(3)]
    assert wrong == [(Presented.WRONG, 0)] * 3
    assert throttle.check(f"Bearer {TOKEN}", TOKEN, "10.0.0.7") == (Presented.THROTTLED, 60)
    assert throttle.check(None, TOKEN, "10.0.0.8") == (Presented.MISSING, 0)  # another host
    assert throttle.attempt("::ffff:10.0.0.7") == 60  # the sign-in form: the same host
    clock.advance(61)
    assert throttle.check(f"Bearer {TOKEN}", TOKEN, "10.0.0.7") == (Presented.RIGHT, 0)
    assert throttle.check("Basic czNjcmV0", TOKEN, "h") == (Presented.MISSING, 0)
    assert throttle.check("Bearer ", TOKEN, "h") == (Presented.MISSING, 0)


def test_a_host_is_one_however_a_transport_writes_it():
    throttle = TokenThrottle(allowed=2, window=60.0, clock=ManualClock(0.0))
    throttle.check("Bearer a", TOKEN, "[::1]")
    throttle.check("Bearer b", TOKEN, "::1")
    assert throttle.check(f"Bearer {TOKEN}", TOKEN, "::1")[0] is Presented.THROTTLED
    throttle.check("Bearer a", TOKEN, "::ffff:127.0.0.1")
    throttle.check("Bearer b", TOKEN, "127.0.0.1")
    assert throttle.check(f"Bearer {TOKEN}", TOKEN, "127.0.0.1")[0] is Presented.THROTTLED


def post(server, path: str, token: str | None, method: str = "POST"):
    """A request to the HTTP port: (status, headers, the JSON status's message)."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = b'{"resourceSpans": []}' if method == "POST" else None
    url = f"http://127.0.0.1:{server.http_port}{path}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, body, headers, method=method)):
            return 200, {}, ""
    except urllib.error.HTTPError as error:
        payload = error.read()
        return error.code, dict(error.headers), json.loads(payload)["message"]


def export(server, token: str | None) -> grpc.RpcError | None:
    """An OTLP export over gRPC: the error it got, None when taken."""
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    try:
        call = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=None,
        )
        metadata = [("authorization", f"Bearer {token}")] if token is not None else None
        call(request(stable_run("r", 1, 2)).SerializeToString(), timeout=5, metadata=metadata)
        return None
    except grpc.RpcError as error:
        return error
    finally:
        channel.close()


@pytest.mark.parametrize(("path", "method"), [("/v1/traces", "POST"), ("/v1/runs", "GET")])
def test_a_wrong_token_is_told_apart_from_a_missing_one_and_nothing_else(path, method):
    with running_server(token=TOKEN) as server:
        missing = post(server, path, None, method)
        assert missing == (401, missing[1], "a bearer token is required")
        assert missing[1]["WWW-Authenticate"] == "Bearer"
        wrong = [post(server, path, guess, method) for guess in ("s3cret-tokem", "x" * 200)]
        for status, headers, message in wrong:
            assert (status, message) == (401, "the bearer token is not this receiver's")
            assert headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'
        assert wrong[0][2] == wrong[1][2]  # a near miss and a far one read alike
        assert post(server, path, TOKEN, method)[0] == 200
        for details in (export(server, None), export(server, "s3cret-tokem")):
            assert details is not None and details.code() is grpc.StatusCode.UNAUTHENTICATED
        assert export(server, None).details() == "a bearer token is required"
        assert export(server, "nope").details() == "the bearer token is not this receiver's"
        assert export(server, TOKEN) is None  # checked where the peer is known: still taken


def test_a_host_with_a_few_wrong_tokens_is_still_served_on_every_kind_of_call(cli, tmp_path):
    """Below the limit, a host that gave wrong tokens is served with the right one: a unary
    export and the status client's server stream (WatchAdmission) alike."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    with running_server(token=TOKEN) as server:
        assert export(server, "nope") is not None
        assert export(server, TOKEN) is None
        endpoint = f"127.0.0.1:{server.grpc_port}"
        result = cli(
            "status",
            "--endpoint",
            endpoint,
            "--run",
            "r",
            "--token-file",
            str(token_file),
            "--wait",
            "5",
            "--format",
            "json",
        )
        assert result.exit_code in (0, 3), result.stderr
        assert json.loads(result.stdout)["run"]["id"] == "r"


def guess(server, door: int, token: str) -> object:
    """A wrong token at one of three doors: OTLP/HTTP, the JSON API, OTLP/gRPC; what it got."""
    if door == 0:
        return post(server, "/v1/traces", token)[0]
    if door == 1:
        return post(server, "/v1/runs", token, "GET")[0]
    refused = export(server, token)
    return None if refused is None else refused.code()


def test_wrong_tokens_at_any_door_throttle_every_door_of_both_transports():
    with running_server(token=TOKEN) as server:
        for _ in range(30):  # a sender without a token is refused, never throttled
            assert post(server, "/v1/traces", None)[0] == 401
        refused = [guess(server, door=n % 3, token=f"guess-{n}") for n in range(10)]
        assert refused.count(401) == 7 and refused.count(grpc.StatusCode.UNAUTHENTICATED) == 3
        status, headers, message = post(server, "/v1/traces", TOKEN)  # the right one too
        assert status == 429 and 1 <= int(headers["Retry-After"]) <= 60
        assert message == "too many wrong tokens: try again later"
        assert post(server, "/v1/runs", TOKEN, "GET")[0] == 429
        throttled = export(server, TOKEN)
        assert throttled is not None and throttled.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert throttled.details() == "too many wrong tokens: try again later"
