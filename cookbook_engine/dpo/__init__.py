"""Direct preference optimisation (DPO): its loop (`loop.py`: prepare, plan, train, the DPO loss). Not here: the frame
every loop shares (cookbook_engine.training), loading preference pairs (cookbook_engine.data)."""
