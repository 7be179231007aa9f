"""Supervised fine-tuning (SL): its loop (`loop.py`: prepare, plan, train) and its measured settings for the built-in
data (`suggested.py`). Not here: the frame every loop shares (cookbook_engine.training), data loading
(cookbook_engine.data)."""
