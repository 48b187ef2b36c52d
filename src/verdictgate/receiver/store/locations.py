"""Where a store is: a PostgreSQL URL or a SQLite file, and how it is shown in a log line
(never with its password)."""

from __future__ import annotations

from pathlib import Path


def is_postgres_url(location: str | Path) -> bool:
    """Whether a store location names a PostgreSQL server (`postgresql://` or `postgres://`)."""
    return str(location).startswith(("postgresql://", "postgres://"))


def redacted(location: str | Path) -> str:
    """A store location fit for a log line: a PostgreSQL URL rebuilt from what libpq reads in
    it, with `***` for its password, wherever it was given (one that cannot be read is not
    shown at all)."""
    text = str(location)
    if not is_postgres_url(text):
        return text
    try:
        from psycopg.conninfo import conninfo_to_dict

        given = {key: str(value) for key, value in conninfo_to_dict(text).items()}
    except Exception:
        return "postgresql://(a URL that cannot be read)"
    user, password = given.pop("user", ""), given.pop("password", None)
    host, port, database = given.pop("host", ""), given.pop("port", ""), given.pop("dbname", "")
    who = f"{user}:***@" if password is not None else f"{user}@" if user else ""
    where = f"{host}:{port}" if port else host
    query = "&".join(f"{key}={value}" for key, value in sorted(given.items()))
    return f"postgresql://{who}{where}/{database}" + (f"?{query}" if query else "")
