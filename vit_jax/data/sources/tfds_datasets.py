"""TFDS datasets as a source: any name no other source takes, labelled by
config.label_feature (a ClassLabel, or a list of them: multi-label). tf.data reads them
through TFDS builders (tfds_builder, TensorFlow), Grain through tfds.data_source
(tfds_arrayrecord, without TensorFlow); each is imported when a dataset is opened."""

# pylint: disable=import-outside-toplevel  # each reader is imported by the stack that needs it

from vit_jax.data.sources import source_contract


class TfdsDataset:
  """A TFDS name: the last source tried, it takes any."""
  loaders = ("tf", "grain")
  takes_label_feature = True

  def handles(self, config) -> bool:
    return True

  def open(self, config, loader):
    train_split, eval_split = config.train_split or "train", config.eval_split or "test"
    feature = source_contract.label_feature(config)
    if loader == "grain":
      from vit_jax.data.sources import tfds_arrayrecord
      return tfds_arrayrecord.tfds_source(config.dataset, train_split, eval_split,
                                          label_feature=feature, data_dir=config.tfds_data_dir)
    from vit_jax.data.sources import tfds_builder
    return tfds_builder.tfds_source(config.dataset, train_split, eval_split,
                                    label_feature=feature, data_dir=config.tfds_data_dir,
                                    manual_dir=config.tfds_manual_dir,
                                    download=config.tfds_download)

  def class_count(self, config) -> int:
    from vit_jax.data.sources import tfds_builder
    return tfds_builder.tfds_class_count(config.dataset, config.tfds_data_dir,
                                         source_contract.label_feature(config))

  def open_eval(self, name, split, config, label_feature, loader):
    if loader == "grain":
      from vit_jax.data.sources import tfds_arrayrecord
      return tfds_arrayrecord.tfds_eval_source(name, split, label_feature=label_feature,
                                               data_dir=config.tfds_data_dir)
    from vit_jax.data.sources import tfds_builder
    return tfds_builder.tfds_eval_source(name, split, label_feature=label_feature,
                                         data_dir=config.tfds_data_dir,
                                         manual_dir=config.tfds_manual_dir,
                                         download=config.tfds_download)


SOURCE = TfdsDataset()
