"""Cookbook Studio's engine: training loops, backends, datasets and runs. Imports no Streamlit."""
