"""The docker role's daemon.json merge: table of (existing file, variables) -> file written."""

import json

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllmops.cluster.plugins.filter.docker_daemon_json import docker_daemon_json

ROLE_DEFAULTS = {"log-driver": "json-file", "log-opts": {"max-size": "100m", "max-file": "3"},
                 "live-restore": True, "data-root": None, "runtimes": None}

CASES = [
    pytest.param("", [ROLE_DEFAULTS], {}, (),
                 {"log-driver": "json-file", "log-opts": {"max-size": "100m", "max-file": "3"}, "live-restore": True},
                 id="fresh host: unset (null) settings are left out"),
    pytest.param(json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "debug": True}),
                 [{"live-restore": True}], {}, (),
                 {"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "debug": True, "live-restore": True},
                 id="keys another tool wrote are kept"),
    pytest.param(json.dumps({"log-opts": {"max-size": "1g", "compress": "true"}}),
                 [{"log-opts": {"max-size": "10m"}}], {}, (),
                 {"log-opts": {"max-size": "10m", "compress": "true"}},
                 id="nested mappings merge, managed value wins"),
    pytest.param(json.dumps({"exec-opts": ["a", "b"]}), [{"exec-opts": ["native.cgroupdriver=systemd"]}], {}, (),
                 {"exec-opts": ["native.cgroupdriver=systemd"]},
                 id="lists are replaced, not appended"),
    pytest.param("", [ROLE_DEFAULTS, {"live-restore": False, "max-concurrent-downloads": 6}], {}, (),
                 {"log-driver": "json-file", "log-opts": {"max-size": "100m", "max-file": "3"},
                  "live-restore": False, "max-concurrent-downloads": 6},
                 id="extra keys are merged last"),
    pytest.param(json.dumps({"debug": True, "data-root": "/old"}), [{"live-restore": True}],
                 {"keep_unmanaged": False}, (),
                 {"live-restore": True}, id="keep_unmanaged=false drops foreign keys"),
    pytest.param(json.dumps({"debug": True, "data-root": "/old"}), [{"live-restore": True}], {}, ("debug",),
                 {"data-root": "/old", "live-restore": True}, id="absent keys are removed"),
]


@pytest.mark.parametrize(("existing", "managed", "options", "absent", "expected"), CASES)
def test_merge(existing, managed, options, absent, expected):
    assert docker_daemon_json(existing, managed, absent_keys=absent, **options) == expected


@pytest.mark.parametrize(("existing", "message"), [
    ('{"debug": true,', "/etc/docker/daemon.json: it is not valid JSON"),
    ('["debug"]', "expected a JSON object, found list"),
])
def test_unreadable_file_is_refused_not_overwritten(existing, message):
    with pytest.raises(AnsibleFilterError, match=message):
        docker_daemon_json(existing, [{"live-restore": True}], source="/etc/docker/daemon.json")
