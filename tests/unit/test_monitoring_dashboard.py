"""The Grafana dashboard (monitoring/dashboard.py -> monitoring/grafana/zkcoord-dashboard.json):
the checked-in JSON is what the generator writes, it is a dashboard the SDK's
own types read back unchanged, and every query parses as PromQL and selects
by the job and instance variables. That the metrics exist is
tests/integration/test_monitoring_metrics.py's business."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("grafana_foundation_sdk", reason="pip install -e '.[test]' (grafana-foundation-sdk)")
pytest.importorskip("promql_parser", reason="pip install -e '.[test]' (promql-parser)")

from monitoring import dashboard, promql  # noqa: E402


@pytest.fixture(scope="module")
def checked_in() -> dict:
    return json.loads(dashboard.OUTPUT.read_text())


def test_checked_in_json_is_what_the_generator_writes():
    assert dashboard.OUTPUT.read_text() == dashboard.render(), \
        "monitoring/grafana/zkcoord-dashboard.json is stale: run python -m monitoring.dashboard"
    assert dashboard.main(["--check"]) == 0


def test_check_fails_on_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "dashboard.json"
    stale.write_text(dashboard.render().replace("Groups by state", "Groups by mood"))
    assert dashboard.main(["--check", "--output", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err


def test_the_sdk_types_read_the_json_back_unchanged(checked_in):
    """A field the dashboard model does not know, or a panel or query type
    the SDK cannot decode, would be lost on the way back."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    decoded = Dashboard.from_json(checked_in)
    assert json.loads(JSONEncoder().encode(decoded)) == checked_in
    assert type(decoded.panels[1].options).__module__.endswith("models.stat")  # decoded as a stat panel


def test_layout_ids_and_datasources(checked_in):
    panels = checked_in["panels"]
    assert [p["id"] for p in panels] == list(range(1, len(panels) + 1))
    assert checked_in["uid"] == dashboard.UID
    taken = set()
    for panel in panels:
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and all(t["datasource"] == panel["datasource"] for t in panel["targets"])
        assert panel.get("description"), f"{panel['title']} has no description"
    names = [v["name"] for v in checked_in["templating"]["list"]]
    assert names == ["datasource", "job", "instance"]


def test_every_query_parses_and_every_selector_is_templated_by_job_and_instance(checked_in):
    queries = promql.dashboard_queries(checked_in)
    panel_targets = sum(len(p.get("targets", [])) for p in checked_in["panels"])
    assert len(queries) == panel_targets + 2  # and the two label_values variables
    for where, expr in queries:
        promql.uses(expr, where)  # raises if it does not parse
        if not where.startswith("panel"):
            continue
        text = expr.replace(" ", "")
        selectors = text.count("{") - text.count("{{")
        assert text.count('job=~"$job",instance=~"$instance"') == selectors, f"{where}: {expr}"


def test_every_zkcoord_metric_has_a_panel(checked_in):
    """Each metric of zkcoord.server.metrics (its docstring's table) is read by some panel."""
    import re

    from zkcoord.server import metrics

    exported = set(re.findall(r"``(zkcoord_[a-z_]+)", metrics.__doc__))
    read = set()
    for where, expr in promql.dashboard_queries(checked_in):
        for use in promql.uses(expr, where):
            read.add(re.sub(r"_(bucket|sum|count)$", "", use.metric))
    assert exported - read == set()
    assert len(exported) >= 20
