"""summarize: the metric columns follow what the jobs logged."""

from __future__ import annotations


def test_summarize_shows_the_metric_columns_the_jobs_have():
    from lightning_cls.summarize import _METRICS, table

    def row(job: int, **metrics) -> dict:
        values = dict.fromkeys(_METRICS)
        values.update({k.replace("_", "/"): v for k, v in metrics.items()})
        return {
            "job": job,
            "status": "COMPLETE",
            "params": {"seed": str(job)},
            "objective": 0.9,
            "wall_time_s": 1.0,
            "pruned_at_epoch": None,
            **values,
        }

    multilabel, _ = table([row(0, val_map=0.9, test_map=0.8), row(1, val_map=0.7)])
    multiclass, _ = table([row(0, val_acc=0.9, val_loss=0.3)])
    assert "val/map" in multilabel and "val/acc" not in multilabel
    assert "val/acc" in multiclass and "val/map" not in multiclass
