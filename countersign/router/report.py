"""`countersign report --html FILE`: one self-contained HTML page (plotly.js inlined: no CDN, works
offline) with decisions per day by outcome, time to decide per action class, rejection and edit
rates per class, the rubber-stamp share per reviewer, and the policy suggestions. Read only.

Needs the `report` extra (plotly, https://plotly.com/python/); the rest of countersign never imports
it.
"""

from __future__ import annotations

import html
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine

from ..exceptions import UsageError
from ..store.history import recorded
from ..store.stats import Stats, outcome_of, stats
from .policy import Policy
from .suggest import suggest

OUTCOMES = {
    "auto_approved": "#a6d96a",
    "approved": "#1a9641",
    "edited": "#2b83ba",
    "rejected": "#d7191c",
    "expired": "#fdae61",
    "pending": "#bababa",
}
"""Each outcome and its colour on the charts."""


def report_html(engine: Engine, since: datetime, policy: Policy | None, min_decisions: int) -> str:
    """The report of the requests created since `since` (UTC), with the suggestions against
    `policy` (none without one) on `min_decisions` human decisions. Raises `UsageError` when
    plotly (the `report` extra) is not installed."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise UsageError("countersign report needs plotly: pip install 'countersign[report]'") from None
    days: dict[str, Counter[str]] = {}
    for row in recorded(engine, since):
        days.setdefault(row.created_at.date().isoformat(), Counter())[outcome_of(row)] += 1
    found = stats(engine, since)
    figures = [_per_day(go, days), _times(go, found), _rates(go, found), _stamps(go, found)]
    charts = [
        figure.to_html(full_html=False, include_plotlyjs=n == 0, config={"displaylogo": False})
        for n, figure in enumerate(figures)
    ]
    advice = "no policy given (--policy or COUNTERSIGN_POLICY)"
    if policy is not None:
        lines = [
            line
            for one in suggest(policy, recorded(engine, since), min_decisions)
            for line in one.lines(policy)
        ]
        advice = "\n".join(lines) or "no human decisions recorded in that time"
    return _page(since, charts, advice)


def _per_day(go: Any, days: dict[str, Counter[str]]) -> Any:
    ordered = sorted(days)
    traces = [
        go.Bar(name=o, x=ordered, y=[days[d][o] for d in ordered], marker_color=colour)
        for o, colour in OUTCOMES.items()
    ]
    return go.Figure(traces, layout={"barmode": "stack", "title": "Decisions per day by outcome"})


def _times(go: Any, found: Stats) -> Any:
    traces = [go.Box(name=name, y=tally.seconds) for name, tally in sorted(found.actions.items())]
    layout = {"title": "Time to a human decision per action class (s)", "yaxis": {"type": "log"}}
    return go.Figure(traces, layout=layout)


def _rates(go: Any, found: Stats) -> Any:
    names = sorted(found.actions)
    decided = {n: max(1, (t := found.actions[n]).approved + t.edited + t.rejected) for n in names}
    traces = [
        go.Bar(
            name="rejected",
            x=names,
            y=[found.actions[n].rejected / decided[n] for n in names],
            marker_color=OUTCOMES["rejected"],
        ),
        go.Bar(
            name="edited",
            x=names,
            y=[found.actions[n].edited / decided[n] for n in names],
            marker_color=OUTCOMES["edited"],
        ),
    ]
    layout = {
        "title": "Rejection and edit rate per action class (of human decisions)",
        "yaxis": {"tickformat": ".0%", "range": [0, 1]},
    }
    return go.Figure(traces, layout=layout)


def _stamps(go: Any, found: Stats) -> Any:
    names = sorted(found.reviewers)
    shares = [found.reviewers[n].as_reviewer_dict()["rubber_stamp_share"] or 0 for n in names]
    layout = {"title": "Rubber-stamp share per reviewer", "yaxis": {"tickformat": ".0%", "range": [0, 1]}}
    return go.Figure([go.Bar(x=names, y=shares)], layout=layout)


def _page(since: datetime, charts: list[str], advice: str) -> str:
    made = datetime.now(UTC).isoformat(timespec="seconds")
    body = "\n".join(f'<section class="chart">{chart}</section>' for chart in charts)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>countersign report</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1100px}}pre{{background:#f4f4f4;padding:1em}}</style>
</head><body>
<h1>countersign report</h1>
<p>Requests created since {html.escape(since.isoformat(timespec="seconds"))}; made {html.escape(made)}.</p>
{body}
<h2>Policy suggestions</h2>
<pre id="suggestions">{html.escape(advice)}</pre>
</body></html>
"""
