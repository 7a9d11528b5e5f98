"""``report.md`` for people and ``report.json`` for machines, from one result dict."""

from __future__ import annotations

import json
from pathlib import Path

from lightning_cls.doctor.index import relative_path
from lightning_cls.doctor.selftest import verdict_reason
from lightning_cls.fileio import atomic_write_text

LIST_LIMIT = 20  # rows per list in the Markdown (the JSON has every one)
FILE_CHECKS = {
    "unreadable": "Unreadable, truncated or empty files (left out of training)",
    "size_outliers": "Images far smaller or larger than the rest",
    "grayscale_files": "Grayscale files in an RGB set",
    "cmyk_files": "CMYK files in an RGB set",
    "exif_rotated": "EXIF-rotated photos (training applies the rotation; other tools may not)",
    "grayscale_content": "RGB images whose three channels are equal (grayscale pictures)",
}


def write_report(result: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "report.json", json.dumps(result, indent=1) + "\n")
    atomic_write_text(out / "report.md", markdown(result))


def markdown(result: dict) -> str:
    splits = ", ".join(f"{name} {n}" for name, n in result["splits"].items())
    lines = [f"# Data check: data={result['data']}", "", f"Splits: {splits}.", ""]
    lines += _distrust_banner(result.get("label_probe", {}))
    if result.get("root"):  # one path style: every file below is relative to the root
        lines += [f"Files are named relative to data.root={result['root']}.", ""]
    lines += _files_section(result)
    lines += _duplicates_section(result)
    lines += _balance_section(result)
    lines += _labels_section(result)
    if "index" in result:
        index = result["index"]
        lines += [
            "## Cleaned index",
            "",
            f"`{index['path']}`: {index['kept']} files kept, "
            f"left out: {index['left_out'] or 'none'}.",
            "",
        ]
    if result["skipped"]:
        lines += ["## Skipped checks", ""]
        lines += [f"- {name}: {why}." for name, why in result["skipped"].items()] + [""]
    lines += [f"Checked in {result['seconds']} s.", ""]
    return "\n".join(lines)


def _bullets(records: list[dict], render) -> list[str]:
    shown = [f"- {render(r)}" for r in records[:LIST_LIMIT]]
    more = len(records) - LIST_LIMIT
    return shown + ([f"- ... and {more} more (report.json)"] if more > 0 else [])


def _files_section(result: dict) -> list[str]:
    files = result["files"]
    lines = ["## Files", ""]
    if "checked" in files:
        lines += [f"{files['checked']} files read.", ""]
    for key, title in FILE_CHECKS.items():
        if key not in files:
            continue
        found = files[key]
        lines.append(f"**{title}: {len(found)}**")
        lines += _bullets(
            found,
            lambda r: ", ".join(
                f"{k}: {shown(v, result) if k == 'path' else v}" for k, v in r.items() if v
            ),
        )
        lines.append("")
    if "flagged" in result["mosaics"]:
        lines += ["![flagged images](flagged.png)", ""]
    return lines


def _duplicates_section(result: dict) -> list[str]:
    groups = result["duplicates"]
    cross = [g for g in groups if g["cross_split"]]
    lines = [
        "## Duplicates",
        "",
        f"{len(groups)} groups of copies ({sum(len(g['members']) for g in groups)} images); "
        f"{len(cross)} across splits (a test image also in train inflates the test score).",
        "",
    ]

    def render(group):
        names = [
            shown(f, result) if f else f"{s}:{r}"
            for f, (s, r) in zip(group["files"], group["members"])
        ]
        return f"{group['kind']} ({group['distance']} bits), {'/'.join(group['splits'])}: " + (
            ", ".join(names[:6]) + (" ..." if len(names) > 6 else "")
        )

    lines += _bullets(groups, render) + [""]
    if "duplicates" in result["mosaics"]:
        lines += ["![duplicates](duplicates.png)", ""]
    return lines


def _balance_section(result: dict) -> list[str]:
    balance = result["balance"]
    classes = result["classes"]
    header = "| split | " + " | ".join(classes) + " |"
    lines = ["## Classes", "", header]
    lines.append("|" + " --- |" * (len(classes) + 1))
    for split, counts in balance["counts"].items():
        lines.append(f"| {split} | " + " | ".join(str(counts[c]) for c in classes) + " |")
    ratio = balance["imbalance"]
    lines += ["", f"Train imbalance (largest / smallest class): {ratio or 'a class is empty'}."]
    if balance["empty_classes"]:
        lines.append(f"Classes without train images: {', '.join(balance['empty_classes'])}.")
    if balance["suggest"]:
        lines.append("Suggested: `" + "` or `".join(balance["suggest"]) + "`.")
        if "class_weights" in balance:
            lines.append(f"`task.class_weights=auto` will weigh them {balance['class_weights']}.")
    return lines + [""]


def _labels_section(result: dict) -> list[str]:
    if "label_issues" in result["skipped"]:
        return []
    issues = result["label_issues"]
    classes = result["classes"]
    probe = result.get("label_probe", {}).get("probe", "")
    lines = ["## Likely label errors", ""]
    lines.append(f"{len(issues)} images (out-of-fold {probe} probe, self-confidence ranking).")
    lines += _probe_note(result.get("label_probe", {}))
    if issues and issues[0].get("file") is None:
        lines.append(
            f"data={result['data']} is held in memory, not read from image files: each image "
            "is named split:row (its row in that split of the DataModule)."
        )
    lines += _planted_note(result.get("planted")) + [""]
    moved = {(r["split"], r["row"]) for r in (result.get("planted") or {}).get("rows", [])}

    def render(issue):
        name = issue.get("file") or f"{issue['split']}:{issue['row']}"
        return (
            f"{name} given {classes[issue['given']]} "
            f"({issue['given_prob']:.2f}), suggested {classes[issue['suggested']]} "
            f"({issue['suggested_prob']:.2f})"
            + (" (planted)" if (issue["split"], issue["row"]) in moved else "")
        )

    lines += _bullets(issues, render) + [""]
    if "label_issues" in result["mosaics"]:
        lines += ["![label issues](label_issues.png)", ""]
    return lines


def shown(file: str, result: dict) -> str:
    """``file`` as report.md names every file: relative to ``data.root`` (as given when the
    data has no root, or the file lies outside it)."""
    root = result.get("root")
    return relative_path(file, root) if root else file


def _reason(probe: dict) -> str:
    return verdict_reason(probe)


def probe_verdict(probe: dict) -> tuple[bool, str]:
    """(trusted, the line saying so and why), as the report's banner says it; the label
    mosaic draws it over its tiles."""
    if probe["reliable"]:
        return True, f"Label findings TRUSTED: {_reason(probe)}."
    return False, (
        f"Label findings NOT TRUSTED: {_reason(probe)}; most flags may be the probe's own "
        "mistakes (the cleaned index keeps these images)."
    )


def _distrust_banner(probe: dict) -> list[str]:
    if not probe or probe["reliable"]:
        return []
    return [f"> **Label findings not trusted**: {_reason(probe)} (see Likely label errors).", ""]


def _planted_note(planted: dict | None) -> list[str]:
    if not planted:
        return []

    def share(value):
        return "n/a" if value is None else f"{value:.3f}"

    return [
        f"Planted (doctor.plant_noise={planted['share']}): {planted['moved']} labels were moved "
        f"to another class before the probe ran (the files are unchanged). The findings hold "
        f"{planted['found']} of them: precision {share(planted['precision'])}, recall "
        f"{share(planted['recall'])}; the first findings that hold 70% of them: precision "
        f"{share(planted.get('precision_at_recall_0.7'))}. Below, 'given' is the label after "
        "the move, and '(planted)' marks a moved one (report.json: planted.rows)."
    ]


def _probe_note(probe: dict) -> list[str]:
    if not probe:
        return []
    accuracy = probe["out_of_fold_accuracy"]
    note = (
        f"The probe's out-of-fold accuracy: {accuracy:.3f} ({probe['folds']} folds; capped by "
        f"the noise, so not the gate). Flagged: as many as the estimated wrong labels. "
        f"Self-test: {_reason(probe)}."
    )
    if "chosen_from" in probe:
        recalls = ", ".join(f"{n} {r:.2f}" for n, r in probe["chosen_from"].items())
        note += f" doctor.probe=auto chose {probe['probe']} by self-test recall ({recalls})."
    if probe["reliable"]:
        return [note]
    return [
        note + " **Too low to trust these findings** (most flags are the probe's own mistakes); "
        "the cleaned index keeps these images. A stronger network, more doctor.probe_epochs, "
        "doctor.probe=kfold or doctor.probe=auto (whichever did not run) helps: see "
        "docs/guides/data-check.md."
    ]
