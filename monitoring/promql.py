"""What the dashboard's and the alerting rules' PromQL reads: the series
selectors and the labels they group by, found with a PromQL parser
(``promql-parser``, the Rust parser's Python binding), never by pattern.

:func:`dashboard_queries` and :func:`rule_queries` list the expressions of
the generated dashboard (panel targets and the variables' ``label_values``
queries) and of a rules file; :func:`uses` parses one expression into the
:class:`Use` of each series selector it contains; :func:`unmatched` tells
which metric names and labels of those a scrape of a real daemon lacks, and
:func:`unknown_values` which label values named cannot occur.

Labels Prometheus attaches to every scraped series (``job``, ``instance``)
are not in a daemon's exposition: matchers on them are left out, and
grouping by them is always possible. ``up`` is Prometheus's own series of
every target. Grafana's interval variables (``$__rate_interval`` ...) are
replaced by a duration before parsing; other ``$variables`` only occur
inside label values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import promql_parser

TARGET_LABELS = frozenset({"job", "instance"})
PROMETHEUS_SERIES = frozenset({"up"})
_GRAFANA_INTERVALS = re.compile(r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}")
_LABEL_VALUES = re.compile(r"^\s*label_values\((?P<selector>.+),\s*(?P<label>[A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")


@dataclass(frozen=True)
class Matcher:
    name: str
    op: str  # "=", "!=", "=~", "!~"
    value: str


@dataclass(frozen=True)
class Use:
    """One series selector of an expression: its metric name, its matchers
    (target labels left out), and the labels an enclosing aggregation or
    vector matching groups it by."""

    where: str
    metric: str
    matchers: tuple[Matcher, ...] = ()
    grouped_by: frozenset[str] = field(default_factory=frozenset)

    def __str__(self) -> str:
        inner = ", ".join(f'{m.name}{m.op}"{m.value}"' for m in self.matchers)
        by = f" by ({', '.join(sorted(self.grouped_by))})" if self.grouped_by else ""
        return f"{self.where}: {self.metric}{{{inner}}}{by}"


_OPS = ((promql_parser.MatchOp.Equal, "="), (promql_parser.MatchOp.NotEqual, "!="),
        (promql_parser.MatchOp.Re, "=~"), (promql_parser.MatchOp.NotRe, "!~"))  # MatchOp is not hashable


def _op(match_op) -> str:
    return next(text for op, text in _OPS if op == match_op)


def _children(expr) -> list:
    kind = type(expr).__name__
    if kind == "BinaryExpr":
        return [expr.lhs, expr.rhs]
    if kind in ("AggregateExpr", "UnaryExpr", "ParenExpr", "SubqueryExpr"):
        return [expr.expr]
    if kind == "Call":
        return [a for a in expr.args if isinstance(a, promql_parser.Expr)]
    if kind == "MatrixSelector":
        return [expr.vector_selector]
    return []


def _walk(expr, where: str, grouped: frozenset[str]) -> Iterator[Use]:
    kind = type(expr).__name__
    if kind == "VectorSelector":
        name = expr.name or next((m.value for m in expr.matchers.matchers if m.name == "__name__"), None)
        if name is None:
            raise ValueError(f"{where}: a selector without a metric name: {expr}")
        matchers = tuple(Matcher(m.name, _op(m.op), m.value) for m in expr.matchers.matchers
                         if m.name not in TARGET_LABELS and m.name != "__name__")
        if expr.matchers.or_matchers:
            raise ValueError(f"{where}: 'or' inside a selector is not checked: {expr}")
        yield Use(where, name, matchers, grouped)
        return
    if kind == "AggregateExpr" and expr.modifier is not None:
        if expr.modifier.type == promql_parser.AggModifierType.By:
            grouped = frozenset(expr.modifier.labels)
        else:
            grouped = frozenset()  # "without": fewer labels than the series have; nothing to find
    if kind == "BinaryExpr" and expr.modifier is not None and expr.modifier.matching is not None:
        if expr.modifier.matching.type == promql_parser.LabelModifierType.Include:  # on(...)
            grouped = grouped | frozenset(expr.modifier.matching.labels)
    for child in _children(expr):
        yield from _walk(child, where, grouped)


def uses(expr: str, where: str = "") -> list[Use]:
    """The series selectors of a PromQL expression (Grafana's interval
    variables allowed). Raises ValueError if it does not parse."""
    text = _GRAFANA_INTERVALS.sub("5m", expr)
    try:
        parsed = promql_parser.parse(text)
    except Exception as exc:  # the binding raises its own error type
        raise ValueError(f"{where}: does not parse as PromQL: {exc}: {expr}") from exc
    return list(_walk(parsed, where or expr, frozenset()))


def dashboard_queries(dashboard: Mapping) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every ``label_values``
    variable of a Grafana dashboard's JSON model."""
    found = []
    for panel in _panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            found.append((f"panel {panel.get('title')!r} {target.get('refId')}", target["expr"]))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        text = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        m = _LABEL_VALUES.match(text)
        if m is None:
            raise ValueError(f"variable {variable['name']}: not a label_values() query: {text}")
        found.append((f"variable {variable['name']}", f"group by ({m['label']}) ({m['selector']})"))
    return found


def _panels(panels: Iterable[Mapping]) -> Iterator[Mapping]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # collapsed rows keep theirs inside


def rule_queries(rules: Mapping) -> list[tuple[str, str]]:
    """(where, PromQL) of every rule of a Prometheus rules file (parsed YAML)."""
    return [(f"{group['name']}/{rule.get('alert') or rule.get('record')}", rule["expr"])
            for group in rules["groups"] for rule in group["rules"]]


def unmatched(selected: Iterable[Use], samples: Iterable[tuple[str, Mapping[str, str]]]) -> list[str]:
    """What a scrape of a real daemon does not have: a metric a selector
    names, or a label it matches on or is grouped by. ``samples`` are
    (sample name, labels) of one daemon's ``/metrics``. Label values are
    :func:`unknown_values`'s business: a daemon in good health never
    answers UNKNOWN_SERVER_ERROR, yet a rule may select it."""
    labels_of: dict[str, set[str]] = {}
    for name, labels in samples:
        labels_of.setdefault(name, set()).update(labels)
    problems = []
    for use in selected:
        if use.metric in PROMETHEUS_SERIES:
            continue
        if use.metric not in labels_of:
            problems.append(f"no metric {use.metric!r} ({use})")
            continue
        wanted = {m.name for m in use.matchers} | (use.grouped_by - TARGET_LABELS)
        missing = sorted(wanted - labels_of[use.metric])
        if missing:
            problems.append(f"no label {', '.join(missing)} on {use.metric} ({use})")
    return problems


def unknown_values(selected: Iterable[Use], known: Mapping[str, Iterable[str]]) -> list[str]:
    """Label values a selector names that cannot occur: ``known`` maps a
    label to every value it can take. A regular expression counts when it
    is alternatives of plain names (``NONE|MEMBER_ID_REQUIRED``)."""
    problems = []
    for use in selected:
        for m in use.matchers:
            if m.name not in known:
                continue
            names = m.value.split("|") if m.op in ("=~", "!~") else [m.value]
            if m.op in ("=~", "!~") and not all(re.fullmatch(r"[A-Za-z0-9_]+", n) for n in names):
                continue  # a real pattern: nothing to compare
            unknown = sorted(set(names) - set(known[m.name]))
            if unknown:
                problems.append(f"{m.name} value {', '.join(unknown)} cannot occur ({use})")
    return problems
