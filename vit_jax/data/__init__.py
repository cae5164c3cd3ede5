"""Input: where examples come from (sources), how they are preprocessed, and the
pipeline that turns them into global device batches."""
