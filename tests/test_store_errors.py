"""The store's refusals to open are one kind of error, `StoreError`, under `VerdictgateError`:
a deployment's fault said in one line, never caught as a bug's."""

from __future__ import annotations

import pytest

from components import free_port
from verdictgate import VerdictgateError
from verdictgate.errors import StoreError
from verdictgate.receiver.store import Store


@pytest.mark.parametrize(
    "location",
    [
        "host=db dbname=verdictgate",  # libpq's key=value form: not a URL
        "postgresql://verdictgate@127.0.0.1:{port}/verdictgate?connect_timeout=1",  # nobody there
        "postgresql://verdictgate@127.0.0.1:{port}/verdictgate?sslmode=nonsense",  # unreadable
    ],
)
def test_a_store_that_cannot_be_opened_is_a_store_error(location: str) -> None:
    with pytest.raises(StoreError) as refused:
        Store(location.format(port=free_port()))
    assert isinstance(refused.value, VerdictgateError)
    assert "\n" not in str(refused.value) and "password" not in str(refused.value)
