"""The receiver's pages for a browser: `GET /`, its runs newest first (filtered by suite and
status), and `GET /runs/{id}`, a run's HTML report, refreshing itself while the run collects.
Read-only, no script, every value escaped."""

from __future__ import annotations

import time
from html import escape
from urllib.parse import quote

from ...reports.html import page, table
from ..store import StoredRun

RUNS_SHOWN = 200
"""Runs the list shows at once (narrow it by suite or status to see others)."""
REFRESH_SECONDS = 5
"""How often the page of a run still collecting reloads itself."""
STATUSES = ("qualified", "rejected", "inconclusive", "in_progress")
HTML = "text/html; charset=utf-8"
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
}
"""Every page: nothing loaded or run but the page itself."""


def runs_page(runs: list[StoredRun], suite: str | None, status: str | None) -> str:
    """The list of runs, with a form that filters it (a plain GET form: no script)."""
    options = "".join(
        f'<option value="{value}"{" selected" if value == status else ""}>{label}</option>'
        for value, label in [("", "any status"), *((s, s.replace("_", " ")) for s in STATUSES)]
    )
    form = (
        '<form method="get" action="/"><label>suite <input name="suite" value="'
        f'{escape(suite or "")}"></label> <label>status <select name="status">{options}'
        "</select></label> <button>show</button></form>"
    )
    rows = [
        [
            f'<a href="/runs/{quote(run.run_id, safe="")}">{escape(run.run_id)}</a>',
            escape(run.status if run.final and run.status else "in progress"),
            escape(run.suite or "—"),
            escape(run.point or "—"),
            f"{run.received} of {run.planned_trials if run.planned_trials is not None else '?'}",
            escape(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(run.last_seen))),
        ]
        for run in runs
    ]
    shown = (
        f'<p class="note">The newest {len(runs)} runs (narrow the list to see older ones).</p>'
        if len(runs) >= RUNS_SHOWN
        else f'<p class="note">{len(runs)} runs.</p>'
    )
    return page(
        "verdictgate runs",
        [
            "<h1>Runs</h1>",
            form,
            shown,
            table(
                ["run", "status", "suite", "point", "trials received", "last activity"],
                rows,
                numeric=(4,),
            ),
        ],
        "verdictgate receiver",
    )


def sign_in_page(failed: bool = False) -> str:
    """What a browser without the token gets (with a 401): a form that sends it once, by POST,
    so that it never appears in an address."""
    return page(
        "verdictgate: sign in",
        [
            "<h1>Sign in</h1>"
            + ('<p class="rejected">That token is not this receiver\'s.</p>' if failed else "")
            + "<p>This receiver asks for its bearer token (the one its senders use). Give it "
            "once: the browser then keeps a cookie for this receiver's pages only.</p>"
            '<form method="post" action="/"><label>token <input name="token" type="password" '
            'autocomplete="current-password"></label> <button>sign in</button></form>'
        ],
        "verdictgate receiver",
    )


def unknown_run_page() -> str:
    """What a run that is not known shows (with a 404)."""
    return page("verdictgate: unknown run", ["<h1>No such run</h1>"], "verdictgate receiver")


def run_page(report: str, in_progress: bool) -> str:
    """A run's HTML report, with a way back to the list, reloading itself while it collects."""
    back = '<p class="note"><a href="/">all runs</a></p>'
    refresh = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">' if in_progress else ""
    return report.replace("<head>", f"<head>{refresh}", 1).replace("<body>", f"<body>{back}", 1)
