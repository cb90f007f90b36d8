"""Monitoring that operators already run, for zkcoord daemons.

This package owns the Grafana dashboard (:mod:`monitoring.dashboard`, which
generates ``grafana/zkcoord-dashboard.json``), the Prometheus alerting rules
(``prometheus/zkcoord-alerts.yml``, unit-tested by promtool with
``prometheus/zkcoord-alerts.test.yml``) and the reading of both for the
metric names and labels their PromQL uses (:mod:`monitoring.promql`). The
metrics themselves are :mod:`zkcoord.server.metrics`'s.
"""
