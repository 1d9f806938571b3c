#!/usr/bin/env python3
"""RabbitMQ's official Grafana dashboards, and Warren's, against a Warren under load.

Starts a debug broker, loads it with warren-perf (classic, quorum and stream queues, the stream read by a consumer group), has Debian's Prometheus scrape it every second, then
evaluates every panel query of the dashboards through Prometheus' HTTP query API, as Grafana
would (the dashboard variables filled in: the cluster from rabbitmq_identity_info, the
namespace label the scrape adds). Prints each panel with its series; fails if a panel that
should have data has none; the panels of NO_DATA_EXPECTED say why they have none.

Usage: scripts/check-dashboards.py (from the checkout; needs prometheus, builds the binaries).
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DASHBOARDS = [
    "tests/fixtures/grafana/RabbitMQ-Overview.json",
    "tests/fixtures/grafana/RabbitMQ-Quorum-Queues-Raft.json",
    "docs/grafana/warren.json",
]
NAMESPACE = "warren-check"
# Panels that rightly return nothing in this run, with why.
NO_DATA_EXPECTED = {
    "Raft members with >5k entries in the log": "a filter: no member holds 5,000 entries in a 20 s run",
}
SCRAPE_SECONDS = 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing listens on {port}")


def panels(dashboard):
    def walk(items):
        for panel in items:
            yield panel
            yield from walk(panel.get("panels", []))

    return walk(dashboard.get("panels", []))


def expressions(path):
    with open(os.path.join(ROOT, path)) as f:
        dashboard = json.load(f)
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            if target.get("expr"):
                yield panel.get("title") or "(untitled)", target["expr"]


def filled(expr, cluster):
    for name, value in [("rabbitmq_cluster", cluster), ("namespace", NAMESPACE),
                        ("__rate_interval", "60s"), ("__interval", "15s")]:
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    return expr


def query(prometheus, expr):
    url = f"http://127.0.0.1:{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as answer:
        body = json.load(answer)
    if body.get("status") != "success":
        sys.exit(f"Prometheus refused {expr}: {body}")
    return body["data"]["result"]


def perf(amqp, *arguments):
    command = [os.path.join(ROOT, "target/debug/warren-perf"), "--uri", f"amqp://guest:guest@127.0.0.1:{amqp}/%2f",
               "--rate", "200", "--duration", str(SCRAPE_SECONDS + 5), *arguments]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    for binary in [["--bin", "warren", "-p", "warren-server"], ["--bin", "warren-perf", "-p", "warren-tests"]]:
        subprocess.run(["cargo", "build", "--locked", *binary], cwd=ROOT, check=True)
    work = tempfile.mkdtemp()
    amqp, http, prometheus = free_port(), free_port(), free_port()
    log = open(os.path.join(work, "warren.log"), "w")
    broker = subprocess.Popen([os.path.join(ROOT, "target/debug/warren"), "--amqp-listen", f"127.0.0.1:{amqp}",
                               "--http-listen", f"127.0.0.1:{http}", "--data-dir", os.path.join(work, "data")],
                              stdout=log, stderr=log)
    children = [broker]
    try:
        wait_for_port(http)
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: warren
    static_configs:
      - targets: ['127.0.0.1:{http}']
        labels:
          namespace: {NAMESPACE}
""")
        children.append(subprocess.Popen(
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={work}/tsdb",
             f"--web.listen-address=127.0.0.1:{prometheus}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_for_port(prometheus)
        children += [
            perf(amqp, "--queue-prefix", "classic", "--confirm", "50", "--persistent", "--durable"),
            perf(amqp, "--queue-prefix", "auto", "--auto-ack"),
            perf(amqp, "--queue-prefix", "quorum", "--queue-type", "quorum", "--confirm", "50"),
            perf(amqp, "--queue-prefix", "stream", "--queue-type", "stream", "--confirm", "50",
                 "--consumer-group", "dashboards"),
        ]
        time.sleep(SCRAPE_SECONDS)
        identity = query(prometheus, f'rabbitmq_identity_info{{namespace="{NAMESPACE}"}}')
        if not identity:
            sys.exit("Prometheus has no rabbitmq_identity_info from Warren")
        cluster = identity[0]["metric"]["rabbitmq_cluster"]
        empty, rightly_empty, total = [], 0, 0
        for path in DASHBOARDS:
            print(f"==> {path}")
            for title, expr in expressions(path):
                total += 1
                series = query(prometheus, filled(expr, cluster))
                why = NO_DATA_EXPECTED.get(title)
                mark = "ok" if series else ("no data (" + why + ")" if why else "NO DATA")
                print(f"  {len(series):3} series  {mark:8}  {title}")
                if not series and not why:
                    empty.append((path, title, expr))
                rightly_empty += not series and bool(why)
        with_data = total - len(empty) - rightly_empty
        print(f"==> {with_data} of {total} panel queries return data; {rightly_empty} rightly return none (said why)")
        for path, title, expr in empty:
            print(f"NO DATA: {path}: {title}: {expr}", file=sys.stderr)
        return 1 if empty else 0
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()


if __name__ == "__main__":
    sys.exit(main())
