#!/usr/bin/env bash
# `make demo`: the main job on the local sandbox. Each capability of zkcoord
# extends this script as it lands.
set -euo pipefail
cd "$(dirname "$0")/.."
ZKC=.venv/bin/zkcoord

echo "== 1. the sandbox: real ZooKeeper 3.8, Kafka 3.9 (ZooKeeper mode) and two zkcoord daemons on loopback"
$ZKC local up --daemons 2
$ZKC local status
eval "$($ZKC local env)"
echo "ZKCOORD_ZOOKEEPER=$ZKCOORD_ZOOKEEPER ZKCOORD_BOOTSTRAP_SERVERS=$ZKCOORD_BOOTSTRAP_SERVERS ZKCOORD_COORDINATORS=$ZKCOORD_COORDINATORS"
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
echo "The sandbox keeps running; stop it with: make down"
