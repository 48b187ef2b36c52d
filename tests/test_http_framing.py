"""The HTTP server's request framing, without a socket: a head is found wherever its bytes
are cut, a head too large is refused 431, and a body taken in any pieces is itself, counted
as it arrives, with the next request's bytes kept."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verdictgate.receiver.http import HttpError
from verdictgate.receiver.http.framing import MAX_HEAD_BYTES, BodyFraming, head_length


def pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    return [data[start:stop] for start, stop in itertools.pairwise(points)]


@given(
    st.lists(st.sampled_from([b"X-A: 1", b"Host: h", b"Content-Length: 3"]), max_size=5),
    st.booleans(),
    st.lists(st.integers(min_value=0, max_value=500), max_size=20),
)
def test_a_head_is_found_once_whole_however_its_bytes_arrive(
    fields: list[bytes], lf_only: bool, cuts: list[int]
) -> None:
    end = b"\n" if lf_only else b"\r\n"
    head = end.join([b"POST /v1/traces HTTP/1.1", *fields]) + end + end
    buffer, scanned, found = bytearray(), 0, None
    for piece in pieces(head + b"abc", cuts):
        buffer += piece
        found = head_length(buffer, scanned)
        if found is not None:
            break
        assert len(buffer) < len(head)
        scanned = len(buffer)
    assert found == len(head)


def test_a_head_without_its_end_past_the_bound_is_refused_431() -> None:
    assert head_length(b"GET / HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD_BYTES - 32)) is None
    with pytest.raises(HttpError) as refused:
        head_length(b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD_BYTES)
    assert refused.value.status == 431


@given(
    st.binary(max_size=2000),
    st.binary(max_size=50),
    st.lists(st.integers(min_value=0, max_value=3000), max_size=20),
)
def test_a_content_length_body_is_itself_and_counted_as_it_arrives(
    body: bytes, after: bytes, cuts: list[int]
) -> None:
    framing = BodyFraming(len(body), limit=len(body))
    counted, rest = 0, None
    for piece in pieces(body + after, cuts):
        if rest is not None:
            rest += piece
            continue
        assert framing.wanted(1 << 16) == len(body) - counted
        added, rest = framing.feed(piece)
        counted += added
    if not body:
        rest = framing.feed(after)[1] if rest is None else rest
    assert (framing.body(), counted, rest) == (body, len(body), after)


def test_a_chunked_body_is_decoded_counted_and_its_framing_bounded() -> None:
    framing = BodyFraming(None, limit=10)
    assert framing.feed(b"3;x=1\r\nabc\r\n") == (3, None)
    assert framing.feed(b"0\r\n\r\nGET") == (0, b"GET")
    assert framing.body() == b"abc"
    padded = BodyFraming(None, limit=100)  # each chunk a byte, framed in four thousand
    with pytest.raises(HttpError) as refused:
        for _ in range(50):  # 50 bytes at most: under the limit, so the framing is refused
            padded.feed(b"1;" + b"x" * 4000 + b"\r\na\r\n")
    assert refused.value.status == 413
