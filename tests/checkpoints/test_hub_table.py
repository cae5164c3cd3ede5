"""The committed mirror table against the installed timm's pretrained configs (interop
extra), and what every released name resolves to."""

import pytest

from torch_libraries import (  # noqa: F401  # pylint: disable=unused-import
    fixture_timm, fixture_torch)
from vit_jax.checkpoints import hub, hub_table, released
from vit_jax.families.vit import names as vit_names
from vit_jax.families.vit import hub_mirrors as vit_hub_mirrors
from vit_jax.training.config_defaults import finetune_config


def test_committed_table_is_what_timm_says(timm):
  """Regenerate with: python -m vit_jax.checkpoints.hub_table (where timm imports)."""
  committed = hub_table.load()
  assert hub_table.build(timm) == committed
  for path, rows in committed["mirrors"].items():
    for row in rows:
      if row["layout"] != hub_table.TIMM:
        continue
      cfg = timm.models.get_pretrained_cfg(row["repo"][len("timm/"):])
      assert cfg.hf_hub_id == row["repo"]
      if cfg.url and "vit_models" in cfg.url:  # the bucket file it came from
        assert cfg.url.endswith("/vit_models/" + path)


def test_every_bucket_file_timm_mirrors_is_in_the_table(timm):
  mirrored = {row["repo"] for rows in hub_table.load()["mirrors"].values() for row in rows}
  for name in timm.models.list_pretrained():
    cfg = timm.models.get_pretrained_cfg(name)
    if "storage.googleapis.com/vit_models/" in (cfg.url or "") and name.startswith("vit_"):
      assert cfg.hf_hub_id in mirrored, name


def test_released_names_resolve_to_table_rows_or_name_the_nearest():
  """Each model config's default start (its bare released name) is a mirrored file, or
  (where timm and Google copied none) an error names mirrored files."""
  table = hub_table.load()["mirrors"]
  unmirrored = []
  for name in vit_names.RELEASED:
    if "gap" in name:
      continue
    path = released.bucket_path(released.resolve(name, local_dir=None))
    if path not in table:
      unmirrored.append(path)
      assert hub.nearest(path), path
  assert finetune_config("ViT-B_16").pretrained == "ViT-B_16"
  assert released.bucket_path(released.resolve("ViT-B_16", local_dir=None)) in table
  # R26+ViT-B_32 has neither a paper-era nor an AugReg i21k file on the Hub.
  assert unmirrored == ["imagenet21k/R26+ViT-B_32.npz"]


@pytest.mark.parametrize("architecture, refused", [
    ("vit_base_patch16_224", None), ("vit_base_r50_s16_384", None),
    ("vit_so400m_patch14_siglip_224", None),
    ("vit_base_patch16_clip_quickgelu_224", "act_layer=quick_gelu"),
    ("vit_base_patch16_rpn_224", "block_fn=ResPostBlock"),
    ("vit_base_resnet50d_224", "a ResNet stem vit_jax does not build"),
])
def test_architecture_verdicts(architecture, refused):
  verdict = hub_table.load()["timm_architectures"][architecture]
  assert (verdict["refused"] is None) if refused is None else refused in verdict["refused"]


def test_released_model_names_of_timm_architectures():
  assert vit_hub_mirrors.released_model("vit_base_patch16_384") == "ViT-B_16"
  assert vit_hub_mirrors.released_model("vit_tiny_r_s16_p8_224") == "R+ViT-Ti_16"
  with pytest.raises(ValueError, match="no released model"):
    vit_hub_mirrors.released_model("vit_base_patch16_clip_224")
