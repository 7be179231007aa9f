"""The studio's Streamlit side: the entry point (main.py) and the UI pieces the pages share. No training logic."""
