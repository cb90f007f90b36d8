#!/usr/bin/env bash
# `make demo`: the main job on the local sandbox. Each capability of zkcoord
# extends this script as it lands.
set -euo pipefail
cd "$(dirname "$0")/.."
ZKC=.venv/bin/zkcoord
# the steps' scratch files, gone however the script ends (a failed step too)
trap 'rm -f /tmp/zkcoord-demo.$$ /tmp/zkcoord-demo-legacy.$$' EXIT

echo "== 1. the sandbox: real ZooKeeper 3.8, Kafka 3.9 (ZooKeeper mode) and two zkcoord daemons on loopback"
$ZKC local up --daemons 2
$ZKC local status
eval "$($ZKC local env)"
echo "ZKCOORD_ZOOKEEPER=$ZKCOORD_ZOOKEEPER ZKCOORD_BOOTSTRAP_SERVERS=$ZKCOORD_BOOTSTRAP_SERVERS ZKCOORD_COORDINATORS=$ZKCOORD_COORDINATORS"
echo "ZKCOORD_GATEWAY_SERVERS=$ZKCOORD_GATEWAY_SERVERS  (stock Kafka clients bootstrap from these)"
echo "ZKCOORD_METRICS_URLS=${ZKCOORD_METRICS_URLS:-}  (each daemon's /metrics and /health)"
echo
echo "== 2. a worker pool under zkcoord: three consumers share a topic, one stops"
.venv/bin/python -m zkcoord.local.demo | tee /tmp/zkcoord-demo.$$
GROUP=$(sed -n 's/^group: //p' /tmp/zkcoord-demo.$$)
rm -f /tmp/zkcoord-demo.$$
echo
echo "== 3. zkcoord describe of the demo group (offsets, then state)"
$ZKC describe "$GROUP" --zookeeper "$ZKCOORD_ZOOKEEPER" --bootstrap-servers "$ZKCOORD_BOOTSTRAP_SERVERS"
$ZKC describe "$GROUP" --state --zookeeper "$ZKCOORD_ZOOKEEPER"
echo
echo "== 4. stock Kafka clients through the gateway: Kafka's Java console consumer and librdkafka, with"
echo "      bootstrap.servers=\$ZKCOORD_GATEWAY_SERVERS, share one group with zkcoord's own consumer"
.venv/bin/python -m zkcoord.local.demo_gateway | tee /tmp/zkcoord-demo.$$
MIXED=$(sed -n 's/^group: //p' /tmp/zkcoord-demo.$$)
rm -f /tmp/zkcoord-demo.$$
$ZKC describe "$MIXED" --zookeeper "$ZKCOORD_ZOOKEEPER" --bootstrap-servers "$ZKCOORD_BOOTSTRAP_SERVERS"
echo
echo "== 5. migrating a legacy group's ZooKeeper offsets into Kafka, through dual-commit"
SUFFIX=$(printf %04x $((RANDOM % 65536)))
TOPIC=invoices-$SUFFIX
LEGACY=billing-$SUFFIX
.venv/bin/python -m zkcoord.local.demo seed-topic "$TOPIC" 3 20
echo "-- the legacy offsets, as old ZooKeeper consumers left them (ExportZkOffsets lines):"
printf '/consumers/%s/offsets/%s/0:5\n/consumers/%s/offsets/%s/1:6\n/consumers/%s/offsets/%s/2:7\n' \
  "$LEGACY" "$TOPIC" "$LEGACY" "$TOPIC" "$LEGACY" "$TOPIC" | tee /tmp/zkcoord-demo-legacy.$$
$ZKC migrate import --file /tmp/zkcoord-demo-legacy.$$ --format zk-lines
rm -f /tmp/zkcoord-demo-legacy.$$
echo "-- plan (changes nothing):"
$ZKC migrate plan --group "$LEGACY"
echo "-- apply: back up, commit to Kafka, switch the group to dual:"
$ZKC migrate apply --group "$LEGACY"
echo "-- a zkcoord consumer of the group, now in dual: it resumes at the migrated offsets and commits to both stores:"
$ZKC consume "$TOPIC" --group "$LEGACY" --max-records 9
$ZKC describe "$LEGACY"
echo "-- verify, finalize (dual -> kafka), status:"
$ZKC migrate verify --group "$LEGACY"
$ZKC migrate finalize --group "$LEGACY"
$ZKC migrate status --group "$LEGACY"
$ZKC describe "$LEGACY" --state
echo
echo "== 6. the daemons' health and metrics, from ZKCOORD_METRICS_URLS (each daemon's --metrics-listen)"
.venv/bin/python -m zkcoord.local.demo_metrics
echo
echo "The sandbox keeps running; stop it with: make down"
