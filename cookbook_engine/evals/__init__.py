"""Evaluation: eval sets (sets.py), evaluators with 95% intervals (evaluators.py, stats.py), which model to run
(targets.py), background jobs stored in DuckDB (jobs.py), leaderboard tables (report.py), sweeps (sweeps.py) and
the CLI commands (commands.py). No Streamlit here: the studio's Evaluate page reads these."""
