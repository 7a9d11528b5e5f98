"""``GET /``: one self-contained HTML page (no CDN, works offline) to try the model by hand.

Drop or pick one or more images: each is posted to ``/predict`` as raw bytes (the server
batches them) and shown with its top-5 labels as bars with probabilities, and, where the
served model supports it (a PyTorch checkpoint: ``/info``'s ``model.explain``), with the heat
map of where it looked (``POST /explain``); elsewhere the card says why there is none. A
model with a prediction-set rule (``conformal``) shows each image's set above the bars.
"""

PAGE_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>lightning_cls: classify images</title>
<style>
  body { font: 15px/1.4 system-ui, sans-serif; margin: 2rem auto; max-width: 960px;
         padding: 0 1rem; color: #1d232b; background: #f6f7f9; }
  h1 { font-size: 1.4rem; margin: 0 0 .25rem; }
  #model { color: #5b6573; margin-bottom: 1rem; }
  #drop { display: block; border: 2px dashed #8a94a3; border-radius: 10px; padding: 2rem; text-align: center;
          background: #fff; cursor: pointer; }
  #drop.over { border-color: #2f6fde; background: #eef4ff; }
  #results { display: grid; grid-template-columns: repeat(auto-fill, minmax(280px, 1fr));
             gap: 1rem; margin-top: 1rem; }
  .card { background: #fff; border-radius: 10px; padding: .75rem;
          box-shadow: 0 1px 3px rgba(0,0,0,.12); }
  .card header { display: flex; gap: .6rem; align-items: center; margin-bottom: .5rem; }
  .card img { width: 64px; height: 64px; object-fit: cover; border-radius: 6px;
              image-rendering: pixelated; background: #ddd; }
  .name { font-weight: 600; overflow-wrap: anywhere; }
  .row { display: grid; grid-template-columns: 7rem 1fr 3.6rem; gap: .4rem;
         align-items: center; margin: .2rem 0; }
  .label { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  .track { background: #e6e9ee; border-radius: 4px; height: 14px; }
  .bar { background: #2f6fde; border-radius: 4px; height: 14px; }
  .row:first-child .bar { background: #1c9a5b; }
  .pct { text-align: right; font-variant-numeric: tabular-nums; }
  .error { color: #b3261e; }
  .card img.heat { width: 128px; height: 128px; }
  .explain { color: #5b6573; font-size: .85rem; margin-top: .4rem; }
  .set { color: #1d232b; font-size: .9rem; margin: .2rem 0 .4rem; }
</style>
</head>
<body>
<h1>Classify images</h1>
<div id="model">Loading model information&hellip;</div>
<label id="drop">Drop images here, or click to choose
  <input id="files" type="file" accept="image/*" multiple hidden>
</label>
<div id="results"></div>
<script>
"use strict";
const drop = document.getElementById("drop");
const results = document.getElementById("results");
let explain = {supported: false, reason: "model information not loaded"};
let setCoverage = null;  // 1 - alpha of the model's conformal rule, from /info

fetch("info").then(r => r.json()).then(info => {
  const m = info.model;
  if (m.explain) explain = m.explain;
  if (m.spec.task.conformal) setCoverage = 1 - m.spec.task.conformal.alpha;
  document.getElementById("model").textContent =
    `Model ${m.name} (version ${m.version}, ${m.runtime}), ${m.spec.classes.length} classes`;
}).catch(() => { document.getElementById("model").textContent = ""; });

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

async function classify(file) {
  const card = el("div", "card");
  const head = el("header");
  const img = el("img");
  img.src = URL.createObjectURL(file);
  img.alt = file.name;
  head.append(img, el("span", "name", file.name));
  const body = el("div", "bars", "classifying\\u2026");
  card.append(head, body);
  results.prepend(card);
  try {
    const type = file.type && file.type.startsWith("image/") ? file.type : "image/unknown";
    const r = await fetch("predict", {method: "POST", headers: {"Content-Type": type}, body: file});
    const answer = await r.json();
    body.textContent = "";
    if (!r.ok) {
      body.append(el("div", "error", `${r.status}: ${answer.detail}`));
      return;
    }
    const p = answer.predictions[0];
    if (p.unknown) {  // below the model's rejection threshold: the scores are still shown
      body.append(el("div", "row unknown", `unknown (confidence ${p.score.toFixed(3)} below the model's threshold)`));
    }
    if (p.set) {  // the model's prediction set: holds the true label with the stated coverage
      const level = setCoverage === null ? "" : ` (${Math.round(100 * setCoverage)}% coverage)`;
      body.append(el("div", "set", `set${level}: {${p.set.join(", ")}}`));
    }
    if (!p.labels.length) {  // a multi-label model: no label reached its threshold
      body.append(el("div", "row", "no label above the model's threshold"));
    }
    p.labels.forEach((label, i) => {
      const row = el("div", "row");
      const track = el("div", "track");
      const bar = el("div", "bar");
      bar.style.width = (100 * p.probs[i]).toFixed(1) + "%";
      track.append(bar);
      row.append(el("span", "label", label), track,
                 el("span", "pct", (100 * p.probs[i]).toFixed(1) + "%"));
      body.append(row);
    });
    await showHeatMap(file, type, card);
  } catch (err) {
    body.textContent = "";
    body.append(el("div", "error", String(err)));
  }
}

async function showHeatMap(file, type, card) {  // where the model looked, if it can say
  const note = el("div", "explain");
  card.append(note);
  if (!explain.supported) {
    note.textContent = explain.reason;
    return;
  }
  const r = await fetch("explain", {method: "POST", headers: {"Content-Type": type}, body: file});
  const answer = await r.json();
  if (!r.ok) { note.textContent = `Heat map: ${r.status}: ${answer.detail}`; return; }
  const heat = el("img", "heat");
  heat.src = answer.overlay;
  heat.alt = `${answer.method} heat map of ${answer.label}`;
  note.textContent = `${answer.method} heat map of ${answer.label} (layer ${answer.layer})`;
  card.insertBefore(heat, note);
}

function classifyAll(files) { for (const f of files) classify(f); }
document.getElementById("files").addEventListener("change", e => classifyAll(e.target.files));
drop.addEventListener("dragover", e => { e.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", e => {
  e.preventDefault();
  drop.classList.remove("over");
  classifyAll(e.dataTransfer.files);
});
</script>
</body>
</html>
"""
