"""deploy.yml's fast path holds only if every play between the first (the
comparison) and the last (the record) ends at once when every node is as
recorded: a play added without that first step would run on every re-run."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import yaml

PLAYS = yaml.safe_load((Path(__file__).resolve().parents[3] / "playbooks" / "deploy.yml").read_text())


def test_the_first_play_compares_and_the_last_records():
    assert "deploy_state_check" in str(PLAYS[0]["tasks"]) and PLAYS[0]["tags"] == ["always"]
    assert "deploy_state_record" in str(PLAYS[-1]["tasks"])


def test_every_play_between_ends_first_when_every_node_is_as_recorded():
    for play in PLAYS[1:-1]:
        first = play.get("pre_tasks", [{}])[0]
        assert first.get("ansible.builtin.meta") == "end_play", play["name"]
        # The bandwidth check measures and deploys nothing: it runs when asked for (-e network_check=true), on a
        # converged cluster too, and ends at once otherwise.
        ends_when = ("not network_check | default(false) | bool" if play.get("tags") == ["network_check"]
                     else "vllmops_converged | default(false)")
        assert first.get("when") == ends_when, play["name"]
        assert not play.get("gather_facts"), f"{play['name']}: facts before the end (preflight reads them once)"


def test_the_tags_that_make_a_run_partial_are_deploy_ymls_play_tags():
    defaults = yaml.safe_load((Path(__file__).resolve().parents[3] / "roles/vllmops/defaults/main.yml").read_text())
    play_tags = {tag for play in PLAYS for tag in play.get("tags", [])} - {"always"}
    assert set(defaults["vllmops_deploy_tags"]) == play_tags


def test_a_node_failing_before_the_service_restarts_stops_the_run_everywhere():
    """Without it, a node failing in docker, the toolkit, nccl or the image drops out of the run while the
    others go on changing; the run must stop on every node before Ray or vLLM restarts, naming the node."""
    serving = next(i for i, play in enumerate(PLAYS) if play.get("tags") == ["vllm_serve"])
    for play in PLAYS[2:serving + 1]:
        assert play.get("any_errors_fatal") is True, play["name"]


def _check_task():
    tasks = yaml.safe_load((Path(__file__).resolve().parents[3] / "roles/vllmops/tasks/deploy_state_check.yml").read_text())
    return next(task for task in tasks if "vllmops.cluster.deploy_state" in task)["vllmops.cluster.deploy_state"]


@pytest.mark.parametrize(("variables", "passed"), [
    ({"model_hub_repo": "org/name", "model_hub_revision": "main"}, "main"),
    ({"model_hub_repo": "org/name", "model_hub_revision": "main", "model_source": "hub"}, "main"),
    ({"model_hub_repo": "org/name", "model_hub_revision": "main", "model_source": "node"}, ""),
    ({"model_hub_revision": "main"}, ""),  # no repository: the model does not come from the hub
    ({}, ""),
    # a recipe's model (vllmops_recipe), unless the inventory names another
    ({"vllmops_recipe_facts": {"model": {"repo": "org/name", "revision": "main"}}}, "main"),
    ({"vllmops_recipe_facts": {"model": {"repo": "org/name", "revision": "main"}}, "model_hub_revision": "abc"}, "abc"),
])
def test_the_comparison_is_given_the_hub_revision_of_a_model_from_the_hub(variables, passed):
    """A branch of the hub is resolved on every full run (roles/model/README.md): the comparison must see it to
    send the run down the full path (issue 38)."""
    expression = _check_task()["model_hub_revision"]
    variables = {"vllmops_recipe_facts": {}, **variables}
    # Chainable like Ansible's: a recipe without a model section defaults as a missing one does.
    assert jinja2.Environment(undefined=jinja2.ChainableUndefined).from_string(expression).render(**variables).strip() == passed


def _index(predicate):
    return next(i for i, play in enumerate(PLAYS) if predicate(play))


def test_the_whole_change_is_checked_before_the_weights_move_or_anything_serving_changes():
    """The plan play reads the model's facts (from where its weights come) and checks every rank's command and
    memory; a refusal there must come before the model play downloads or copies, and before earlyoom, the
    exporters, Ray, the proxy or vLLM change. What the check needs (the engine, the cluster network and its
    firewall, the image) comes before it."""
    plan = _index(lambda play: "plan" in play.get("tags", []))
    check = _index(lambda play: "tasks_from': 'validate.yml'" in str(play.get("tasks")))
    # The check follows the plan at once (its own play: with several services the fleet role checks each unit).
    assert check == plan + 1 and "plan" in PLAYS[check]["tags"]
    tasks = str(PLAYS[check].get("tasks"))
    assert tasks.index("tasks_from': 'facts.yml'") < tasks.index("tasks_from': 'validate.yml'"), tasks
    after = {tag for play in PLAYS[check + 1:] for tag in play.get("tags", [])}
    before = {tag for play in PLAYS[:plan] for tag in play.get("tags", [])}
    assert {"model", "host_memory", "metrics_exporters", "ray_cluster", "api_proxy", "vllm_serve"} <= after
    assert not before & {"model", "host_memory", "metrics_exporters", "ray_cluster", "api_proxy", "vllm_serve"}, before
    assert {"docker", "nvidia_container_toolkit", "nccl", "firewall", "image"} <= before
