"""``make demo``'s last part: what the daemons' metrics endpoints say.

Run as ``python -m zkcoord.local.demo_metrics`` with ``ZKCOORD_METRICS_URLS``
set (``eval "$(zkcoord local env)"`` after ``zkcoord local up --daemons N``).
For each daemon it fetches ``/health`` and ``/metrics`` and prints a few
lines: health, groups, members, rebalances, the ZooKeeper session, the
gateway, and requests per API with their errors; then how to see the rest.
Exits 1 if a daemon did not answer or is not ready.

:func:`summary` is pure (an exposition text in, lines out), so a test can
feed it a real registry's text.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

from zkcoord.local import procs


def samples(metrics_text: str) -> dict[str, list[tuple[dict, float]]]:
    """Every sample of an exposition text: name -> [(labels, value)]."""
    found: dict[str, list[tuple[dict, float]]] = defaultdict(list)
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            found[sample.name].append((sample.labels, sample.value))
    return found


def _total(found: dict, name: str) -> int:
    return int(sum(value for _, value in found.get(name, [])))


def _requests_by_api(found: dict) -> list[str]:
    """One line per API: its requests and, in brackets, its error answers by name."""
    totals: dict[str, int] = defaultdict(int)
    errors: dict[str, dict[str, int]] = defaultdict(dict)
    for labels, value in found.get("zkcoord_requests_total", []):
        api, error = labels.get("api", "?"), labels.get("error", "NONE")
        totals[api] += int(value)
        if error != "NONE" and value:  # summed over the workers of a daemon with several
            errors[api][error] = errors[api].get(error, 0) + int(value)
    width = max((len(api) for api in totals), default=0)
    lines = []
    for api in sorted(totals, key=lambda a: (-totals[a], a)):
        detail = ", ".join(f"{name} {count}" for name, count in sorted(errors[api].items()))
        lines.append(f"    {api:<{width}}  {totals[api]:>6}" + (f"  errors: {detail}" if detail else ""))
    return lines or ["    (none yet)"]


def _health_line(status: int, body: bytes) -> str:
    """``200 ready`` or ``503 unavailable: <reason>``; the raw body when it is not the daemon's JSON."""
    try:
        answer = json.loads(body)
        return " ".join([str(status), answer["status"]]) + (f": {answer['reason']}" if "reason" in answer else "")
    except (ValueError, TypeError, KeyError):
        return f"{status} {body.decode(errors='replace').strip()}"


def summary(url: str, health: tuple[int, bytes] | None, metrics_text: str | None) -> list[str]:
    """A daemon's few lines that matter, from its /health answer and /metrics text."""
    if health is None:
        return [f"{url}: no answer (is the daemon up? `zkcoord local status`)"]
    lines = [f"{url}  /health: {_health_line(*health)}"]
    if metrics_text is None:
        return [*lines, "  /metrics: no answer"]
    found = samples(metrics_text)
    rebalances = _total(found, "zkcoord_rebalances_total")
    timed, seconds = (_total(found, "zkcoord_rebalance_duration_seconds_count"),
                      sum(v for _, v in found.get("zkcoord_rebalance_duration_seconds_sum", [])))
    lines.append(f"  groups owned {_total(found, 'zkcoord_groups_owned')}, "
                 f"members {_total(found, 'zkcoord_group_members')}, rebalances {rebalances}"
                 + (f" (mean {seconds / timed:.2f} s from PreparingRebalance to Stable)" if timed else ""))
    sessions = [value for _, value in found.get("zkcoord_zookeeper_connected", [])]
    connected = "connected" if sessions and all(sessions) else "NOT connected"
    if len(sessions) > 1:  # one per worker (zkcoord run --workers)
        ready = int(sum(v for labels, v in found.get("zkcoord_workers", []) if labels.get("state") == "ready"))
        lines.append(f"  workers: {ready} of {len(sessions)} ready")
        connected = f"connected in {int(sum(sessions))} of {len(sessions)} workers"
    lines.append(f"  ZooKeeper session {connected}, "
                 f"{_total(found, 'zkcoord_zookeeper_session_expiries_total')} expiries")
    if "zkcoord_gateway_connections" in found:
        lines.append(f"  gateway: {_total(found, 'zkcoord_gateway_connections')} client connections open, "
                     f"{_total(found, 'zkcoord_gateway_forwarded_requests_total')} requests passed to brokers")
    lines.append("  requests answered, by API:")
    return lines + _requests_by_api(found)


def main() -> int:
    urls = [u for u in os.environ.get("ZKCOORD_METRICS_URLS", "").split(",") if u]
    if not urls:
        print("ZKCOORD_METRICS_URLS is empty: the sandbox runs no daemons, or daemons started by a zkcoord "
              "without metrics ports; `zkcoord local down`, then `zkcoord local up --daemons 2`.")
        return 1
    ok = True
    for url in urls:
        health = procs.http_get(f"{url}/health")
        metrics = procs.http_get(f"{url}/metrics")
        text = metrics[1].decode() if metrics and metrics[0] == 200 else None
        print("\n".join(summary(url, health, text)))
        ok = ok and health is not None and health[0] == 200 and text is not None
    print(f"All the metrics, as Prometheus text: curl -s {urls[0]}/metrics (each daemon's URL is in "
          f"$ZKCOORD_METRICS_URLS); the readiness probe: curl -s {urls[0]}/health")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
