"""The API proxy with api_proxy_services: requests routed by their model to several services, each with
replicas, behind the one proxy - real nginx and njs from Debian 12 (unpacked, not installed), the role's
own templates rendered by ansible-playbook (nginx -t checks them, the router script included, as
configure.yml does), Python HTTP servers standing in for vLLM's replicas (tests/sandbox/router_fixture.py).
Service a has two replicas, b one. With api_proxy_metrics each replica's /metrics has a path of its own, which the
metrics role's scrape configuration gives a real Prometheus (Debian's package, tests/sandbox/prometheus.py)."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
from prometheus import Prometheus
from router_fixture import Client, Nginx, Replica, certificate, free_port, nginx_binaries, proxy_vars, render, scrape_config

KEY = "vllmops-router-test-0123456789"
FAIL_TIMEOUT = 2  # api_proxy_fail_timeout: how long a replica that failed is left out
LEFT_OUT = FAIL_TIMEOUT + 1.2  # nginx counts it in whole seconds: up to one more


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("router")
    cert = certificate(tmp)
    replicas = {name: Replica(name[0], name).start() for name in ("a-0", "a-1", "b-0")}
    services = [{"name": "a", "upstreams": [replicas["a-0"].address, replicas["a-1"].address]},
                {"name": "b", "upstreams": [replicas["b-0"].address]}]
    port, default_port, draining_port = free_port(), free_port(), free_port()
    # As roles/fleet writes it while a-0 restarts: out of a's balanced upstream, still in the plan.
    draining = [{"name": "a", "upstreams": [replicas["a-1"].address]}, services[1]]
    plan = {"upstreams": {service["name"]: service["upstreams"] for service in services}}
    confs = render(tmp, {
        "router": dict(proxy_vars(tmp / "router", port, KEY, cert, services), api_proxy_fail_timeout=FAIL_TIMEOUT,
                       api_proxy_metrics=True),
        "router_no_metrics": proxy_vars(tmp / "router_no_metrics", port, KEY, cert, services),
        "router_draining": dict(proxy_vars(tmp / "router_draining", draining_port, KEY, cert, draining),
                                api_proxy_metrics=True, vllmops_fleet=plan),
        "default": proxy_vars(tmp / "default", default_port, KEY, cert, upstream=replicas["b-0"].address),
        "default_metrics": dict(proxy_vars(tmp / "default_metrics", default_port, KEY, cert,
                                           upstream=replicas["b-0"].address), api_proxy_metrics=True)})
    nginx = Nginx(confs["router"], port).start()
    yield SimpleNamespace(port=port, default_port=default_port, draining_port=draining_port, cert=cert[0], confs=confs,
                          replicas=replicas)
    log = nginx.stop()
    for replica in replicas.values():
        replica.stop()
    assert "[emerg]" not in log and "[alert]" not in log, log


@pytest.fixture
def up(proxy):
    """Every replica serving; one a test stopped is started again and nginx tries it again."""
    stopped = [replica for replica in proxy.replicas.values() if not replica.running]
    for replica in stopped:
        replica.start()
    if stopped:
        time.sleep(LEFT_OUT)
    return proxy


@pytest.fixture
def client(up):
    client = Client(up.port, KEY, up.cert)
    yield client
    client.close()


def _served_by(client: Client, model: str, path: str = "/v1/completions") -> str:
    status, body = client.request("POST", path, {"model": model, "prompt": "Hello", "max_tokens": 4})
    assert status == 200, body
    return json.loads(body)["replica"]


def test_each_model_reaches_its_service(client):
    assert _served_by(client, "a").startswith("a-")
    assert _served_by(client, "b") == "b-0"
    assert _served_by(client, "b", "/v1/chat/completions") == "b-0"


def test_requests_for_a_model_reach_every_replica_of_its_service(client):
    assert {_served_by(client, "a") for _ in range(20)} == {"a-0", "a-1"}


def test_a_stream_arrives_as_several_events_as_they_are_written(client):
    response = client.send("POST", "/v1/chat/completions", {"model": "a", "messages": [], "stream": True})
    assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream"
    began, events = time.monotonic(), []
    while line := response.readline():
        if line.startswith(b"data: "):
            events.append((time.monotonic() - began, line[6:].strip()))
    assert [data for _, data in events][-1] == b"[DONE]"
    tokens = [json.loads(data)["choices"][0]["text"] for _, data in events[:-1]]
    assert tokens == [f"token{index}" for index in range(5)]
    # The stand-in writes an event every 0.1 s: unbuffered, the first arrives long before the last.
    assert events[-1][0] - events[0][0] > 0.3, events


def test_models_lists_every_service(client):
    status, body = client.request("GET", "/v1/models")
    assert status == 200, body
    answer = json.loads(body)
    assert answer["object"] == "list" and sorted(model["id"] for model in answer["data"]) == ["a", "b"]


@pytest.mark.parametrize(("method", "path", "body", "key", "status", "says"), [
    pytest.param("GET", "/v1/models", None, False, 401, "missing or wrong API key", id="models without the key"),
    pytest.param("POST", "/v1/completions", {"model": "a"}, False, 401, "missing or wrong API key", id="completion without the key"),
    pytest.param("POST", "/tokenize", {"model": "a"}, True, 404, "not an allowed route", id="a route not allowed"),
    pytest.param("POST", "/tokenize", {"model": "a"}, False, 401, "missing or wrong API key", id="a route not allowed, no key"),
    pytest.param("GET", "/_vllmops_models/0", None, True, 404, "not an allowed route", id="the router's own location"),
    pytest.param("GET", "/_vllmops_health/1", None, False, 401, "missing or wrong API key", id="the router's own, no key"),
    pytest.param("POST", "/v1/completions", {"model": "c"}, True, 404, "model c is not served here; served: a, b",
                 id="an unknown model"),
    pytest.param("POST", "/v1/completions", "model=a", True, 400, "not JSON", id="a body not JSON"),
    pytest.param("POST", "/v1/chat/completions", {"messages": []}, True, 400, "names no model", id="no model"),
    pytest.param("POST", "/v1/completions", '["a"]', True, 400, "names no model", id="JSON but no object"),
    pytest.param("GET", "/metrics/a/0", None, False, 401, "missing or wrong API key", id="a replica's metrics, no key"),
    pytest.param("GET", "/metrics/b/0", None, False, 401, "missing or wrong API key", id="another replica's, no key"),
    pytest.param("GET", "/metrics/a/2", None, True, 404, "no such replica", id="metrics of a replica index beyond"),
    pytest.param("GET", "/metrics/c/0", None, True, 404, "no such replica", id="metrics of an unknown service"),
    pytest.param("GET", "/metrics/a", None, True, 404, "no such replica", id="metrics of a service, no index"),
    pytest.param("GET", "/metrics/c/0", None, False, 401, "missing or wrong API key", id="an unknown one, no key"),
    pytest.param("GET", "/metrics", None, True, 400, "each replica's own: /metrics/SERVICE/INDEX",
                 id="metrics naming no model"),
])
def test_what_is_refused_and_why(client, method, path, body, key, status, says):
    answer_status, answer = client.request(method, path, body, key=key)
    assert answer_status == status, answer
    error = json.loads(answer)["error"]
    assert error["code"] == status and says in error["message"], error


def test_a_wrong_key_is_refused(up):
    client = Client(up.port, KEY + "x", up.cert)
    assert client.request("POST", "/v1/completions", {"model": "a"})[0] == 401
    assert client.request("GET", "/v1/models")[0] == 401
    assert client.request("GET", "/metrics/a/0")[0] == 401


def _metrics_from(client: Client, path: str) -> str:
    """Which replica answered path: the stand-in's /metrics names it (vllmops_standin_replica{replica=NAME})."""
    status, body = client.request("GET", path)
    assert status == 200, body
    (line,) = [line for line in body.decode().splitlines() if line.startswith("vllmops_standin_replica{")]
    return line.split('"')[1]


def test_each_replica_has_a_metrics_path_of_its_own(client):
    """/metrics/SERVICE/INDEX: that replica every time, never its service's balanced upstream."""
    for path, replica in (("/metrics/a/0", "a-0"), ("/metrics/a/1", "a-1"), ("/metrics/b/0", "b-0")):
        assert {_metrics_from(client, path) for _ in range(6)} == {replica}, path


def test_metrics_without_a_replica_still_route_by_model(client):
    assert _metrics_from(client, "/metrics?model=b") == "b-0"
    assert {_metrics_from(client, "/metrics?model=a") for _ in range(10)} == {"a-0", "a-1"}


def test_a_stopped_replica_s_metrics_fail_rather_than_come_from_another(client, up):
    """A scraper records that replica down (502) - not its sibling's series under its name."""
    up.replicas["a-0"].stop()
    status, body = client.request("GET", "/metrics/a/0")
    assert status == 502, body
    assert _metrics_from(client, "/metrics/a/1") == "a-1"


def test_a_replica_out_of_the_balanced_upstream_keeps_its_metrics_path(up):
    """While roles/fleet restarts a-0 (out of a's upstream, in the plan), /metrics/a/0 is still a-0's, a/1 a-1's."""
    with Nginx(up.confs["router_draining"], up.draining_port):
        client = Client(up.draining_port, KEY, up.cert)
        assert {_served_by(client, "a") for _ in range(6)} == {"a-1"}
        assert _metrics_from(client, "/metrics/a/0") == "a-0"
        assert _metrics_from(client, "/metrics/a/1") == "a-1"
        assert _metrics_from(client, "/metrics/b/0") == "b-0"


def test_prometheus_scrapes_every_replica_through_the_proxy_labelled(up, tmp_path):
    """The metrics role's configuration for this fleet: Prometheus reaches each replica through the proxy (https,
    its CA, the key), one target each, and the series it stores under replica=NAME are that replica's own."""
    heads = {"a-0": "node1", "a-1": "node2", "b-0": "node1"}
    fleet = {"services": [
        {"name": service, "replicas": [
            {"index": index, "id": f"{service}-{index}", "port": up.replicas[f"{service}-{index}"].port,
             "head": heads[f"{service}-{index}"], "head_address": "127.0.0.1", "nodes": [heads[f"{service}-{index}"]]}
            for index in range(count)]}
        for service, count in (("a", 2), ("b", 1))]}
    (tmp_path / "api-key").write_text(KEY)
    (tmp_path / "api-ca.crt").write_bytes(up.cert.read_bytes())
    config = scrape_config(tmp_path, {
        "vllmops_cluster_name": "router-test", "metrics_scrape_interval": "1s", "vllmops_api_proxy": True,
        "vllmops_head_host": "node1", "vllmops_fleet": fleet, "_metrics_with_ca": True,
        "_metrics_api_host": "127.0.0.1", "_metrics_api_port": up.port, "_metrics_exporters": []})
    with Prometheus(config) as prometheus:
        up_series = prometheus.wait('up{job="vllm"}', count=3)
        assert sorted((s["metric"]["service"], s["metric"]["replica"], s["metric"]["node"], s["metric"]["cluster"])
                      for s in up_series) == [("a", "a-0", "node1", "router-test"), ("a", "a-1", "node2", "router-test"),
                                              ("b", "b-0", "node1", "router-test")], up_series
        assert all(s["value"][1] == "1" for s in up_series), up_series
        # The target's replica label beside the one the replica itself exported (renamed exported_replica).
        own = prometheus.wait("vllmops_standin_replica", count=3)
        assert sorted((s["metric"]["replica"], s["metric"]["exported_replica"], s["metric"]["instance"]) for s in own) == [
            (name, name, up.replicas[name].address) for name in ("a-0", "a-1", "b-0")], own


def test_a_stopped_replica_costs_no_request(client, up):
    up.replicas["a-0"].stop()
    results = [client.request("POST", "/v1/completions", {"model": "a", "prompt": "Hello"}) for _ in range(20)]
    assert [status for status, _ in results] == [200] * 20, results
    assert {json.loads(body)["replica"] for _, body in results} == {"a-1"}


def test_a_replica_answering_503_costs_no_request(client, up):
    """A completion (POST: not idempotent) the replica refused with 503 is sent to the other one."""
    up.replicas["a-0"].overloaded = True
    try:
        results = [client.request("POST", "/v1/completions", {"model": "a", "prompt": "Hello"}) for _ in range(10)]
    finally:
        up.replicas["a-0"].overloaded = False
    assert [status for status, _ in results] == [200] * 10, results
    assert {json.loads(body)["replica"] for _, body in results} == {"a-1"}
    time.sleep(LEFT_OUT)  # a-0 is left out that long


def test_a_replica_busy_with_a_stream_gets_no_new_request(up):
    """least_conn: while one replica of a streams an answer, the next requests go to the other."""
    streaming, asking = Client(up.port, KEY, up.cert), Client(up.port, KEY, up.cert)
    response = streaming.send("POST", "/v1/completions", {"model": "a", "stream": True})
    busy = json.loads(response.readline()[6:])["replica"]
    others = {_served_by(asking, "a") for _ in range(10)}
    response.read()
    assert others == {"a-0", "a-1"} - {busy}


def test_health_is_200_with_every_service_up(up):
    status, body = Client(up.port, cafile=up.cert).request("GET", "/health")  # no key
    assert status == 200, body


def test_health_names_the_service_that_is_down(up):
    up.replicas["b-0"].stop()
    status, body = Client(up.port, cafile=up.cert).request("GET", "/health")
    assert status == 503, body
    error = json.loads(body)["error"]
    assert error["services"] == ["b"] and "b" in error["message"], error
    # Its models are left out of the list; the other service's still answer.
    with_key = Client(up.port, KEY, up.cert)
    assert [model["id"] for model in json.loads(with_key.request("GET", "/v1/models")[1])["data"]] == ["a"]
    assert _served_by(with_key, "a").startswith("a-")


def test_the_default_settings_render_without_njs(proxy):
    conf = proxy.confs["default"].read_text()
    assert "load_module" not in conf and "js_" not in conf and "vllmops_svc" not in conf
    assert "upstream vllmops_vllm {" in conf and conf.count("proxy_pass http://vllmops_vllm;") == 6
    router = proxy.confs["router"].read_text()
    assert f"load_module {nginx_binaries()[1]};" in router
    assert "js_import vllmops from" in router and "upstream vllmops_vllm " not in router


def test_per_replica_metrics_paths_come_only_with_the_router_and_api_proxy_metrics(proxy):
    one = proxy.confs["default_metrics"].read_text()
    assert "location = /metrics {" in one and "/metrics/" not in one
    assert one.count("proxy_pass http://vllmops_vllm;") == 7
    assert "/metrics" not in proxy.confs["router_no_metrics"].read_text()
    router = proxy.confs["router"].read_text()
    assert [line.strip() for line in router.splitlines() if line.strip().startswith("location = \"/metrics/")] == [
        'location = "/metrics/a/0" {', 'location = "/metrics/a/1" {', 'location = "/metrics/b/0" {']


def test_the_default_settings_still_serve_one_upstream(up):
    """api_proxy_services empty: one vLLM, every model's request to it, the key as before."""
    with Nginx(up.confs["default"], up.default_port):
        client = Client(up.default_port, KEY, up.cert)
        assert _served_by(client, "anything") == "b-0"
        assert client.request("GET", "/v1/models")[0] == 200
        assert client.request("GET", "/v1/models", key=False)[0] == 401
        assert Client(up.default_port, cafile=up.cert).request("GET", "/health")[0] == 200
