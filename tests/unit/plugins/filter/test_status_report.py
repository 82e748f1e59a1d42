"""status.yml's table: table of (what the nodes reported, plan, Ray, API) -> the text and verdict an operator reads."""

import json
from pathlib import Path

import jsonschema
import pytest
from ansible_collections.vllmops.cluster.plugins.filter.status_report import status_report
from ansible_collections.vllmops.cluster.plugins.module_utils.fleet import make_fleet

IMAGE = "sha256:0123456789abcdef0123"
UP = {"ray_head": "inactive", "ray_worker": "inactive", "vllm": "active"}


def node(address, units=UP, gpus=("NVIDIA GB10",), image_id=IMAGE, vllm="0.11.1"):
    return {"address": address, "gpus": list(gpus), "image_id": image_id, "vllm_version": vllm, "units": dict(units)}


def ray_units(head, vllm="active"):
    return {"ray_head": "active" if head else "inactive", "ray_worker": "inactive" if head else "active",
            "vllm": vllm if head else "inactive"}


def plan(backend):
    mode = "ray" if backend == "ray" else "mp-multinode"
    return {"backend": backend, "mode": mode, "summary": f"{mode}: 2 nodes, TP 2 x PP 1 over 2 GPUs",
            "members": {"spark-1": {"rank": 0, "runs_vllm": True}, "spark-2": {"rank": 1, "runs_vllm": mode != "ray"}}}


def ray(*addresses, dead=()):
    nodes = [{"address": a, "alive": True} for a in addresses] + [{"address": a, "alive": False} for a in dead]
    return {"nodes": nodes, "alive_nodes": len(addresses), "gpus": float(len(addresses))}


API_OK = {"status": 200, "json": {"data": [{"id": "Qwen/Qwen3-0.6B"}]}}
API_DOWN = {"status": -1, "msg": "Connection refused"}
SCHEMA = json.loads((Path(__file__).resolve().parents[4] / "docs/status.schema.json").read_text())
RAY_NODES = {"spark-1": node("10.66.0.11", ray_units(True)), "spark-2": node("10.66.0.12", ray_units(False))}
MP_NODES = {"spark-1": node("10.66.0.11"), "spark-2": node("10.66.0.12")}


def test_healthy_ray_cluster_reads_as_today():
    report = status_report(RAY_NODES, "spark-1", plan=plan("ray"), ray=ray("10.66.0.11", "10.66.0.12"), api=API_OK)
    assert report["lines"] == [
        "NODE                       ROLE   CLUSTER IP   GPUS       IMAGE, VLLM          RAY UNIT  IN RAY VLLM UNIT",
        "spark-1                    head   10.66.0.11   1 GB10     0123456789ab 0.11.1  active    yes    active healthy",
        "spark-2                    worker 10.66.0.12   1 GB10     0123456789ab 0.11.1  active    yes    -",
        "served model: Qwen/Qwen3-0.6B; Ray: 2 alive node(s), 2.0 GPU(s)",
        "OK",
    ]
    assert report["text"] == "\n".join(report["lines"])
    assert (report["verdict"], report["problems"]) == ("OK", [])


def test_healthy_mp_cluster_shows_ranks_and_the_plan():
    report = status_report(MP_NODES, "spark-1", plan=plan("mp"), ray={"skipped": True}, api=API_OK)
    assert report["lines"][1:] == [
        "spark-1                    head 0 10.66.0.11   1 GB10     0123456789ab 0.11.1  -         -      active healthy",
        "spark-2                    worker 1 10.66.0.12   1 GB10     0123456789ab 0.11.1  -         -      active",
        "served model: Qwen/Qwen3-0.6B; mp-multinode: 2 nodes, TP 2 x PP 1 over 2 GPUs",
        "OK",
    ]


@pytest.mark.parametrize(("nodes", "backend", "ray_info", "api", "row", "problems"), [
    pytest.param({**MP_NODES, "spark-2": node("10.66.0.12", {**UP, "vllm": "failed"})}, "mp", None, API_OK,
                 "spark-2                    worker 1 10.66.0.12   1 GB10     0123456789ab 0.11.1  -         -      failed",
                 ["vLLM rank not running on: spark-2"], id="mp: a rank's unit down"),
    pytest.param({**RAY_NODES, "spark-1": node("10.66.0.11", ray_units(True, vllm="inactive"))}, "ray",
                 ray("10.66.0.11", "10.66.0.12"), API_DOWN,
                 "spark-1                    head   10.66.0.11   1 GB10     0123456789ab 0.11.1  active    yes    "
                 "inactive not answering",
                 ["vLLM not running on: spark-1"], id="ray: vLLM down on the head"),
    pytest.param({**RAY_NODES, "spark-2": node("10.66.0.12", {**ray_units(False), "ray_worker": "failed"})}, "ray",
                 ray("10.66.0.11", dead=["10.66.0.12"]), API_OK,
                 "spark-2                    worker 10.66.0.12   1 GB10     0123456789ab 0.11.1  failed    NO     -",
                 ["not in Ray: spark-2", "Ray counts 1 alive node(s) for the 2 of the inventory"],
                 id="ray: a worker's unit down, not in Ray"),
    pytest.param({**RAY_NODES, "spark-2": None}, "ray", ray("10.66.0.11"), API_OK,
                 "spark-2                    worker -            ?          ?                    ?         ?      "
                 "host unreachable",
                 ["no answer from: spark-2", "Ray counts 1 alive node(s) for the 2 of the inventory"],
                 id="ray: a host unreachable"),
    pytest.param({**MP_NODES, "spark-2": None}, "mp", None, API_OK,
                 "spark-2                    worker 1 -            ?          ?                    ?         ?      "
                 "host unreachable",
                 ["no answer from: spark-2"], id="mp: a host unreachable"),
    pytest.param(RAY_NODES, "ray", ray("10.66.0.11", "10.66.0.12", "10.66.0.99"), API_OK,
                 "spark-2                    worker 10.66.0.12   1 GB10     0123456789ab 0.11.1  active    yes    -",
                 ["Ray counts 3 alive node(s) for the 2 of the inventory",
                  "not in the inventory but in the cluster: 10.66.0.99 (a Ray node) - remove with playbooks/remove_node.yml "
                  "-e node=NAME -e node_address=ADDRESS"], id="ray: a node Ray has that we do not, named"),
    pytest.param(MP_NODES, "mp", None, API_DOWN,
                 "spark-1                    head 0 10.66.0.11   1 GB10     0123456789ab 0.11.1  -         -      "
                 "active not answering",
                 ["vLLM on spark-1 does not answer /v1/models (HTTP -1)"], id="mp: unit up, API not answering"),
    pytest.param({**MP_NODES, "spark-2": node("10.66.0.12", gpus=(), image_id="", vllm="")}, "mp", None, API_OK,
                 "spark-2                    worker 1 10.66.0.12   0          absent -             -         -      active",
                 [], id="mp: a node without GPUs or image reads as such"),
])
def test_degraded_or_not(nodes, backend, ray_info, api, row, problems):
    report = status_report(nodes, "spark-1", plan=plan(backend), ray=ray_info, api=api)
    assert row in report["lines"]
    assert report["problems"] == problems
    assert report["verdict"] == ("DEGRADED" if problems else "OK")
    assert report["lines"][-1] == (f"DEGRADED: {'; '.join(problems)}" if problems else "OK")


# --- extra members: machines in the cluster that the inventory does not name --------------------
REMOVE = " - remove with playbooks/remove_node.yml -e node=NAME -e node_address=ADDRESS"


@pytest.mark.parametrize(("nodes", "backend", "ray_info", "peers", "problems", "extra_members"), [
    pytest.param(RAY_NODES, "ray", ray("10.66.0.11", "10.66.0.12", "10.66.0.99"),
                 {"spark-1": ["10.66.0.98", "10.66.0.99"], "spark-2": ["10.66.0.98"]},
                 ["Ray counts 3 alive node(s) for the 2 of the inventory",
                  "not in the inventory but in the cluster: 10.66.0.98 (connected to the cluster ports of spark-1, spark-2), "
                  "10.66.0.99 (a Ray node, connected to spark-1's cluster ports)" + REMOVE],
                 [{"address": "10.66.0.98", "seen_as": ["peer"]}, {"address": "10.66.0.99", "seen_as": ["ray", "peer"]}],
                 id="ray: a Ray node and a peer, merged per address, one line"),
    pytest.param(RAY_NODES, "ray", ray("10.66.0.11", "10.66.0.12"),
                 {"spark-1": ["10.66.0.100", "fd00::13", "10.66.0.9"], "spark-2": []},
                 ["not in the inventory but in the cluster: 10.66.0.9 (connected to spark-1's cluster ports), "
                  "10.66.0.100 (connected to spark-1's cluster ports), fd00::13 (connected to spark-1's cluster ports)"
                  + REMOVE],
                 [{"address": "10.66.0.9", "seen_as": ["peer"]}, {"address": "10.66.0.100", "seen_as": ["peer"]},
                  {"address": "fd00::13", "seen_as": ["peer"]}],
                 id="ray: Ray counts right but a stranger reconnects; addresses in numeric order, IPv6 last"),
    pytest.param(MP_NODES, "mp", ray("10.66.0.99"), {"spark-1": ["10.66.0.13"]},
                 ["not in the inventory but in the cluster: 10.66.0.13 (connected to spark-1's cluster ports)" + REMOVE],
                 [{"address": "10.66.0.13", "seen_as": ["peer"]}],
                 id="mp: a former rank still connected to the master port; Ray is not asked"),
    pytest.param(RAY_NODES, "ray", ray("10.66.0.11", "10.66.0.12"), {"spark-1": ["10.66.0.12"], "spark-2": ["10.66.0.11"]},
                 [], [], id="members connected to each other are no extras"),
    pytest.param({**RAY_NODES, "spark-2": None}, "ray", ray("10.66.0.11", "10.66.0.12"), {"spark-1": ["10.66.0.12"]},
                 ["no answer from: spark-2",
                  "not in the inventory but in the cluster: 10.66.0.12 (a Ray node, connected to spark-1's cluster ports) "
                  "(unless one is spark-2, which did not answer)" + REMOVE],
                 [{"address": "10.66.0.12", "seen_as": ["ray", "peer"]}],
                 id="ray: a node that did not answer may be the extra one, and the line says so"),
])
def test_extra_members_are_named_with_how_to_remove_them(nodes, backend, ray_info, peers, problems, extra_members):
    report = status_report(nodes, "spark-1", plan=plan(backend), ray=ray_info,
                           api=API_OK, peers=peers)
    assert report["problems"] == problems
    assert report["verdict"] == ("DEGRADED" if problems else "OK")
    assert report["lines"][-1] == (f"DEGRADED: {'; '.join(problems)}" if problems else "OK")
    assert report["document"]["extra_members"] == extra_members
    jsonschema.validate(report["document"], SCHEMA)


def test_the_plan_s_members_are_no_extras():
    # A member's address the plan knows, whatever its node reported this time (here: no cluster.env yet).
    nodes = {"spark-1": node("10.66.0.11", ray_units(True)), "spark-2": node("", ray_units(False))}
    members = {**plan("ray"), "members": {"spark-1": {"rank": 0, "address": "10.66.0.11"},
                                          "spark-2": {"rank": 1, "address": "10.66.0.12"}}}
    report = status_report(nodes, "spark-1", plan=members, ray=ray("10.66.0.11", "10.66.0.12"), api=API_OK,
                           peers={"spark-1": ["10.66.0.12"]})
    assert report["document"]["extra_members"] == []
    assert report["problems"] == ["not in Ray: spark-2"]


def test_without_a_plan_the_table_assumes_ray():
    nodes = {"spark-1": node("", ray_units(True)), "spark-2": node("10.66.0.12", ray_units(False))}
    report = status_report(nodes, "spark-1", plan=None, ray=None, api={"status": 200, "json": {"data": []}})
    assert report["lines"][1] == (
        "spark-1                    head   -            1 GB10     0123456789ab 0.11.1  active    NO     active healthy")
    assert report["lines"][-2] == "served model: none answering; Ray: 0 alive node(s), 0 GPU(s)"
    assert report["problems"] == ["not in Ray: spark-1, spark-2", "Ray counts 0 alive node(s) for the 2 of the inventory"]


def test_hosts_missing_from_the_reports_did_not_answer_and_keep_their_place():
    report = status_report({"spark-1": MP_NODES["spark-1"]}, "spark-1", hosts=["spark-0", "spark-1"],
                           plan=plan("mp"), api=API_OK)
    assert [line.split()[0] for line in report["lines"][1:3]] == ["spark-0", "spark-1"]
    assert report["lines"][1].endswith("host unreachable")
    assert report["problems"] == ["no answer from: spark-0"]


# --- the head watchdog (health=): its timer, last check and last event -------------------------
RESTARTED = {
    "checked_at": "2027-01-15T08:02:00Z", "last_check": {"ok": True, "took": 0.04},
    "last_event": {"time": "2027-01-15T08:00:30Z", "action": "restart", "recovered_after_s": 41.5,
                   "saw": "3 failed checks in a row since 2027-01-15T08:00:10Z: completion: no answer within 10 s; /health: 200",
                   "did": "restarted vllmops-vllm (rank 0); the other ranks follow"},
}
HELD = {
    "checked_at": "2027-01-15T09:00:00Z", "last_check": {"ok": False, "what": "completion: HTTP 500", "health": 503},
    "last_event": {"time": "2027-01-15T08:59:00Z", "action": "held", "restarts_in_window": 3, "saw": "3 failed checks",
                   "did": "nothing: 3 restart(s) in the last 3600 s already"},
}


def watchdog(record, timer="active"):
    return {"unit": "vllmops-vllm-health", "timer": timer, "record": json.dumps(record) if isinstance(record, dict) else record}


@pytest.mark.parametrize(("health", "lines", "problems"), [
    pytest.param(watchdog(RESTARTED), [
        "head watchdog vllmops-vllm-health: timer active; last check 2027-01-15T08:02:00Z: ok (0.04 s)",
        "last event 2027-01-15T08:00:30Z: saw 3 failed checks in a row since 2027-01-15T08:00:10Z: completion: no answer "
        "within 10 s; /health: 200; did restarted vllmops-vllm (rank 0); the other ranks follow; served again 41.5 s later",
    ], [], id="a restart that healed: shown, OK"),
    pytest.param(watchdog({"checked_at": "2027-01-15T08:02:00Z", "last_check": {"ok": True, "took": 0.1}}), [
        "head watchdog vllmops-vllm-health: timer active; last check 2027-01-15T08:02:00Z: ok (0.1 s)",
        "last event: none (no restart so far)",
    ], [], id="never acted"),
    pytest.param(watchdog("", timer="active"), [
        "head watchdog vllmops-vllm-health: timer active; last check -: none yet",
        "last event: none (no restart so far)",
    ], [], id="just installed, no check yet"),
    pytest.param(watchdog({**RESTARTED, "last_event": {**RESTARTED["last_event"], "failure_class": "oom"}}), [
        "head watchdog vllmops-vllm-health: timer active; last check 2027-01-15T08:02:00Z: ok (0.04 s)",
        "last event 2027-01-15T08:00:30Z: saw 3 failed checks in a row since 2027-01-15T08:00:10Z: completion: no answer "
        "within 10 s; /health: 200; did restarted vllmops-vllm (rank 0); the other ranks follow; served again 41.5 s later; "
        "the rank's log: oom",
    ], [], id="the class the watchdog named from the rank's log"),
    pytest.param(watchdog(HELD), [
        "head watchdog vllmops-vllm-health: timer active; last check 2027-01-15T09:00:00Z: FAILED: completion: HTTP 500; "
        "/health: 503",
        "last event 2027-01-15T08:59:00Z: saw 3 failed checks; did nothing: 3 restart(s) in the last 3600 s already",
    ], ["the head watchdog reached its restart limit (3 in its window) and no longer restarts vLLM"],
        id="held at its limit while vLLM fails: DEGRADED"),
    pytest.param(watchdog(RESTARTED, timer="inactive"), [
        "head watchdog vllmops-vllm-health: timer inactive; last check 2027-01-15T08:02:00Z: ok (0.04 s)",
        "last event 2027-01-15T08:00:30Z: saw 3 failed checks in a row since 2027-01-15T08:00:10Z: completion: "
        "no answer within 10 s; /health: 200; did restarted vllmops-vllm (rank 0); the other ranks follow; served again 41.5 s later",
    ], ["the head watchdog is not running (vllmops-vllm-health.timer inactive)"], id="timer stopped (a deploy that failed)"),
    pytest.param(watchdog({"checked_at": "2027-01-15T08:02:00Z",
                           "last_check": {"ok": None, "what": 'completion refused: HTTP 401 {"error": "Unauthorized"}'}}), [
        'head watchdog vllmops-vllm-health: timer active; last check 2027-01-15T08:02:00Z: completion refused: HTTP 401 '
        '{"error": "Unauthorized"}',
        "last event: none (no restart so far)",
    ], ["the head watchdog cannot check vLLM (completion refused: HTTP 401)"], id="its check refused: blind, DEGRADED"),
    pytest.param(watchdog("", timer="inactive"), [], [], id="no head watchdog: no line"),
    pytest.param(watchdog("{broken", timer="inactive"), [], [], id="a record that does not parse reads as none"),
])
def test_the_head_watchdog_lines(health, lines, problems):
    report = status_report(MP_NODES, "spark-1", plan=plan("mp"), api=API_OK, health=health)
    assert report["lines"][4:-1] == lines
    assert report["problems"] == problems
    assert report["lines"][-1] == (f"DEGRADED: {'; '.join(problems)}" if problems else "OK")


def test_a_record_already_parsed_reads_the_same():
    as_text = status_report(MP_NODES, "spark-1", plan=plan("mp"), api=API_OK, health=watchdog(RESTARTED))
    as_dict = status_report(MP_NODES, "spark-1", plan=plan("mp"), api=API_OK, health={**watchdog(RESTARTED), "record": RESTARTED})
    assert as_text == as_dict


# --- status_format=json: the same report for scripts, as docs/status.schema.json says -----------


@pytest.mark.parametrize(("nodes", "backend", "ray_info", "api", "health"), [
    pytest.param(MP_NODES, "mp", None, API_OK, watchdog(RESTARTED), id="mp healthy, a restart on record"),
    pytest.param(RAY_NODES, "ray", ray("10.66.0.11", "10.66.0.12"), API_OK, None, id="ray healthy"),
    pytest.param({**RAY_NODES, "spark-2": None}, "ray", ray("10.66.0.11"), API_DOWN, watchdog(HELD), id="ray degraded"),
    pytest.param({**MP_NODES, "spark-2": None}, None, None, API_DOWN, watchdog("not json", timer="inactive"),
                 id="no plan, a host unreachable"),
])
def test_the_json_document_follows_its_schema_and_says_what_the_table_says(nodes, backend, ray_info, api, health):
    report = status_report(nodes, "spark-1", plan=plan(backend) if backend else None, ray=ray_info, api=api, health=health)
    document = report["document"]
    jsonschema.validate(document, SCHEMA)
    assert (document["verdict"], document["problems"]) == (report["verdict"], report["problems"])
    assert [node["name"] for node in document["nodes"]] == list(nodes)
    assert [node["reachable"] for node in document["nodes"]] == [value is not None for value in nodes.values()]
    assert document["api"]["answering"] == (api is API_OK)
    on_ray = backend in ("ray", None)
    assert (document["ray"] is None) == (not on_ray)
    assert [node["rank"] for node in document["nodes"]] == ([None, None] if on_ray else [0, 1])


def test_the_schema_refuses_what_scripts_must_not_get():
    document = status_report(MP_NODES, "spark-1", plan=plan("mp"), api=API_OK)["document"]
    for broken in ({**document, "verdict": "FINE"}, {**document, "extra": 1},
                   {**document, "extra_members": [{"address": "10.66.0.99", "seen_as": ["ssh"]}]},
                   {key: value for key, value in document.items() if key != "extra_members"},
                   {**document, "nodes": [{**document["nodes"][0], "rank": "0"}]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, SCHEMA)


def test_the_model_must_be_the_same_on_every_node_that_runs_vllm():
    same = {host: dict(n, model={"digest": "sha256:" + "a" * 64, "stale": False}) for host, n in MP_NODES.items()}
    report = status_report(same, "spark-1", plan=plan("mp"), api=API_OK)
    assert report["verdict"] == "OK"
    assert "model: sha256:aaaaaaaaaaaa on every node" in report["lines"]
    assert [n["model_digest"] for n in report["document"]["nodes"]] == ["sha256:" + "a" * 64] * 2

    differs = dict(same, **{"spark-2": dict(MP_NODES["spark-2"], model={"digest": "", "stale": False})})
    report = status_report(differs, "spark-1", plan=plan("mp"), api=API_OK)
    assert report["problems"] == ["the model differs between the nodes: spark-1 sha256:aaaaaaaaaaaa, spark-2 none"]
    changed = dict(same, **{"spark-2": dict(MP_NODES["spark-2"], model={"digest": "sha256:" + "a" * 64, "stale": True})})
    assert status_report(changed, "spark-1", plan=plan("mp"), api=API_OK)["problems"] == [
        "model files changed since their manifest on: spark-2"]
    # With Ray too: a worker loads its part of the weights from its own disk. Without a manifest anywhere (a
    # model put there by hand) nothing is judged.
    on_ray = {"spark-1": dict(RAY_NODES["spark-1"], model={"digest": "sha256:" + "a" * 64, "stale": False}),
              "spark-2": dict(RAY_NODES["spark-2"], model={"digest": "", "stale": False})}
    assert status_report(on_ray, "spark-1", plan=plan("ray"), ray=ray("10.66.0.11", "10.66.0.12"), api=API_OK)["problems"] == [
        "the model differs between the nodes: spark-1 sha256:aaaaaaaaaaaa, spark-2 none"]
    bare = {host: dict(n, model={"digest": "", "stale": False}) for host, n in MP_NODES.items()}
    assert status_report(bare, "spark-1", plan=plan("mp"), api=API_OK)["verdict"] == "OK"


def test_the_same_image_on_both_image_stores_is_one_image_and_other_content_is_named():
    # Recorded: one image on Docker 20.10 (classic store) and on 26.1 with the containerd image store.
    content = "sha256:085d8ea2e75d221feecafb18d8cae8640fcdd12c81b875950de352c48d5434ec"
    mixed = {"spark-1": dict(MP_NODES["spark-1"], image_id="sha256:7f15267e56ac654f3891994e0111e744c29b8437c928031044bcbed5b4b283b4",
                             image_content_id=content),
             "spark-2": dict(MP_NODES["spark-2"], image_id="sha256:a3d47d1f2a2dcb47840f5a928d86e6c4c01958300a9c163c16854b50b39e36eb",
                             image_content_id=content)}
    report = status_report(mixed, "spark-1", plan=plan("mp"), api=API_OK)
    assert report["verdict"] == "OK"
    assert all("085d8ea2e75d 0.11.1" in line for line in report["lines"] if line.startswith("spark-"))
    document = report["document"]
    jsonschema.validate(document, SCHEMA)
    assert [n["image_content_id"] for n in document["nodes"]] == [content, content]
    assert [n["image_id"][:19] for n in document["nodes"]] == ["sha256:7f15267e56ac", "sha256:a3d47d1f2a2d"]

    other = dict(mixed, **{"spark-2": dict(mixed["spark-2"], image_content_id="sha256:" + "b" * 64)})
    assert status_report(other, "spark-1", plan=plan("mp"), api=API_OK)["problems"] == [
        "the image differs between the nodes (by content ID): spark-1 sha256:085d8ea2e75d, spark-2 sha256:bbbbbbbbbbbb"]
    # A report of the previous version (no content ID) is judged as before: not at all.
    assert status_report(MP_NODES, "spark-1", plan=plan("mp"), api=API_OK)["verdict"] == "OK"


def released(current, matches=True, last_good=None, previous="r-000000000001"):
    return {"current": current, "last_good": last_good or current, "previous": previous, "matches": matches}


def test_every_node_on_one_release_says_which_and_the_one_before():
    nodes = {host: dict(reported, release=released("r-0123456789ab")) for host, reported in MP_NODES.items()}
    report = status_report(nodes, "spark-1", plan=plan("mp"), ray={"skipped": True}, api=API_OK)
    assert "release: r-0123456789ab on every node (last good r-0123456789ab, previous r-000000000001)" in report["lines"]
    assert report["verdict"] == "OK"
    assert report["document"]["nodes"][1]["release"] == released("r-0123456789ab")
    jsonschema.validate(report["document"], SCHEMA)


@pytest.mark.parametrize(("releases", "problem"), [
    ((released("r-0123456789ab"), released("r-aaaaaaaaaaaa")),
     "the nodes serve different releases: spark-1 r-0123456789ab, spark-2 r-aaaaaaaaaaaa"),
    ((released("r-0123456789ab"), released("r-0123456789ab", matches=False)),
     "files of the release differ from its record on: spark-2 (edited by hand, or a switch that did not finish: "
     "deploy.yml, or playbooks/rollback.yml)"),
])
def test_nodes_on_different_releases_or_off_their_record_are_degraded(releases, problem):
    nodes = {host: dict(reported, release=release) for (host, reported), release in zip(MP_NODES.items(), releases, strict=True)}
    report = status_report(nodes, "spark-1", plan=plan("mp"), ray={"skipped": True}, api=API_OK)
    assert report["verdict"] == "DEGRADED"
    assert report["problems"] == [problem]
    assert report["lines"][-1] == f"DEGRADED: {problem}"
    jsonschema.validate(report["document"], SCHEMA)


def test_a_cluster_without_releases_yet_is_not_degraded_for_it():
    nodes = {host: dict(reported, release={"current": None, "last_good": None, "previous": None, "matches": None})
             for host, reported in MP_NODES.items()}
    report = status_report(nodes, "spark-1", plan=plan("mp"), ray={"skipped": True}, api=API_OK)
    assert report["verdict"] == "OK"


# --- several services (fleet=): a line per service and replica; OK, DEGRADED or DOWN -----------------
# The plan as fleet_plan makes it: qwen's two replicas on one node each, coder's one replica over both nodes.
FLEET = make_fleet(
    [{"name": "qwen", "model": "Qwen/Qwen3-0.6B", "replicas": 2},
     {"name": "coder", "model": "/srv/models/coder", "tensor_parallel_size": 2, "gpus": {"spark-1": [1], "spark-2": [1]}}],
    [{"name": "spark-1", "gpus": 2, "address": "10.66.0.11"}, {"name": "spark-2", "gpus": 2, "address": "10.66.0.12"}])
FLEET_API = {"status": 200, "json": {"data": [{"id": "qwen"}, {"id": "coder"}]}}


def fleet_nodes(states=None, health=None):
    """What status.yml's hosts report: each unit's state (default active) and the /health of the replicas each
    heads (default 200)."""
    states, health = states or {}, health or {}
    nodes = {}
    for host, address in (("spark-1", "10.66.0.11"), ("spark-2", "10.66.0.12")):
        reported = node(address, units={})
        reported["units"] = {unit: states.get(unit, "active") for unit in FLEET["hosts"][host]}
        reported["replicas"] = {replica["id"]: health.get(replica["id"], 200) for service in FLEET["services"]
                                for replica in service["replicas"] if replica["head"] == host}
        nodes[host] = reported
    return nodes


def test_a_fleet_all_up_reads_service_by_service_and_is_ok():
    report = status_report(fleet_nodes(), "spark-1", fleet=FLEET, api=FLEET_API, ray={"skipped": True})
    assert report["lines"] == [
        "NODE                       ROLE   CLUSTER IP   GPUS       IMAGE, VLLM          RAY UNIT  IN RAY VLLM UNIT",
        "spark-1                    head   10.66.0.11   1 GB10     0123456789ab 0.11.1  -         -      2/2 active",
        "spark-2                    worker 10.66.0.12   1 GB10     0123456789ab 0.11.1  -         -      2/2 active",
        "SERVICE, REPLICA           MODEL, NODES               PORT   READY     LAYOUT, UNITS",
        "qwen                       Qwen/Qwen3-0.6B            8100   2/2       TP 1 x PP 1 x DP 1; listed in /v1/models",
        "  qwen-0                   spark-1                    8100   healthy   vllmops-vllm-qwen-0 active",
        "  qwen-1                   spark-2                    8100   healthy   vllmops-vllm-qwen-1 active",
        "coder                      /srv/models/coder          8101   1/1       TP 2 x PP 1 x DP 1; listed in /v1/models",
        "  coder-0                  spark-1,spark-2            8101   healthy   vllmops-vllm-coder-0 active, vllmops-vllm-coder-0-r1 active",
        "served model: qwen, coder; 2 service(s), 3/3 replicas answering",
        "OK",
    ]
    assert (report["verdict"], report["problems"]) == ("OK", [])
    document = report["document"]
    jsonschema.validate(document, SCHEMA)
    assert (document["backend"], document["ray"], document["head_watchdog"]) == ("mp", None, None)
    assert document["plan"] == FLEET["summary"]
    assert [(s["name"], s["ready"], s["total"], s["listed"]) for s in document["services"]] == [
        ("qwen", 2, 2, True), ("coder", 1, 1, True)]
    assert document["services"][1]["replicas"] == [{
        "id": "coder-0", "nodes": ["spark-1", "spark-2"], "port": 8101, "healthy": True, "http_status": 200, "watchdog": None,
        "units": [{"host": "spark-1", "unit": "vllmops-vllm-coder-0", "state": "active"},
                  {"host": "spark-2", "unit": "vllmops-vllm-coder-0-r1", "state": "active"}]}]
    assert document["services"][1]["layout"] == {"tensor_parallel_size": 2, "pipeline_parallel_size": 1, "data_parallel_size": 1,
                                                 "data_parallel_size_local": 1, "enable_expert_parallel": False}
    assert [n["rank"] for n in document["nodes"]] == [None, None]
    assert [n["units"] for n in document["nodes"]][1] == {"vllmops-vllm-qwen-1": "active", "vllmops-vllm-coder-0-r1": "active"}


def watched(nodes, timers=None, records=None):
    """fleet_nodes with each replica's watchdog reported by its head: timer active and a passing check, unless told."""
    timers, records = timers or {}, records or {}
    ok = json.dumps({"checked_at": "2026-12-06T01:00:00Z", "last_ok_at": 1.0, "failures": 0, "restarts": [],
                     "last_check": {"ok": True, "took": 0.4}})
    for reported in nodes.values():
        ids = list(reported["replicas"])
        units = [f"vllmops-fleet-health-{replica}" for replica in ids]
        reported["watchdogs"] = {"ids": ids, "units": units, "timers": [timers.get(i, "active") for i in ids],
                                 "records": [records.get(i, ok) for i in ids]}
    return nodes


def test_a_fleet_replica_s_watchdog_reads_under_its_replica():
    report = status_report(watched(fleet_nodes()), "spark-1", fleet=FLEET, api=FLEET_API)
    assert (report["verdict"], report["problems"]) == ("OK", [])
    at = report["lines"].index("  qwen-1                   spark-2                    8100   healthy   vllmops-vllm-qwen-1 active")
    assert report["lines"][at + 1:at + 3] == [
        "      head watchdog vllmops-fleet-health-qwen-1: timer active; last check 2026-12-06T01:00:00Z: ok (0.4 s)",
        "      last event: none (no restart so far)"]
    jsonschema.validate(report["document"], SCHEMA)
    assert report["document"]["services"][0]["replicas"][1]["watchdog"] == {
        "unit": "vllmops-fleet-health-qwen-1", "timer": "active", "checked_at": "2026-12-06T01:00:00Z",
        "last_check": {"ok": True, "took": 0.4}, "last_event": None}


def test_a_fleet_replica_whose_watchdog_stopped_or_held_is_degraded():
    held = json.dumps({"checked_at": "2026-12-06T01:00:00Z", "failures": 3,
                       "last_check": {"ok": False, "what": "timed out after 30 s", "health": "200"},
                       "last_event": {"time": "2026-12-06T00:59:00Z", "saw": "3 failed checks", "did": "nothing: the limit",
                                      "action": "held", "restarts_in_window": 3, "at": 5.0}})
    report = status_report(watched(fleet_nodes(), timers={"qwen-0": "inactive"}, records={"coder-0": held}), "spark-1",
                           fleet=FLEET, api=FLEET_API)
    assert report["verdict"] == "DEGRADED"
    assert report["problems"] == [
        "replica qwen-0: its watchdog is not running (vllmops-fleet-health-qwen-0.timer inactive)",
        "replica coder-0: its watchdog reached its restart limit (3 in its window) and no longer restarts vLLM"]
    jsonschema.validate(report["document"], SCHEMA)


@pytest.mark.parametrize(("nodes", "api", "verdict", "problems", "rows"), [
    pytest.param(fleet_nodes({"vllmops-vllm-qwen-1": "failed"}, {"qwen-1": -1}), FLEET_API, "DEGRADED",
                 ["service qwen serves on 1 of 2 replicas, not answering: qwen-1 on spark-2 (/health: no answer; "
                  "vllmops-vllm-qwen-1 failed)"],
                 ["qwen                       Qwen/Qwen3-0.6B            8100   1/2       TP 1 x PP 1 x DP 1; listed in /v1/models",
                  "  qwen-1                   spark-2                    8100   no answer vllmops-vllm-qwen-1 failed"],
                 id="one replica down, its service still serves: DEGRADED, naming the replica"),
    pytest.param(fleet_nodes(health={"qwen-0": 503}), FLEET_API, "DEGRADED",
                 ["service qwen serves on 1 of 2 replicas, not answering: qwen-0 on spark-1 (/health: HTTP 503)"],
                 ["  qwen-0                   spark-1                    8100   HTTP 503  vllmops-vllm-qwen-0 active"],
                 id="a unit up whose vLLM refuses /health"),
    pytest.param(fleet_nodes({"vllmops-vllm-coder-0-r1": "failed"}, {"coder-0": 503}),
                 {"status": 200, "json": {"data": [{"id": "qwen"}]}}, "DOWN",
                 ["service coder is down, no replica answers: coder-0 on spark-1, spark-2 (/health: HTTP 503; "
                  "vllmops-vllm-coder-0-r1 failed)",
                  "the API on spark-1 does not list: coder (clients cannot reach them)"],
                 ["coder                      /srv/models/coder          8101   0/1       TP 2 x PP 1 x DP 1; NOT listed in /v1/models",
                  "  coder-0                  spark-1,spark-2            8101   HTTP 503  vllmops-vllm-coder-0 active, "
                  "vllmops-vllm-coder-0-r1 failed"],
                 id="a service with no replica answering: DOWN"),
    pytest.param(fleet_nodes(health={"qwen-0": -1, "qwen-1": -1}), FLEET_API, "DOWN",
                 ["service qwen is down, no replica answers: qwen-0 on spark-1 (/health: no answer), "
                  "qwen-1 on spark-2 (/health: no answer)"],
                 ["qwen                       Qwen/Qwen3-0.6B            8100   0/2       TP 1 x PP 1 x DP 1; listed in /v1/models"],
                 id="every replica of a service down, the other service up: still DOWN"),
    pytest.param({**fleet_nodes(), "spark-2": None}, FLEET_API, "DEGRADED",
                 ["no answer from: spark-2",
                  "service qwen serves on 1 of 2 replicas, not answering: qwen-1 on spark-2 (its head spark-2 did not answer; "
                  "vllmops-vllm-qwen-1 ?)",
                  "service coder: units not active in answering replicas: vllmops-vllm-coder-0-r1 on spark-2 (?)"],
                 ["spark-2                    worker -            ?          ?                    ?         ?      host unreachable",
                  "  qwen-1                   spark-2                    8100   ?         vllmops-vllm-qwen-1 ?"],
                 id="a node that did not answer: its replicas unknown, counted as not answering"),
    pytest.param(fleet_nodes({"vllmops-vllm-coder-0-r1": "activating"}), FLEET_API, "DEGRADED",
                 ["service coder: units not active in answering replicas: vllmops-vllm-coder-0-r1 on spark-2 (activating)"],
                 ["spark-2                    worker 10.66.0.12   1 GB10     0123456789ab 0.11.1  -         -      1/2 active"],
                 id="a replica over two nodes answering from its head while the other node's rank is not active"),
    pytest.param(fleet_nodes(), API_DOWN, "DEGRADED",
                 ["the API on spark-1 does not answer /v1/models (HTTP -1): clients reach no service"],
                 ["qwen                       Qwen/Qwen3-0.6B            8100   2/2       TP 1 x PP 1 x DP 1; NOT listed in /v1/models"],
                 id="every replica answers but the API proxy does not"),
])
def test_a_fleet_degraded_or_down(nodes, api, verdict, problems, rows):
    report = status_report(nodes, "spark-1", fleet=FLEET, api=api)
    assert (report["verdict"], report["problems"]) == (verdict, problems)
    assert report["lines"][-1] == f"{verdict}: {'; '.join(problems)}"
    assert all(row in report["lines"] for row in rows), "\n".join(report["lines"])
    document = report["document"]
    jsonschema.validate(document, SCHEMA)
    assert document["verdict"] == verdict
    # The JSON counts what the table shows: a replica is ready when its /health answered 200.
    healthy = {line.split()[0] for line in report["lines"] if line.startswith("  ") and " healthy " in line}
    assert {r["id"] for s in document["services"] for r in s["replicas"] if r["healthy"]} == healthy
    assert [s["ready"] for s in document["services"]] == [sum(r["healthy"] for r in s["replicas"]) for s in document["services"]]


def test_a_fleet_node_that_did_not_answer_reads_as_unknown_in_the_json():
    document = status_report({**fleet_nodes(), "spark-2": None}, "spark-1", fleet=FLEET, api=FLEET_API)["document"]
    qwen_1 = document["services"][0]["replicas"][1]
    assert (qwen_1["healthy"], qwen_1["http_status"], qwen_1["units"][0]["state"]) == (False, None, None)
    assert document["nodes"][1]["reachable"] is False


def test_a_fleet_layout_names_data_and_expert_parallelism():
    moe = {**FLEET, "services": [{**FLEET["services"][1], "layout": {**FLEET["services"][1]["layout"], "tensor_parallel_size": 1,
                                                                   "data_parallel_size": 2, "enable_expert_parallel": True}}]}
    report = status_report(fleet_nodes(), "spark-1", fleet=moe, api=FLEET_API)
    assert "TP 1 x PP 1 x DP 2, EP; listed in /v1/models" in report["lines"][4]
    assert report["document"]["services"][0]["layout"]["enable_expert_parallel"] is True


def test_a_fleet_skips_the_single_service_checks():
    # Ray's count, the head watchdog and the releases of the one service say nothing of several services.
    nodes = {host: dict(reported, release=released(f"r-{host}", matches=False)) for host, reported in fleet_nodes().items()}
    report = status_report(nodes, "spark-1", fleet=FLEET, api=FLEET_API, plan=plan("ray"), ray=ray("10.66.0.11"),
                           health=watchdog(HELD, timer="inactive"))
    assert (report["verdict"], report["problems"]) == ("OK", [])
    assert [n["release"] for n in report["document"]["nodes"]] == [None, None]
    assert not any(line.startswith(("head watchdog", "release:")) for line in report["lines"])


def test_the_single_service_report_has_no_services_and_is_never_down():
    report = status_report(MP_NODES, "spark-1", plan=plan("mp"), api=API_DOWN, fleet=None)
    assert "services" not in report["document"]
    assert report["verdict"] == "DEGRADED"
    assert not any(line.startswith("SERVICE") for line in report["lines"])


def test_the_schema_refuses_a_broken_services_list():
    document = status_report(fleet_nodes(), "spark-1", fleet=FLEET, api=FLEET_API)["document"]
    service = document["services"][0]
    replica = service["replicas"][0]
    for broken in ({**document, "verdict": "UP"},
                   {**document, "services": [{key: value for key, value in service.items() if key != "ready"}]},
                   {**document, "services": [{**service, "replicas": [{**replica, "healthy": "yes"}]}]},
                   {**document, "services": [{**service, "replicas": [{**replica, "units": [{"unit": "x", "state": "active"}]}]}]}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, SCHEMA)
