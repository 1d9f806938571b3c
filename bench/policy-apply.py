"""Times a policy that matches N queues (issue 31: within 2 s for 10,000): declares N queues
(classic unless TYPE says quorum), defines 49 policies that match none, then sets, changes and
clears one that matches them all, timing each PUT (answered once every queue on the node runs
with it: a quorum queue's leader has proposed the change to its group by then, and its
replicas apply it as the entry commits), and checks a queue's effective policy.

usage: bench/policy-apply.py AMQP_PORT HTTP_PORT N [TYPE]   (a broker running with guest/guest)"""
import base64, json, sys, time, urllib.request
import pika

amqp_port, http_port, count = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
queue_type = sys.argv[4] if len(sys.argv) > 4 else "classic"
arguments = {"x-queue-type": queue_type}

def api(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{http_port}{path}", data=data, method=method)
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=600) as answer:
        text = answer.read()
        return answer.status, (json.loads(text) if text else None)

connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", amqp_port))
channel = connection.channel()
start = time.monotonic()
for i in range(count):
    channel.queue_declare(f"bench.{i}", durable=queue_type != "classic", arguments=arguments)
print(f"declared {count} {queue_type} queues in {time.monotonic() - start:.1f} s")
for i in range(49):
    api("PUT", f"/api/policies/%2F/other-{i}", {"pattern": f"^nomatch-{i}$", "definition": {"max-length": 10}})
for label, definition in [("set", {"max-length": 1000, "message-ttl": 60000}), ("changed", {"max-length": 500})]:
    start = time.monotonic()
    status, _ = api("PUT", "/api/policies/%2F/bench", {"pattern": "^bench\\.", "definition": definition, "apply-to": "queues"})
    print(f"policy {label} over {count} queues (50 policies defined): {time.monotonic() - start:.3f} s (HTTP {status})")
_, queue = api("GET", f"/api/queues/%2F/bench.{count - 1}")
assert queue["policy"] == "bench" and queue["effective_policy_definition"] == {"max-length": 500}, queue
start = time.monotonic()
api("DELETE", "/api/policies/%2F/bench")
print(f"policy cleared over {count} queues: {time.monotonic() - start:.3f} s")
connection.close()
