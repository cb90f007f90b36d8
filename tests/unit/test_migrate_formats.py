"""Offset files: kafka-consumer-groups CSV (both shapes) and ExportZkOffsets
lines, written and read back exactly, and every bad line named by number;
plus the group selection of `migrate plan` and bootstrap-server checks."""

from __future__ import annotations

import pytest

from zkcoord.errors import ConfigError, NotFoundError, UsageError
from zkcoord.kafka.offsets import KafkaOffsets, check_bootstrap_servers
from zkcoord.migrate.formats import read_csv, read_offsets, read_zk_lines, write_csv, write_offsets, write_zk_lines
from zkcoord.migrate.plan import Selection

TWO = {"orders-app": {("orders", 1): 7, ("orders", 0): 42}, "billing,eu": {("invoices", 3): 0}}


# -- csv ----------------------------------------------------------------------------------

def test_csv_with_group_column_round_trips_and_quotes_commas():
    text = write_csv(TWO)
    assert text == '"billing,eu",invoices,3,0\norders-app,orders,0,42\norders-app,orders,1,7\n'
    assert read_csv(text) == TWO


def test_csv_of_one_group_has_three_columns_like_kafka_consumer_groups():
    one = {"g": TWO["orders-app"]}
    assert write_csv(one) == "orders,0,42\norders,1,7\n"
    assert write_csv(one, with_group=True) == "g,orders,0,42\ng,orders,1,7\n"
    assert read_csv("orders,0,42\norders,1,7\n", group="g") == one
    with pytest.raises(UsageError, match="2 groups cannot be written without the group column"):
        write_csv(TWO, with_group=False)


def test_csv_tolerates_what_people_and_tools_add():
    text = "group,topic,partition,offset\r\n g , t , 0 , 5 \r\n\r\ng,t,0,5\n\n"
    assert read_csv(text) == {"g": {("t", 0): 5}}  # header, CRLF, spaces, blank lines, a repeat
    assert read_csv("TOPIC,PARTITION,OFFSET\nt,1,2\n", group="g") == {"g": {("t", 1): 2}}


@pytest.mark.parametrize("text, group, message", [
    ("t,0,5\n", None, "f.csv line 1: the file has no group column (topic,partition,offset): name the group "
                      "with --group"),
    ("g,t,0,5\n", "g", "f.csv line 1: the file names its groups (group,topic,partition,offset); drop --group 'g'"),
    ("\n\ng,t,0,5\ng,t,1\n", None, "f.csv line 4: has 3 fields where the lines before have 4"),
    ("g,t\n", None, "f.csv line 1: expected topic,partition,offset or group,topic,partition,offset; found 2 field(s)"),
    ("g,t,0,5,9\n", None, "f.csv line 1: expected topic,partition,offset or group,topic,partition,offset; "
                          "found 5 field(s)"),
    ("g,t,0,-5\n", None, "f.csv line 1: offset '-5' is not a whole number from 0 to 9223372036854775807"),
    ("g,t,0,5.0\n", None, "f.csv line 1: offset '5.0' is not a whole number from 0 to 9223372036854775807"),
    ("g,t,0,9223372036854775808\n", None, "f.csv line 1: offset '9223372036854775808' is not a whole number"),
    ("g,t,x,5\n", None, "f.csv line 1: partition 'x' is not a whole number from 0 to 2147483647"),
    ("g,t,2147483648,5\n", None, "f.csv line 1: partition '2147483648' is not a whole number"),
    ("g,t,0,\n", None, "f.csv line 1: offset '' is not a whole number"),
    ("g,t/x,0,1\n", None, "f.csv line 1: topic 't/x' cannot name a znode: it must not contain '/'"),
    (",t,0,1\n", None, "f.csv line 1: group id '' cannot name a znode"),
    ("..,t,0,1\n", None, "f.csv line 1: group id '..' cannot name a znode"),
    ('g,"t,0,1\n', None, "f.csv line 1: is not valid CSV (unexpected end of data)"),
    ("g,t,0,1\ng,t,0,2\n", None, "f.csv line 2: group 'g' t-0 has offset 2, but line 1 gave it 1"),
    ("", None, "f.csv holds no offsets"),
    ("\n \n", None, "f.csv holds no offsets"),
    ("group,topic,partition,offset\n", None, "f.csv holds no offsets"),
])
def test_bad_csv_names_the_line_and_the_problem(text, group, message):
    with pytest.raises(UsageError) as info:
        read_csv(text, group, source="f.csv")
    assert str(info.value).startswith(message)


# -- zk-lines -----------------------------------------------------------------------------

def test_zk_lines_round_trip_under_any_root():
    text = write_zk_lines(TWO)
    assert text == ("/consumers/billing,eu/offsets/invoices/3:0\n/consumers/orders-app/offsets/orders/0:42\n"
                    "/consumers/orders-app/offsets/orders/1:7\n")
    assert read_zk_lines(text) == TWO
    chrooted = write_zk_lines(TWO, "/kafka/consumers")
    assert chrooted.splitlines()[0] == "/kafka/consumers/billing,eu/offsets/invoices/3:0"
    assert read_zk_lines(chrooted, "/kafka/consumers") == TWO


def test_zk_lines_allow_colons_in_group_ids_and_blank_lines():
    assert read_zk_lines("\n/consumers/app:v2/offsets/t/0:5\n  \n") == {"app:v2": {("t", 0): 5}}


@pytest.mark.parametrize("text, message", [
    ("/consumers/g/offsets/t/0\n", "x line 1: expected <root>/<group>/offsets/<topic>/<partition>:<offset>, got "
                                   "'/consumers/g/offsets/t/0'"),
    ("/consumers/g/offsets/t/0:abc\n", "x line 1: offset 'abc' is not a whole number"),
    ("/consumers/g/owners/t/0:5\n", "x line 1: '/consumers/g/owners/t/0' is not <root>/<group>/offsets/<topic>/"),
    ("/g/offsets/t/0:5\n", "x line 1: '/g/offsets/t/0' is not <root>/<group>/offsets/<topic>/<partition>"),
    ("consumers/g/offsets/t/0:5\n", "x line 1: 'consumers/g/offsets/t/0' is not <root>"),
    ("/consumers/g/offsets/t/0:1\n/kafka/consumers/g/offsets/t/1:5\n",
     "x line 2: '/kafka/consumers/g/offsets/t/1' is under /kafka/consumers, not under --zk-root /consumers "
     "(give --zk-root /kafka/consumers if that is where the offsets belong)"),
    ("/consumers/g/offsets/t/p1:5\n", "x line 1: partition 'p1' is not a whole number"),
    ("/consumers/g/offsets/t/0:1\n/consumers/g/offsets/t/0:2\n", "x line 2: group 'g' t-0 has offset 2, but line 1"),
    ("", "x holds no offsets"),
])
def test_bad_zk_lines_name_the_line_and_the_problem(text, message):
    with pytest.raises(UsageError) as info:
        read_zk_lines(text, source="x")
    assert str(info.value).startswith(message)


def test_format_dispatch():
    assert read_offsets("t,0,1\n", "csv", group="g") == {"g": {("t", 0): 1}}
    assert read_offsets("/c/g/offsets/t/0:1\n", "zk-lines", root="/c") == {"g": {("t", 0): 1}}
    assert write_offsets({"g": {("t", 0): 1}}, "zk-lines", root="/c") == "/c/g/offsets/t/0:1\n"
    with pytest.raises(UsageError, match="zk-lines name their groups in each path; drop --group"):
        read_offsets("/consumers/g/offsets/t/0:1\n", "zk-lines", group="g")
    with pytest.raises(UsageError, match="unknown offsets format 'xml'; expected one of csv, zk-lines"):
        read_offsets("", "xml")
    with pytest.raises(ConfigError, match="offsets root 'c' must start with '/'"):
        read_zk_lines("/c/g/offsets/t/0:1\n", "c")


# -- group selection and bootstrap servers ---------------------------------------------------

def test_selection_needs_exactly_one_way():
    for bad in [dict(), dict(groups=("a",), all_groups=True), dict(all_groups=True, pattern="x")]:
        with pytest.raises(UsageError, match="exactly one of --group G"):
            Selection(**bad)
    with pytest.raises(UsageError, match=r"--pattern '\[' is not a regular expression"):
        Selection(pattern="[")


def test_selection_chooses_among_the_legacy_groups():
    present = ["orders-eu", "orders-us", "billing", "orders"]
    assert Selection(all_groups=True).choose(present, "/consumers") == ["billing", "orders", "orders-eu", "orders-us"]
    assert Selection(pattern="orders-.*").choose(present, "/consumers") == ["orders-eu", "orders-us"]
    assert Selection(pattern="orders").choose(present, "/consumers") == ["orders"]  # whole name
    assert Selection(groups=("orders", "billing", "orders")).choose(present, "/c") == ["orders", "billing"]
    with pytest.raises(NotFoundError) as info:
        Selection(groups=("billing", "nope", "gone")).choose(present, "/kafka/consumers")
    assert str(info.value) == ("no legacy group 'nope', 'gone' under /kafka/consumers (it has 4 group(s)); "
                               "check the name and --zk-root")


@pytest.mark.parametrize("value, expected", [
    ("k1:9092", "k1:9092"), (" k1:9092 , k2:9093", "k1:9092,k2:9093"), ("k1", "k1"), ("[::1]:9092", "[::1]:9092"),
])
def test_bootstrap_servers_accepted(value, expected):
    assert check_bootstrap_servers(value) == expected


@pytest.mark.parametrize("value", ["", "  ", "k1:", "k1:x", "k1:0", "k1:70000", ":9092", "k1:9092,,k2:9092"])
def test_bootstrap_servers_refused(value):
    with pytest.raises(ConfigError):
        check_bootstrap_servers(value)


def test_kafka_offsets_does_no_io_before_start():
    kafka = KafkaOffsets("127.0.0.1:1", request_timeout_ms=1000)  # nothing listens there: no error yet
    with pytest.raises(RuntimeError, match=r"start\(\) has not been called"):
        kafka.partition_counts(["t"])
    assert kafka.partition_counts([]) == {}
    kafka.close()
    with pytest.raises(ConfigError, match="request_timeout_ms must be from 1000 to 3600000"):
        KafkaOffsets("k:9092", request_timeout_ms=10)
