"""On-policy distillation: a student learns to put its probability where a teacher's is, on its own samples."""
