"""What every training loop (SL, DPO, RL) shares: the loop's frame (`skeleton.py`), the tokenizer, learning rate,
schedules, Adam settings and checkpoints (`common.py`), each run kind's key metric (`metric_names.py`) and a run's
metrics, checkpoints and transcripts on their way to the store and the run folder (`run_logger.py`). Not here: any
one paradigm's step (sl/, dpo/, rl/), the run's life cycle (runs.py)."""
