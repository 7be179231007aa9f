"""Training data: loading and validating datasets from files, uploads and the Hugging Face hub (`loading.py`), the
built-in datasets (`builtin.py`) and turning chat conversations into dataset rows (`from_chat.py`). Named `data`, not
`datasets`, so it never shadows the Hugging Face package. Not here: rendering rows to tokens (renderers.py, the loops'
prepare())."""
