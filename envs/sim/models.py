"""Model profiles from the Ada-SRSF paper, Table III (Tesla V100, PyTorch 1.2).

The reference simulator rounds forward/backward times to whole ms (36/54, 25/37, 35/52,
32/47); its workload files carry those rounded values, and :mod:`envs.sim.workload` keeps
whatever a file says.  The profiles here are the paper's unrounded figures.
"""

from __future__ import annotations

from envs.sim.errors import ConfigError
from envs.sim.spec import ModelProfile

VGG16 = ModelProfile("vgg16", 526.4, 4527.0, 16, 35.8, 53.7)
RESNET50 = ModelProfile("resnet50", 99.2, 3213.0, 16, 25.0, 37.4)
INCEPTION_V3 = ModelProfile("inception-v3", 103.0, 3291.0, 16, 34.9, 52.4)
LSTM_PTB = ModelProfile("lstm", 251.8, 2751.0, 64, 31.5, 47.3)

#: Table III profiles by the names the Ada-SRSF workload files use.
PAPER_MODELS: dict[str, ModelProfile] = {
    m.name: m for m in (VGG16, RESNET50, INCEPTION_V3, LSTM_PTB)
}

#: The reference simulator's integer-ms versions of the same models.
REFERENCE_MODELS: dict[str, ModelProfile] = {
    "vgg16": ModelProfile("vgg16", 526.4, 4527.0, 16, 36.0, 54.0),
    "resnet50": ModelProfile("resnet50", 99.2, 3213.0, 16, 25.0, 37.0),
    "inception-v3": ModelProfile("inception-v3", 103.0, 3291.0, 16, 35.0, 52.0),
    "lstm": ModelProfile("lstm", 251.8, 2751.0, 64, 32.0, 47.0),
}


def get_model(name: str, table: dict[str, ModelProfile] | None = None) -> ModelProfile:
    """Look up a profile by name with a clear error listing the known names."""
    table = PAPER_MODELS if table is None else table
    try:
        return table[name]
    except KeyError:
        raise ConfigError(f"unknown model {name!r}; known: {sorted(table)}") from None


def _tiresias(name: str, size_mb: float, iter_ms: float) -> ModelProfile:
    # forward : backward = 1 : 2, the usual rule of thumb (the trace gives only their sum)
    return ModelProfile(name, size_mb, 5000.0, 32, iter_ms / 3.0, iter_ms * 2.0 / 3.0)


#: Models of Tiresias's 60-job trace (``envs/sim/data/tiresias``).  Size = sum of the
#: upstream tensor list (MB; googlenet uses Inception-v3's, as upstream does); per-iteration
#: time = the trace's total duration / total iterations over its 1-GPU jobs of that model;
#: 5,000 MB per worker (upstream's worker memory); batch 32 is a label only.
TIRESIAS_MODELS: dict[str, ModelProfile] = {
    m.name: m
    for m in (
        _tiresias("vgg19", 547.1, 270.6),
        _tiresias("vgg16", 526.8, 235.7),
        _tiresias("vgg11", 506.5, 156.1),
        _tiresias("alexnet", 235.8, 54.5),
        _tiresias("resnet152", 149.6, 370.4),
        _tiresias("resnet101", 119.7, 260.2),
        _tiresias("resnet50", 80.6, 153.3),
        _tiresias("inception4", 132.8, 477.7),
        _tiresias("inception3", 56.6, 232.3),
        _tiresias("googlenet", 56.6, 140.1),
    )
}
