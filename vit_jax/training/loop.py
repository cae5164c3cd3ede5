"""train_and_evaluate(config, workdir): the whole main job, read top to bottom.

Order matters for users: everything that can fail on bad input (counts and choices, mesh,
batch split, the workdir and its lock, dataset, pretrained file, existing checkpoints) is
checked before anything slow (compilation, training) starts, and nothing in the workdir
is written until then. A finished run is reported, not repeated.
"""

import dataclasses
import math
import time
from typing import Any, Dict, Optional

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vit_jax.base import config_checks, errors, storage, workdir_files
from vit_jax.base.console import log
from vit_jax.data import device_batches, loaders, splits
from vit_jax.models import attention
from vit_jax.training import (
    lora_adapters, objectives, param_groups, pretrained_file, sharding, state_and_step,
    static_checks)
from vit_jax.training import evaluators as evaluators_lib
from vit_jax.training.objectives import naflex
from vit_jax.training.runs import (
    class_report, dataset_record, metrics, orbax_checkpoints, outputs, preemption)
from vit_jax.training.runs import workdir as workdir_lib


def hyperrule_steps(num_train: int) -> int:
  """BiT HyperRule schedule length: <20k examples 500, <500k 10k, else 20k steps."""
  return 500 if num_train < 20_000 else 10_000 if num_train < 500_000 else 20_000


def resolve_config(config: ml_collections.ConfigDict, info: loaders.DatasetInfo,
                   objective: objectives.Objective) -> ml_collections.ConfigDict:
  """A copy with values that depend on the data filled in (total_steps = -1, loss =
  'auto', class_weights = 'balanced')."""
  config = config.copy_and_resolve_references()
  if config.total_steps == -1:
    with config.unlocked():
      config.total_steps = hyperrule_steps(info.num_train)
    log.info("total_steps=-1: BiT HyperRule gives %d steps for %d training examples",
                 config.total_steps, info.num_train)
  if objective.predicts_classes:
    objectives.classification.resolve(config, info)
  return config


def describe_devices(config) -> str:
  """What the run computes on, so that a missing accelerator or an unused fast path
  (cuDNN flash attention needs a GPU and bfloat16/float16) shows before the first step."""
  backend = attention.attention_backend(config.model.attention_impl, jnp.dtype(config.dtype))
  hint = ""
  if (jax.default_backend() == "gpu" and backend == "xla"
      and config.model.attention_impl == "dot_product"):
    hint = " (cuDNN flash attention needs --config.dtype=bfloat16)"
  return (f"{jax.device_count()} x {jax.devices()[0].device_kind} ({jax.default_backend()}, "
          f"jax {jax.__version__}, {jax.process_count()} process(es)); attention: "
          f"{backend}{hint}")


@jax.jit
def track_nonfinite(first_step, step, step_metrics):
  """The first step whose loss or gradient norm was not finite (0: none yet), kept on the
  device every step so that a divergence noticed at a logging step names its real step."""
  finite = jnp.isfinite(step_metrics["loss"]) & jnp.isfinite(step_metrics["grad_norm"])
  return jnp.where((first_step == 0) & ~finite, step.astype(first_step.dtype), first_step)


def check_finite(step: int, step_metrics: dict, checkpointer: orbax_checkpoints.Checkpointer,
                 first_nonfinite=None, clipped: bool = True) -> None:
  """Stops on a non-finite loss or gradient, before that step's state can be saved, with a
  one-line errors.Diverged naming the step it began at (first_nonfinite, see
  track_nonfinite), the keys to change (clipping too when it was off) and what a rerun
  does."""
  for name in ("loss", "grad_norm"):
    value = float(step_metrics[name])
    if math.isfinite(value):
      continue
    began = int(jax.device_get(first_nonfinite)) if first_nonfinite is not None else 0
    when = f"at step {began} (noticed at step {step})" if 0 < began < step else f"at step {step}"
    latest = checkpointer.latest_step()
    change = "lower config.base_lr" + ("" if clipped else ", set config.grad_norm_clip=1.0")
    if latest is None:
      after = ("no checkpoint was saved before it, so a rerun starts from scratch: "
               f"{change} or check the data first")
    else:
      after = (f"the last good checkpoint (step {latest}) is kept in {checkpointer.directory}"
               f": {change} or check the data, then rerun to resume from it")
    raise errors.Diverged(f"{name} is {value} {when}; stopping without saving; {after}")


def save_before_stopping(checkpointer: orbax_checkpoints.Checkpointer, step: int, state,
                         start_step: int) -> None:
  """A bad file found mid-run (e.g. at the first evaluation) must not cost the steps
  trained so far: their state is checkpointed, if finite, before the error is shown."""
  if step <= start_step:
    return
  try:
    checkpointer.save(step, state)
  except orbax_checkpoints.NonFiniteStateError:
    return
  checkpointer.wait()
  log.warning("saved the checkpoint of step %d before stopping: fix the file named below "
              "and rerun the same command to resume", step)


def write_train_metrics(writer, step: int, step_metrics: dict,
                        progress: metrics.Progress) -> None:
  """Logs train/* scalars with throughput, and the progress line."""
  values = {f"train/{k}": float(v) for k, v in step_metrics.items()}
  rates = progress.update(step, loss=values["train/loss"])
  if rates:
    values["train/img_per_sec"] = rates["img_per_sec"]
    values["train/img_per_sec_per_device"] = rates["img_per_sec_per_device"]
  writer.write_scalars(step, values)


def check_config(config: ml_collections.ConfigDict, mesh,
                 objective: objectives.Objective) -> None:
  """Everything about the config that can be refused without reading data, then the
  pretrained file (fetched if it is a released name not yet downloaded)."""
  static_checks.check_static(config, mesh, objective)
  pretrained_file.resolve(config)


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> Dict[str, float]:
  """Fine-tunes or pre-trains per `config`, resuming from `workdir` if it has a checkpoint.

  Returns the final evaluation metrics.
  """
  started = time.time()
  workdir = workdir_lib.resolve(workdir)  # file:// as a path; unsupported schemes refused
  config = pretrained_file.with_budget(config)  # a NaFlex pretrained file's budget; 0: squares
  mesh = sharding.make_mesh(config.mesh)
  objective = objectives.get(config)  # the one objective of this run
  check_config(config, mesh, objective)
  workdir_lib.check_outside(workdir, config.dataset)
  with workdir_lib.held_for_this_job(workdir):
    return _train_in_workdir(config, workdir, mesh, objective, started)


def _train_in_workdir(config, workdir: str, mesh, objective: objectives.Objective,
                      started: float) -> Dict[str, float]:
  # --- Checks that read data and files, before anything slow or any write -------------
  dataset = loaders.open_dataset(config, naflex.loader_patch_size(config))
  config = resolve_config(config, dataset.info, objective)
  prepare = getattr(objective, "prepare", None)  # what the data needs of the run (a vocabulary)
  if prepare is not None:
    config = prepare(config, dataset, workdir)
  config_checks.check_warmup_fits(config)
  param_groups.check_unfreezes(config)
  checkpointer = orbax_checkpoints.Checkpointer(workdir, keep=config.keep_checkpoints)
  job = Job(config, workdir, mesh, objective, dataset, checkpointer,
            is_main=jax.process_index() == 0, started=started)
  with workdir_lib.writes_checked(workdir, checkpointer.saved_steps):
    try:
      return _run(job)
    finally:  # pending async saves complete even when training fails
      checkpointer.wait()
      checkpointer.close()


@dataclasses.dataclass(frozen=True)
class Job:
  """What every stage of one run reads: the resolved config, where it writes, what it runs
  on, its objective (built once), its data and its checkpoints."""
  config: ml_collections.ConfigDict
  workdir: str
  mesh: Any
  objective: objectives.Objective
  dataset: loaders.Dataset
  checkpointer: orbax_checkpoints.Checkpointer
  is_main: bool
  started: float


@dataclasses.dataclass
class LoopEnd:
  """Where the loop stopped and what its evaluations measured."""
  state: Any
  start_step: int
  progress: metrics.Progress
  eval_metrics: Dict[str, float]
  reports: dict
  preempted_at: Optional[int]
  interrupted: bool


def _run(job: Job) -> Dict[str, float]:
  latest_step = job.checkpointer.latest_step()
  finished = outputs.finished_results(job.workdir, latest_step, job.config.total_steps)
  if finished is not None:
    log.info("already finished at step %d; results in %s (%s, %s, %s): pass a larger "
             "--config.total_steps to train on, or use a new --workdir", latest_step,
             job.workdir, workdir_files.PARAMS, workdir_files.METRICS,
             workdir_files.FINAL_METRICS)
    return finished
  record = dataset_record.describe(job.config, job.dataset.info, job.dataset.fingerprints())
  changed_record = None
  if latest_step is not None:  # the labels and examples must be what they were
    changed_record = dataset_record.check_resume(
        job.workdir, record, step=latest_step, allow_change=job.config.allow_data_change)
  load_pretrained = latest_step is None and job.config.pretrained is not None
  module, host_params = job.objective.create_model(job.config, job.dataset.info.num_classes,
                                                   load_pretrained=load_pretrained)
  run = state_and_step.build(job.config, module, job.mesh, job.objective)
  evaluators = evaluators_lib.build_all(job.config, run.module, job.mesh, job.dataset,
                                        job.objective)  # opens their data; LoRA's module
  state, resume_step = _initial_state(job, run, host_params, latest_step)
  log.info("devices: %s", describe_devices(job.config))  # after a resume that can fail in one line
  writer = metrics.create_writer(job.workdir, is_main_process=job.is_main,
                                 resume_step=resume_step, tensorflow=job.config.loader == "tf")
  if job.is_main:
    _write_start_files(job, run, state, resume_step, record if changed_record is None
                       else changed_record, changed_record is not None, writer)
  end = _train_loop(job, run, state, evaluators, writer)
  return _finish(job, run, end, evaluators, writer)


def _initial_state(job: Job, run: state_and_step.Trainer, host_params, latest_step):
  """(state, resume step or None): the latest checkpoint's, the pretrained params', or a
  fresh init's, created directly with their shardings."""
  if latest_step is not None:
    try:
      state, resume_step = job.checkpointer.restore_latest(jax.tree.map(
          lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
          run.abstract_state, run.state_shardings))
    except orbax_checkpoints.CheckpointRestoreError as e:  # name what the user changed
      changed = outputs.changed_since_start(job.config, job.workdir)
      if not changed:
        raise
      raise orbax_checkpoints.CheckpointRestoreError(
          f"{e}; changed since the run started ({workdir_files.CONFIG}): "
          f"{', '.join(changed)}") from None
    log.info("resumed from step %d (checkpoint in %s)", resume_step, job.checkpointer.directory)
    return state, resume_step
  if host_params is not None:
    log.info("starting from pretrained %s", job.config.pretrained)
    return run.from_params(host_params), None
  log.info("starting from scratch (seed %d)", job.config.seed)
  return run.init(jax.random.PRNGKey(job.config.seed)), None


def _write_start_files(job: Job, run: state_and_step.Trainer, state,
                       resume_step: Optional[int], record: dict, record_changed: bool,
                       writer) -> None:
  """config.json, dataset.json (new, changed or missing) and, on a fresh start, the
  parameter table."""
  outputs.save_config(job.config, job.workdir, resume_step)
  if resume_step is None or record_changed or dataset_record.read(job.workdir) is None:
    dataset_record.write(job.workdir, record)
  if resume_step is None:
    columns = param_groups.table_columns(state.params, job.config, run.trained)
    num_params = outputs.write_parameter_table(state.params, job.workdir, columns)
    log.info("%s (table in %s)", param_groups.trained_summary(columns, state.params,
                                                              state.opt_state),
             storage.join(job.workdir, workdir_files.PARAMETER_TABLE))
    writer.write_hparams({"num_params": num_params})


def _train_loop(job: Job, run: state_and_step.Trainer, state, evaluators, writer) -> LoopEnd:
  """Steps to config.total_steps with the periodic logging, evaluations and checkpoints;
  stops early, checkpointed, on a preemption signal. A bad file met mid-run checkpoints the
  steps trained so far before its error goes up."""
  config, checkpointer = job.config, job.checkpointer
  start_step, total_steps = int(state.step), config.total_steps
  if jax.process_count() > 1:
    rows = config.batch // jax.process_count()
    log.info("process %d of %d reads rows [%d, %d) of every global batch of %d",
             jax.process_index(), jax.process_count(), jax.process_index() * rows,
             (jax.process_index() + 1) * rows, config.batch)
  batch_sharding, replicated = run.batch_sharding, run.replicated
  batches = device_batches.prefetch_to_device(job.dataset.train_batches(
      batch_size=config.batch, start_step=start_step, num_steps=total_steps, seed=config.seed,
      process_index=jax.process_index(), process_count=jax.process_count()), batch_sharding)
  dropout_rng = sharding.put(jax.random.PRNGKey(config.seed + 1), replicated)
  schedule = run.placed_schedule()
  first_nonfinite = sharding.put(np.zeros((), np.int32), replicated)
  end = LoopEnd(state, start_step, metrics.Progress(
      total_steps=total_steps, batch_size=config.batch, num_devices=jax.device_count()),
                eval_metrics={}, reports={}, preempted_at=None, interrupted=False)
  done_step = start_step
  watcher = preemption.PreemptionWatcher()
  try:
    for step in range(start_step + 1, total_steps + 1):
      batch = next(batches)
      with state_and_step.within_device_memory(config):
        with jax.transfer_guard("disallow"):  # inputs must already be on the devices
          end.state, step_metrics = run.step(end.state, batch, dropout_rng, schedule)
          first_nonfinite = track_nonfinite(first_nonfinite, end.state.step, step_metrics)
        if step == start_step + 1:  # compiled and run: memory it lacks is known here
          jax.block_until_ready(end.state)
      done_step = step
      if step == start_step + 1:
        end.progress.update(step)  # the rate clock starts after compilation
      is_checkpoint_step = step % config.checkpoint_every == 0 or step == total_steps
      is_progress_step = step % config.progress_every == 0 or step == total_steps
      preempted = step < total_steps and watcher.should_stop(step)
      if is_progress_step or is_checkpoint_step or preempted:  # one copy serves all
        host_metrics = jax.device_get(step_metrics)
        check_finite(step, host_metrics, checkpointer, first_nonfinite,
                     clipped=bool(config.grad_norm_clip))
        if is_progress_step:
          write_train_metrics(writer, step, host_metrics, end.progress)
      for evaluator in evaluators:
        if evaluator.due(step, total_steps):
          _evaluate(job, evaluator, end, step, writer)
      if is_checkpoint_step or preempted:
        checkpointer.save(step, end.state)
      if preempted:  # the save ends under the watcher: a second Ctrl-C still aborts it
        checkpointer.wait()
        end.preempted_at = step
        break
  except (splits.CorruptImageError, FileNotFoundError):
    save_before_stopping(checkpointer, done_step, end.state, start_step)
    raise
  finally:
    batches.close()
    watcher.close()
  end.interrupted = watcher.interrupted
  return end


def _evaluate(job: Job, evaluator, end: LoopEnd, step: int, writer) -> None:
  """One evaluator's metrics and per-class reports at `step`, logged and kept."""
  measured = evaluator.run(end.state, step)
  writer.write_scalars(step, measured)
  end.eval_metrics.update(measured)
  end.reports.update(evaluator.reports)
  if job.is_main:
    class_report.record(job.workdir, writer, step, evaluator.reports)


def _finish(job: Job, run: state_and_step.Trainer, end: LoopEnd, evaluators,
            writer) -> Dict[str, float]:
  """A preempted run: its checkpoint named (Ctrl-C raises). A finished one: the final
  evaluation if none ran at the end, params.npz (and LoRA's adapters.npz), the final
  metrics and the summary."""
  checkpointer, total_steps = job.checkpointer, job.config.total_steps
  if end.preempted_at is not None:  # its save has ended (_train_loop waited for it)
    writer.close()
    saved = (f"saved the checkpoint of step {end.preempted_at} in {checkpointer.directory}; "
             "rerun the same command to resume")
    if end.interrupted:  # Ctrl-C: the caller stops too (a command exits 130)
      raise preemption.Interrupted(saved)
    log.warning("preempted: %s", saved)
    return {"preempted_at_step": end.preempted_at, **end.eval_metrics}
  if not end.eval_metrics:  # resumed at the end: report the final state anyway
    for evaluator in evaluators:
      _evaluate(job, evaluator, end, total_steps, writer)
  eval_metrics = {**end.eval_metrics, **class_report.final_entries(end.reports)}  # worst
  final_params = sharding.to_host(end.state.eval_params)  # a collective  # classes by name
  # a classifier's head carries the dataset's class names; mpp exports none
  class_names = job.dataset.info.class_names if job.objective.predicts_classes else None
  if run.lora:  # params.npz: merged weights; adapters.npz (first) beside it
    final_params, adapters = lora_adapters.export(sharding.to_host(end.state.params),
                                                  final_params, run.lora, class_names,
                                                  naflex.max_patches(job.config))
    if job.is_main:
      lora_adapters.save_adapters(adapters, storage.join(job.workdir, lora_adapters.ADAPTERS))
  final_params = job.objective.export_params(final_params)
  if job.is_main:
    outputs.write_final(final_params, eval_metrics, job.workdir, class_names,
                        multi_label=job.dataset.info.multi_label and class_names is not None,
                        max_patches=naflex.max_patches(job.config))
  writer.flush()
  writer.close()
  checkpointer.wait()
  if job.is_main:
    log.info("%s", metrics.final_summary(
        workdir=job.workdir, steps=(end.start_step, total_steps),
        seconds=time.time() - job.started, img_per_sec=end.progress.mean_img_per_sec(),
        eval_metrics=eval_metrics, checkpoint_dir=checkpointer.directory,
        checkpoint_steps=checkpointer.all_steps()))
  return eval_metrics
