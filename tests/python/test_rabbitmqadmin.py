"""RabbitMQ's own rabbitmqadmin (the script from Debian's rabbitmq-server package; path in
$RABBITMQADMIN, else on $PATH, else target/rabbitmqadmin/rabbitmqadmin, where
tests/cross_client.sh puts it) lists, declares, publishes, gets and deletes against Warren's
management API unchanged."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT, free_port, run_broker


def rabbitmqadmin_path() -> str:
    candidates = [os.environ.get("RABBITMQADMIN"), shutil.which("rabbitmqadmin"),
                  str(REPO_ROOT / "target" / "rabbitmqadmin" / "rabbitmqadmin")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail("rabbitmqadmin not found: tests/cross_client.sh fetches it, or set RABBITMQADMIN")


@pytest.fixture
def admin(tmp_path):
    """Runs rabbitmqadmin against a broker of this test's own; returns run(*args) -> stdout."""
    http = free_port()
    script = rabbitmqadmin_path()
    with run_broker(tmp_path, ["--http-listen", f"127.0.0.1:{http}"]):
        def run(*args, expect_failure=False):
            done = subprocess.run(
                ["python3", script, "-H", "127.0.0.1", "-P", str(http), "-u", "guest", "-p", "guest", *args],
                capture_output=True, text=True, timeout=30,
            )
            if expect_failure:
                assert done.returncode != 0, done.stdout
                return done.stdout + done.stderr
            assert done.returncode == 0, f"rabbitmqadmin {args}: {done.stdout}{done.stderr}"
            return done.stdout
        yield run


def raw(admin, *args):
    return json.loads(admin("-f", "raw_json", *args))


def test_rabbitmqadmin_declares_publishes_gets_lists_and_deletes(admin, tmp_path):
    assert "queue declared" in admin("declare", "queue", "name=orders", "durable=true",
                                      'arguments={"x-max-length": 100}')
    assert "exchange declared" in admin("declare", "exchange", "name=shop", "type=topic")
    assert "binding declared" in admin("declare", "binding", "source=shop", "destination=orders",
                                        "routing_key=order.*")
    assert "Message published" in admin("publish", "exchange=shop", "routing_key=order.new", "payload=hello")

    queues = raw(admin, "list", "queues")
    assert [(q["name"], q["messages"], q["arguments"]) for q in queues] == [("orders", 1, {"x-max-length": 100})]
    exchanges = {e["name"]: e["type"] for e in raw(admin, "list", "exchanges")}
    assert exchanges["shop"] == "topic" and exchanges["amq.direct"] == "direct"
    bindings = raw(admin, "list", "bindings")
    assert {"source": "shop", "destination": "orders", "routing_key": "order.*"}.items() <= bindings[-1].items()
    overview = raw(admin, "show", "overview")
    assert overview[0]["object_totals"]["queues"] == 1

    got = raw(admin, "get", "queue=orders", "ackmode=ack_requeue_false")
    assert [(m["payload"], m["routing_key"]) for m in got] == [("hello", "order.new")]
    assert raw(admin, "list", "queues")[0]["messages"] == 0

    exported = tmp_path / "definitions.json"
    assert "Exported definitions" in admin("export", str(exported))
    assert json.loads(exported.read_text())["queues"][0]["name"] == "orders"

    assert "binding deleted" in admin("delete", "binding", "source=shop", "destination=orders",
                                       "destination_type=queue", "properties_key=order.*")
    assert "queue deleted" in admin("delete", "queue", "name=orders")
    assert "exchange deleted" in admin("delete", "exchange", "name=shop")
    assert raw(admin, "list", "queues") == []
    assert "Not found" in admin("purge", "queue", "name=orders", expect_failure=True)

    assert "Uploaded definitions" in admin("import", str(exported))
    assert [q["name"] for q in raw(admin, "list", "queues")] == ["orders"]


def test_rabbitmqadmin_declares_lists_and_deletes_policies(admin):
    assert "policy declared" in admin("declare", "policy", "name=limits", "pattern=^orders",
                                      'definition={"max-length": 5, "ha-mode": "all"}', "priority=2",
                                      "apply-to=queues")
    [policy] = raw(admin, "list", "policies")
    assert (policy["name"], policy["pattern"], policy["apply-to"], policy["priority"]) == (
        "limits", "^orders", "queues", 2)
    assert policy["definition"] == {"max-length": 5, "ha-mode": "all"}
    assert "operator_policy declared" in admin("declare", "operator_policy", "name=cap", "pattern=.*",
                                               'definition={"max-length": 100}', "apply-to=queues")
    assert [p["name"] for p in raw(admin, "list", "operator_policies")] == ["cap"]
    assert "queue declared" in admin("declare", "queue", "name=orders", "durable=true")
    [queue] = raw(admin, "list", "queues")
    assert (queue["policy"], queue["operator_policy"]) == ("limits", "cap")
    parameters = raw(admin, "list", "parameters")
    assert [(p["component"], p["name"]) for p in parameters] == [("operator_policy", "cap")]
    assert "policy deleted" in admin("delete", "policy", "name=limits")
    assert "operator_policy deleted" in admin("delete", "operator_policy", "name=cap")
    assert raw(admin, "list", "policies") == [] and raw(admin, "list", "parameters") == []
