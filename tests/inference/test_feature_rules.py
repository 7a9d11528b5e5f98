"""Rejection in feature space (``reject=knn|mahalanobis``): the scores against brute force, the
rule fitted by calibration, carried as a second ``features`` output by every export, and
answered the same by the checkpoint and each exported file; bad options are one-line errors."""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import ask_server, fit_plain_simplecnn, make_data
from lightning_cls.inference import InputSpec, feature_rules, load_artifact, predict_files
from lightning_cls.inference.predictor import Predictor
from lightning_cls.inference.spec import SpecError, Split
from lightning_cls.inference.trust import check_rule_options
from lightning_cls.models import create_model
from lightning_cls.training.calibration import calibrate

# ---------------------------------------------------------------------------------------------
# The scores, against brute force


def test_knn_scores_the_k_th_nearest_cosine_similarity():
    rng = np.random.default_rng(0)
    train, labels = rng.normal(size=(60, 5)), np.repeat(np.arange(3), 20)
    rule = {"score": "knn", **feature_rules.fit("knn", train, labels, k=4, bank=1000)}
    queries = rng.normal(size=(7, 5))
    bank = train / np.linalg.norm(train, axis=1, keepdims=True)
    z = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    expected = np.sort(z @ bank.T, axis=1)[:, -4]  # the 4th largest similarity
    got = feature_rules.scores(rule, queries)
    np.testing.assert_allclose(got, expected, atol=2e-3)  # the bank is float16
    # Scale does not matter (the features are normalised); a training point is at home.
    np.testing.assert_allclose(feature_rules.scores(rule, 10 * queries), got, atol=1e-6)
    assert feature_rules.scores({**rule, "k": 1}, train[:3]).min() > 0.999


def test_mahalanobis_is_minus_the_nearest_class_distance_under_the_shared_covariance():
    rng = np.random.default_rng(1)
    train = np.r_[rng.normal(0, 1, (200, 3)) + [4, 0, 0], rng.normal(0, 1, (200, 3)) - [4, 0, 0]]
    labels = np.repeat([0, 1], 200)
    rule = {"score": "mahalanobis", **feature_rules.fit("mahalanobis", train, labels)}
    z = feature_rules.normalized(train)
    means = np.stack([z[labels == c].mean(0) for c in (0, 1)])
    centred = z - means[labels]
    precision = np.linalg.pinv(centred.T @ centred / len(z))
    queries = rng.normal(size=(5, 3))
    q = feature_rules.normalized(queries)
    expected = -np.min([np.einsum("nd,de,ne->n", q - m, precision, q - m) for m in means], axis=0)
    np.testing.assert_allclose(feature_rules.scores(rule, queries), expected, rtol=1e-3, atol=1e-3)


def test_mahalanobis_keeps_its_digits_when_the_features_are_nearly_collinear():
    """Penultimate features are nearly collinear, so the precision is huge (~1e9 here) and the
    squared distance a small difference of large terms: float32 rounded it by ~0.1% (the .pte
    and the .ckpt then disagreed by a float16 step); it is computed in float64."""
    rng = np.random.default_rng(3)
    base = rng.normal(size=(400, 6))
    near = base @ rng.normal(size=(6, 10)) + 1e-3 * rng.normal(size=(400, 10))
    train, labels = np.c_[base, near], np.arange(400) % 4
    rule = {"score": "mahalanobis", **feature_rules.fit("mahalanobis", train, labels)}
    queries = train[:8] + 0.01 * rng.normal(size=(8, 16))
    z = feature_rules.normalized(queries).astype(np.float64)
    means = feature_rules.decode(rule["means"], "means").astype(np.float64)
    precision = feature_rules.decode(rule["precision"], "precision").astype(np.float64)
    assert np.abs(precision).max() > 1e8
    expected = -np.min([np.einsum("nd,de,ne->n", z - m, precision, z - m) for m in means], 0)
    np.testing.assert_allclose(feature_rules.scores(rule, queries), expected, rtol=1e-6)


def test_the_bank_is_a_class_balanced_subsample():
    labels = np.r_[np.zeros(1000), np.ones(30), np.full(500, 2)].astype(int)
    rows = feature_rules.balanced_subsample(labels, 300, seed=0)
    counts = np.bincount(labels[rows])
    assert len(rows) == 300 and len(set(rows)) == 300
    assert counts[1] == 30  # the small class whole; the rest shared equally
    assert counts[0] == counts[2] == 135
    assert (feature_rules.balanced_subsample(labels[:10], 300) == np.arange(10)).all()


def test_the_rule_is_stored_float16_and_summarised_without_its_arrays():
    rule = feature_rules.fit("knn", np.ones((10, 4)), np.zeros(10, int), k=3)
    assert rule["bank"]["dtype"] == "float16" and rule["bank"]["shape"] == [10, 4]
    spec = InputSpec.from_dict({
        "classes": ["a"], "mean": [0.5], "std": [0.5], "image_size": 8, "num_channels": 1,
        "reject": {"score": "knn", "threshold": 0.5, "keep": 0.9, **rule},
    })  # fmt: skip
    again = InputSpec.from_json(spec.to_json())  # the metadata every artifact carries
    assert again.decision.reject == spec.decision.reject and again.decision.needs_features
    assert feature_rules.summary(spec.decision.reject)["bank"] == "<float16 10x4>"


# ---------------------------------------------------------------------------------------------
# Bad options: one line naming the value and the fix, before any work


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (("odin",), r"reject='odin' is not a known rejection rule; use one of msp, energy, knn"),
        (("knm",), r"reject='knm' is not a known rejection rule \(did you mean knn\?\)"),
        (({"name": "knn", "k": 0},), r"reject.k=0 is not an integer >= 1"),
        (({"name": "knn", "k": "5"},), r"reject.k='5' is not an integer >= 1"),
        (({"name": "knn", "k": 80, "bank": 50},), r"reject.k=80 is larger than the feature bank"),
        (({"name": "knn", "bank": 0},), r"reject.bank=0 is not an integer >= 1"),
        (({"name": "knn", "kk": 5},), r"reject=knn has no option among \['kk'\].*options: k, bank"),
        (({"name": "msp", "k": 5},), r"reject=msp has no option among \['k'\].*options: none"),
        (("knn", 1.5), r"reject_keep=1.5 is not a share strictly between 0 and 1"),
    ],
)
def test_bad_rule_options_are_one_line_errors(options, match):
    with pytest.raises(ValueError, match=match):
        check_rule_options(*options)


def test_a_stored_rule_without_its_arrays_or_with_k_past_the_bank_is_refused():
    base = dict(classes=["a", "b"], mean=[0.5], std=[0.5], image_size=8, num_channels=1)
    with pytest.raises(SpecError, match=r"reject=knn lacks its fitted bank"):
        InputSpec(**base, task={"reject": {"score": "knn", "threshold": 0.5, "keep": 0.9, "k": 3}})
    rule = feature_rules.fit("knn", np.ones((4, 2)), np.zeros(4, int), k=2)
    with pytest.raises(SpecError, match=r"reject.k=9 is larger than the feature bank \(4 train"):
        InputSpec(
            **base, task={"reject": {"score": "knn", "threshold": 0.5, "keep": 0.9, **rule, "k": 9}}
        )


def test_a_network_without_a_linear_head_has_no_features():
    from lightning_cls.inference.network import FeatureNet

    with pytest.raises(ValueError, match=r"has no nn.Linear head.*use reject=msp or energy"):
        FeatureNet(torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten()))

    class Squared(torch.nn.Module):  # changes the head's output: its features are not the logits'
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.head(x.flatten(1)) ** 2

    with pytest.raises(ValueError, match=r"Squared changes its last linear layer's output"):
        FeatureNet(Squared(), (1, 2, 2))


# ---------------------------------------------------------------------------------------------
# Fitted by calibration on a trained network; every artifact answers alike


@dataclass
class Trained:
    net: torch.nn.Module
    spec: InputSpec  # the knn rule chosen on validation
    test: Split
    noise: torch.Tensor  # uint8 (N, 1, 16, 16) uniform noise
    stripes: torch.Tensor


def _stripes(n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    x = torch.arange(16).float().view(1, 1, 1, 16)
    freq = torch.randint(1, 5, (n, 1, 1, 1), generator=g).float()
    wave = torch.sin(x * freq * 0.8 + torch.rand(n, 1, 1, 1, generator=g) * 6.28) * 0.5 + 0.5
    return (wave.expand(n, 1, 16, 16) * 255).round().to(torch.uint8).contiguous()


@pytest.fixture(scope="module")
def trained() -> Trained:
    """A SimpleCNN trained (plain torch, ~2 s) on one generated family; its knn rule fitted on
    the train split's features and thresholded to keep 95% of validation."""
    torch.manual_seed(0)
    data = make_data(
        num_classes=4, num_channels=1, image_size=16, train_size=256, test_size=128, val_size=64
    )
    data.setup("fit")
    train, val = data.splits["train"], data.splits["val"]
    spec = replace(
        data.spec, model_name="simplecnn", model_kwargs={"widths": [8, 16], "hidden": 32}
    )
    net = fit_plain_simplecnn(train, spec, num_classes=4)
    result = calibrate(net, spec, val, reject={"name": "knn", "k": 10}, keep=0.95, train=train)
    spec = InputSpec.from_dict({**spec.to_dict(), **result.spec_updates})
    noise = torch.randint(0, 256, (128, 1, 16, 16), generator=torch.Generator().manual_seed(2))
    return Trained(net, spec, data.splits["test"], noise.to(torch.uint8), _stripes(128))


def _unknown_share(spec, runtime, images) -> float:
    logits, features = Predictor(runtime, spec).image_outputs(images)
    verdicts = spec.decision.verdicts(logits, features)
    return sum(unknown for unknown, _ in verdicts) / len(verdicts)


def test_knn_rejects_noise_and_another_family_and_keeps_the_known(trained):
    rule = trained.spec.decision.reject
    assert rule["score"] == "knn" and rule["k"] == 10 and rule["keep"] == 0.95
    assert rule["bank"]["shape"][0] == 192  # every train image: fewer than the bank size
    assert _unknown_share(trained.spec, trained.net, trained.noise) >= 0.9
    assert _unknown_share(trained.spec, trained.net, trained.stripes) >= 0.9
    assert _unknown_share(trained.spec, trained.net, trained.test.images) <= 0.15


def test_mahalanobis_is_fitted_and_applied_the_same_way(trained, tmp_path):
    data = make_data(
        num_classes=4, num_channels=1, image_size=16, train_size=256, test_size=128, val_size=64
    )
    data.setup("fit")
    base = InputSpec.from_dict({**trained.spec.to_dict(), "reject": None})
    result = calibrate(trained.net, base, data.splits["val"], data.splits["test"],
                       reject="mahalanobis", train=data.splits["train"])  # fmt: skip
    spec = InputSpec.from_dict({**base.to_dict(), **result.spec_updates})
    assert set(spec.decision.reject) == {"score", "threshold", "keep", "means", "precision"}
    assert 0.8 <= result.metrics["test_kept"] <= 1.0
    # 40 features: the 32 penultimate and the first convolution's 8 filters; no arrays in reports
    assert result.report()["reject"]["precision"] == "<float32 40x40>"
    assert _unknown_share(spec, trained.net, trained.noise) >= 0.9


def _checkpoint(trained: Trained, path) -> str:
    """The net as a Lightning-style .ckpt (``net.`` keys, the spec in its hyper-parameters)."""
    state = {f"net.{k}": v for k, v in trained.net.state_dict().items()}
    torch.save({"state_dict": state, "hyper_parameters": trained.spec.to_dict()}, path)
    return str(path)


@pytest.fixture(scope="module")
def folder(trained, tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    for name, images in (("known", trained.test.images), ("noise", trained.noise),
                         ("stripes", trained.stripes)):  # fmt: skip
        for i in range(12):
            Image.fromarray(images[i, 0].numpy()).save(root / f"{name}_{i}.png")
    return sorted(root.glob("*.png"))


def _answers(path, files, **options) -> dict:
    rows, failures = predict_files(load_artifact(path, **options), files, top_k=1)
    assert not failures
    return {r["file"]: (r["unknown"], r["score"], r["labels"][0]) for r in rows}


@pytest.mark.parametrize("fmt", ["onnx", "torchscript", "pt2", "openvino"])
def test_every_export_carries_the_features_and_answers_like_the_checkpoint(
    trained, folder, tmp_path, fmt
):
    from lightning_cls.export import export_format

    ckpt = _checkpoint(trained, tmp_path / "m.ckpt")
    expected = _answers(ckpt, folder)
    assert sum(u for u, _, _ in expected.values()) >= 20  # noise and stripes: unknown
    if fmt == "openvino":
        pytest.importorskip("openvino")
        onnx = export_format("onnx", trained.net, trained.spec, tmp_path / "model.onnx")
        path = export_format("openvino", None, trained.spec, tmp_path / "model.xml", onnx_path=onnx)
    else:
        file = {"onnx": "model.onnx", "torchscript": "model.torchscript", "pt2": "model.pt2"}[fmt]
        path = export_format(fmt, trained.net, trained.spec, tmp_path / file)
    predictor = load_artifact(path, trust_artifact=True)
    assert predictor.runtime.gives_features
    got = _answers(path, folder, trust_artifact=True)
    assert got.keys() == expected.keys()
    for name, (unknown, score, label) in expected.items():
        assert got[name][0] == unknown and got[name][2] == label, name
        assert got[name][1] == pytest.approx(score, abs=1e-4), name


def test_onnx_writes_features_as_a_second_named_output(trained, tmp_path):
    import onnxruntime as ort

    from lightning_cls.export import export_format

    path = export_format("onnx", trained.net, trained.spec, tmp_path / "model.onnx")
    outputs = [o.name for o in ort.InferenceSession(str(path)).get_outputs()]
    assert outputs == ["logits", "features"]
    plain = InputSpec.from_dict({**trained.spec.to_dict(), "reject": None})
    path = export_format("onnx", trained.net, plain, tmp_path / "plain.onnx")  # no rule: as before
    assert [o.name for o in ort.InferenceSession(str(path)).get_outputs()] == ["logits"]


@pytest.mark.parametrize("fmt", ["onnx", "torchscript", "pt2"])
def test_a_file_without_features_is_refused_for_a_feature_rule(trained, tmp_path, fmt):
    """The runtime reads what the file answers, not what the spec given to it asks."""
    from lightning_cls.export import export_format

    plain = InputSpec.from_dict({**trained.spec.to_dict(), "reject": None})
    path = export_format(fmt, trained.net, plain, tmp_path / f"plain.{fmt}")
    with pytest.raises(ValueError, match=rf"plain.{fmt} has no features output.*reject=knn"):
        load_artifact(path, spec={"reject": trained.spec.decision.reject}, trust_artifact=True)


def test_the_predictions_csv_names_the_rule(trained, folder, tmp_path):
    from lightning_cls.inference import write_predictions_csv

    ckpt = _checkpoint(trained, tmp_path / "m.ckpt")
    predictor = load_artifact(ckpt)
    rows, _ = predict_files(predictor, folder, top_k=1)
    write_predictions_csv(tmp_path / "p.csv", rows, [], 1, predictor.spec)
    table = list(csv.DictReader((tmp_path / "p.csv").open()))
    assert table[0].keys() >= {"file", "answer", "knn_score", "label_1"}
    noise = [r["answer"] for r in table if "noise_" in r["file"]]
    assert noise.count("unknown") >= 11


def test_the_server_answers_the_knn_rule_like_predict(trained, tmp_path):

    from lightning_cls.export import export_format

    path = export_format("onnx", trained.net, trained.spec, tmp_path / "model.onnx")
    predictor = load_artifact(path)
    images = [trained.noise[0], trained.stripes[0], trained.test.images[0]]
    answers = ask_server(path, images)
    logits, features = predictor.image_outputs(np.stack([i.numpy() for i in images]))
    expected = predictor.task.confidence(logits, features=features)
    for answer, score in zip(answers, expected.tolist()):
        assert answer["score"] == pytest.approx(score, abs=1e-5)
    assert [a["unknown"] for a in answers] == [True, True, False]


def test_an_eager_predictor_gives_logits_after_features(trained):
    predictor = Predictor(trained.net, trained.spec)
    images = trained.test.images[:5]
    logits, features = predictor.image_features(images)
    assert features.shape == (5, 32 + 8)  # penultimate, then the first convolution's filters
    torch.testing.assert_close(predictor.image_logits(images), logits)  # still plain logits


def test_the_features_are_the_penultimate_and_the_first_convolutions_max_each_normalised():
    from lightning_cls.inference.network import FeatureNet

    torch.manual_seed(0)
    net = create_model("simplecnn", in_channels=3, num_classes=4, image_size=16).eval()
    x = torch.randn(5, 3, 16, 16)
    logits, features = FeatureNet(net, (3, 16, 16))(x)
    torch.testing.assert_close(logits, net(x))
    conv = next(m for m in net.modules() if isinstance(m, torch.nn.Conv2d))
    low = torch.nn.functional.normalize(conv(x).amax((2, 3)), dim=1)
    torch.testing.assert_close(features[:, -conv.out_channels :], low)
    penultimate = features[:, : -conv.out_channels]
    torch.testing.assert_close(penultimate.norm(dim=1), torch.ones(5))
    # No convolution on the input's channels (an MLP): the penultimate features alone, raw.
    mlp = create_model("mlp", in_channels=3, num_classes=4, image_size=16, hidden=24).eval()
    _, only = FeatureNet(mlp, (3, 16, 16))(x)
    assert only.shape == (5, 24) and not torch.allclose(only.norm(dim=1), torch.ones(5))


@pytest.mark.parametrize("score", ["knn", "mahalanobis"])
def test_a_rule_fitted_on_the_penultimate_features_alone_scores_as_before(score):
    """Checkpoints calibrated before the features gained the first convolution's part hold a
    bank (means) as wide as the penultimate features: they score those columns, as before."""
    from lightning_cls.inference.network import FeatureNet

    torch.manual_seed(0)
    net = create_model("simplecnn", in_channels=1, num_classes=3, image_size=16).eval()
    train, x = torch.randn(60, 1, 16, 16), torch.randn(7, 1, 16, 16)
    labels = np.arange(60) % 3
    with torch.no_grad():
        old_train = FeatureNet(net, (1, 16, 16)).body(train).flatten(1).numpy()  # penultimate
        old_x = FeatureNet(net, (1, 16, 16)).body(x).flatten(1).numpy()
        _, new_x = FeatureNet(net, (1, 16, 16))(x)
    options = {"k": 5} if score == "knn" else {}  # mahalanobis takes no options
    rule = {"score": score, **feature_rules.fit(score, old_train, labels, **options)}
    assert new_x.shape[1] > old_x.shape[1]
    np.testing.assert_allclose(
        feature_rules.scores(rule, new_x.numpy()), feature_rules.scores(rule, old_x), rtol=1e-4
    )
    with pytest.raises(ValueError, match="features"):  # narrower than the fit: refused
        feature_rules.scores(rule, old_x[:, :-2])


# ---------------------------------------------------------------------------------------------
# The on-device files (issue 40): ExecuTorch and LiteRT carry the features too


@pytest.fixture(scope="module")
def rules(trained) -> dict[str, InputSpec]:
    """The trained net's spec with each feature-space rule fitted (knn: ``trained.spec``)."""
    data = make_data(
        num_classes=4, num_channels=1, image_size=16, train_size=256, test_size=128, val_size=64
    )
    data.setup("fit")
    base = InputSpec.from_dict({**trained.spec.to_dict(), "reject": None})
    result = calibrate(trained.net, base, data.splits["val"], reject="mahalanobis",
                       keep=0.95, train=data.splits["train"])  # fmt: skip
    maha = InputSpec.from_dict({**base.to_dict(), **result.spec_updates})
    return {"knn": trained.spec, "mahalanobis": maha}


def _on_device(fmt, net, spec, path):
    """``export=<fmt>`` of ``net`` at ``path``; skipped where its extra (converter) is absent."""
    from lightning_cls.export import export_format

    pytest.importorskip({"executorch": "executorch", "litert": "ai_edge_litert"}[fmt])
    if fmt == "litert":
        from lightning_cls.export.litert import converter_python

        if converter_python() is None:  # make test does not build the converter's environment
            pytest.skip("litert-torch's environment is absent: make venv-litert (or LITERT_PYTHON)")
    return export_format(fmt, net, spec, path)


@pytest.mark.parametrize("score", ["knn", "mahalanobis"])
@pytest.mark.parametrize(("fmt", "file"), [("executorch", "model.pte"), ("litert", "model.tflite")])
def test_on_device_files_carry_the_features_and_answer_like_the_checkpoint(
    trained, rules, folder, tmp_path, fmt, file, score
):
    spec = rules[score]
    ckpt = _checkpoint(replace(trained, spec=spec), tmp_path / "m.ckpt")
    expected = _answers(ckpt, folder)
    assert sum(u for u, _, _ in expected.values()) >= 20  # noise and stripes: unknown
    assert sum(u for u, _, _ in expected.values()) <= 26  # most known images kept
    path = _on_device(fmt, trained.net, spec, tmp_path / file)
    predictor = load_artifact(path)  # predict's path: no torch network, no trust needed
    assert predictor.runtime.kind == fmt and predictor.runtime.gives_features
    assert (
        predictor.spec.decision.reject == spec.decision.reject
    )  # the fitted rule travels in the file
    got = _answers(path, folder)
    assert got.keys() == expected.keys()
    for name, (unknown, score_, label) in expected.items():
        assert got[name][0] == unknown and got[name][2] == label, name
        # mahalanobis scores are squared distances (~20): to a float16 step there
        assert got[name][1] == pytest.approx(score_, rel=1e-3, abs=1e-4), name
    # Negative control: the same file with the rule's threshold moved answers otherwise.
    moved = {
        **spec.decision.reject,
        "threshold": float(np.median([s for _, s, _ in expected.values()])),
    }
    shifted = _answers(path, folder, spec={"reject": moved})
    assert sum(u for u, _, _ in shifted.values()) != sum(u for u, _, _ in expected.values())


@pytest.mark.parametrize(("fmt", "file"), [("executorch", "model.pte"), ("litert", "model.tflite")])
def test_an_on_device_file_without_features_is_refused_for_a_feature_rule(
    trained, tmp_path, fmt, file
):
    plain = InputSpec.from_dict({**trained.spec.to_dict(), "reject": None})
    path = _on_device(fmt, trained.net, plain, tmp_path / file)
    with pytest.raises(ValueError, match=rf"{file} has no features output.*reject=knn"):
        load_artifact(path, spec={"reject": trained.spec.decision.reject})


def test_a_rule_takes_its_own_options_and_the_old_flat_keys_still_reach_them(caplog):
    from lightning_cls.inference.reject_rules import REJECT_RULES
    from lightning_cls.inference.trust import reject_from_config

    rule = REJECT_RULES.create("knn", k=7, bank=30)
    state = rule.fit(np.eye(40, 6), np.arange(40) % 4)
    assert state["k"] == 7 and state["bank"]["shape"] == [30, 6]  # the bank option
    group = {"name": "knn", "k": 50, "bank": 5000}  # conf/reject/knn.yaml
    assert reject_from_config({"reject": group, "reject_k": None}) == group
    with caplog.at_level("WARNING"):
        chosen = reject_from_config({"reject": group, "reject_k": 5, "reject_keep": 0.9})
    assert chosen == {"name": "knn", "k": 5, "bank": 5000}
    assert "reject_k=5 is deprecated; write reject.k=5" in caplog.text
    assert reject_from_config({"reject": {"name": "msp"}, "reject_k": 5}) == {"name": "msp"}
    assert reject_from_config({"reject": {"name": None}, "reject_k": 5}) is None
