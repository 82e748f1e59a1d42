"""The generated certificate of the API proxy is signed again, by the same CA, when it expires within
api_proxy_tls_renew_days or when the head's names change, and the run says why; the CA clients trust stays
(issue 38). The role's own task file (roles/api_proxy/tasks/tls_generate.yml, all on the controller) runs
with community.crypto, in one ansible-playbook: four deploys in a row."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TASKS = ROOT / "roles/api_proxy/tasks/tls_generate.yml"
NAMES = ["DNS:head", "IP:10.0.0.1", "DNS:localhost", "IP:127.0.0.1"]
# (play, the certificate's validity in days, what it names)
DEPLOYS = [("first", 20, NAMES), ("expiring", 825, NAMES), ("again", 825, NAMES), ("moved", 825, [*NAMES[:1], "IP:10.0.0.9", *NAMES[2:]])]


@pytest.fixture(scope="module")
def deploys(tmp_path_factory):
    """Each deploy's task results by task name, and the secrets directory."""
    tmp = tmp_path_factory.mktemp("tls")
    secrets = tmp / "secrets"
    plays = [{"name": name, "hosts": "localhost", "connection": "local", "gather_facts": False,
              "vars": {"ansible_python_interpreter": sys.executable, "vllmops_secrets_dir": str(secrets),
                       "vllmops_api_ca_file": str(secrets / "api-ca.crt"), "vllmops_cluster_name": "test",
                       "api_proxy_tls_days": days, "api_proxy_tls_renew_days": 30, "_api_proxy_sans": names},
              "tasks": [{"ansible.builtin.import_tasks": str(TASKS)}]}
             for name, days, names in DEPLOYS]
    (tmp / "deploys.yml").write_text(json.dumps(plays))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               PATH=f"{BIN}:{os.environ['PATH']}")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(tmp / "deploys.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    results = {play["play"]["name"]: {task["task"]["name"]: task["hosts"]["localhost"] for task in play["tasks"]}
               for play in json.loads(proc.stdout)["plays"]}
    return results, secrets


def _said(results):
    return results["Say why the proxy's certificate was signed again (by the same CA)"].get("msg", "")


def _changed(results, prefix):
    return next(result.get("changed", False) for name, result in results.items() if name.startswith(prefix))


def test_a_certificate_expiring_within_the_threshold_is_signed_again_by_the_same_ca(deploys):
    results, _ = deploys
    expiring = results["expiring"]
    assert _changed(expiring, "Sign it with the cluster's CA")
    assert "valid only until" in _said(expiring) and "api_proxy_tls_renew_days (30 days)" in _said(expiring)
    for name in ("expiring", "again", "moved"):
        assert not _changed(results[name], "Generate the CA's private key"), name
        assert not _changed(results[name], "Sign the CA's own certificate"), f"{name}: clients trust that CA"
        assert not _changed(results[name], "Generate the proxy's private key"), name


def test_a_certificate_far_from_its_end_is_left_alone(deploys):
    results, _ = deploys
    assert not _changed(results["again"], "Sign it with the cluster's CA")
    assert results["again"]["Say why the proxy's certificate was signed again (by the same CA)"].get("skipped")


def test_a_head_with_other_addresses_gets_a_certificate_naming_them(deploys):
    results, secrets = deploys
    assert _changed(results["moved"], "Sign it with the cluster's CA")
    assert "IP:10.0.0.1" in _said(results["moved"]) and "the head now has DNS:head, IP:10.0.0.9" in _said(results["moved"])
    cert = x509.load_pem_x509_certificate((secrets / "api-server.crt").read_bytes())
    ca = x509.load_pem_x509_certificate((secrets / "api-ca.crt").read_bytes())
    assert cert.issuer == ca.subject
    assert "10.0.0.9" in str(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    assert cert.not_valid_after_utc > datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=800)
