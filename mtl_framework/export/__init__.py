"""Stage 7, export: a run's trained backbone written in a format of
`mtl_framework.formats` (writer.py), with its model card (model_card.py)."""
