"""The model-family contract: everything the rest of the package may ask of a family of
models (ViT with its hybrids and NaFlex, the other released families in
vit_jax/families/, or a user's own), so that no command, checkpoint reader, trainer,
exporter or planner names a family or tests a module's type.

A family is one `Family` value, made of parts: each part is a small protocol answered by a
module of the family's own folder (vit_jax/families/<name>/), and a part the family does
not have is None, which every tool meets as `family.refuse(tool, subject)`: one line that
says what the family lacks and what to use instead. The family registers itself with
vit_jax.models.family_registry.register when its folder is imported; the registry's one
list names the built-in folders (docs/architecture.md, "Add a model family").
"""

import dataclasses
from typing import (Any, Callable, Dict, List, Mapping, Optional, Protocol, Sequence,
                    Tuple, runtime_checkable)

import numpy as np

from vit_jax.base import errors

Arrays = Mapping[str, np.ndarray]  # a checkpoint's arrays, flat '/'-joined names


@runtime_checkable
class Names(Protocol):
  """Its released names, the settings behind each, and the modules they build."""

  def released(self) -> Sequence[str]:
    """The released names, in the order listings show them."""

  def spellings(self) -> Sequence[str]:
    """Every name it answers to (released names first), for close-match hints."""

  def canonical(self, name: str) -> Optional[str]:
    """The released name for any accepted spelling (case ignored); None: not its name."""

  def architecture(self, name: str) -> Any:
    """The settings of a released name (a frozen dataclass)."""

  def create(self, name: str, *, num_classes: int, **overrides) -> Any:
    """The flax module of a released name; overrides replace module attributes."""

  def from_config(self, config, num_classes: int) -> Any:
    """The module a training config builds (config.model_name, config.model.*)."""

  def architecture_of(self, module) -> Any:
    """The settings a module was built with (the dataclass architecture() gives)."""

  def name_of(self, module) -> str:
    """The released name of a module's architecture, else a description of its sizes."""


@runtime_checkable
class ReleasedFile(Protocol):
  """Its released checkpoint layout: recognised by its arrays, read, written back."""

  def recognises(self, arrays: Arrays) -> bool:
    """Whether a checkpoint's arrays are this family's released layout."""

  def load(self, arrays: Arrays, path: str, **options) -> Tuple[Any, Dict[str, Any]]:
    """(module, host params) of the arrays; options are vit_jax.load_npz's keywords
    (image_size resizes what depends on the resolution). Refusals: CheckpointError."""

  def holds(self, params: Any) -> bool:
    """Whether a params tree (module.init's or load's) is this family's."""

  def to_arrays(self, params: Any) -> Dict[str, np.ndarray]:
    """A params tree as the released file's flat arrays (what save_npz writes)."""

  def native_image_size(self, module, params: Any) -> int:
    """The input side the params were made for (their position table's, ...)."""


@runtime_checkable
class Geometry(Protocol):
  """How images become tokens: what predict, export, plan and benchmark size by."""
  # True: the module runs its params at any size (a ViT resizes its position table in the
  # forward pass); False: another size needs params resized on loading (load_npz's
  # image_size), as weights tied to one token grid
  resizes_in_forward: bool

  def stride(self, module) -> int:
    """Pixels per token side."""

  def token_grid(self, module, image_side: int) -> int:
    """Tokens per side for an input side."""

  def flops_per_image(self, module, image_side: int,
                      patches: Optional[int] = None) -> Optional[float]:
    """Matmul FLOPs of one forward pass (2 per multiply-add) at image_side, or at a patch
    budget (NaFlex: patches, padding included); None: not counted."""


@dataclasses.dataclass(frozen=True)
class TrainingRules:
  """What the main job's library (vit_jax.training: sharding, param_groups, lora_adapters)
  and the planner need to know of a family's parameters: regexes over '/'-joined parameter
  paths (parameters.txt's names), and the sizes tensor parallelism splits."""
  # The repeated blocks' path without their index ('Transformer/encoderblock'): block i is
  # <blocks>_<i>/..., scan_layers stacks them as <blocks>/... (depth axis first). Layer
  # decay counts in them; what precedes them (the embeddings) is layer 0.
  blocks: str
  head_side: str  # what follows the blocks: the full learning rate under layer decay
  # (regex, the mesh axis of each dimension): Megatron-style splits over `tensor`, LoRA's
  # adapters split like the kernel dimensions they stand for; the first match wins.
  tensor_rules: Tuple[Tuple[str, Tuple[Optional[str], ...]], ...]
  # module -> (the widths the tensor axis must divide, how a one-line error names them:
  # "the model's 12 heads and 3072 MLP units")
  tensor_widths: Callable[[Any], Tuple[Tuple[int, ...], str]]
  # What loading resizes to the run's image size (a position table): frozen under LoRA,
  # yet not the base file's, so adapters.npz keeps it.
  resized_on_load: str
  # params -> the same with scan-stacked blocks split per block: the released files' names,
  # which LoRA's adapters.npz uses
  to_block_layout: Callable[[Any], Any]
  # The module attribute and config.model key of the number of blocks: the planner
  # compiles twins of one and two blocks (None: no repeated blocks, priced as it is)
  depth_key: Optional[str]
  # The Dense kernels LoRA adapts when config.lora.targets is left at its default (a ViT's
  # attention kernels); '' for none: config.lora.targets must name them
  lora_targets: str = ""


@runtime_checkable
class Layout(Protocol):
  """Another library's layout of the family's weights (timm, Hugging Face): what
  vit_jax.checkpoints.formats reads as a released file."""

  def recognises(self, state: Arrays, config: Mapping[str, Any]) -> bool:
    """Whether a state dict (with its config.json, {} if none) is this layout of the
    family."""

  def to_released(self, state: Arrays, config: Mapping[str, Any], *,
                  notes: bool) -> Dict[str, np.ndarray]:
    """The state in the family's released layout; notes: log what the other library
    computes differently. Refusals: errors.InvalidInput, one line without the path."""


@runtime_checkable
class Converter(Protocol):
  """Its files in other libraries' layouts: what python -m vit_jax.convert writes
  (vit_jax.checkpoints.format_conversion: the targets 'npz', 'timm', 'hf')."""
  default_target: Optional[str]  # the target of a DST folder when --to is not given

  def convert(self, src: str, arrays: Arrays, dst: str, to: str, *,
              model_name: Optional[str], image_size: Optional[int],
              patch_size: Optional[int], pre_logits: Optional[str],
              overwrite: bool) -> List[str]:
    """Writes src (its arrays already read; dst checked and claimed) as `to` at dst: the
    lines that say what was read and written and how to load it. Options the family has
    no use for are refused in one line (format_conversion.ConversionError)."""


@runtime_checkable
class Fetcher(Protocol):
  """Released models a family fetches itself, outside the released buckets (a Hub folder
  with its tokenizer, a bucket file with its vocabulary): what vit_jax.checkpoints.hub
  resolves and python -m vit_jax.download fetches and lists by name."""
  folder: str  # `python -m vit_jax.download --list FOLDER` lists them; DIR/FOLDER/ keeps them

  def holds(self, name: str) -> bool:
    """Whether `name` is one of its released names."""

  def fetch(self, name: str, directory: str, *, force: bool, verbose: bool) -> str:
    """The local path of released `name` under `directory`, fetched unless it is there."""

  def listing(self) -> List[str]:
    """One line per released name: where it comes from."""


@runtime_checkable
class HubMirrors(Protocol):
  """Its released files' copies on the Hugging Face Hub and the timm architectures it
  computes: what the maintainer's table (vit_jax.checkpoints.hub_table) records from the
  installed timm, and what vit_jax.checkpoints.hub checks a Hub model against."""
  computed_args: Any  # the timm builder arguments it computes (a set of names)
  timm_models: str  # its timm model class, as refusals name it: 'VisionTransformer'
  timm_scope: str  # what of timm it takes, in words: 'plain ViTs, their R26/R50 hybrids'

  def rows(self, timm) -> Dict[str, List[Dict[str, str]]]:
    """{'FOLDER/FILE.npz': [{'repo', 'layout', 'differs'}, ...]} in the order to try them."""

  def timm_architectures(self, timm) -> Dict[str, Dict[str, Any]]:
    """{timm architecture: {'act_layer', 'refused'}} of its timm builders."""

  def owns_timm_architecture(self, architecture: str) -> bool:
    """Whether a timm architecture name is one of its models'."""

  def gelu_note(self, act_layer: Optional[str]) -> Optional[str]:
    """What to tell a user of timm weights whose activation differs from ours, or None."""

  def transformers_notes(self, config: Mapping[str, Any]) -> Optional[List[str]]:
    """For a transformers config.json: None if its model_type is not this family's, else
    what to tell the user (errors.InvalidInput for a model it does not compute)."""


@runtime_checkable
class ZeroShot(Protocol):
  """Images scored against texts (class names, captions): what python -m vit_jax.zeroshot
  and predict --classes ask of an image-text family."""

  def open_model(self, checkpoint: str, *, tokenizer: Optional[str] = None,
                 bert_heads: Optional[int] = None) -> Any:
    """A loaded model with `reading` and `sigmoid` (how scores are read), `image_side`,
    `patch_budget(image_size, max_patches)` (the NaFlex budget images are read at, None
    for squares: max_patches where given, 0 squares; else the model's own reading),
    `embed_images(paths, *, image_size, max_patches, batch_size)` (read so),
    `embed_texts(texts)`, `class_embeddings(names, templates)` and `scores(zimg, zcls)`."""



@runtime_checkable
class PairTraining(Protocol):
  """An image-text pair the main job trains with the contrastive objective
  (vit_jax.training.objectives.contrastive): built from a training config, its towers from
  the families' files (a pair's file, an image model's, a pair's text tower) or from
  scratch."""

  def create(self, config, *, load_pretrained: bool) -> Tuple[Any, Optional[Dict[str, Any]]]:
    """(module, host params or None): the pair config.contrastive, config.text and the image
    keys (config.model_name, config.model.*, config.pretrained) describe; params are the
    files' (the parts no file gives freshly initialised) when load_pretrained, else None."""

  def sample_inputs(self, config) -> Tuple[Any, ...]:
    """Zero inputs of one example that module.init takes (images, tokens)."""

  def tokenizer_file(self, config) -> Optional[str]:
    """The vocabulary of the file the text tower starts from (None: none beside it)."""

  def kept_tokenizer_name(self, path: str) -> str:
    """The name a run's vocabulary file takes beside its params.npz (where the family's
    loader, and so zero-shot, finds it)."""

  def lower_cases(self, config) -> bool:
    """Whether captions are ASCII lower-cased before a sentencepiece vocabulary (as the
    family's zero-shot reads the file the run writes)."""

  def check(self, config) -> None:
    """Refuses, in one line, settings no pair can be built from, before anything is read."""

  def flops(self, module, config) -> Dict[str, Optional[float]]:
    """Matmul FLOPs (2 per multiply-add) of one pair's forward pass (an image at
    config.pp.crop, a caption of config.text.length tokens) by tower, keyed by the towers'
    top-level parameter names (what config.freeze matches); None: a tower not counted.
    What plan and benchmark divide by for MFU."""


@dataclasses.dataclass(frozen=True)
class NamedInputs:
  """The inputs of an exported function that takes several, as one dict (NaFlex's
  patches, mask and grid): each one's item shape and dtype, the fixed batch the export is
  checked on (rows -> {name: array}) and, for metadata.json, how that batch was made."""
  specs: Mapping[str, Tuple[Tuple[int, ...], str]]  # name -> (item shape, dtype)
  draw: Callable[[int], Dict[str, np.ndarray]]
  note: str


@dataclasses.dataclass(frozen=True)
class ExportedFunction:
  """One artefact of an export that is no single classifier: a function of one input (or
  of a dict of named_inputs), its weights closed over, written in OUT/<name>/ and checked
  in the format's own runtime."""
  name: str  # its folder in OUT and its entry in metadata.json: 'image_tower'
  fn: Callable[[Any], Any]  # a batch of its input -> a batch of its output
  weights: Any  # the params fn closes over: one serialized graph holds at most 2 GiB
  # Its input: 'images' means the classifier's (NHWC float32 in [-1, 1]; metadata.json
  # then says how to preprocess them), any other name is the family's own ('tokens').
  input_name: str
  input_shape: Tuple[int, ...]  # one item's, without the batch dimension
  input_dtype: str  # 'float32', 'int32'
  input_range: Tuple[float, float]  # [low, high) of the values the check draws
  output_name: str  # 'embeddings'
  metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # its entry's own
  # Set: fn takes a dict of these inputs instead (input_shape, _dtype, _range unused).
  named_inputs: Optional[NamedInputs] = None


@dataclasses.dataclass(frozen=True)
class ExportedModel:
  """A checkpoint opened for export as named functions (ExportSignature.load)."""
  path: str  # the file or folder read: metadata.json records its sha256
  summary: str  # what was read, for the line 'read CHECKPOINT: <summary>'
  compared: str  # what parity compares, in metadata.json's words: 'embedding'
  functions: Tuple[ExportedFunction, ...]
  copies: Mapping[str, str]  # a file name in OUT -> the local file copied there
  # {function name: its metadata.json entry} -> metadata.json's fields about the model
  describe: Callable[[Mapping[str, Any]], Dict[str, Any]]


@runtime_checkable
class ExportSignature(Protocol):
  """What python -m vit_jax.export writes for the checkpoints a family claims (Family.claims)
  when its model is no single classifier: named functions, each its own artefact
  (vit_jax.export.functions). Families without one export as classifiers."""

  def check_options(self, to: str, *, image_size: Any, dtype: str, with_preprocessing: bool,
                    max_patches: Optional[int]) -> None:
    """One line (errors.InvalidInput) for an option its export cannot take, before loading;
    the functions are written as load returns them, in float32 (other dtypes: refuse)."""

  def load(self, checkpoint: str, *, image_size: Any) -> ExportedModel:
    """The checkpoint (a released name fetched first) as the functions to export;
    image_size: a side or (height, width), None for the checkpoint's own."""


@dataclasses.dataclass(frozen=True)
class TimedPart:
  """One part of a model that python -m vit_jax.benchmark times on its own: a row."""
  name: str  # the row's model column: 'image tower'
  size: int  # the row's size column: its input side, or length
  fn: Callable[[Any, Any], Any]  # (params, inputs) -> outputs, compiled then timed
  params: Any
  inputs: Any  # one batch of synthetic inputs (their values do not change the timing)


@dataclasses.dataclass(frozen=True)
class TimedModel:
  """A checkpoint opened for the benchmark as parts (BenchmarkParts.load)."""
  kind: str  # what the checkpoint is within its family: the header's and rows' 'family'
  parts: Tuple[TimedPart, ...]


@runtime_checkable
class BenchmarkParts(Protocol):
  """How python -m vit_jax.benchmark times the checkpoints a family claims (Family.claims)
  when the main job trains no such model: part by part, each part's inference on one
  device (vit_jax.planning.part_timing)."""
  timed: str  # what is timed, for messages: "its towers' inference"

  def load(self, checkpoint: str, *, batch: int, image_size: Optional[int],
           dtype: str) -> TimedModel:
    """The checkpoint's parts with inputs of `batch` items in compute `dtype`; image_size
    None: the checkpoint's own. A released name not downloaded: one line (errors.UserError)."""

@dataclasses.dataclass(frozen=True)
class Bucket:
  """Where the family's released files live and which one a bare released name means:
  what vit_jax.checkpoints.released names and vit_jax.checkpoints.hub fetches."""
  url: str  # its Cloud Storage bucket: 'gs://vit_models'
  folders: Mapping[str, str]  # folder -> what its files are ('imagenet21k': ...)
  # folder -> the released names it holds, where the family lists them (shown by
  # `python -m vit_jax.download --list` when no Hub mirror holds them)
  listed: Mapping[str, Sequence[str]]
  # released name -> 'FOLDER/FILE' (no .npz) that a bare name means: the usual start for
  # fine-tuning; errors.InvalidInput when the family released none for that name
  start_file: Callable[[str], str]
  # (folder, released name) -> how that folder's file names spell the model ('B_16' in
  # augreg/): bucket names are case-sensitive, users' spellings are not
  file_stem: Callable[[str, str], str] = lambda folder, name: name


@dataclasses.dataclass(frozen=True)
class Family:
  """One model family, as the registry holds it."""
  name: str  # registry key and folder name: 'vit'
  title: str  # how one-line messages name it: 'ViT'
  guide: str  # its page: 'docs/python_api.md'
  module_types: Tuple[type, ...]  # the flax modules it builds
  names: Names
  released_file: Optional[ReleasedFile] = None
  geometry: Optional[Geometry] = None
  training: Optional[TrainingRules] = None
  layouts: Mapping[str, Layout] = dataclasses.field(default_factory=dict)
  converter: Optional[Converter] = None
  bucket: Optional[Bucket] = None
  fetcher: Optional[Fetcher] = None
  hub_mirrors: Optional[HubMirrors] = None
  zero_shot: Optional[ZeroShot] = None
  export_signature: Optional[ExportSignature] = None
  benchmark_parts: Optional[BenchmarkParts] = None
  pair_training: Optional[PairTraining] = None
  # checkpoint (a name or path) -> whether it is this family's, told from its name or its
  # arrays' names without loading it: for families whose files load_npz does not read
  # whole (None: the arrays tell, see released_file.recognises)
  claims: Optional[Callable[[str], bool]] = None
  # The family whose model load_npz gives of this family's files when it is another's (a
  # pair's file gives its image tower, a ViT: 'vit'); None: its own. What a training
  # config's model_name must be of for its config.pretrained (checkpoint_family.check_start).
  loads_as: Optional[str] = None
  # tool -> the rest of the one line that refuses the family's models in that tool,
  # after '<subject> is a <title>' (so starting ': ' or '; '): why, and what to use
  # instead. Tools: 'visualize', 'vtab', 'naflex', ...
  refusals: Mapping[str, str] = dataclasses.field(default_factory=dict)
  # A regex of the words that name the family in code (identifiers, strings, comments):
  # tests/test_family_names.py finds none outside its folder. '' for the default family,
  # whose words (ViT) the whole package speaks.
  words: str = ""

  @property
  def a_title(self) -> str:
    """'a ViT', 'an image-text model': the title as a message's noun."""
    return f"{_article(self.title)} {self.title}"

  def owns(self, module) -> bool:
    return isinstance(module, self.module_types)

  def refuse(self, tool: str, subject: str) -> None:
    """One line when `tool` does not take this family's models; nothing otherwise.
    subject: what the user gave (a path, a model name)."""
    if tool in self.refusals:
      raise errors.InvalidInput(f"{subject} is {self.a_title}{self.refusals[tool]}")

  def part(self, part: str, subject: str):
    """A part the caller needs (released_file, geometry, training), or one line."""
    found = getattr(self, part)
    if found is None:
      raise errors.InvalidInput(f"{subject} is {self.a_title} model, "
                                f"which has no {part.replace('_', ' ')} ({self.guide})")
    return found


def _article(word: str) -> str:
  return "an" if word[:1].upper() in "AEIOU" or word.startswith("MLP") else "a"
