"""Changes of the serving image an operator makes on purpose (the head moved
to another node is test_ray_grow_and_remove.py): an image upgrade, with one
more flag, whose server hangs at start, rolled back to the previous image and
configuration automatically (Ray's units too); an upgrade that passes, then
playbooks/rollback.yml back to the previous image by its ID, even where its
name no longer points at it (its units then equal what the inventory
describes). The passing upgrade also sets an NCCL variable: every Ray and
vLLM container runs with it, and without it again once rolled back."""

from __future__ import annotations

import json

from ray_cluster import HEAD, STANDIN, WORKER

# What these changes touch (the plays of the other roles have nothing to do).
TAGS = ("--tags", "image,ray_cluster,api_proxy,vllm_serve")
SERVING = {"vllmops-vllm", "vllmops-ray-head", "vllmops-ray-worker"}


def serving_images(cluster) -> dict:
    """Node -> Ray's and vLLM's containers -> the image ID each runs."""
    return {node: {name: image for name, image in found.items() if name in SERVING}
            for node, found in cluster.running_images().items()}


def image_ids(cluster, name: str) -> dict:
    """Node -> the ID an image has there (the same content has another ID in containerd's image store than in the
    classic one: compared per node, the stories hold on a cluster with both)."""
    return {node: cluster.on(node, "docker", "image", "inspect", "--format", "{{.Id}}", name) for node in (HEAD, WORKER)}


def runs(cluster, ids: dict) -> bool:
    """Whether every serving container on each node runs that node's ID of one image."""
    return all(set(found.values()) == {ids[node]} for node, found in serving_images(cluster).items())


def variant(cluster, tag: str, *lines: str) -> None:
    """An image built on the head from the serving image, with a few more lines."""
    dockerfile = "\n".join([f"FROM {cluster.vars['vllmops_image']}", *lines]) + "\n"
    cluster.on(HEAD, "sh", "-c", f'printf "%s" "$1" | DOCKER_BUILDKIT=0 docker build --quiet --tag {tag} -', "sh", dockerfile)


def serving_env(cluster, name: str) -> dict:
    """Node -> Ray's and vLLM's containers -> the value of the variable name in each (None when unset)."""
    found = {}
    for node, containers in serving_images(cluster).items():
        env = {container: cluster.on(node, "docker", "inspect", "--format", "{{json .Config.Env}}", container)
               for container in containers}
        found[node] = {container: next((item.split("=", 1)[1] for item in json.loads(text)
                                        if item.startswith(name + "=")), None) for container, text in env.items()}
    return found


def kept(cluster, node: str, which: str) -> str:
    return cluster.on(node, "docker", "image", "inspect", "--format", "{{.Id}}", f"vllmops-kept:{which}", check=False)


def test_an_upgrade_whose_server_hangs_at_start_goes_back_to_the_previous_image_and_flags_ray_included(cluster):
    base = image_ids(cluster, cluster.vars["vllmops_image"])
    before, args = serving_images(cluster), cluster.vllm_args()
    assert runs(cluster, base), before
    variant(cluster, STANDIN + "-hang", "ENV VLLMOPS_STANDIN_FAIL=hang")

    # It never answers, and its log stops moving: diagnosed after the hang window (vllm_serve_hang_window).
    run = cluster.deploy(*TAGS, serve_args={"max_num_seqs": 8},
                         extra={"vllmops_image": STANDIN + "-hang"})
    assert run.rc != 0, run
    assert "new configuration: hang" in str(run), run
    assert "Rolled back every node to the last working configuration: healthy again." in str(run), run
    assert serving_images(cluster) == before
    assert cluster.vllm_args() == args
    assert cluster.complete("rolled back", 3)["usage"]["completion_tokens"] == 3


def test_a_passing_upgrade_then_rollback_yml_serves_the_previous_image_by_its_id(cluster):
    name, newer = cluster.vars["vllmops_image"], STANDIN.replace("v0.33.0", "v0.33.1")
    base = image_ids(cluster, name)
    variant(cluster, newer, "LABEL io.vllmops.test=upgrade")

    up = cluster.deploy("--tags", "nccl," + TAGS[1], extra={"vllmops_image": newer,
                                                           "nccl_env": {"NCCL_MIN_NCHANNELS": "4"}})
    assert up.rc == 0, up
    new = image_ids(cluster, newer)
    assert runs(cluster, new), (serving_images(cluster), new)
    tuned = serving_env(cluster, "NCCL_MIN_NCHANNELS")
    assert {value for found in tuned.values() for value in found.values()} == {"4"}, tuned
    assert (kept(cluster, WORKER, "last-good"), kept(cluster, WORKER, "previous")) == (new[WORKER], base[WORKER])

    # The old name no longer points at the old content on node2: the units name it by ID, the kept tag holds it.
    cluster.on(WORKER, "docker", "image", "rm", name)
    try:
        back = cluster.playbook("playbooks/rollback.yml")
        assert back.rc == 0, back
        assert runs(cluster, base), (serving_images(cluster), base)
        untuned = serving_env(cluster, "NCCL_MIN_NCHANNELS")
        assert {value for found in untuned.values() for value in found.values()} == {None}, untuned
        assert "NCCL_MIN_NCHANNELS" not in cluster.on(WORKER, "cat", "/etc/vllmops/cluster.env")
        assert cluster.complete("gone back", 3)["usage"]["completion_tokens"] == 3
        assert (kept(cluster, WORKER, "last-good"), kept(cluster, WORKER, "previous")) == (base[WORKER], new[WORKER])
    finally:
        cluster.on(WORKER, "docker", "tag", base[WORKER], name)

    assert cluster.healthy()
