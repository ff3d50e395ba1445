"""checks.meta_device.shapes_only: the parameter counts of the checks, built for their shapes alone."""

import subprocess
import sys

import torch
from torch import nn

from transformer_course.checks.meta_device import shapes_only
from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM

CONFIG = DecoderOnlyConfig(50, 16, num_heads=2, d_ff=32, num_layers=2, max_len=12, tie_weights=False)


def test_a_model_built_for_its_shapes_has_the_shapes_of_one_built_on_the_cpu():
    with shapes_only():
        meta = DecoderOnlyLM(CONFIG)
        embedding = nn.Embedding(7, 3)
    cpu = DecoderOnlyLM(CONFIG)
    assert all(p.is_meta for p in meta.parameters()) and embedding.weight.is_meta
    assert {k: v.shape for k, v in meta.state_dict().items()} == {k: v.shape for k, v in cpu.state_dict().items()}
    assert meta.num_parameters() == cpu.num_parameters()


def test_only_meta_tensors_skip_their_initialisation():
    with shapes_only():
        real = torch.zeros(1000, device="cpu")
        nn.init.normal_(real)
        real.normal_()
    assert real.std() > 0.5  # initialised as usual


def test_building_for_shapes_does_not_import_the_compiler():
    # torch 2.13's normal_ on a meta tensor imports torch._dynamo (1.5 CPU-s) on its first call.
    code = ("import sys, torch\nfrom transformer_course.checks.meta_device import shapes_only\n"
            "from transformer_course.models import DecoderOnlyConfig, DecoderOnlyLM\n"
            "before = set(sys.modules)\n"
            "with shapes_only():\n    DecoderOnlyLM(DecoderOnlyConfig(50257, 768, 12, 3072, 12, 1024))\n"
            "print(sorted(m for m in set(sys.modules) - before if m.startswith('torch._dynamo')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
