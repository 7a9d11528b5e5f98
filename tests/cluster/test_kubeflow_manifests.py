"""examples/kubeflow/ (the TrainJob and ClusterTrainingRuntime of docs/guides/cluster.md)
against Kubeflow Trainer v2.2's CRDs (tests/cluster/crds/, from kubeflow/trainer v2.2.0), and
what the torch runtime hands the container against what torchrun reads.

A CRD's ``openAPIV3Schema`` is OpenAPI 3.0's subset of JSON Schema plus Kubernetes' ``x-``
keys, so ``jsonschema`` checks it once two things are spelt out:

- unknown fields. Kubernetes schemas are structural: an object lists its ``properties``, and
  the API server drops any other field (with ``kubectl apply``'s default strict field
  validation it refuses the object, naming the field), unless the node says
  ``x-kubernetes-preserve-unknown-fields: true``. JSON Schema allows unknown fields unless
  told ``additionalProperties: false``, so ``structural`` adds that to every object node that
  has no ``additionalProperties`` (a map such as ``labels``) and does not preserve unknown
  fields (no node of these two CRDs does). Without it a typo passes (a test below shows it).
  The root ``metadata`` stays open: the API server checks ObjectMeta itself, not the CRD.
- ``nullable: true`` becomes a ``null`` type (neither CRD has one).

Not checked: the CEL rules (``x-kubernetes-validations``) and the admission webhook's checks.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRDS = Path(__file__).resolve().parent / "crds"
EXAMPLES = ROOT / "examples" / "kubeflow"
PAGE = ROOT / "docs" / "guides" / "cluster.md"

# What Kubeflow Trainer v2.2's torch plugin (pkg/runtime/framework/plugins/torch/torch.go,
# pkg/constants/constants.go) sets in the trainer container, and refuses in a TrainJob's env.
TORCH_ENV = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
# kubeflow/trainer v2.2.0 manifests/base/runtimes/torch_distributed.yaml: upstream's own
# runtime must pass the converted schema too (it is not made stricter than the API server).
UPSTREAM_RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: torch-distributed
  labels:
    trainer.kubeflow.org/framework: torch
spec:
  mlPolicy:
    numNodes: 1
    torch: {}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: trainer
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime
"""


def structural(node, root: bool = True):
    """A CRD's openAPIV3Schema as JSON Schema that refuses unknown fields (see the module doc)."""
    if isinstance(node, list):
        return [structural(n, root=False) for n in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {
                name: sub if root and name == "metadata" else structural(sub, root=False)
                for name, sub in value.items()
            }
        elif key in ("items", "additionalProperties", "anyOf", "allOf", "oneOf", "not"):
            out[key] = structural(value, root=False)
        else:
            out[key] = value
    if node.get("nullable") and "type" in node:
        out["type"] = [node["type"], "null"]
    if (
        node.get("type") == "object"
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def crd_text(plural: str) -> str:
    return (CRDS / f"trainer.kubeflow.org_{plural}.yaml").read_text()


def crd_schema(plural: str, closed: bool = True) -> dict:
    crd = yaml.load(crd_text(plural), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = version["schema"]["openAPIV3Schema"]
    schema = structural(schema) if closed else schema
    kind = crd["spec"]["names"]["kind"]
    schema["properties"]["apiVersion"] = {"const": f"{crd['spec']['group']}/v1alpha1"}
    schema["properties"]["kind"] = {"const": kind}
    return schema


def validate(manifest: dict, plural: str, closed: bool = True) -> None:
    schema = crd_schema(plural, closed)
    jsonschema.Draft4Validator.check_schema(schema)
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft4Validator(schema).iter_errors(manifest)
    )
    if error is not None:
        raise error


def load(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def test_the_manifests_are_valid_against_the_v2_2_crds():
    validate(load("trainjob.yaml"), "trainjobs")
    validate(load("cluster_training_runtime.yaml"), "clustertrainingruntimes")
    validate(yaml.safe_load(UPSTREAM_RUNTIME), "clustertrainingruntimes")


@pytest.mark.parametrize(
    ("plural", "name", "edit", "message"),
    [
        ("trainjobs", "trainjob.yaml", lambda m: m["spec"]["trainer"].update(numNode=2),
         r"Additional properties are not allowed \('numNode' was unexpected\)"),
        ("trainjobs", "trainjob.yaml", lambda m: m["spec"]["trainer"].update(numNodes="2"),
         r"'2' is not of type 'integer'"),
        ("trainjobs", "trainjob.yaml", lambda m: m["spec"].update(runtimeRef={"kind": "x"}),
         r"'name' is a required property"),
        ("clustertrainingruntimes", "cluster_training_runtime.yaml",
         lambda m: m["spec"]["mlPolicy"]["torch"].update(numProcPerNode=2),
         r"'numProcPerNode' was unexpected"),
        ("clustertrainingruntimes", "cluster_training_runtime.yaml",
         lambda m: m["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
         ["template"]["spec"]["containers"][0].update(volumeMount=[]),
         r"'volumeMount' was unexpected"),
    ],
)  # fmt: skip
def test_a_misspelt_field_or_a_wrong_type_fails(plural, name, edit, message):
    manifest = load(name)
    edit(manifest)
    with pytest.raises(jsonschema.ValidationError, match=message):
        validate(manifest, plural)


def test_without_additional_properties_false_a_typo_would_pass():
    manifest = load("trainjob.yaml")
    manifest["spec"]["trainer"]["numNode"] = 2
    validate(manifest, "trainjobs", closed=False)  # the CRD schema taken literally: passes
    with pytest.raises(jsonschema.ValidationError, match="numNode"):
        validate(manifest, "trainjobs")


def test_the_crds_preserve_no_unknown_fields():
    for path in CRDS.glob("*.yaml"):
        assert "x-kubernetes-preserve-unknown-fields" not in path.read_text(), path.name


def test_the_trainjob_fits_its_runtime_and_the_command():
    job, runtime = load("trainjob.yaml"), load("cluster_training_runtime.yaml")
    assert job["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]
    assert job["spec"]["runtimeRef"].get("kind", "ClusterTrainingRuntime") == runtime["kind"]
    assert "torch" in runtime["spec"]["mlPolicy"]  # PET_* env comes from the torch policy
    # The trainer's args, image and resources reach only the container named "node" of the
    # replicated job labelled as the trainer step (pkg/runtime/framework/plugins/jobset/builder.go).
    (node,) = [
        j
        for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]
        if j["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"]
        == "trainer"
    ]
    (container,) = node["template"]["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "node"
    assert container["command"] == ["torchrun", "-m", "lightning_cls.train"]
    trainer = job["spec"]["trainer"]
    args = trainer["args"]
    assert f"trainer.num_nodes={trainer['numNodes']}" in args
    assert f"trainer.devices={trainer['numProcPerNode']}" in args
    run_dir = next(a.split("=", 1)[1] for a in args if a.startswith("hydra.run.dir="))
    assert any(run_dir.startswith(m["mountPath"] + "/") for m in container["volumeMounts"])
    assert not {e["name"] for e in trainer.get("env", [])} & set(
        TORCH_ENV
    )  # the webhook refuses them


def test_torchrun_reads_the_env_the_torch_runtime_sets(monkeypatch):
    from torch.distributed.run import get_args_parser

    env = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": "1",
           "PET_MASTER_ADDR": "digits-node-0-0.digits", "PET_MASTER_PORT": "29500"}  # fmt: skip
    assert set(env) == set(TORCH_ENV)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    container = load("cluster_training_runtime.yaml")["spec"]["template"]["spec"]
    command = container["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    argv = (
        command["containers"][0]["command"][1:] + load("trainjob.yaml")["spec"]["trainer"]["args"]
    )
    args = get_args_parser().parse_args(argv)
    assert (args.nnodes, args.nproc_per_node, args.node_rank) == ("2", "1", 1)
    assert (args.master_addr, args.master_port) == ("digits-node-0-0.digits", 29500)
    assert (args.module, args.training_script) == (True, "lightning_cls.train")
    assert args.training_script_args[0] == "trainer=ddp"


def test_the_guide_shows_the_manifests_verbatim():
    blocks = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), flags=re.S)
    for name in ("cluster_training_runtime.yaml", "trainjob.yaml"):
        assert (EXAMPLES / name).read_text() in blocks, f"docs/guides/cluster.md lacks {name}"
    assert "kind: PyTorchJob" not in PAGE.read_text()
