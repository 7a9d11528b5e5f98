"""The Kubeflow PyTorchJob of docs/guides/cluster.md against the PyTorchJob schema: the part of
the training operator's CRD (kubeflow.org/v1, ``pytorchjobs.kubeflow.org``) that the page uses,
with its required keys, replica types and restart policies."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
import yaml

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "cluster.md"

CONTAINER = {
    "type": "object",
    "required": ["name", "image"],
    "properties": {
        "name": {"type": "string"},
        "image": {"type": "string"},
        "command": {"type": "array", "items": {"type": "string"}},
        "args": {"type": "array", "items": {"type": "string"}},
        "volumeMounts": {
            "type": "array",
            "items": {"type": "object", "required": ["name", "mountPath"]},
        },
    },
}
REPLICA = {
    "type": "object",
    "required": ["template"],
    "additionalProperties": False,
    "properties": {
        "replicas": {"type": "integer", "minimum": 0},
        "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
        "template": {
            "type": "object",
            "required": ["spec"],
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["containers"],
                    "properties": {
                        "containers": {"type": "array", "minItems": 1, "items": CONTAINER},
                        "volumes": {"type": "array", "items": {"required": ["name"]}},
                    },
                }
            },
        },
    },
}
PYTORCH_JOB = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v1"},
        "kind": {"const": "PyTorchJob"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["pytorchReplicaSpecs"],
            "properties": {
                "pytorchReplicaSpecs": {
                    "type": "object",
                    "required": ["Master"],
                    "additionalProperties": False,
                    "properties": {"Master": REPLICA, "Worker": REPLICA},
                }
            },
        },
    },
}


def pytorch_job() -> dict:
    blocks = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), flags=re.S)
    jobs = [yaml.safe_load(b) for b in blocks if "kind: PyTorchJob" in b]
    assert len(jobs) == 1
    return jobs[0]


def test_the_pages_pytorchjob_is_valid():
    job = pytorch_job()
    jsonschema.validate(job, PYTORCH_JOB)
    specs = job["spec"]["pytorchReplicaSpecs"]
    nodes = sum(s.get("replicas", 1) for s in specs.values())
    for spec in specs.values():
        (container,) = spec["template"]["spec"]["containers"]
        assert container["command"] == ["python", "-m", "lightning_cls.train"]
        assert f"trainer.num_nodes={nodes}" in container["args"]  # one process per pod
        assert any(a.startswith("hydra.run.dir=") for a in container["args"])


def test_the_schema_rejects_a_misspelt_replica_type():
    job = pytorch_job()
    job["spec"]["pytorchReplicaSpecs"]["Workers"] = job["spec"]["pytorchReplicaSpecs"].pop("Worker")
    with pytest.raises(jsonschema.ValidationError, match="Workers"):
        jsonschema.validate(job, PYTORCH_JOB)
