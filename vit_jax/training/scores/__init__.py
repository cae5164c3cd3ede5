"""How an evaluation set's summed counts or gathered rows become numbers: per-class recall,
precision and the confusion matrix (per_class), multi-label mAP and F1 (multilabel). Shared
by the classification evaluator, which computes them, and training.runs.class_report, which
writes them."""
