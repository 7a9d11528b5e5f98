"""The rules over the penultimate features and the last linear layer (``react``, ``vim``) and
the ``combined`` rule (a feature rule OR a logit rule): against their formulas on synthetic
features, torch and numpy alike, their options checked, and the checkpoint and its ONNX file
answering alike."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp

from lightning_cls.inference import feature_rules
from lightning_cls.inference.reject_rules import REJECT_RULES
from lightning_cls.inference.tasks import create_task
from lightning_cls.inference.trust import check_reject, rule_of

K, D = 3, 12


def network(seed: int = 0, n: int = 400):
    """A linear head (W, b), n training images' raw penultimate features h >= 0 (ReLU'd,
    clustered by class), their labels, logits and the features a runtime gives: h
    L2-normalised, then a normalised low-level part (``network.FeatureNet``)."""
    rng = np.random.default_rng(0)
    weight = rng.normal(size=(K, D)).astype(np.float32)
    bias = rng.normal(size=K).astype(np.float32)
    labels, h = images(weight, n, seed)
    return weight, bias, labels, h


def images(weight, n: int, seed: int):
    """n images' labels and raw penultimate features, clustered around their class's row."""
    rng = np.random.default_rng(seed + 100)
    labels = rng.integers(0, K, n)
    return labels, np.maximum(rng.normal(size=(n, D)) + 2 * weight[labels], 0).astype(np.float32)


def outputs(h, weight, bias, seed=1, low=None):
    rng = np.random.default_rng(seed)
    low = rng.random((len(h), 4)) if low is None else low
    logits = (h.astype(np.float64) @ weight.T + bias).astype(np.float32)
    features = np.concatenate([feature_rules.normalized(h), feature_rules.normalized(low)], 1)
    return logits, features


def fitted(name, h, labels, weight, bias, task, threshold=0.0, **options):
    logits, features = outputs(h, weight, bias)
    rule = REJECT_RULES.create(name, **options)
    state = rule.fit_outputs(features, labels, logits=logits, task=task, head=(weight, bias))
    return rule, check_reject({"score": name, "threshold": threshold, "keep": 0.9, **state})


TASK = create_task("multiclass", None, 1.5)


def test_the_penultimate_features_come_back_from_their_direction_and_the_logits():
    weight, bias, labels, h = network()
    logits, features = outputs(h, weight, bias)
    back = feature_rules.HeadRule.penultimate(features, logits, weight, bias)
    np.testing.assert_allclose(back, h, rtol=1e-4, atol=1e-4)
    # features without the normalisation (a network without a stem) come back as they are
    np.testing.assert_allclose(
        feature_rules.HeadRule.penultimate(h, logits, weight, bias), h, rtol=1e-4, atol=1e-4
    )


def test_react_is_the_energy_of_the_clipped_features_logits():
    weight, bias, labels, h = network()
    rule, state = fitted("react", h, labels, weight, bias, TASK, percentile=80)
    clip = np.percentile(h.astype(np.float64), 80)
    assert state["percentile"] == 80 and state["clip"] == pytest.approx(clip, rel=1e-4)
    _, test = images(weight, 50, seed=3)
    test[:5] *= 6  # far larger activations: what ReAct clips
    logits, features = outputs(test, weight, bias)
    expected = logsumexp((np.minimum(test, clip) @ weight.T + bias) / 1.5, axis=1)
    ours = rule.scores(TASK, logits, features, state)
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4)
    plain = logsumexp(logits / 1.5, axis=1)
    assert (ours[:5] < plain[:5] - 1).all()  # the clip lowers the large activations' energy


def test_vim_is_the_energy_minus_the_scaled_residual_norm():
    weight, bias, labels, h = network()
    rule, state = fitted("vim", h, labels, weight, bias, TASK, dim=4)
    w, b, train = weight.astype(np.float64), bias.astype(np.float64), h.astype(np.float64)
    origin = -np.linalg.pinv(w) @ b
    values, vectors = np.linalg.eigh((train - origin).T @ (train - origin) / len(train))
    residual = vectors[:, np.argsort(values)[::-1][4:]]
    alpha = ((train @ w.T + b) / 1.5).max(1).mean() / np.linalg.norm(
        (train - origin) @ residual, axis=1
    ).mean()
    assert state["dim"] == 4 and state["alpha"] == pytest.approx(alpha, rel=1e-3)
    _, test = images(weight, 50, seed=4)
    logits, features = outputs(test, weight, bias)
    outside = np.linalg.norm((test - origin) @ residual, axis=1)
    expected = logsumexp(logits / 1.5, axis=1) - alpha * outside
    np.testing.assert_allclose(rule.scores(TASK, logits, features, state), expected, rtol=1e-3,
                               atol=1e-3)  # fmt: skip
    # the auto dimension: half the width here (the paper's rule for narrow features)
    assert fitted("vim", h, labels, weight, bias, TASK)[1]["dim"] == D // 2


@pytest.mark.parametrize(("name", "options"), [("react", {}), ("vim", {}), ("combined", {})])
def test_scores_are_the_same_from_torch_and_numpy_and_survive_the_spec(name, options):
    import torch

    from lightning_cls.inference import InputSpec

    weight, bias, labels, h = network()
    rule, state = fitted(name, h, labels, weight, bias, TASK, **options)
    assert set(state) == {"score", "threshold", "keep", *rule.params}
    spec = InputSpec.from_dict({
        "classes": ["a", "b", "c"], "mean": [0.5], "std": [0.5], "image_size": 8,
        "num_channels": 1, "temperature": 1.5, "reject": state,
    })  # fmt: skip
    spec = InputSpec.from_json(spec.to_json())  # the metadata every artifact carries
    assert spec.decision.reject == state
    assert spec.decision.needs_features
    _, test = images(weight, 40, seed=5)
    logits, features = outputs(test, weight, bias)
    numpy = spec.decision.confidence(logits, features=features)
    ours = spec.decision.confidence(torch.from_numpy(logits), features=torch.from_numpy(features))
    assert isinstance(ours, torch.Tensor) and isinstance(numpy, np.ndarray)
    np.testing.assert_array_equal(ours.numpy(), numpy)
    assert np.ptp(numpy) > 0
    summary = feature_rules.summary(spec.decision.reject)
    assert "data" not in str(summary)  # arrays shown by their shapes, nested ones too


def test_combined_rejects_what_either_rule_rejects_at_its_own_threshold():
    """Features catch one kind of unknown (pictures unlike the training ones: their low-level
    part is off), the logits another (weak penultimate features, in a familiar direction: a small
    largest logit). Each rule alone misses the other's; the combined rule catches both, and
    its threshold 0 is exactly the OR of the two rules at their own thresholds."""
    weight, bias, labels, h = network(n=600)
    rng = np.random.default_rng(9)
    low = np.abs(rng.normal(size=(600, 4))) + [4, 4, 0, 0]  # the training images' statistics
    logits, features = outputs(h, weight, bias, low=low)
    rule = REJECT_RULES.create("combined", feature={"name": "knn", "k": 5}, logit="maxlogit")
    state = rule.fit_outputs(features, labels, logits=logits, task=TASK, head=(weight, bias))
    state = check_reject({"score": "combined", "threshold": 0.0, "keep": 0.9, **state})
    assert state["feature"]["k"] == 5 and state["logit"]["score"] == "maxlogit"

    _, known = images(weight, 200, seed=11)
    known_low = np.abs(rng.normal(size=(200, 4))) + [4, 4, 0, 0]
    # unlike the training pictures: photos' class features, but another low-level part
    odd = known[:50]
    odd_low = np.abs(rng.normal(size=(50, 4))) + [0, 0, 4, 4]
    # weak: a known image's feature direction at a tenth of its length (small logits: the
    # network sees little of any class), in a usual picture
    between = known[50:100] * 0.1
    between_low = np.abs(rng.normal(size=(50, 4))) + [4, 4, 0, 0]

    def verdicts(part_or_all, h_, low_):
        lg, ft = outputs(h_, weight, bias, low=low_)
        if part_or_all == "combined":
            return np.asarray(rule.scores(TASK, lg, ft, state)) < 0
        return rule.margins(TASK, lg, ft, state)[part_or_all] < 0

    for kind, (h_, low_) in {"odd": (odd, odd_low), "between": (between, between_low)}.items():
        caught = {part: verdicts(part, h_, low_).mean() for part in ("feature", "logit")}
        both = verdicts("combined", h_, low_)
        assert both.mean() >= 0.9, (kind, caught, both.mean())
        alone = caught["feature"] if kind == "between" else caught["logit"]
        assert alone < 0.5, (kind, caught)  # the other rule alone misses most of them
        np.testing.assert_array_equal(
            both, verdicts("feature", h_, low_) | verdicts("logit", h_, low_)
        )
    known_rejected = verdicts("combined", known, known_low).mean()
    assert known_rejected < 0.2  # each rule keeps 95% of held-out known images


@pytest.mark.parametrize("join", ["gate", "min"])
def test_combined_join_ranks_what_the_feature_rule_accepts(join):
    """``join=gate`` (the default): among the images the feature rule accepts, the combined
    score IS the logit rule's margin, so it ranks unknown classes as the logit score does; the
    ones the feature rule rejects stay below 0. ``join=min`` is the smaller margin everywhere.
    Both: threshold 0 is the OR of the two rules. A state fitted before ``join`` existed (no
    key) joins by ``min``, as it was fitted to."""
    weight, bias, labels, h = network(n=600)
    rng = np.random.default_rng(3)
    low = np.abs(rng.normal(size=(600, 4))) + [4, 4, 0, 0]
    logits, features = outputs(h, weight, bias, low=low)
    options = {"feature": {"name": "knn", "k": 5}, "logit": "energy"}
    if join == "min":
        options["join"] = "min"
    rule = REJECT_RULES.create("combined", **options)
    state = rule.fit_outputs(features, labels, logits=logits, task=TASK, head=(weight, bias))
    assert state["join"] == join
    state = check_reject({"score": "combined", "threshold": 0.0, "keep": 0.9, **state})
    _, known = images(weight, 300, seed=12)
    odd_low = np.abs(rng.normal(size=(300, 4))) + np.where(np.arange(300)[:, None] < 100,
                                                           [0, 0, 4, 4], [4, 4, 0, 0])  # fmt: skip
    lg, ft = outputs(known * rng.uniform(0.05, 1.5, size=(300, 1)), weight, bias, low=odd_low)
    margins = rule.margins(TASK, lg, ft, state)
    combined = np.asarray(rule.scores(TASK, lg, ft, state), dtype=np.float64)
    accepted = margins["feature"] >= 0
    assert 0 < accepted.sum() < len(accepted)  # both kinds present
    smaller = np.minimum(margins["feature"], margins["logit"])
    if join == "gate":
        np.testing.assert_allclose(combined[accepted], margins["logit"][accepted], rtol=1e-5)
        assert np.any(combined[accepted] > smaller[accepted] + 1e-3)  # not the min there
    else:
        assert np.allclose(combined, smaller, rtol=1e-5)
    np.testing.assert_allclose(combined[~accepted], smaller[~accepted], rtol=1e-5)
    np.testing.assert_array_equal(combined < 0, (margins["feature"] < 0) | (margins["logit"] < 0))
    legacy = {key: value for key, value in state.items() if key != "join"}
    old = np.asarray(rule.scores(TASK, lg, ft, check_reject(legacy)), dtype=np.float64)
    np.testing.assert_allclose(old, smaller, rtol=1e-5)


def test_pnorm_is_the_largest_logit_over_the_logits_p_norm():
    import torch

    logits = np.random.default_rng(0).normal(size=(20, K)).astype(np.float32) * 4
    rule = rule_of("pnorm", p=3)
    state = check_reject({"score": "pnorm", "threshold": 0.1, "keep": 0.9, **rule.fit(None, None)})
    z = logits / 1.5
    expected = z.max(1) / (np.abs(z) ** 3).sum(1) ** (1 / 3)
    ours = rule.scores(TASK, logits, None, state)
    np.testing.assert_allclose(ours, expected, rtol=1e-5)
    np.testing.assert_array_equal(rule.scores(TASK, torch.from_numpy(logits), None, state), ours)
    assert rule.scores_logits and not rule.needs_features  # Core ML refuses it, as energy


@pytest.mark.parametrize(
    ("name", "options", "match"),
    [
        ("react", {"percentile": 0}, r"^reject.percentile=0 is not a number in \(0, 100\]"),
        ("react", {"percentile": 101}, r"^reject.percentile=101 is not a number in \(0, 100\]"),
        ("react", {"percentile": "90"}, r"^reject.percentile='90' is not a number"),
        ("react", {"percentile": True}, r"^reject.percentile=True is not a number"),
        ("pnorm", {"p": 0.5}, r"^reject.p=0.5 is not a finite number >= 1"),
        ("vim", {"dim": 0}, r"^reject.dim=0 is not an integer >= 1 or null"),
        ("vim", {"dim": 2.5}, r"^reject.dim=2.5 is not an integer >= 1 or null"),
        ("combined", {"feature": "maxlogit"},
         r"^reject.feature='maxlogit' is not a rule that scores the network's features; give "
         r"reject.feature.name=knn"),
        ("combined", {"logit": {"name": "knn"}},
         r"^reject.logit='knn' is not a rule that scores the logits alone; give "
         r"reject.logit.name=maxlogit"),
        ("combined", {"feature": {"name": "knn", "k": 0}}, r"^reject.k=0 is not an integer >= 1"),
        ("combined", {"logit_keep": 1.5},
         r"^reject.logit_keep=1.5 is not a share strictly between 0 and 1"),
        ("combined", {"feature": "knnn"}, r"did you mean knn\?"),
        ("combined", {"feature": "combined"}, r"^reject.feature='combined' is not a rule that"),
        ("combined", {"join": "max"}, r"^reject.join='max' is not one of \['gate', 'min'\]"),
    ],
)  # fmt: skip
def test_options_are_checked_naming_the_option(name, options, match):
    with pytest.raises(ValueError, match=match):
        rule_of(name, **options)


def test_a_dimension_leaving_no_residual_is_refused_when_fitted():
    weight, bias, labels, h = network()
    with pytest.raises(ValueError, match=rf"^reject.dim={D} leaves no residual: the penultimate "
                       rf"features have {D} dimensions; give reject.dim<{D}"):  # fmt: skip
        fitted("vim", h, labels, weight, bias, TASK, dim=D)


def test_a_head_rule_fitted_without_the_head_names_what_it_lacks():
    weight, bias, labels, h = network()
    logits, features = outputs(h, weight, bias)
    with pytest.raises(ValueError, match=r"^reject=react is fitted on the training images' head"):
        REJECT_RULES.create("react").fit_outputs(features, labels, logits=logits, task=TASK)
    with pytest.raises(ValueError, match=r"^reject=combined is fitted on the training images' "
                       r"logits and task"):  # fmt: skip
        REJECT_RULES.create("combined").fit_outputs(features, labels)
    # what a caller that knows nothing of them does: fit(features, labels)
    with pytest.raises(ValueError, match=r"^reject=vim is fitted on the training images' "
                       r"logits and task and head .*RejectRule.fit_outputs"):  # fmt: skip
        REJECT_RULES.create("vim").fit(features, labels)


def test_stored_state_of_another_network_is_refused():
    weight, bias, labels, h = network()
    rule, state = fitted("react", h, labels, weight, bias, TASK)
    logits, features = outputs(h[:4], weight, bias)
    with pytest.raises(ValueError, match=r"gives 2 logits but its rejection rule's head has 3"):
        rule.scores(TASK, logits[:, :2], features, state)
    with pytest.raises(ValueError, match=r"^The model's features have 5 values but its "
                       r"rejection rule was fitted on 12"):  # fmt: skip
        rule.scores(TASK, logits, features[:, :5], state)
    with pytest.raises(ValueError, match=r"^reject=combined lacks its fitted logit rule"):
        check_reject({"score": "combined", "threshold": 0, "keep": 0.9,
                      "feature": {"score": "knn"}})  # fmt: skip


@pytest.mark.parametrize(
    "reject",
    [
        {"name": "react", "percentile": 80},
        {"name": "vim", "dim": 8},
        {"name": "combined", "feature": {"name": "knn", "k": 3}, "logit": {"name": "energy"}},
    ],
    ids=["react", "vim", "combined"],
)
def test_the_checkpoint_and_its_onnx_file_answer_alike(trained, tmp_path, reject):
    """Fitted on a trained network's training images (its logits, features and last linear
    layer), the rule travels in the spec: the ONNX file, scoring with numpy, answers as the
    checkpoint's PyTorch network does."""
    import torch

    from lightning_cls.export import export_format
    from lightning_cls.inference import InputSpec, load_artifact, load_torch_model
    from lightning_cls.inference.network import with_features
    from lightning_cls.inference.predictor import Predictor
    from lightning_cls.inference.trust import build_rule, quantile_threshold

    net, spec = load_torch_model(trained.ckpt)
    trained.data.setup("fit")
    splits = trained.data.splits
    predictor = Predictor(net, spec)
    logits, features = predictor.image_features(splits["train"].images)
    rule = build_rule(reject)
    state = rule.fit_outputs(features, splits["train"].labels, logits=logits,
                             task=spec.decision, head=with_features(net).head)  # fmt: skip
    fitted = {"score": reject["name"], "threshold": 0.0, "keep": 0.8, **state}
    val_logits, val_features = predictor.image_features(splits["val"].images)
    scores = InputSpec.from_dict({**spec.to_dict(), "reject": fitted}).decision.confidence(
        val_logits, features=val_features
    )
    fitted["threshold"] = quantile_threshold(scores.numpy(), 0.8)
    spec = InputSpec.from_dict({**spec.to_dict(), "reject": fitted})

    onnx = load_artifact(export_format("onnx", net, spec, tmp_path / "m.onnx"))
    assert onnx.spec.decision.reject == spec.decision.reject and onnx.spec.decision.needs_features
    images = splits["test"].images[:32]
    noise = np.random.default_rng(0).integers(0, 256, (16, *images.shape[1:]), dtype=np.uint8)
    images = torch.cat([images, torch.as_tensor(noise)])
    ours = spec.decision.verdicts(*Predictor(net, spec).image_features(images))
    theirs = onnx.spec.decision.verdicts(*onnx.image_features(images))
    np.testing.assert_allclose([c for _, c in ours], [c for _, c in theirs], rtol=1e-3,
                               atol=1e-3)  # fmt: skip
    assert [u for u, _ in ours] == [u for u, _ in theirs]
    assert 0 < sum(u for u, _ in ours) < len(ours)  # some unknown, some not: it can fail


@pytest.mark.parametrize(
    "rule",
    [["reject=react"], ["reject=vim", "reject.dim=8"],
     ["reject=combined", "reject.logit.name=gen", "+reject.logit.gamma=0.5"]],
    ids=["react", "vim", "combined"],
)  # fmt: skip
def test_calibrate_fits_the_head_rules_and_onnx_carries_them(trained, tmp_path, rule):
    from helpers import LEARNABLE, as_overrides
    from helpers.hydra_configs import compose
    from lightning_cls.calibrate import calibrate_checkpoint
    from lightning_cls.export import export_format
    from lightning_cls.inference import load_artifact, load_torch_model

    overrides = [f"ckpt_path={trained.ckpt}", *rule, "calibration.keep=0.8"]
    report = calibrate_checkpoint(
        compose("calibrate", overrides + as_overrides(LEARNABLE), tmp_path)
    )
    net, spec = load_torch_model(report["calibrated_ckpt"])
    assert (
        spec.decision.reject["score"] == rule[0].removeprefix("reject=")
        and spec.decision.reject["keep"] == 0.8
    )
    onnx = load_artifact(export_format("onnx", net, spec, tmp_path / "m.onnx"))
    assert onnx.spec.decision.reject == spec.decision.reject


def test_a_multi_label_task_scores_its_joint_energy():
    """Multi-label: ReAct and ViM take the task's energy (the JointEnergy, sum of softplus);
    combined fits its knn bank from multi-hot labels."""
    import torch

    task = create_task("multilabel", None, 1.5)
    weight, bias, labels, h = network()
    multi_hot = np.eye(K, dtype=np.float32)[labels]
    _, test = images(weight, 30, seed=6)
    test[:3] *= 5
    logits, features = outputs(test, weight, bias)
    for name in ("react", "vim", "combined"):
        train_logits, train_features = outputs(h, weight, bias)
        rule = REJECT_RULES.create(name)
        state = rule.fit_outputs(train_features, multi_hot, logits=train_logits, task=task,
                                 head=(weight, bias))  # fmt: skip
        state = {"score": name, "threshold": 0.0, "keep": 0.9, **state}
        ours = rule.scores(task, logits, features, state)
        theirs = rule.scores(task, torch.from_numpy(logits), torch.from_numpy(features), state)
        np.testing.assert_array_equal(theirs.numpy(), ours)
        if name == "react":
            rectified = (np.minimum(test, state["clip"]) @ weight.T + bias) / 1.5
            expected = np.logaddexp(0, rectified).sum(1)
            np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4)


def test_reject_auto_is_the_combined_rule_with_its_measured_defaults():
    """``reject=auto`` (the rule the guide recommends) composes to ``combined`` with the
    options chosen on near_val (docs/guides/calibration.md, "Which rule to turn on"), and the
    class's defaults are the YAML's, so a rule built in code answers as one from the config."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from lightning_cls import config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        auto = compose(config_name="train", overrides=["reject=auto"]).reject
        combined = compose(config_name="train", overrides=["reject=combined"]).reject
    options = OmegaConf.to_container(auto)
    assert options == OmegaConf.to_container(combined)
    assert options == {
        "name": "combined", "feature": {"name": "knn"}, "logit": {"name": "energy"},
        "feature_keep": 0.98, "logit_keep": 0.95, "join": "gate",
    }  # fmt: skip
    rule = REJECT_RULES.create(options.pop("name"), **options)
    default = REJECT_RULES.create("combined")
    assert (rule.logit.name, rule.feature_keep, rule.join) == ("energy", 0.98, "gate")
    assert (default.logit.name, default.feature_keep, default.join) == ("energy", 0.98, "gate")
