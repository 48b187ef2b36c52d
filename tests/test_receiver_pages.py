"""The receiver's pages: `GET /` lists runs newest first (filtered), `GET /runs/{id}` shows a
run's HTML report, refreshing itself while the run collects; the API's token, given once and
kept in a cookie; every value escaped, in the markup and in a real browser."""

from __future__ import annotations

import http.client
from urllib.parse import quote, urlencode

from receiver_support import decision_span, request, run_span, running_server
from verdictgate import ManualClock
from verdictgate.otel.otlp_reading import extract_protobuf
from verdictgate.receiver.queries.sign_in import page_key
from verdictgate.receiver.transport.bearer import TokenThrottle

TOKEN = "s3cret-token"
EVIL = '<img src=x onerror="window.pwned=1"><script>window.pwned=1</script>'


def send(server, spans) -> None:
    server.receiver.ingest(extract_protobuf(request(spans).SerializeToString()))


def stable(run: str, suite_case: str = "c", trials: int = 4) -> list:
    return [
        decision_span(run, f"{suite_case}{c}", i, "approve", "approve")
        for c in range(2)
        for i in range(trials)
    ]


def get(server, path: str, headers: dict | None = None) -> tuple[int, dict, str]:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read().decode()
    finally:
        connection.close()


def sign_in(server, token: str) -> tuple[int, dict]:
    """POST the sign-in form; (status, headers)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
    try:
        body = urlencode({"token": token})
        connection.request(
            "POST", "/", body=body, headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
        answer = connection.getresponse()
        answer.read()
        return answer.status, dict(answer.getheaders())
    finally:
        connection.close()


def test_signing_in_once_keeps_a_cookie_for_this_receiver_only() -> None:
    token = "a+b/c=d&e%f#g"  # what a base64 token or a careless one may hold
    with running_server(token=token) as server:
        status, headers, body = get(server, "/")
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
        assert '<form method="post" action="/">' in body
        status, _ = sign_in(server, "wrong")
        assert status == 401
        status, headers = sign_in(server, token)
        assert status == 303 and headers["Location"] == "/"
        cookie = headers["Set-Cookie"]
        name, value = cookie.split(";")[0].split("=", 1)
        assert name == f"verdictgate_pages_{server.http_port}"  # a host's cookies go to every port
        assert token not in cookie and value == page_key(token)  # no bearer token in the cookie
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
        kept = {"Cookie": f'other={{"a":1}}; a@b=1; {name}={value}'}  # odd cookies beside it
        assert get(server, "/", kept)[0] == 200
        assert get(server, "/", {"Authorization": f"Bearer {token}"})[0] == 200
        assert get(server, "/", {"Cookie": f"{name}=wrong"})[0] == 401
        assert get(server, "/v1/runs", kept)[0] == 401  # the API takes the header only


def test_pages_answer_head_and_refuse_other_methods() -> None:
    with running_server() as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
        connection.request("HEAD", "/")
        answer = connection.getresponse()
        assert answer.status == 200 and answer.read() == b""
        connection.request("DELETE", "/runs/x")
        answer = connection.getresponse()
        answer.read()
        assert answer.status == 405 and answer.getheader("Allow") == "GET, HEAD"
        connection.close()


def test_runs_are_listed_newest_first_and_filtered() -> None:
    with running_server(idle=3600) as server:
        send(server, [run_span("old", 8), *stable("old")])  # complete, so final
        send(server, [*stable("new", trials=2)])  # a canary still collecting
        status, headers, body = get(server, "/")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert "default-src 'none'" in headers["Content-Security-Policy"]
        assert body.index(">new<") < body.index(">old<")
        final = server.receiver.assessment("old").status.value
        assert final in body and "in progress" in body
        only_open = get(server, "/?status=in_progress")[2]
        assert ">new<" in only_open and ">old<" not in only_open
        assert ">old<" in get(server, f"/?status={final}")[2]
        assert ">old<" not in get(server, "/?suite=elsewhere")[2]


def test_a_run_page_is_its_report_and_refreshes_while_it_collects() -> None:
    with running_server(idle=3600) as server:
        send(server, [*stable("open", trials=2)])
        status, _, body = get(server, "/runs/open")
        assert status == 200 and 'http-equiv="refresh"' in body and "svg" in body
        send(server, [run_span("done", 8), *stable("done")])
        body = get(server, "/runs/done")[2]
        assert 'http-equiv="refresh"' not in body and 'href="/"' in body
        assert get(server, "/runs/nothing")[0] == 404


def test_markup_in_names_shows_as_text() -> None:
    with running_server(idle=3600) as server:
        send(
            server,
            [decision_span(EVIL, f"c{c}", i, EVIL, EVIL) for c in range(2) for i in range(2)],
        )
        listing = get(server, "/")[2]
        report = get(server, f"/runs/{quote(EVIL, safe='')}")[2]
        for page in (listing, report):
            assert "<script" not in page and "<img" not in page
            assert "&lt;script&gt;" in page


def test_the_pages_in_a_browser(browser) -> None:
    with running_server(token=TOKEN, idle=3600) as server:
        send(
            server,
            [decision_span(EVIL, f"c{c}", i, EVIL, EVIL) for c in range(2) for i in range(2)],
        )
        base = f"http://127.0.0.1:{server.http_port}"
        page = browser.new_page(viewport={"width": 390, "height": 800})
        requests: list = []

        def note(request, requests: list = requests) -> None:
            requests.append(request.url)

        page.on("request", note)
        page.goto(f"{base}/")
        page.fill("input[name=token]", TOKEN)
        page.click("button")  # signs in: the cookie is set, and the list shown
        assert page.url == f"{base}/"
        assert EVIL in page.inner_text("body")
        page.click(f"a[href='/runs/{quote(EVIL, safe='')}']")
        assert page.evaluate("window.pwned") is None
        assert page.query_selector("svg.forest") is not None
        overflow = page.evaluate(
            "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert overflow[0] <= overflow[1]
        assert all(url.startswith(base) for url in requests)
        page.close()


def test_guessing_the_token_at_the_sign_in_form_is_throttled() -> None:
    """Ten wrong tokens a minute from one host; the eleventh try is answered 429 with
    Retry-After, even with the right token, until the oldest failure ages out."""
    with running_server(token=TOKEN) as server:
        assert [sign_in(server, f"guess-{n}")[0] for n in range(10)] == [401] * 10
        status, headers = sign_in(server, TOKEN)
        assert status == 429 and 1 <= int(headers["Retry-After"]) <= 60


def test_the_throttle_forgets_tries_as_they_age_and_keeps_no_host_for_ever() -> None:
    clock = ManualClock(100.0)
    throttle = TokenThrottle(allowed=3, window=60.0, clock=clock)
    assert [throttle.attempt("h") for _ in range(3)] == [0, 0, 0]
    assert throttle.attempt("h") == 60 and throttle.attempt("other") == 0
    throttle.succeeded("other")  # a right token does not count
    clock.advance(30)
    assert throttle.attempt("h") == 30
    clock.advance(30)
    assert throttle.attempt("h") == 0
    for n in range(1000):
        throttle.attempt(f"guesser-{n}")
    clock.advance(61)
    assert throttle.attempt("late") == 0 and throttle.hosts() == 1
