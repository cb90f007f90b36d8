"""monitoring.promql: the selectors, matchers and grouping labels it finds
in PromQL, and what it reports against a scrape."""

from __future__ import annotations

import pytest

pytest.importorskip("promql_parser", reason="pip install -e '.[test]' (promql-parser)")

from monitoring import promql  # noqa: E402


def test_selectors_matchers_and_grouping_labels():
    uses = promql.uses('sum by (api) (rate(a_total{job=~"$job", error!="NONE"}[$__rate_interval])) '
                       '/ on (api) group_left sum by (api, le) (b_bucket{instance=~"$instance"})', "w")
    assert [(u.metric, [(m.name, m.op, m.value) for m in u.matchers], sorted(u.grouped_by)) for u in uses] == [
        ("a_total", [("error", "!=", "NONE")], ["api"]),
        ("b_bucket", [], ["api", "le"]),
    ]


def test_a_renamed_metric_or_label_is_reported():
    samples = [("a_total", {"api": "JoinGroup", "error": "NONE"})]
    assert promql.unmatched(promql.uses('sum by (api) (rate(a_total{error="X"}[5m]))'), samples) == []
    assert promql.unmatched(promql.uses("sum by (api) (rate(renamed_total[5m]))", "w"), samples) == [
        "no metric 'renamed_total' (w: renamed_total{} by (api))"]
    assert promql.unmatched(promql.uses("sum by (endpoint) (rate(a_total[5m]))", "w"), samples) == [
        "no label endpoint on a_total (w: a_total{} by (endpoint))"]
    assert promql.unmatched(promql.uses("up == 0 and on (job, instance) a_total"), samples) == []


def test_label_values_that_cannot_occur_are_reported():
    known = {"error": ["NONE", "MEMBER_ID_REQUIRED"]}
    ok = promql.uses('a{error!~"NONE|MEMBER_ID_REQUIRED"} + a{error=~".*_ERROR"}')
    assert promql.unknown_values(ok, known) == []
    assert promql.unknown_values(promql.uses('a{error="NONEE"}', "w"), known) == [
        'error value NONEE cannot occur (w: a{error="NONEE"})']


def test_grafana_variable_queries_become_promql():
    dashboard = {"panels": [{"type": "row", "title": "r", "panels": [
        {"title": "p", "targets": [{"refId": "A", "expr": "x"}]}]}],
        "templating": {"list": [{"type": "query", "name": "job",
                                 "query": {"query": "label_values(x{a=\"b\"}, job)"}},
                                {"type": "datasource", "name": "datasource", "query": "prometheus"}]}}
    assert promql.dashboard_queries(dashboard) == [
        ("panel 'p' A", "x"), ("variable job", 'group by (job) (x{a="b"})')]
    with pytest.raises(ValueError, match="does not parse"):
        promql.uses("sum(rate(x[5m])", "w")
