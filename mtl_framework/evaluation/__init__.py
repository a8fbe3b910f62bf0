"""Stage 6, evaluate: dev scores of a trained model (dev.py), predictions on new text
(predict.py) and CLUE submission files (clue.py)."""
