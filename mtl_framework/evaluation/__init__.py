"""Stage 6, evaluate: dev scores of a trained model (dev.py), predictions on new text
(predict.py), CLUE submission files (clue.py) and plots of a run (report.py)."""
