"""``migrate run-job`` on a real Spark standalone cluster: the sandbox's
``local up --spark-workers 2`` (a master and two workers of the installed
pyspark, one core each, as local processes).

* plan, apply and verify on the cluster give the same report and summary as
  on ``local[*]`` (the same groups for plan; two identically seeded sets of
  groups for apply and verify, which change them), the CSVs merged into
  files because the executors run on this machine, and the progress lines
  of the executors reach the driver;
* the driver killed with SIGKILL mid-apply, and one worker killed (with its
  executor and Python workers) mid-apply: a re-run, or Spark's own retry of
  the lost task, finishes every group, nothing lost, rewound or backed up
  twice;
* on the secure sandbox (SASL_SSL brokers, ZooKeeper with SASL) with its own
  Spark cluster, the tasks log in with the settings the driver read, sent
  with them: the files are gone before the job runs.

"Mid-apply" is made certain, not guessed: one group of each Spark task is
held by a contender of a daemon that never answers (node 7), so apply waits
for that owner to switch the group's mode (``--timeout-ms`` long) while the
task's other groups are done or not yet begun; the test acts once both mode
requests are in ZooKeeper, then lets the owner go.

Where the cluster comes from: ``ZKCOORD_TEST_SPARK_SANDBOX`` (the state
directory of a running sandbox with Spark workers: used, never brought
down), else the test sandbox (workers added, stopped at the end), else a
private sandbox.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from test_migrate_flow import migration
from test_migrate_spark import kafka, topics  # noqa: F401 (fixtures)

from tests.support.daemons import wait_for
from tests.support.state_dirs import state_directory
from zkcoord.kafka.offsets import KafkaOffsets
from zkcoord.local import spark_cluster
from zkcoord.local.sandbox import Sandbox
from zkcoord.migrate.plan import Selection
from zkcoord.migrate.spark_job import JobConfig, run_job, spark_session

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]  # Spark applications on 2 shared cores
WORKERS = 2
HOLD_TIMEOUT_MS = 300_000  # how long a held group's apply waits for its owner: longer than any test step


@pytest.fixture(scope="module")
def cluster(services):
    """(sandbox, master URL) of a Spark cluster with WORKERS workers."""
    given = os.environ.get("ZKCOORD_TEST_SPARK_SANDBOX")
    if given:
        sandbox = Sandbox(Path(given))
        state = sandbox.load()
        if state is None or len(state.spark_workers) < WORKERS:
            pytest.skip(f"ZKCOORD_TEST_SPARK_SANDBOX={given} has no sandbox with {WORKERS} Spark workers")
        yield sandbox, spark_cluster.master_url(state)
        return
    if services.sandbox is not None:
        sandbox = services.sandbox
        state, _ = sandbox.up(brokers=len(sandbox.load().brokers), spark_workers=WORKERS)
        try:
            yield sandbox, spark_cluster.master_url(state)
        finally:
            for server in reversed(spark_cluster.servers(sandbox.load())):
                sandbox.stop_server(server.name)
        return
    with state_directory(os.environ.get("ZKCOORD_TEST_STATE_DIR"), "spark") as state_dir:
        sandbox = Sandbox(state_dir, log=print)
        try:
            state, _ = sandbox.up(spark_workers=WORKERS)
            yield sandbox, spark_cluster.master_url(state)
        finally:
            sandbox.down()


def workers_back(sandbox: Sandbox) -> None:
    """Every worker running and registered again (after a test killed one)."""
    state = sandbox.load()
    sandbox.up(brokers=len(state.brokers), spark_workers=len(state.spark_workers))


# -- the data ------------------------------------------------------------------------------
def seed_set(zk, kafka_offsets_: KafkaOffsets, topics_: tuple[str, str], prefix: str, missing: str,  # noqa: F811
             count: int = 12) -> list[str]:
    """``count`` legacy groups ``<prefix>-NN`` over both topics with every kind of decision; the same
    values for every prefix (``missing``: a topic no cluster has)."""
    a, b = topics_
    groups = [f"{prefix}-{i:02d}" for i in range(count)]
    for i, group in enumerate(groups):
        for t, topic in enumerate(topics_):
            for p in range(3):
                value = str((i * 7 + p * 3 + t * 11) % 58).encode()  # 50..57: beyond the log end
                zk.create(f"/consumers/{group}/offsets/{topic}/{p}", value, makepath=True)
    zk.set(f"/consumers/{groups[1]}/offsets/{a}/0", b"abc")
    zk.set(f"/consumers/{groups[2]}/offsets/{b}/2", b"4")  # below the log start
    zk.create(f"/consumers/{groups[3]}/offsets/{missing}/0", b"3", makepath=True)
    zk.create(f"/consumers/{groups[4]}/offsets/{a}/9", b"1")
    kafka_offsets_.commit_offsets(groups[5], {(a, 0): 49})  # ahead
    kafka_offsets_.commit_offsets(groups[6], {(a, p): (6 * 7 + p * 3) % 58 for p in range(3)})  # equal
    kafka_offsets_.commit_offsets(groups[7], {(a, 1): 0})  # behind
    return groups


def run_cli(zk_hosts: str, bootstrap: str, mode: str, pattern: str, report: Path, *extra: str,
            master: str | None = None) -> subprocess.Popen:
    """``zkcoord migrate run-job`` in a process of its own (the driver), JSON on stdout."""
    argv = [sys.executable, "-m", "zkcoord", "migrate", "run-job", "--mode", mode, "--pattern", pattern,
            "--zookeeper", zk_hosts, "--bootstrap-servers", bootstrap, "--report-dir", str(report),
            "--spark-partitions", "2", "--batch-groups", "3", "--output", "json", "--no-progress", *extra]
    if master is not None:
        argv += ["--spark-master", master]
    # A new user's environment: no PYSPARK_PYTHON (an earlier local[*] session of this process sets it).
    env = {k: v for k, v in os.environ.items() if k != "ZKCOORD_SPARK_MASTER" and not k.startswith("PYSPARK_")}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


def finished(proc: subprocess.Popen, codes=(0,), timeout_s: float = 900) -> dict:
    out, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode in codes, f"exit {proc.returncode}\nstderr:\n{err[-4000:]}"
    return json.loads(out)


def normalized(text: str, prefix: str | None) -> str:
    """``text`` with the group names' ``<prefix>-`` made the same for both sets."""
    return text if prefix is None else text.replace(f"{prefix}-", "<set>-")


def csv_of(path: str, prefix: str | None = None) -> list[list[str]]:
    with open(path, newline="") as f:
        return [[normalized(cell, prefix) for cell in row] for row in csv.reader(f)]


# -- the same results as local[*] ----------------------------------------------------------
def side(master: str | None, zk_hosts: str, bootstrap: str, prefix: str, report: Path):
    """On one session: plan, apply, verify of the groups ``<prefix>-*``; each job's (summary,
    partitions.csv, groups.csv) with the groups' prefix made the same, and the plan's progress."""
    found, seen = {}, []
    with spark_session(master) as spark:
        assert spark.sparkContext.master == (master or "local[*]")
        for mode in ("plan", "apply", "verify"):
            config = JobConfig(zk_hosts, bootstrap, Selection(pattern=f"{prefix}-.*"), str(report / mode), mode=mode,
                               spark_partitions=2, batch_groups=3)
            result = run_job(config, spark, on_progress=seen.append if mode == "plan" else None)
            assert result.report.csv_layout == "file"  # on the cluster too: the executors' parts merged here
            name = prefix
            summary = {"totals": result.totals.as_dict(), "statuses": dict(result.statuses),
                       "outcomes": dict(result.outcomes), "error_groups": result.error_groups,
                       "notes": [[normalized(g, name), n] for g, n in result.notes],
                       "errors": [[normalized(g, name), e] for g, e in result.errors]}
            found[mode] = (summary, csv_of(result.report.csv, name), csv_of(result.report.groups_csv, name))
    return found, seen


def test_plan_apply_verify_on_the_cluster_equal_local(zk, zk_hosts, services, kafka, topics, cluster,  # noqa: F811
                                                      unique_name, tmp_path):
    sandbox, master = cluster
    missing = unique_name("gone")
    # names of this run's own (Kafka, where the commits go, is shared by every test and run)
    one, two = unique_name("zl1"), unique_name("zr2")
    local, remote = seed_set(zk, kafka, topics, one, missing), seed_set(zk, kafka, topics, two, missing)

    on_local, _ = side(None, zk_hosts, services.bootstrap_servers, one, tmp_path / "local")
    on_cluster, seen = side(master, zk_hosts, services.bootstrap_servers, two, tmp_path / "cluster")
    for mode in ("plan", "apply", "verify"):
        assert on_cluster[mode] == on_local[mode], mode
    assert len({d for d, n in on_cluster["plan"][0]["totals"]["by_decision"].items() if n}) == 8  # every kind
    rows = sum(on_cluster["plan"][0]["statuses"].values())
    assert (seen[-1].groups_done, seen[-1].offsets_done) == (len(remote), rows)  # counted from the executors' lines
    assert on_cluster["apply"][0]["outcomes"] == {"applied": len(remote)}
    assert {migration(zk, g)["phase"] for g in local + remote} == {"dual"}
    assert kafka.committed_offsets(remote) == {g.replace(f"{one}-", f"{two}-"): offsets for g, offsets in
                                               kafka.committed_offsets(local).items()}


# -- resuming after a kill -----------------------------------------------------------------
def hold(zk, group: str) -> str:
    """Daemon 7 owns ``group`` and never answers its mode requests; the contender's path."""
    return zk.create(f"/coordinators/{group}/owner/x__lock__", b"7", ephemeral=True, sequence=True, makepath=True)


def prepared(zk, admin_kafka: KafkaOffsets, topic: str, prefix: str) -> tuple[list[str], list[str]]:
    """24 groups (Spark partitions 0-11 and 12-23 at 2 partitions), Kafka ahead on one partition
    each; groups 4 and 16 (each task's second batch of 3) held."""
    groups = [f"{prefix}-{i:02d}" for i in range(24)]
    for i, group in enumerate(groups):
        for p in range(3):
            zk.create(f"/consumers/{group}/offsets/{topic}/{p}", str(10 + p + i % 5).encode(), makepath=True)
        admin_kafka.commit_offsets(group, {(topic, 3): 33})
    return groups, [groups[4], groups[16]]


def expected_offsets(topic: str, group: str) -> dict:
    i = int(group.rsplit("-", 1)[1])
    return {**{(topic, p): 10 + p + i % 5 for p in range(3)}, (topic, 3): 33}


def assert_all_migrated(zk, kafka_: KafkaOffsets, topic: str, groups: list[str]) -> None:
    committed = kafka_.committed_offsets(groups)
    assert {g: committed[g] for g in groups} == {g: expected_offsets(topic, g) for g in groups}
    for group in groups:
        record = migration(zk, group)
        assert record["phase"] == "dual", group
        assert [phase for phase, _ in record["history"]] == ["backed-up", "kafka-committed", "dual"], group
        assert migration(zk, group, "backup")["kafka"] == [[topic, 3, 33]], group  # from before, never rewritten


@pytest.fixture
def topic4(services, unique_name):
    """A 4-partition topic with 40 records per partition on the 3.9 cluster."""
    name = unique_name("kill")
    admin = KafkaAdminClient(bootstrap_servers=services.bootstrap_servers, request_timeout_ms=30_000)
    try:
        admin.create_topics([NewTopic(name, 4, 1)], wait_for_metadata=True)
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=services.bootstrap_servers, acks="all", linger_ms=5)
    for p in range(4):
        for i in range(40):
            producer.send(name, value=b"r%d" % i, partition=p)
    producer.flush()
    producer.close()
    return name


def wait_both_held(zk, held: list[str], proc: subprocess.Popen) -> None:
    def requested():
        if proc.poll() is not None:
            raise AssertionError(f"the job ended early ({proc.returncode}): {proc.stderr.read()[-3000:]}")
        return all(zk.exists(f"/zkcoord/migrations/{g}/mode-request") for g in held)
    wait_for(requested, 600, "both tasks waiting on their held group's owner", interval_s=0.2)


def test_the_driver_killed_mid_apply_then_a_rerun_finishes_every_group(zk, zk_hosts, services, kafka, topic4,  # noqa: F811
                                                                        cluster, tmp_path, unique_name):
    sandbox, master = cluster
    prefix = unique_name("drv")
    groups, held = prepared(zk, kafka, topic4, prefix)
    contenders = [hold(zk, g) for g in held]
    proc = run_cli(zk_hosts, services.bootstrap_servers, "apply", f"{prefix}-.*", tmp_path / "first", "--timeout-ms",
                   str(HOLD_TIMEOUT_MS), master=master)
    try:
        wait_both_held(zk, held, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver: python and its JVM
        proc.communicate(timeout=60)
    phases = {g: (migration(zk, g) or {}).get("phase") for g in groups}
    assert {phases[g] for g in held} == {"kafka-committed"}
    assert "dual" in phases.values() and None in phases.values(), phases  # some groups done, some never begun
    wait_for(lambda: not any(a.get("state") == "RUNNING" for a in
                             (spark_cluster.master_status(sandbox.load()) or {}).get("activeapps", ())),
             120, "the killed driver's application gone from the master")

    for contender in contenders:
        zk.delete(contender)  # the owner is gone: the re-run takes the elections itself
    again = finished(run_cli(zk_hosts, services.bootstrap_servers, "apply", f"{prefix}-.*", tmp_path / "again",
                             master=master))
    outcomes = again["outcomes"]
    assert outcomes.get("already-done") == sum(p == "dual" for p in phases.values())
    assert sum(outcomes.values()) == len(groups) and set(outcomes) <= {"applied", "already-done"}
    assert_all_migrated(zk, kafka, topic4, groups)


def test_a_worker_killed_mid_apply_its_tasks_run_again_and_finish(zk, zk_hosts, services, kafka, topic4,  # noqa: F811
                                                                   cluster, tmp_path, unique_name):
    sandbox, master = cluster
    prefix = unique_name("wrk")
    groups, held = prepared(zk, kafka, topic4, prefix)
    contenders = [hold(zk, g) for g in held]
    proc = run_cli(zk_hosts, services.bootstrap_servers, "apply", f"{prefix}-.*", tmp_path / "report", "--timeout-ms",
                   str(HOLD_TIMEOUT_MS), master=master)
    try:
        wait_both_held(zk, held, proc)
        # each worker has one core: each runs one of the two tasks; either one dies with its worker
        spark_cluster.kill_worker(sandbox, spark_cluster.worker_name(1))
        # what the killed worker's executor left is in the sandbox (removed by `down`), not in /tmp
        assert list((sandbox.state_dir / spark_cluster.worker_name(1) / "local").glob("spark-*/executor-*"))
        for contender in contenders:
            zk.delete(contender)
        document = finished(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
        workers_back(sandbox)
    outcomes = document["outcomes"]
    assert sum(outcomes.values()) == len(groups) and set(outcomes) <= {"applied", "already-done"}, outcomes
    assert outcomes.get("already-done", 0) >= 1  # the lost task's groups done before the kill, found done
    assert_all_migrated(zk, kafka, topic4, groups)


# -- the secure sandbox --------------------------------------------------------------------
@pytest.fixture(scope="module")
def secure_cluster():
    with state_directory(os.environ.get("ZKCOORD_TEST_STATE_DIR"), "secure-spark") as state_dir:
        sandbox = Sandbox(state_dir, log=print)
        try:
            state, _ = sandbox.up(brokers=1, secure=True, spark_workers=WORKERS)
            yield sandbox, state
        finally:
            sandbox.down()


def test_on_the_secure_sandbox_the_tasks_log_in_with_what_they_were_sent(secure_cluster, tmp_path, unique_name):
    from kazoo.client import KazooClient

    from zkcoord.kafka.client_security import KafkaClientSecurity
    from zkcoord.kafka.login import portable
    from zkcoord.local import secure
    from zkcoord.zk.auth import ZkSecurity

    sandbox, state = secure_cluster
    material = secure.load(sandbox.state_dir)
    bootstrap, zookeeper = sandbox.bootstrap_servers(state), sandbox.zookeeper_address(state)
    topic, group = unique_name("sec"), unique_name("sec-g")
    admin_login = material.client_security("admin")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **admin_login.kafka_python_options())
    try:
        admin.create_topics([NewTopic(topic, 2, 1)], wait_for_metadata=True)
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **admin_login.kafka_python_options())
        for i in range(20):
            producer.send(topic, b"v", partition=i % 2)
        producer.flush()
        producer.close()
    finally:
        admin.close()
    zk_login = secure.zookeeper_security(material)
    client = KazooClient(hosts=zookeeper, timeout=10, **{**zk_login.kazoo_options(), "default_acl": None})
    client.start(timeout=30)
    try:
        client.create(f"/consumers/{group}/offsets/{topic}/0", b"7", makepath=True)
        client.create(f"/consumers/{group}/offsets/{topic}/1", b"8", makepath=True)
    finally:
        client.stop()
        client.close()

    # Copies of the login files, read by the driver, then gone before any task runs.
    copies = tmp_path / "logins"
    copies.mkdir()
    jaas, ca = copies / "zk.jaas", copies / "ca.pem"
    jaas.write_text(material.zookeeper_client_jaas.read_text())
    ca.write_text(material.ca_pem.read_text())
    properties = copies / "admin.properties"
    properties.write_text(material.client_properties("admin").read_text().replace(str(material.ca_pem), str(ca)))
    kafka_login = KafkaClientSecurity.from_file(properties)
    zk_security = ZkSecurity(sasl_jaas_file=str(jaas), set_acl=True)

    def config(mode: str) -> JobConfig:
        return JobConfig(zookeeper, bootstrap, Selection(groups=(group,)), str(tmp_path / mode), mode=mode,
                         zk_security=zk_security.loaded(), kafka_security=portable(kafka_login), timeout_ms=60_000)

    plan, apply, verify = config("plan"), config("apply"), config("verify")
    for path in copies.iterdir():
        path.unlink()
    copies.rmdir()
    with spark_session(spark_cluster.master_url(state)) as spark:
        planned = run_job(plan, spark)
        assert (planned.totals.to_write, planned.error_groups, planned.errors) == (2, 0, ())
        applied = run_job(apply, spark)
        assert dict(applied.outcomes) == {"applied": 1}
        assert dict(run_job(verify, spark).outcomes) == {"clean": 1}
    with KafkaOffsets(bootstrap, security=admin_login) as kafka_:
        assert kafka_.committed_offsets([group])[group] == {(topic, 0): 7, (topic, 1): 8}
    logs = "".join(p.read_text(errors="replace") for p in (sandbox.state_dir).rglob("stderr"))
    assert not any(pw.value in logs for pw in material.passwords.values())  # no secret in the executors' logs


# -- spark-submit --------------------------------------------------------------------------
def test_spark_submit_runs_the_job_on_the_cluster(zk, zk_hosts, services, kafka, topics, cluster,  # noqa: F811
                                                  unique_name, tmp_path):
    """The README's command: a one-line driver script, this interpreter as the driver's and the
    executors' Python (the sandbox's executors run on this machine). Spark's PythonRunner merges
    the driver's stderr into its stdout: --no-progress keeps stdout the JSON document alone."""
    sandbox, master = cluster
    prefix = unique_name("zs3")
    groups = seed_set(zk, kafka, topics, prefix, unique_name("gone"), count=8)
    driver = tmp_path / "zkcoord_driver.py"
    driver.write_text("from zkcoord.cli.main import main; main()\n")
    spark_submit = Path(sys.executable).parent / "spark-submit"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZKCOORD_SPARK", "PYSPARK_"))}
    env["PYSPARK_PYTHON"] = sys.executable
    proc = subprocess.run([str(spark_submit), "--master", master, str(driver), "migrate", "run-job", "--mode", "plan",
                           "--pattern", f"{prefix}-.*", "--zookeeper", zk_hosts, "--bootstrap-servers",
                           services.bootstrap_servers, "--report-dir", str(tmp_path / "r"), "--output", "json",
                           "--no-progress"],  # spark-submit merges the driver's stderr into its stdout
                          env=env, capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    document = json.loads(proc.stdout)
    assert (document["spark_master"], document["groups_selected"]) == (master, len(groups))
    assert document["report"]["csv_layout"] == "file"
    rows = csv_of(document["report"]["csv"])
    assert rows[0][0] == "group" and {r[0] for r in rows[1:]} == set(groups)
    assert len(rows) - 1 == document["totals"]["partitions"]
