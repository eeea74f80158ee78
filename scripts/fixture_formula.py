"""The fixture formula of fixtures/resnet18-formula/README.md, shared by the generators.

Every value comes from the tensor's name: u_j in [0, 1) from the splitmix64 stream seeded
by the name's FNV-1a hash, s = 2u - 1. By module type: a convolution or linear weight is
`s * sqrt(3 / fan_in)`, its bias `s * sqrt(3 / out)`; a normalisation weight `1 + 0.1 s`
and bias `0.1 s`; running means `0.1 s`, variances `0.5 + u`; ConvNeXt's layer scale `0.1 s`.
"""
import numpy as np
import torch
from torchvision.models.convnext import LayerNorm2d

MASK = (1 << 64) - 1
NORMS = (torch.nn.BatchNorm2d, torch.nn.LayerNorm, LayerNorm2d, torch.nn.GroupNorm)


def fnv1a(name):
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def uniform(name, n):
    """u_j in [0, 1) of the stream `name` (splitmix64 of seed + j + golden ratio)."""
    with np.errstate(over="ignore"):
        z = np.arange(n, dtype=np.uint64) + np.uint64(fnv1a(name))
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def formula(name, shape, kind):
    n = int(np.prod(shape))
    u = uniform(name, n)
    s = 2 * u - 1
    if name.endswith("running_var"):
        v = 0.5 + u
    elif name.endswith("running_mean"):
        v = 0.1 * s
    elif name.endswith("layer_scale"):
        v = 0.1 * s
    elif kind == "norm":
        v = 1 + 0.1 * s if name.endswith("weight") else 0.1 * s
    elif name.endswith("bias"):
        v = s * np.sqrt(3 / shape[0])
    else:
        v = s * np.sqrt(3 / (n / shape[0]))
    return torch.from_numpy(v.reshape(shape)).float()


def set_weights(m):
    """Sets every state entry of module `m` by the formula (batch counters to zero)."""
    kinds = {}
    for mname, mod in m.named_modules():
        for pname, _ in list(mod.named_parameters(recurse=False)) + list(mod.named_buffers(recurse=False)):
            kinds[f"{mname}.{pname}" if mname else pname] = "norm" if isinstance(mod, NORMS) else "other"
    state = {}
    for k, v in m.state_dict().items():
        if k.endswith("num_batches_tracked"):
            state[k] = torch.zeros_like(v)
        else:
            state[k] = formula(k, tuple(v.shape), kinds[k])
    m.load_state_dict(state)
