"""transformer_ua: runnable, verified constructions of Transformer expressivity proofs.

Install: ``pip install -e .`` (core), ``pip install -e ".[test]"`` (tests),
``pip install -e ".[experiments]"`` (experiment binaries), ``pip install -e ".[colab]"``
(everything the notebooks in colabs/ need, with Jupyter's nbconvert to run them headless),
``pip install -e ".[export]"`` (ONNX export), ``pip install -e ".[importers]"`` (certify
torch modules and ``torch.onnx.export`` files), ``pip install -e ".[portable]"`` (the flat
file in PyTorch through onnx2torch).
"""

import setuptools

CORE = [
    'jax>=0.10.2,<0.11',
    'jaxlib>=0.10.2,<0.11',
    'flax>=0.12.8,<0.13',
    'optax>=0.2.8,<0.3',
    'chex>=0.1.92,<0.2',
    'orbax-checkpoint>=0.12.8,<0.13',
    'absl-py>=2.1',
    'ml_collections>=1.0',
    'numpy>=1.26',
    'matplotlib>=3.8',
    'tqdm>=4.66',
    # arb ball arithmetic: certified evaluation of realized networks (exact.ball).
    'python-flint>=0.9,<0.10',
    # the independent high-precision re-evaluation of the one-layer ids
    # (verify.one_layer, experiments/verify_contextual_mapping.py) and the tests' oracle.
    'mpmath>=1.3',
]
# Export of realized networks to ONNX and their cross-check in onnxruntime.
EXPORT = [
    'onnx>=1.16',
    'onnxruntime>=1.18',
]
# Networks from PyTorch (torch.onnx.export, both exporters) for the certifier
# (transformer_ua/networks/). torch is pinned: an unpinned torch resolves to a CUDA build of
# several GB; 2.13.0 is the release these machines hold as a CPU build. The default (dynamo)
# exporter needs onnxscript.
TORCH = ['torch==2.13.0', 'onnxscript==0.7.2']
# The binaries: the main job writes its certified network as ONNX and runs it in
# onnxruntime; the size law checks every float row in onnxruntime; the certifier reads
# torch modules (certify_torch_encoder.py trains them).
EXPERIMENTS = [
    'tokenizers>=0.20',
    'tensorboardX>=2.6',
] + EXPORT + TORCH
NOTEBOOKS = [
    'nbclient>=0.10',
    'nbformat>=5.10',
    'ipykernel>=6.29',
]
# Running the notebooks (colabs/): a kernel, nbconvert (`jupyter nbconvert --execute`) and
# what notebook 05 trains with (tokenizers).
COLAB = NOTEBOOKS + EXPERIMENTS + ['nbconvert>=7.0']
# Certification on a Dask cluster (--dask_scheduler; docs/performance.md).
CLUSTER = ['dask[distributed]>=2024.1']
IMPORTERS = TORCH + EXPORT
TEST = [
    'pytest>=8.0',
    'pytest-xdist>=3.5',
    'hypothesis>=6.100',
] + EXPERIMENTS + NOTEBOOKS + EXPORT + CLUSTER + TORCH

setuptools.setup(
    name='transformer_ua',
    version='0.1.0',
    description=('Constructive universal-approximation proofs for Transformers '
                 '(Yun et al. 2020; Fang et al. 2022) as verified JAX programs.'),
    packages=setuptools.find_packages(include=['transformer_ua', 'transformer_ua.*']),
    python_requires='>=3.10',
    install_requires=CORE,
    extras_require={
        'test': TEST,
        'experiments': EXPERIMENTS,
        'export': EXPORT,
        'colab': COLAB,
        # certify_network on torch modules and torch.onnx.export files.
        'importers': IMPORTERS,
        # The PyTorch reference BERT of the throughput benchmark (benchmarks/).
        'reference': TORCH + ['transformers>=4.40'],
        # The certified network outside the project: its flat ONNX file in PyTorch
        # (docs/portable.md).
        'portable': TORCH + ['onnx2torch>=1.5'] + EXPORT,
        # Marabou's second opinion on a realized g (verify.marabou; Python <= 3.12).
        'verify': ['maraboupy==2.0.0'] + EXPORT,
        'cluster': CLUSTER,
    },
)
