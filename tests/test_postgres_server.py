"""The PostgreSQL the store tests will run against (issue 27): a real server from the Debian
package, started as an unprivileged user in a scratch directory, reached through psycopg."""

from __future__ import annotations

import psycopg
import pytest

from postgres_support import postgresql


def test_a_scratch_postgresql_starts_answers_and_stops():
    with postgresql() as url, psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CREATE TABLE trials (run text, trial int, PRIMARY KEY (run, trial))")
        connection.execute("INSERT INTO trials VALUES ('r', 0) ON CONFLICT DO NOTHING")
        connection.execute("INSERT INTO trials VALUES ('r', 0) ON CONFLICT DO NOTHING")
        (count,) = connection.execute("SELECT count(*) FROM trials").fetchone() or (None,)
        (listening,) = connection.execute("SHOW listen_addresses").fetchone() or (None,)
    assert count == 1  # the key keeps a trial once, as the SQLite store's does
    assert listening == "127.0.0.1"
    with pytest.raises(psycopg.OperationalError):  # stopped with its context
        psycopg.connect(url, connect_timeout=2)
