"""The zkcoord Grafana dashboard, built with grafana-foundation-sdk.

``python -m monitoring.dashboard`` writes ``monitoring/grafana/zkcoord-dashboard.json``;
``--check`` only compares and exits 1 when the checked-in file differs (a
unit test does the same). Edit this module, never the JSON.

Every query selects ``job=~"$job", instance=~"$instance"`` (:data:`SEL`);
the variables list the jobs and instances that export
``zkcoord_zookeeper_connected``, a gauge every daemon with
``--metrics-listen`` exports from its start. The metrics are those of
:mod:`zkcoord.server.metrics`; ``tests/integration/test_monitoring_metrics.py``
checks that each name and label used here is exported by a real daemon.

The JSON is generated for Grafana 11.6 (the SDK release pinned in
pyproject.toml); Grafana 10 and later import it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as d
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.stat import Panel as Stat
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as models

OUTPUT = Path(__file__).resolve().parent / "grafana" / "zkcoord-dashboard.json"
UID = "zkcoord-overview"
DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'job=~"$job", instance=~"$instance"'
RATE = "$__rate_interval"
# Answers with these codes are steps of the group protocol, not failures (as in the alerting rules).
PROTOCOL_STEPS = "NONE|MEMBER_ID_REQUIRED|REBALANCE_IN_PROGRESS"


def query(expr: str, legend: str = "", *, instant: bool = False) -> Dataquery:
    q = Dataquery().expr(expr).datasource(DATASOURCE)
    if legend:
        q = q.legend_format(legend)
    return q.instant() if instant else q.range()


def timeseries(title: str, description: str, targets: list[Dataquery], unit: str = "short", *,
               stacked: bool = False, width: int = 8) -> Timeseries:
    panel = (Timeseries().title(title).description(description).datasource(DATASOURCE).unit(unit)
             .height(8).span(width).min(0).fill_opacity(10 if not stacked else 30)
             .legend(common_builders.VizLegendOptions().display_mode(common.LegendDisplayMode.LIST)
                     .placement(common.LegendPlacement.BOTTOM).show_legend(True))
             .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI)
                      .sort(common.SortOrder.DESCENDING)))
    if stacked:
        panel = panel.stacking(common_builders.StackingConfig().mode(common.StackingMode.NORMAL))
    for i, target in enumerate(targets):
        panel = panel.with_target(target.ref_id(chr(ord("A") + i)))
    return panel


def thresholds(*steps: tuple[float | None, str]) -> d.ThresholdsConfig:
    return d.ThresholdsConfig().mode(models.ThresholdsMode.ABSOLUTE).steps(
        [models.Threshold(value=value, color=color) for value, color in steps])


def stat(title: str, description: str, expr: str, unit: str = "short", *,
         steps: tuple[tuple[float | None, str], ...] = ((None, "green"),),
         mappings: list[models.ValueMapping] | None = None) -> Stat:
    panel = (Stat().title(title).description(description).datasource(DATASOURCE).unit(unit).height(4).span(4)
             .with_target(query(expr, instant=True).ref_id("A"))
             .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
             .graph_mode(common.BigValueGraphMode.NONE).color_mode(common.BigValueColorMode.BACKGROUND)
             .thresholds(thresholds(*steps)))
    if mappings:
        panel = panel.mappings(mappings)
    return panel


def rate(metric: str, by: str, extra: str = "") -> str:
    """``sum by (by) (rate(metric{SEL, extra}[$__rate_interval]))``."""
    selector = f"{SEL}, {extra}" if extra else SEL
    return f"sum by ({by}) (rate({metric}{{{selector}}}[{RATE}]))"


def rate_panel(metric: str, by: str, unit: str, title: str, description: str, *, extra: str = "",
               width: int = 8) -> Timeseries:
    """A panel of one counter's per-second rate, one series per ``by`` labels."""
    legend = " ".join(f"{{{{{label.strip()}}}}}" for label in by.split(","))
    return timeseries(title, description, [query(rate(metric, by, extra), legend)], unit, width=width)


def increase(metric: str) -> str:
    """``sum by (instance) (increase(metric{SEL}[$__rate_interval]))``: events per interval."""
    return f"sum by (instance) (increase({metric}{{{SEL}}}[{RATE}]))"


def quantiles(metric: str, by: str = "", legend_prefix: str = "") -> list[Dataquery]:
    """p50, p95 and p99 of a histogram, per ``by`` labels if given."""
    group = f"{by}, le" if by else "le"
    out = []
    for q in (0.5, 0.95, 0.99):
        legend = f"{legend_prefix}p{round(q * 100)}" if not by else f"{{{{{by}}}}} p{round(q * 100)}"
        out.append(query(f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{SEL}}}[{RATE}])))",
                         legend))
    return out


def overview_row(builder: d.Dashboard) -> d.Dashboard:
    connected = [models.ValueMap(options={
        "0": models.ValueMappingResult(text="disconnected", color="red", index=0),
        "1": models.ValueMappingResult(text="connected", color="green", index=1)})]
    return (builder.with_row(d.Row("Overview"))
            .with_panel(stat("Daemons up", "Scrape targets of the selected jobs that answered (Prometheus `up`).",
                             f"sum(up{{{SEL}}})", steps=((None, "red"), (1, "green"))))
            .with_panel(stat("ZooKeeper", "The worst ZooKeeper session of the selected daemons "
                             "(zkcoord_zookeeper_connected).", f"min(zkcoord_zookeeper_connected{{{SEL}}})",
                             steps=((None, "red"), (1, "green")), mappings=connected))
            .with_panel(stat("Groups owned", "Groups served by the selected daemons.",
                             f"sum(zkcoord_groups_owned{{{SEL}}})"))
            .with_panel(stat("Members", "Members of the owned groups.", f"sum(zkcoord_group_members{{{SEL}}})"))
            .with_panel(stat("Groups with Kafka-side members",
                             "Owned dual/kafka groups that also have members in Kafka's own group coordinator "
                             "(consumers bootstrapped from a broker instead of a gateway).",
                             f"sum(zkcoord_groups_with_kafka_members{{{SEL}}})",
                             steps=((None, "green"), (1, "red"))))
            .with_panel(stat("Dual-commit divergences", "Dual commits Kafka stored and ZooKeeper did not, over "
                             "the dashboard's time range; the next owner repairs them on load.",
                             f"sum(increase(zkcoord_dual_commit_divergences_total{{{SEL}}}[$__range]))",
                             steps=((None, "green"), (1, "orange")))))


def groups_row(builder: d.Dashboard) -> d.Dashboard:
    return (builder.with_row(d.Row("Groups and rebalances"))
            .with_panel(timeseries("Groups by state", "Owned groups by Kafka's group state.",
                                   [query(f"sum by (state) (zkcoord_groups{{{SEL}}})", "{{state}}")],
                                   stacked=True))
            .with_panel(timeseries("Groups by offset storage", "Owned groups by offset storage mode "
                                   "(zookeeper, dual, kafka: the migration's phases).",
                                   [query(f"sum by (mode) (zkcoord_groups{{{SEL}}})", "{{mode}}")], stacked=True))
            .with_panel(timeseries("Members and held heartbeats", "Members of the owned groups, and heartbeats "
                                   "held for the rebalance notice (about one per zkcoord-consumer member).",
                                   [query(f"sum by (instance) (zkcoord_group_members{{{SEL}}})",
                                          "members {{instance}}"),
                                    query(f"sum by (instance) (zkcoord_held_heartbeats{{{SEL}}})",
                                          "held {{instance}}")]))
            .with_panel(rate_panel("zkcoord_rebalances_total", "instance", "ops", "Rebalances",
                                   "New generations started, per second."))
            .with_panel(timeseries("Rebalance duration", "From PreparingRebalance to the group's Stable write.",
                                   quantiles("zkcoord_rebalance_duration_seconds"), "s"))
            .with_panel(timeseries("Groups owned per daemon", "How the groups are spread over the daemons.",
                                   [query(f"sum by (instance) (zkcoord_groups_owned{{{SEL}}})", "{{instance}}")])))


def consumer_groups_row(builder: d.Dashboard) -> d.Dashboard:
    """KIP-848's consumer groups beside the classic ones: how many of each, which protocol
    the members speak (classic members in consumer groups: an upgrade under way), how far
    the groups are from their target assignments, and the heartbeats of each protocol."""
    heartbeats = 'api=~"Heartbeat|ConsumerGroupHeartbeat"'
    return (builder.with_row(d.Row("Consumer groups (KIP-848)"))
            .with_panel(timeseries("Groups by type and state", "Owned groups by group type (classic, consumer) and "
                                   "Kafka's state of that type (a consumer group: Empty, Assigning, Reconciling, "
                                   "Stable).",
                                   [query(f"sum by (type, state) (zkcoord_groups{{{SEL}}})", "{{type}} {{state}}")],
                                   stacked=True, width=6))
            .with_panel(timeseries("Members by protocol", "Members of the owned groups by group type and by the "
                                   "protocol each member speaks; classic members in consumer groups are an online "
                                   "upgrade (or downgrade) in progress.",
                                   [query(f"sum by (type, protocol) (zkcoord_members_by_protocol{{{SEL}}})",
                                          "{{protocol}} members of {{type}} groups")], stacked=True, width=6))
            .with_panel(timeseries("Consumer groups converging", "Members of consumer groups not at their target "
                                   "assignment yet (revoking, or waiting for partitions others still own), and the "
                                   "largest group epoch minus target assignment epoch of a daemon's groups (above 0: "
                                   "a target assignment is pending). Both return to 0 once the groups settle.",
                                   [query(f"sum(zkcoord_consumer_group_unreconciled_members{{{SEL}}})",
                                          "members not at target"),
                                    query(f"max(zkcoord_consumer_group_epoch_lag_max{{{SEL}}})",
                                          "max epoch lag")], width=6))
            .with_panel(rate_panel("zkcoord_requests_total", "api, error", "reqps", "Heartbeats by protocol",
                                   "Heartbeats answered per second: Heartbeat (classic members, also those in "
                                   "consumer groups) and ConsumerGroupHeartbeat (KIP-848 members), by error (NONE, "
                                   "or the error that makes a member rejoin).", extra=heartbeats, width=6)))


def requests_row(builder: d.Dashboard) -> d.Dashboard:
    errors = 'error!="NONE"'
    failures = f'error!~"{PROTOCOL_STEPS}"'
    ratio = f"{rate('zkcoord_requests_total', 'api', failures)} / {rate('zkcoord_requests_total', 'api')}"
    return (builder.with_row(d.Row("Requests"))
            .with_panel(rate_panel("zkcoord_requests_total", "api", "reqps", "Requests by API",
                                   "Kafka requests answered per second (daemon listeners and gateways), by API."))
            .with_panel(rate_panel("zkcoord_requests_total", "api, error", "reqps", "Error responses by API and error",
                                   "Answers whose error code is not NONE, per second, by API and Kafka error name "
                                   "(as Kafka's ErrorsPerSec).", extra=errors))
            .with_panel(timeseries("Error ratio by API", "Share of each API's answers that carry an error other "
                                   "than the group protocol's own steps (MEMBER_ID_REQUIRED, REBALANCE_IN_PROGRESS): "
                                   "what the ZkcoordRequestErrors alert watches.",
                                   [query(ratio, "{{api}}")], "percentunit"))
            .with_panel(timeseries("Latency p99 by API", "Time to answer, 99th percentile (held heartbeats left "
                                   "out).", quantiles_by_api(0.99), "s"))
            .with_panel(timeseries("Latency p50 by API", "Time to answer, median.", quantiles_by_api(0.5), "s"))
            .with_panel(timeseries("Mean latency by API", "Time to answer, mean.",
                                   [query(f"{rate('zkcoord_request_latency_seconds_sum', 'api')} / "
                                          f"{rate('zkcoord_request_latency_seconds_count', 'api')}", "{{api}}")],
                                   "s"))
            .with_panel(timeseries("Event loop lag", "How late each daemon's event loop ran a callback due every "
                                   "50 ms: a stall (a long callback, a collector pass, the process descheduled) "
                                   "delays every request it overlaps.",
                                   quantiles("zkcoord_event_loop_lag_seconds", "instance"), "s"))
            .with_panel(rate_panel("zkcoord_sasl_logins_total", "mechanism, result", "ops", "SASL logins",
                                   "SASL logins per second on the daemons' and gateways' listeners, by mechanism "
                                   "and result (failed: a wrong password, an unknown user, a refused mechanism).")))


def quantiles_by_api(q: float) -> list[Dataquery]:
    return [query(f"histogram_quantile({q}, sum by (api, le) "
                  f"(rate(zkcoord_request_latency_seconds_bucket{{{SEL}}}[{RATE}])))", "{{api}}")]


def zookeeper_row(builder: d.Dashboard) -> d.Dashboard:
    return (builder.with_row(d.Row("ZooKeeper"))
            .with_panel(timeseries("ZooKeeper session", "1 while the daemon's ZooKeeper session is connected; 0 "
                                   "while suspended or expired (the daemon answers COORDINATOR_LOAD_IN_PROGRESS or "
                                   "NOT_COORDINATOR then).",
                                   [query(f"zkcoord_zookeeper_connected{{{SEL}}}", "{{instance}}")]))
            .with_panel(timeseries("Connection losses", "ZooKeeper connections lost (session suspended) per "
                                   "interval.",
                                   [query(increase("zkcoord_zookeeper_suspensions_total"), "{{instance}}")]))
            .with_panel(timeseries("Session expiries", "ZooKeeper sessions lost per interval: the daemon's "
                                   "groups were released and are loaded again. Given up: suspensions that lasted "
                                   "the session time-out, the session treated as lost (the groups given up at once, "
                                   "before ZooKeeper says so).",
                                   [query(increase("zkcoord_zookeeper_session_expiries_total"), "{{instance}}"),
                                    query(increase("zkcoord_zookeeper_sessions_given_up_total"),
                                          "{{instance}} given up")]))
            .with_panel(timeseries("Offset commits' session", "1 while the session the offset commits go on is "
                                   "open (each daemon worker opens it in the background at its first commit, "
                                   "beside its own; 0 with "
                                   "a SASL login, whose commits use the daemon's session). Opened: its connections "
                                   "opened per interval (a new session, or the same one reattached: after each "
                                   "reconnect, and after a lost connection). Failed: attempts to open it per "
                                   "interval (commits go through the daemon's own session meanwhile; often ZooKeeper's "
                                   "maxClientCnxns).",
                                   [query(f"zkcoord_zookeeper_commit_session_connected{{{SEL}}}", "{{instance}}"),
                                    query(increase("zkcoord_zookeeper_commit_sessions_opened_total"),
                                          "{{instance}} opened"),
                                    query(increase("zkcoord_zookeeper_commit_session_open_failures_total"),
                                          "{{instance}} failed")]))
            .with_panel(rate_panel("zkcoord_peer_probes_total", "outcome", "ops", "Probes of the next daemon",
                                   "Probes of the next live daemon's listener per second, by outcome: refused "
                                   "means nothing listens there (its process is gone)."))
            .with_panel(timeseries("Dead daemons' sessions ended", "Sessions of daemons proved dead (their port "
                                   "refused connections) that this daemon ended per interval, by outcome: 'ended' "
                                   "started the takeover of their groups without waiting for ZooKeeper's expiry.",
                                   [query(f"sum by (instance, outcome) "
                                          f"(increase(zkcoord_peer_sessions_ended_total{{{SEL}}}[{RATE}]))",
                                          "{{instance}} {{outcome}}")])))


def offsets_row(builder: d.Dashboard) -> d.Dashboard:
    return (builder.with_row(d.Row("Offsets and migration"))
            .with_panel(rate_panel("zkcoord_offset_commits_total", "mode", "ops", "Offset commits by storage mode",
                                   "OffsetCommits stored per second, by the group's offset storage mode."))
            .with_panel(timeseries("Offset commit multis", "ZooKeeper multis the offset commits sent per second "
                                   "(the commits of every owned group share them: commits per multi is the "
                                   "batching), and those refused or whose answer was lost.",
                                   [query(f"sum by (instance) (rate(zkcoord_zookeeper_offset_multis_total{{{SEL}}}"
                                          f"[{RATE}]))", "{{instance}}"),
                                    query(f"sum by (instance) (rate(zkcoord_zookeeper_offset_multis_failed_total"
                                          f"{{{SEL}}}[{RATE}]))", "{{instance}} failed")], "ops"))
            .with_panel(rate_panel("zkcoord_forwarded_commit_refusals_total", "error", "ops",
                                   "Forwarded commit refusals", "Partitions of dual/kafka commits Kafka refused, "
                                   "per second, by Kafka's error name."))
            .with_panel(timeseries("Dual-commit divergences", "Dual commits stored in Kafka and not in ZooKeeper, "
                                   "per interval (Kafka ahead; repaired by the next owner's load).",
                                   [query(increase("zkcoord_dual_commit_divergences_total"), "{{instance}}")]))
            .with_panel(timeseries("Forward aborts", "Times a daemon aborted its Kafka connections because a "
                                   "group it stopped owning had a commit in flight to Kafka (so that commit cannot "
                                   "land after the next owner's), per interval.",
                                   [query(increase("zkcoord_forward_aborts_total"), "{{instance}}")]))
            .with_panel(timeseries("Members in Kafka's own coordinator", "Owned dual/kafka groups with members in "
                                   "Kafka's own group coordinator, and those members, as last seen.",
                                   [query(f"sum(zkcoord_groups_with_kafka_members{{{SEL}}})", "groups"),
                                    query(f"sum(zkcoord_kafka_side_members{{{SEL}}})", "members")]))
            .with_panel(timeseries("Groups in a live handover", "Owned groups shared with legacy ZooKeeper "
                                   "consumers, whose partitions the daemons hand over member by member.",
                                   [query(f"sum by (instance) (zkcoord_mixed_groups{{{SEL}}})", "{{instance}}")])))


def gateway_row(builder: d.Dashboard) -> d.Dashboard:
    return (builder.with_row(d.Row("Gateway"))
            .with_panel(timeseries("Gateway connections", "Client connections open on each gateway, and the "
                                   "brokers it has a port for.",
                                   [query(f"sum by (instance) (zkcoord_gateway_connections{{{SEL}}})",
                                          "connections {{instance}}"),
                                    query(f"sum by (instance) (zkcoord_gateway_brokers{{{SEL}}})",
                                          "brokers {{instance}}")]))
            .with_panel(rate_panel("zkcoord_gateway_forwarded_requests_total", "api", "reqps",
                                   "Forwarded requests by API", "Requests the gateways passed to a broker, per "
                                   "second (the group APIs they answer are under Requests)."))
            .with_panel(rate_panel("zkcoord_gateway_forwarded_bytes_total", "direction", "Bps", "Forwarded bytes",
                                   "Bytes per second of forwarded requests and of the brokers' answers to them."))
            .with_panel(rate_panel("zkcoord_gateway_forwarded_bytes_total", "api, direction", "Bps",
                                   "Forwarded bytes by API", "The same, by API.", width=16))
            .with_panel(rate_panel("zkcoord_gateway_broker_connect_failures_total", "instance", "ops", "Gateway errors",
                                   "Client connections closed because no broker accepted the gateway's connection, "
                                   "per second.")))


def label_variable(name: str, label: str, values_query: str) -> d.QueryVariable:
    """A multi-value variable of a label's values, "All" (any value) by default."""
    return (d.QueryVariable(name).label(label).datasource(DATASOURCE)
            .query({"query": values_query, "refId": name})
            .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(models.VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(".*")
            .current(models.VariableOption(selected=True, text=["All"], value=["$__all"])))


def variables(builder: d.Dashboard) -> d.Dashboard:
    datasource = d.DatasourceVariable("datasource").label("Data source").type("prometheus")
    job = label_variable("job", "Job", "label_values(zkcoord_zookeeper_connected, job)")
    instance = label_variable("instance", "Instance",
                              'label_values(zkcoord_zookeeper_connected{job=~"$job"}, instance)')
    return builder.with_variable(datasource).with_variable(job).with_variable(instance)


def build() -> dict:
    """The dashboard as Grafana's JSON model (a dict)."""
    builder = (d.Dashboard("zkcoord").uid(UID)
               .description("zkcoord coordinator daemons and gateways: groups, rebalances, KIP-848 consumer groups, "
                            "requests, ZooKeeper, offset storage and migration, gateway traffic.")
               .tags(["zkcoord", "kafka", "zookeeper"]).editable().refresh("30s").time("now-3h", "now")
               .timezone(common.TimeZoneBrowser).tooltip(models.DashboardCursorSync.CROSSHAIR))
    builder = variables(builder)
    for row in (overview_row, groups_row, consumer_groups_row, requests_row, zookeeper_row, offsets_row, gateway_row):
        builder = row(builder)
    model = builder.build()
    for panel_id, panel in enumerate(model.panels, 1):  # stable ids, in layout order
        panel.id_val = panel_id
    return json.loads(JSONEncoder().encode(model))


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m monitoring.dashboard", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the checked-in JSON, write nothing")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python -m monitoring.dashboard", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
