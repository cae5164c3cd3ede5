"""vit_jax: a JAX/Flax reproduction of the Vision Transformer (Dosovitskiy et al., 2021)."""

import setuptools

# Ranges tested in CI (Python 3.11, CPU): jax 0.10.2, flax 0.12.8, optax 0.2.8,
# orbax-checkpoint 0.12.8, tensorflow-cpu 2.21.0, tensorflow-datasets 4.9.10,
# ml-collections 1.1.0, clu 0.0.12, numpy 2.4, safetensors 0.8.0. jax 0.11 needs
# Python >= 3.12, where pip picks jax 0.11.2 and flax 0.12.12: the versions of the GPU
# numbers in benchmarks/RESULTS.md (the suite passes there too, on the CPU).
JAX_VERSIONS = ">=0.10.2,<0.12"
# TensorFlow feeds the tf.data loader (config.loader='tf', the default), TFDS builders and
# the TensorFlow exports. Everything else (the Grain loader, predict, plan) runs without
# it: `pip install --no-deps -e . && pip install -r requirements-without-tensorflow.txt`
# installs CORE_REQUIRES alone (docs/grain.md; tests/test_without_tensorflow.py holds
# the file to this list).
TENSORFLOW_REQUIRES = [
    "tensorflow-cpu>=2.21,<2.22; platform_machine == 'x86_64'",
    "tensorflow>=2.21,<2.22; platform_machine != 'x86_64'",
]
CORE_REQUIRES = [
    f"jax{JAX_VERSIONS}",
    "flax>=0.12.8,<0.13",
    "optax>=0.2.8,<0.3",
    "orbax-checkpoint>=0.12.8,<0.13",
    # TFDS imports TensorFlow only for tf.data: its data sources (array_record) need none.
    "tensorflow-datasets>=4.9.10,<4.10",
    "grain>=0.2.18,<0.3",  # config.loader='grain'
    "array_record>=0.8.1",  # ArrayRecord shards (python -m vit_jax.make_arrayrecord)
    # tensorflow-datasets needs it for download/prepare but does not declare it.
    "importlib_resources>=6",
    "ml-collections>=1.1,<1.2",
    "clu>=0.0.12,<0.1",
    "tensorboard>=2.21,<2.22",
    "numpy>=2.0,<3",
    "ml_dtypes>=0.5",  # reads bfloat16 .npz files (a jax dependency too)
    "pillow>=10",
    # The Grain loader's JPEG decoding (libjpeg-turbo) and resizes (docs/grain.md).
    "simplejpeg>=1.8,<2",
    "opencv-python-headless>=4.8,<6",
    "scikit-learn>=1.5",  # ships the embedded demo dataset (digits)
    "scipy>=1.11",  # few-shot ridge solves
    "matplotlib>=3.8",
    "tqdm>=4.60",
    "absl-py>=2.1",
    "safetensors>=0.8,<0.9",  # timm / Hugging Face checkpoints (its numpy API: no torch)
    # gs:// workdirs (TPU pods): the run's own files and the lock's create-if-absent
    # precondition go through fsspec/gcsfs (vit_jax/base/storage.py), as do downloads (its
    # aiohttp for http(s)://); tf.io.gfile has no preconditions and cannot be pointed at a
    # test endpoint. A hard requirement, not an extra: a pod job would otherwise fail on
    # every worker only after setup.
    "gcsfs>=2025.3",
    # Released checkpoints come from their Hugging Face Hub mirrors (the bucket refuses
    # anonymous downloads since 2026-02): its cache, HF_ENDPOINT, HF_HUB_OFFLINE, HF_TOKEN.
    "huggingface_hub>=2.0,<3",
    # Two-tower models' tokenizers without TensorFlow (vit_jax.data.text_tokens): BERT WordPiece
    # and tokenizer.json through `tokenizers`, LiT's / SigLIP's sentencepiece models.
    "tokenizers>=0.22,<0.24",
    "sentencepiece>=0.2,<0.3",
]
INSTALL_REQUIRES = CORE_REQUIRES + TENSORFLOW_REQUIRES
# Checks against the libraries themselves (tests/checkpoints/test_interop.py skips without
# them). torch 2.13.0 resolves to the CPU-only wheel here (never leave torch unpinned: that
# pulls CUDA); timm imports torchvision, whose PyPI wheel is built against CUDA torch: its
# compiled detection ops do not load beside CPU torch, which the tests work around (timm's
# ViTs never call them).
INTEROP_REQUIRES = ["torch==2.13.0", "torchvision==0.28.0", "timm==1.0.31",
                    "transformers==5.23.0"]
# python -m vit_jax.export's runtimes (CPU wheels: onnxruntime, not onnxruntime-gpu; no
# torch). jax2onnx converts the ONNX export (tf2onnx cannot read jax2tf's StableHLO ops);
# its releases after 0.13.0 cap orbax-checkpoint below 0.11.37, which this project's
# orbax excludes. ai-edge-litert is the TFLite interpreter (tf.lite.Interpreter is
# deprecated in TensorFlow 2.21); StableHLO and the SavedModel need only jax and tensorflow.
EXPORT_REQUIRES = ["jax2onnx==0.13.0", "onnx==1.23.2", "onnxruntime==1.32.0",
                   "ai-edge-litert==2.3.0"]

setuptools.setup(
    name="vit_jax",
    version="0.1.0",
    description="Vision Transformer (ViT) and hybrid ResNet+ViT models in JAX/Flax, "
    "compatible with the released .npz checkpoints.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    # configs/*.py are loaded by path (--config=configs/vit_b16.py), not imported: installing
    # them as a top-level `configs` package would collide with other projects' `configs`.
    # Their shared defaults ship as vit_jax.training.config_defaults.
    packages=setuptools.find_packages(include=["vit_jax", "vit_jax.*"]),
    # The Hub mirrors of the released files (vit_jax.checkpoints.hub_table writes it).
    package_data={"vit_jax.checkpoints": ["hub_mirrors.json"]},
    install_requires=INSTALL_REQUIRES,
    extras_require={
        # gcp-storage-emulator: the Cloud Storage of the gs:// tests, on 127.0.0.1; pinned
        # because tests/gcs_emulator.py adds GCS's generation preconditions to its handlers.
        # libtpu (the tpu extra's): vit_jax.plan's tests compile for TPU topologies on the
        # CPU (tests/planning/test_compiled_plan.py); it starts no TPU backend where none is attached.
        # filelock: the tests' bounded compile cache (tests/conftest.py) evicts under it.
        "test": ["pytest>=8", "pytest-xdist>=3.5", "gcp-storage-emulator==2026.7.19",
                 "filelock>=3.12",
                 "nbclient>=0.10", "nbformat>=5.10",
                 "ipykernel>=6", "nbconvert>=7",  # jupyter nbconvert --execute the notebook
                 f"jax[tpu]{JAX_VERSIONS}; sys_platform == 'linux'"],
        # Cloud TPU VMs; also what `python -m vit_jax.plan --tpu=...` needs on any machine.
        "tpu": [f"jax[tpu]{JAX_VERSIONS}"],
        # CUDA 13 wheels (NVIDIA driver >= 580), as the GPU numbers were measured; cuda12
        # for older drivers (>= 525). Both bring their own CUDA, cuDNN and NCCL.
        "cuda": [f"jax[cuda13]{JAX_VERSIONS}"],
        "cuda12": [f"jax[cuda12]{JAX_VERSIONS}"],
        "interop": INTEROP_REQUIRES,
        "export": EXPORT_REQUIRES,
    },
)
