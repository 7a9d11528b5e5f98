"""A plain PyTorch training loop (no Lightning Trainer, no Hydra) on a lightning_cls DataModule.

python examples/plain_loop_with_datamodule.py               # embedded digits, offline
python examples/plain_loop_with_datamodule.py --cifar10     # downloads CIFAR-10 into ./data
"""

import argparse

import torch
from torch import nn

from lightning_cls.data import CIFAR10DataModule, DigitsDataModule
from lightning_cls.models import create_model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cifar10", action="store_true")
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dm = CIFAR10DataModule(data_dir="data") if args.cifar10 else DigitsDataModule()
    dm.prepare_data()
    dm.setup()
    net = create_model(
        "simplecnn",
        num_classes=dm.num_classes,
        in_channels=dm.num_channels,
        image_size=dm.image_size,
    ).to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()

    for epoch in range(args.epochs):
        net.train()
        total = 0.0
        for x, y in dm.train_dataloader():  # batches arrive augmented and normalized
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = criterion(net(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
        net.eval()
        correct = seen = 0
        with torch.no_grad():
            for x, y in dm.val_dataloader():
                correct += (net(x.to(device)).argmax(1) == y.to(device)).sum().item()
                seen += len(y)
        print(
            f"epoch {epoch}: train loss {total / len(dm.train_dataloader()):.3f}, val acc {correct / seen:.3f}"
        )


if __name__ == "__main__":
    main()
