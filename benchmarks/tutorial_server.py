"""The server a user writes from the classic PyTorch + FastAPI tutorial (the baseline of
``serve_load.py``): one request -> decode -> one eager forward at batch 1, in the event loop.

``python benchmarks/tutorial_server.py <model_weights.pt> <model_weights.json> <port> [echo]``

With ``echo`` the endpoint reads the body and answers a fixed JSON without decoding or running
the model: the request rate the HTTP stack and the load generator allow on this machine, the
ceiling any server here can reach.
"""

import io
import json
import sys
from pathlib import Path

import numpy as np
import torch
import uvicorn
from fastapi import FastAPI, Request
from PIL import Image

from lightning_cls.models import create_model

weights, meta_path, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
echo = sys.argv[4:] == ["echo"]
meta = json.loads(Path(meta_path).read_text())
model = create_model(meta["model_name"], **meta["model_kwargs"])
model.load_state_dict(torch.load(weights, weights_only=True))
model.eval()
size, classes = meta["image_size"], meta["classes"]
mean = torch.tensor(meta["mean"]).view(3, 1, 1)
std = torch.tensor(meta["std"]).view(3, 1, 1)

app = FastAPI()


@app.post("/predict")
async def predict(request: Request):
    data = await request.body()
    if echo:
        return {"labels": classes[:5], "probs": [0.2] * 5, "bytes": len(data)}
    img = Image.open(io.BytesIO(data)).convert("RGB").resize((size, size))
    x = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1).float() / 255
    x = ((x - mean) / std).unsqueeze(0)
    with torch.no_grad():
        probs = model(x).softmax(1)[0]
    top = probs.topk(5)
    return {"labels": [classes[i] for i in top.indices], "probs": top.values.tolist()}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
