"""The chunked-body decoder the HTTP poller feeds as bytes arrive: any body, cut into any
chunks and delivered in any pieces, decodes to itself, and the bytes after it are kept."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verdictgate.receiver.http import HttpError
from verdictgate.receiver.http.chunked import ChunkedBody


def framed(chunks: list[bytes], extensions: list[str], lf_only: bool) -> bytes:
    end = b"\n" if lf_only else b"\r\n"
    out = b""
    for number, chunk in enumerate(chunks):
        extension = extensions[number % len(extensions)] if extensions else ""
        out += b"%x%s" % (len(chunk), extension.encode()) + end + chunk + end
    return out + b"0" + end + b"X-Trailer: 1" + end + end


def fed(decoder: ChunkedBody, data: bytes, cuts: list[int]) -> bytes:
    """Feed `data` cut at `cuts`; what came after the body."""
    after = b""
    points = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    for start, stop in itertools.pairwise(points):
        after += decoder.feed(data[start:stop]) if not decoder.done else data[start:stop]
    return after


@given(
    st.lists(st.binary(min_size=1, max_size=300), max_size=12),
    st.lists(st.sampled_from(["", ";x=1", ' ;name="v"']), max_size=3),
    st.booleans(),
    st.lists(st.integers(min_value=0, max_value=10_000), max_size=30),
    st.binary(max_size=40),
)
def test_any_body_in_any_chunks_and_pieces_decodes_to_itself(chunks, extensions, lf, cuts, rest):
    decoder = ChunkedBody(limit=1 << 20)
    after = fed(decoder, framed(chunks, extensions, lf) + rest, cuts)
    assert decoder.done
    assert bytes(decoder.body) == b"".join(chunks)
    assert after == rest


@given(st.lists(st.binary(min_size=1, max_size=100), min_size=1, max_size=8), st.data())
def test_a_body_over_its_limit_is_413_however_it_is_cut(chunks, data):
    total = sum(map(len, chunks))
    decoder = ChunkedBody(limit=total - 1)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=2_000), max_size=20))
    with pytest.raises(HttpError) as refused:
        fed(decoder, framed(chunks, [], False), cuts)
    assert refused.value.status == 413


@pytest.mark.parametrize(
    "data",
    [
        b"zz\r\n",
        b"2\r\nabc\r\n",
        b"3\r\nabcX",
        b"1;" + b"e" * 5000,
        b"-1\r\n",
        b"0\r\n" + b"T: v\r\n" * 40 + b"\r\n",
    ],
    ids=["not-hex", "long-chunk", "no-line-end", "long-line", "negative", "many-trailers"],
)
def test_malformed_framing_is_400(data):
    decoder = ChunkedBody(limit=1 << 20)
    with pytest.raises(HttpError) as refused:
        for byte in range(len(data)):  # one byte at a time: the slowest sender
            decoder.feed(data[byte : byte + 1])
    assert refused.value.status == 400
